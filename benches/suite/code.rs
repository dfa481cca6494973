//! `code_run`'s figures: what a snippet costs beyond its interpreter's own
//! start (a whole `tool run code_run` of a no-op snippet, less a whole
//! `tool run time` and less the interpreter started on the same file
//! outside latchclaw, in the same cleared environment: what is left is the
//! sandbox, the prelude's files, the pipes, the tmp, the started receipt
//! and the record; the three run in turn and the figure is the median of
//! the rounds' differences), and a round trip from inside a snippet:
//! `secrets()` (the pipe alone) and `tool("time")` (the whole call path:
//! gate, receipt, redaction), timed by the snippet itself.

use super::{RUNS, Report, cmd, ms, percentile, setup_home, ws_line};
use crate::measure::{self, Cmd};
use serde_json::{Value, json};
use std::path::Path;

const TRIPS: usize = 2000;
const TOOL_TRIPS: usize = 200;

pub fn figures(report: &mut Report, root: &Path, ws: &Path) {
    let config = |receipts: bool| {
        format!(
            "{}[security]\nautonomy = \"full\"\n[channels.cli]\n\
             tools_allow = [\"code_run\", \"time\", \"shell\"]\n[receipts]\nenabled = {receipts}\n\
             [tools.code_run]\nrisk = \"low\"\n",
            ws_line(ws)
        )
    };
    // The least a snippet can be (an empty one is refused).
    for (lang, interp, file, flags, src) in [
        (
            "python",
            "/usr/bin/python3",
            "empty.py",
            &["-B", "-s"][..],
            "pass\n",
        ),
        ("node", "/usr/bin/node", "empty.js", &[][..], "0;\n"),
    ] {
        if !Path::new(interp).is_file() {
            report
                .notes
                .push(format!("code: no {interp}, no {lang} figures"));
            continue;
        }
        let home = setup_home(root, &format!("code-{lang}"), &config(true));
        let snippet = home.join(file);
        std::fs::write(&snippet, src).unwrap();
        let args = json!({"language": lang, "code": src}).to_string();
        let run = cmd(&home, &["tool", "run", "code_run", "--json", &args]);
        let time = cmd(&home, &["tool", "run", "time"]);
        // In the environment a snippet gets (node starts far slower in a
        // full one), through `env -i` (one exec more, counted against
        // code_run's figure).
        let tmp = home.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let bare = Cmd {
            program: "/usr/bin/env",
            args: [
                "-i".to_string(),
                "PATH=/usr/local/bin:/usr/bin:/bin".into(),
                format!("HOME={}", tmp.display()),
                format!("TMPDIR={}", tmp.display()),
                "LANG=C.UTF-8".into(),
                interp.into(),
            ]
            .into_iter()
            .chain(flags.iter().map(|s| s.to_string()))
            .chain([snippet.display().to_string()])
            .collect(),
            home: &home,
        };
        // The three in turn, and the figure taken round by round: the
        // interpreter alone moves by more than the overhead from one
        // minute to the next on a shared machine.
        let t = measure::interleaved(&[&run, &time, &bare], 2 * RUNS - 1);
        let (run_t, time_t, bare_t) = (&t[0], &t[1], &t[2]);
        let (run_m, time_m, bare_m) = (
            percentile(run_t, 50),
            percentile(time_t, 50),
            percentile(bare_t, 50),
        );
        let rounds: Vec<f64> = (0..run_t.len())
            .map(|i| run_t[i] - time_t[i] - bare_t[i])
            .collect();
        let over = percentile(&rounds, 50);
        report.row(
            format!("tool run code_run, a no-op {lang} snippet"),
            ms(run_m),
            "reported",
            None,
        );
        report.row(
            format!(
                "  less `tool run time` ({}) and {lang} alone ({}), round by round",
                ms(time_m),
                ms(bare_m)
            ),
            ms(over),
            "≤ 5 ms",
            Some(over <= 5.0),
        );
    }
    // What every sandboxed call pays, code_run or not: the namespace
    // sandbox and the started receipt (`shell true` against `time`).
    let home = setup_home(root, "code-floor", &config(true));
    let shell = cmd(
        &home,
        &["tool", "run", "shell", "--json", "{\"command\":\"true\"}"],
    );
    let time = cmd(&home, &["tool", "run", "time"]);
    let (shell_t, time_t) = measure::paired(&shell, &time, RUNS);
    report.row(
        "  for reference: `tool run shell true` less `tool run time` (the sandbox, the started receipt)",
        ms(percentile(&shell_t, 50) - percentile(&time_t, 50)),
        "reported",
        None,
    );
    if !Path::new("/usr/bin/python3").is_file() {
        return;
    }
    let trips = format!(
        "import time, latchclaw\n\
         t = time.perf_counter()\n\
         for _ in range({TRIPS}):\n    latchclaw.secrets()\n\
         a = (time.perf_counter() - t) / {TRIPS}\n\
         t = time.perf_counter()\n\
         for _ in range({TOOL_TRIPS}):\n    latchclaw.tool('time', {{}})\n\
         b = (time.perf_counter() - t) / {TOOL_TRIPS}\n\
         latchclaw.output({{'pipe_us': a * 1e6, 'tool_us': b * 1e6}})\n"
    );
    for receipts in [true, false] {
        let home = setup_home(root, &format!("code-trips-{receipts}"), &config(receipts));
        let args = json!({"language": "python", "code": trips, "timeout_secs": 600}).to_string();
        let (mut pipe, mut tool) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let out = cmd(&home, &["tool", "run", "code_run", "--json", &args])
                .command_for_setup()
                .output()
                .unwrap();
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            let inner: Value = serde_json::from_str(v["output"].as_str().unwrap()).unwrap();
            pipe.push(inner["output"]["pipe_us"].as_f64().unwrap());
            tool.push(inner["output"]["tool_us"].as_f64().unwrap());
        }
        let (pipe, tool) = (percentile(&pipe, 50), percentile(&tool, 50));
        if receipts {
            report.row(
                "code_run: one tool(\"time\") round trip from python (receipt fsync'd)",
                format!("{:.0} µs", tool),
                "≤ 1 ms",
                Some(tool <= 1000.0),
            );
            report.row(
                "  the pipe alone (secrets())",
                format!("{:.0} µs", pipe),
                "reported",
                None,
            );
        } else {
            report.row(
                "  tool(\"time\") with receipts off",
                format!("{:.0} µs", tool),
                "reported",
                None,
            );
        }
    }
}
