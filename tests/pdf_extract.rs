//! `pdf_extract` on the real binary: pages and ranges, its limits, and the
//! paths the gate refuses it (secret-named, forbidden, outside, links out).
#![cfg(feature = "pdf")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, lit, output};
use serde_json::{Value, json};
use std::os::unix::fs::symlink;

const SECRET: &str = "CANARY-PDF-SECRET-5521";
const OUTSIDE: &str = "CANARY-PDF-OUTSIDE-9034";

/// A PDF with one page per text (uncompressed, a classic xref table).
fn pdf(pages: &[&str]) -> Vec<u8> {
    let n = pages.len();
    let mut objs = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {n} /Resources << /Font << /F1 3 0 R >> >> >>",
            (0..n)
                .map(|i| format!("{} 0 R", 4 + 2 * i))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_string(),
    ];
    for (i, t) in pages.iter().enumerate() {
        objs.push(format!(
            "<< /Type /Page /Parent 2 0 R /Contents {} 0 R >>",
            5 + 2 * i
        ));
        let body = format!("BT /F1 12 Tf 72 700 Td ({t}) Tj ET");
        objs.push(format!(
            "<< /Length {} >>\nstream\n{body}\nendstream",
            body.len()
        ));
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offs = Vec::new();
    for (i, o) in objs.iter().enumerate() {
        offs.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{o}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objs.len() + 1).as_bytes());
    for o in offs {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objs.len() + 1
        )
        .as_bytes(),
    );
    out
}

fn env_with(autonomy: &str, top: &str, allow: bool) -> Env {
    let env = Env::new();
    let outside = env.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("out.pdf"), pdf(&[OUTSIDE])).unwrap();
    let ws = &env.ws;
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::create_dir_all(ws.join("private")).unwrap();
    std::fs::write(
        ws.join("docs/report.pdf"),
        pdf(&["Quarterly report", "Revenue grew", "Costs fell", "Outlook"]),
    )
    .unwrap();
    std::fs::write(ws.join(".env.pdf"), pdf(&[SECRET])).unwrap();
    std::fs::write(ws.join("private/p.pdf"), pdf(&[SECRET])).unwrap();
    std::fs::write(ws.join("notes.txt"), "plain text\n").unwrap();
    symlink(outside.join("out.pdf"), ws.join("docs/link.pdf")).unwrap();
    symlink(&outside, ws.join("out-dir")).unwrap();
    let tables = if allow {
        "[channels.cli]\ntools_allow = [\"file_read\", \"pdf_extract\"]\n"
    } else {
        ""
    };
    env.config(&format!(
        "{top}\n[security]\nautonomy = \"{autonomy}\"\nforbidden_paths = [{}]\n{tables}",
        lit(&ws.join("private"))
    ));
    env
}

fn run(env: &Env, args: Value) -> (i32, Value) {
    let (r, v) = env.tool("pdf_extract", args);
    (r.code, v)
}

#[test]
fn pdf_extract_reads_pages_and_page_ranges() {
    let env = env_with("readonly", "", true);
    let (code, v) = run(&env, json!({"path": "docs/report.pdf"}));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "allowed", "readonly allows pdf_extract: {v}");
    assert_eq!(v["risk"], "low");
    assert_eq!(
        output(&v),
        "--- page 1 ---\nQuarterly report\n--- page 2 ---\nRevenue grew\n\
         --- page 3 ---\nCosts fell\n--- page 4 ---\nOutlook\n"
    );
    assert_eq!(v["metadata"]["pages"], 4, "{v}");
    assert_eq!(v["metadata"]["path"], "docs/report.pdf");
    let (code, v) = run(
        &env,
        json!({"path": "docs/report.pdf", "first_page": 2, "last_page": 3}),
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        output(&v),
        "--- page 2 ---\nRevenue grew\n--- page 3 ---\nCosts fell\n\
         …[pages 2–3 of 4 shown; 1 more; ask with first_page=4]\n"
    );
    let (_, v) = run(&env, json!({"path": "docs/report.pdf", "max_chars": 20}));
    assert_eq!(
        output(&v),
        "--- page 1 ---\nQuarterly report\n--- page 2 ---\nReve\n\
         …[truncated in page 2 at max_chars=20; 2 pages after it; ask with first_page=3]\n"
    );
    assert_eq!(v["metadata"]["truncated"], true);
}

#[test]
fn pdf_extract_says_what_is_wrong() {
    let env = env_with("readonly", "", true);
    std::fs::write(env.ws.join("locked.pdf"), {
        let mut p = pdf(&["x"]);
        let at = p.windows(7).position(|w| w == b"/Root 1").unwrap();
        p.splice(at..at, b"/Encrypt << /V 2 >> ".iter().copied());
        p
    })
    .unwrap();
    for (args, want, code) in [
        (
            json!({"path": "docs/report.pdf", "first_page": 9}),
            "past the last page (4)",
            3,
        ),
        (
            json!({"path": "docs/report.pdf", "first_page": 0}),
            "from 1 to",
            3,
        ),
        (
            json!({"path": "docs/report.pdf", "first_page": 3, "last_page": 2}),
            "\"last_page\" (2) is before \"first_page\" (3)",
            3,
        ),
        (
            json!({"path": "notes.txt"}),
            "notes.txt: not a PDF file (no %PDF- header at its start)",
            3,
        ),
        (
            json!({"path": "locked.pdf"}),
            "locked.pdf: encrypted PDFs are not supported",
            3,
        ),
        (json!({"path": "docs"}), "docs is a directory", 3),
    ] {
        let (c, v) = run(&env, args.clone());
        assert_eq!(c, code, "{args}: {v}");
        assert_eq!(v["status"], "failed", "{args}: {v}");
        assert!(
            v["error"].as_str().unwrap_or("").contains(want),
            "{args}: {v}"
        );
    }
    // A schema mistake never reaches the gate.
    let r = env.run(&[
        "tool",
        "run",
        "pdf_extract",
        "--json",
        r#"{"path": "a.pdf", "pages": "1-2"}"#,
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("unknown argument \"pages\""), "{r:?}");
}

#[test]
fn pdf_extract_refuses_paths_the_gate_refuses() {
    for autonomy in ["readonly", "full"] {
        let env = env_with(autonomy, "", true);
        for (path, why) in [
            (".env.pdf", "secret-named"),
            ("private/p.pdf", "forbidden"),
            ("../outside/out.pdf", "outside the workspace"),
            ("docs/link.pdf", "outside the workspace"),
            ("out-dir/out.pdf", "outside the workspace"),
            ("/etc/passwd", "outside the workspace"),
        ] {
            let (code, v) = run(&env, json!({"path": path}));
            assert_eq!(
                (code, v["status"].as_str()),
                (4, Some("denied")),
                "{path}: {v}"
            );
            let all = v.to_string();
            assert!(all.contains(why), "{path}: {all}");
            assert!(!all.contains(SECRET) && !all.contains(OUTSIDE), "{all}");
        }
    }
}

#[test]
fn pdf_extract_is_off_unless_allowed() {
    let env = env_with("full", "", false);
    let (code, v) = run(&env, json!({"path": "docs/report.pdf"}));
    assert_eq!((code, v["status"].as_str()), (4, Some("denied")), "{v}");
    assert!(v.to_string().contains("not enabled on this channel"), "{v}");
    let r = env.run(&["tool", "list"]);
    assert!(r.stdout.contains("pdf_extract"), "{r:?}");
}
