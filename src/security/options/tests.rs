//! Each refusal below was checked against the real program on Debian 12
//! (coreutils 9.1, grep 3.8, sed 4.9, findutils 4.9, diffutils 3.8, file
//! 5.44, git 2.47) where the program exists; the comments say what it did.

use super::table::*;
use super::*;

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

#[track_caller]
fn ok(prog: &str, words: &[&str]) -> Parsed {
    match parse(prog, &argv(words)) {
        Some(Ok(p)) => p,
        Some(Err(e)) => panic!("{prog} {words:?} refused: {e}"),
        None => panic!("no table for {prog}"),
    }
}

#[track_caller]
fn err(prog: &str, words: &[&str]) -> String {
    match parse(prog, &argv(words)) {
        Some(Ok(p)) => panic!("{prog} {words:?} allowed: {p:?}"),
        // A table refuses a command, never anything else.
        Some(Err(e)) if e.kind == crate::security::refusal::Refusal::Command => e.reason,
        Some(Err(e)) => panic!("{prog} {words:?}: refused as {:?}: {e}", e.kind),
        None => panic!("no table for {prog}"),
    }
}

/// Refused, and the reason contains `needle`.
#[track_caller]
fn refused(prog: &str, words: &[&str], needle: &str) {
    let e = err(prog, words);
    assert!(
        e.contains(needle),
        "{prog} {words:?}: `{e}` lacks `{needle}`"
    );
    assert!(e.contains(&format!("`{prog}")), "{e} does not name {prog}");
}

fn s(v: &[&str]) -> Vec<String> {
    argv(v)
}

// ------------------------------------------------------------ the registry

#[test]
fn every_default_allowlisted_program_has_a_table() {
    for prog in crate::config::DEFAULT_SHELL_ALLOWLIST {
        assert!(has_table(prog), "{prog}");
        assert!(describe_program(prog).unwrap().starts_with(prog));
    }
    for prog in ["expr", "tee", "mkdir", "touch", "cp", "mv"] {
        assert!(has_table(prog), "{prog}");
    }
    assert!(!has_table("rm"));
    assert!(!has_table("/bin/ls"));
    assert!(parse("sh", &s(&["-c", "id"])).is_none());
    assert!(describe_program("ls").unwrap().contains("61 options"));
}

#[test]
fn tables_are_consistent() {
    for e in PROGRAMS {
        let Some(t) = e.spec.map(|s| s.opts) else {
            continue;
        };
        for (i, a) in t.iter().enumerate() {
            assert!(a.s != '\0' || !a.l.is_empty(), "{}: empty entry", e.name);
            for b in &t[i + 1..] {
                assert!(a.l.is_empty() || a.l != b.l, "{}: --{} twice", e.name, a.l);
                // The first entry with a letter wins; a second one must mean
                // the same (aliases like --quiet/--silent).
                assert!(
                    a.s == '\0' || a.s != b.s || a.same_meaning(b),
                    "{}: -{} means two things",
                    e.name,
                    a.s
                );
            }
        }
    }
}

// ------------------------------------------------------------ getopt_long

#[test]
fn long_options_resolve_like_getopt_long() {
    // Exact, unique prefix, glued value, next-word value.
    assert_eq!(ok("sort", &["--output=o", "f"]).writes, ["o"]);
    assert_eq!(ok("sort", &["--outp=/x", "f"]).writes, ["/x"]);
    assert_eq!(ok("sort", &["--outp", "/x", "f"]).writes, ["/x"]);
    assert_eq!(ok("sort", &["f", "-o", "/y"]).writes, ["/y"]);
    // `sort --s` could be --sort or --stable.
    refused("sort", &["--s", "f"], "ambiguous");
    // An exact name wins over longer ones (--exclude vs --exclude-from).
    let p = ok("grep", &["-r", "--exclude", "*.o", "x", "src"]);
    assert_eq!(p.reads, ["src"]);
    assert_eq!(
        ok("grep", &["--exclude-f=list", "x", "f"]).reads,
        ["list", "f"]
    );
    // --color and --colour mean the same: glibc takes the first.
    ok("grep", &["--colo=never", "x", "f"]);
    refused("sort", &["--foo"], "not known to latchclaw's table");
    refused("sort", &["-Q"], "`-Q`");
    refused("ls", &["--all=yes"], "takes no value");
    refused("sort", &["-o"], "needs a value");
    refused("ls", &["--=x"], "not known");
}

#[test]
fn short_clusters_and_glued_values() {
    // `-ko/tmp/x` would be -k with value "o/tmp/x"; `-uo/x` is -u then -o.
    assert!(ok("sort", &["-ko/tmp/x", "f"]).writes.is_empty());
    assert_eq!(ok("sort", &["-ruo/x", "f"]).writes, ["/x"]);
    assert_eq!(ok("sort", &["-rno", "/x", "f"]).writes, ["/x"]);
    assert_eq!(ok("sort", &["-k2", "-t,", "f"]).reads, ["f"]);
    assert_eq!(ok("sort", &["-k1,2", "f"]).reads, ["f"]);
    assert_eq!(ok("cut", &["-d,", "-f1", "data.csv"]).reads, ["data.csv"]);
    // Options after operands count (permutation); `--` ends them.
    assert_eq!(ok("sort", &["f", "-o", "g"]).writes, ["g"]);
    assert_eq!(ok("cat", &["--", "-o", "-"]).reads, ["-o"]);
    // `-` is standard input.
    assert!(ok("cat", &["-"]).reads.is_empty());
}

#[test]
fn no_panics_and_linear_on_odd_argv() {
    let vocab = [
        "",
        "-",
        "--",
        "---",
        "-=",
        "--=",
        "=",
        "-e",
        "-f",
        "-o",
        "-t",
        "-C",
        "-i",
        "-ni",
        "-i.bak",
        "--in-place",
        "--in",
        "-x",
        "-exec",
        "-delete",
        "(",
        ")",
        "!",
        ",",
        "+1",
        "+",
        "-5",
        "-5c",
        "-c",
        "-n",
        "-r",
        "-R",
        "-L",
        "--files0-from",
        "--pre",
        "-z",
        "é",
        "-é",
        "--é=é",
        "\u{0}",
        "s/a/b/",
        "s/x/y/e",
        "w /x",
        "a\\",
        "1a\\\\\\\\\ne id",
        "[",
        "s/[/",
        "y/a",
        "/etc/passwd",
        "-newer",
        "-newerXY",
        "-newermt",
        "-D",
        "-O3",
        "--git-dir",
        "-c",
        "log",
        "status",
        "config",
        "branch",
        "tag",
        "stash",
        "commit",
        "-m",
        "--format",
        "--format=",
        "--end-of-options",
        "--no-index",
        "--output",
        "-p",
        "-U",
        "-n5",
        ":",
        "HEAD:x",
        "{",
        "}",
        "#",
        ";",
        "\\",
        "\n",
        "r",
        "R",
        "b",
        ":a",
        "v",
        "q5",
        "l",
        "0~3p",
        "$!N",
        "/x/I,+3{p}",
        "\t",
    ];
    let mut rng = fastrand::Rng::with_seed(10);
    for e in PROGRAMS {
        for _ in 0..400 {
            let n = rng.usize(0..9);
            let args: Vec<String> = (0..n)
                .map(|_| {
                    let mut w = vocab[rng.usize(..vocab.len())].to_string();
                    if rng.u8(..) < 40 {
                        w.push_str(vocab[rng.usize(..vocab.len())]);
                    }
                    w
                })
                .collect();
            let _ = (e.parse)(&args);
            // git with a subcommand in front, too.
            if e.name == "git" {
                for sub in ["log", "grep", "config", "branch", "commit", "stash", "diff"] {
                    let mut a = vec![sub.to_string()];
                    a.extend(args.iter().cloned());
                    let _ = (e.parse)(&a);
                }
            }
        }
    }
    // Big argv: linear, no stack growth.
    let big: Vec<String> = (0..100_000).map(|i| format!("-{}", i % 7)).collect();
    let many: Vec<String> = (0..100_000).map(|i| format!("f{i}")).collect();
    let started = std::time::Instant::now();
    for e in PROGRAMS {
        let _ = (e.parse)(&big);
        let _ = (e.parse)(&many);
    }
    let long_script = "p;".repeat(200_000);
    let _ = parse("sed", &s(&[&long_script]));
    let nested = "{".repeat(100_000) + &"}".repeat(100_000);
    let _ = parse("sed", &s(&[&nested]));
    let dir = "d".repeat(5000);
    assert!(parse("git", &s(&["-C", &dir, "status"])).unwrap().is_err());
    let mut cc = vec!["-C".to_string(), "x".repeat(4000)];
    cc.extend(std::iter::repeat_n(["-C".to_string(), "y".into()], 1000).flatten());
    assert!(parse("git", &cc).unwrap().is_err());
    let stars = "*".repeat(3000);
    assert!(
        parse("sed", &s(&[&format!("-i{stars}"), "p", &"f".repeat(3000)]))
            .unwrap()
            .is_err()
    );
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

// ------------------------------------------------------------ coreutils

#[test]
fn ls_reads_and_recursion() {
    let p = ok("ls", &["-la"]);
    assert_eq!(p.reads, ["."]);
    assert!(p.read_dirs_recursive.is_empty());
    let p = ok("ls", &["-la", "src", "/tmp"]);
    assert_eq!(p.reads, ["src", "/tmp"]);
    let p = ok("ls", &["-R", "src"]);
    assert_eq!(p.read_dirs_recursive, ["src"]);
    assert!(!p.follows_symlinks_recursively);
    assert!(ok("ls", &["-RL"]).follows_symlinks_recursively);
    assert!(ok("ls", &["--recursive", "--dereference"]).follows_symlinks_recursively);
    // Checked: ls says "option '--deref' is ambiguous".
    refused("ls", &["--deref"], "ambiguous");
    assert!(!ok("ls", &["-L", "x"]).follows_symlinks_recursively);
    ok(
        "ls",
        &[
            "--color=auto",
            "-1",
            "--group-directories-first",
            "-h",
            "--sort=size",
        ],
    );
    assert!(!ok("ls", &["-la"]).writes_anything);
    refused("ls", &["-j"], "not known");
}

#[test]
fn cat_head_tail_wc() {
    assert_eq!(ok("cat", &["-n", "a", "b"]).reads, ["a", "b"]);
    assert_eq!(ok("head", &["-n", "5", "f"]).reads, ["f"]);
    assert_eq!(ok("head", &["-5", "f"]).reads, ["f"]);
    // head -5c FILE prints 5 bytes of FILE: the whole word is the count.
    assert_eq!(ok("head", &["-5c", "/etc/passwd"]).reads, ["/etc/passwd"]);
    assert_eq!(ok("head", &["-c", "-5", "f"]).reads, ["f"]);
    refused("head", &["-5x", "f"], "not a valid letter");
    // After the first argument a digit is an error in head.
    refused("head", &["-n", "1", "-5"], "-5");
    assert_eq!(ok("tail", &["-n", "+3", "f"]).reads, ["f"]);
    assert_eq!(ok("tail", &["-5", "f"]).reads, ["f"]);
    assert_eq!(ok("tail", &["+3", "f"]).reads, ["f"]);
    // tail -3c FILE: last 3 bytes of FILE (checked: prints "ld\n").
    assert_eq!(ok("tail", &["-3c", "/etc/passwd"]).reads, ["/etc/passwd"]);
    assert_eq!(ok("tail", &["-5", "--", "f"]).reads, ["f"]);
    // Not the obsolete form (two files): -5 is then an invalid option.
    refused("tail", &["-5", "a", "b"], "-5");
    // Deliberate: tail -f never ends, so it is refused rather than left to
    // the timeout.
    refused("tail", &["-f", "log"], "never ends");
    refused("tail", &["-F", "log"], "never ends");
    refused("tail", &["--fol=name", "log"], "never ends");
    refused("tail", &["-5f", "log"], "never ends");
    assert_eq!(ok("wc", &["-l", "a"]).reads, ["a"]);
    // The names inside the list file would be read unseen.
    refused("wc", &["--files0-from=list"], "cannot see");
    refused("wc", &["--files0=list"], "cannot see");
}

#[test]
fn text_only_programs() {
    for prog in ["echo", "printf", "expr", "true"] {
        let p = ok(prog, &["-x", "--help", "/etc/passwd", "-e", "%s"]);
        assert_eq!(p, Parsed::default());
    }
    assert_eq!(ok("pwd", &["-P"]), Parsed::default());
    refused("pwd", &["-x"], "not known");
    assert_eq!(ok("basename", &["/a/b.rs", ".rs"]), Parsed::default());
    // basename stops at the first operand: `-s` there is a name.
    assert_eq!(ok("basename", &["/a/b", "-s"]), Parsed::default());
    assert_eq!(ok("dirname", &["/etc/passwd"]), Parsed::default());
    assert_eq!(ok("tr", &["a-z", "A-Z"]), Parsed::default());
    assert_eq!(ok("tr", &["-d", "\\n"]), Parsed::default());
    assert_eq!(ok("which", &["-a", "ls", "git"]), Parsed::default());
    assert_eq!(ok("which", &["./tool"]).reads, ["./tool"]);
    refused("which", &["-s", "ls"], "only -a");
}

#[test]
fn date_never_sets_the_clock() {
    ok("date", &["+%F"]);
    ok("date", &["-u", "+%Y-%m-%dT%H:%M:%S"]);
    ok("date", &["-d", "yesterday", "+%F"]);
    ok("date", &["--iso-8601=seconds"]);
    refused("date", &["-s", "2030-01-01"], "sets the system clock");
    // `date --se` resolves to --set (checked: "option '--set' requires an
    // argument").
    refused("date", &["--se=2030-01-01"], "sets the system clock");
    refused("date", &["--se", "x"], "(read as `--set`)");
    // A date operand without + sets the clock too.
    refused("date", &["010100002030"], "sets the system clock");
    // -f reads each line of the file as a date and prints it when invalid.
    assert_eq!(ok("date", &["-f/etc/passwd"]).reads, ["/etc/passwd"]);
    assert_eq!(ok("date", &["--file", "dates"]).reads, ["dates"]);
    assert_eq!(ok("date", &["-r", "f"]).reads, ["f"]);
    assert!(ok("date", &["-f", "-"]).reads.is_empty());
    refused("date", &["--rfc", "x"], "ambiguous");
}

#[test]
fn sort_options() {
    assert_eq!(ok("sort", &["-k2", "-t,", "f"]).reads, ["f"]);
    refused("sort", &["--compress-program=sh", "f"], "runs a program");
    // A prefix of --compress-program (checked: sort accepts it).
    refused("sort", &["--compress=sh", "f"], "runs a program");
    refused("sort", &["--files0-from=l"], "cannot see");
    let p = ok("sort", &["-T", "/tmp", "f"]);
    assert_eq!(p.writes, ["/tmp"]);
    assert!(p.writes_anything);
    assert_eq!(
        ok("sort", &["--random-source=/dev/urandom", "-R", "f"]).reads,
        ["/dev/urandom", "f"]
    );
    assert!(!ok("sort", &["-u", "f"]).writes_anything);
}

#[test]
fn uniq_second_operand_is_written() {
    let p = ok("uniq", &["a", "/tmp/out"]);
    assert_eq!(p.reads, ["a"]);
    assert_eq!(p.writes, ["/tmp/out"]);
    assert!(p.writes_anything);
    // `+1` skips characters (checked: `uniq +1 in out` creates out).
    let p = ok("uniq", &["+1", "in", "out"]);
    assert_eq!((p.reads, p.writes), (s(&["in"]), s(&["out"])));
    let p = ok("uniq", &["-c", "+1", "/etc/passwd"]);
    assert_eq!(p.reads, ["/etc/passwd"]);
    assert!(!p.writes_anything);
    // After `--`, +1 is a file.
    let p = ok("uniq", &["--", "+1", "out"]);
    assert_eq!(p.writes, ["out"]);
    refused("uniq", &["a", "b", "c"], "at most two");
    assert!(ok("uniq", &["a", "-"]).writes.is_empty());
    assert!(ok("uniq", &["-d", "-f", "2", "x"]).writes.is_empty());
}

#[test]
fn stat_du_df() {
    assert_eq!(ok("stat", &["-c", "%s", "f"]).reads, ["f"]);
    let p = ok("du", &["-sh"]);
    assert_eq!(p.read_dirs_recursive, ["."]);
    assert!(!p.follows_symlinks_recursively);
    assert!(ok("du", &["-L", "x"]).follows_symlinks_recursively);
    assert_eq!(ok("du", &["-X", "ex", "d"]).reads, ["ex", "d"]);
    refused("du", &["--files0-from=-"], "cannot see");
    assert_eq!(ok("df", &["-h", "."]).reads, ["."]);
    assert!(ok("df", &["-h"]).reads.is_empty());
}

#[test]
fn tee_mkdir_touch_write() {
    let p = ok("tee", &["/tmp/x"]);
    assert_eq!(p.writes, ["/tmp/x"]);
    assert!(p.writes_anything);
    assert!(ok("tee", &["-a", "log"]).writes_anything);
    let p = ok("mkdir", &["-p", "a/b", "c"]);
    assert_eq!(p.writes, ["a/b", "c"]);
    let p = ok("touch", &["-r", "/etc/passwd", "f"]);
    assert_eq!((p.reads, p.writes), (s(&["/etc/passwd"]), s(&["f"])));
    assert_eq!(ok("touch", &["-d", "2020-01-01", "f"]).writes, ["f"]);
}

#[test]
fn cp_and_mv() {
    let p = ok("cp", &["a", "b"]);
    assert_eq!(p.reads, ["a"]);
    assert!(p.writes.contains(&"b".to_string()));
    assert!(p.writes_anything);
    let p = ok("cp", &["-r", "src", "dst"]);
    assert_eq!(p.read_dirs_recursive, ["src"]);
    assert_eq!(p.write_dirs_recursive, ["dst"]);
    assert!(!p.follows_symlinks_recursively);
    assert!(ok("cp", &["-rL", "src", "dst"]).follows_symlinks_recursively);
    assert_eq!(ok("cp", &["-a", "s", "d"]).read_dirs_recursive, ["s"]);
    let p = ok("cp", &["-t", "/tmp", "a", "b"]);
    assert_eq!(p.reads, ["a", "b"]);
    assert!(p.writes.contains(&"/tmp".to_string()));
    assert!(p.writes.contains(&"/tmp/a".to_string()));
    // --parents writes DEST/SOURCE, which `..` can lead out of DEST.
    let p = ok("cp", &["--parents", "../x/f", "d"]);
    assert!(p.writes.contains(&"d/../x/f".to_string()));
    ok(
        "cp",
        &[
            "--backup=numbered",
            "-S",
            ".orig",
            "--reflink=auto",
            "a",
            "b",
        ],
    );
    refused("cp", &["-s", "/etc/passwd", "link"], "makes links");
    refused("cp", &["-l", "a", "b"], "makes links");
    refused("cp", &["--sym", "a", "b"], "makes links");
    refused("cp", &["a"], "source and a destination");
    refused("cp", &["-t", "a", "-t", "b", "c"], "one target");
    let p = ok("mv", &["a", "b/"]);
    assert_eq!(p.reads, ["a"]);
    assert!(p.writes.contains(&"a".to_string()));
    assert!(p.writes.contains(&"b/a".to_string()));
    assert!(
        ok("mv", &["-t", "d", "x"])
            .writes
            .contains(&"x".to_string())
    );
}

#[test]
fn cp_and_mv_backups_are_writes_too() {
    let has = |p: &Parsed, w: &str| p.writes.iter().any(|x| x == w);
    let p = ok("cp", &["-b", "-S", ".key", "server", "d"]);
    assert!(
        has(&p, "d/server.key") && has(&p, "d.key"),
        "{:?}",
        p.writes
    );
    assert!(has(&ok("cp", &["--suffix=.key", "a", "b"]), "b.key"));
    assert!(has(&ok("cp", &["--backup=simple", "a", "b"]), "b~"));
    assert!(has(
        &ok("cp", &["--backup=none", "-S", ".pem", "a", "b"]),
        "b.pem"
    ));
    let p = ok("mv", &["-b", "a", "b/"]);
    assert!(has(&p, "b/a~") && has(&p, "a~"), "{:?}", p.writes);
    let p = ok("mv", &["-t", "d", "-S", ".env", "x"]);
    assert!(has(&p, "d/x.env"), "{:?}", p.writes);
    assert!(
        !ok("cp", &["a", "b"])
            .writes
            .iter()
            .any(|w| w.ends_with('~'))
    );
    // Numbered backups (`numbered`, `t`; `existing`, the default, where
    // some are there): DEST.~N~.
    let p = ok("cp", &["--backup=numbered", "a.txt", "d/"]);
    assert!(has(&p, "d/a.txt.~N~"), "{:?}", p.writes);
    assert!(has(&ok("mv", &["-b", "a", "b"]), "b.~N~"));
    let p = ok("cp", &["--backup=simple", "a", "b"]);
    assert!(
        !p.writes.iter().any(|w| w.ends_with(".~N~")),
        "{:?}",
        p.writes
    );
    refused("cp", &["-b", "-S", "/../.git", "a", "b"], "containing '/'");
    refused("mv", &["--suffix=x/y", "a", "b"], "containing '/'");
    refused("cp", &["--suffix", "/", "a", "b"], "containing '/'");
}

// ------------------------------------------------------------ grep, rg

#[test]
fn grep_patterns_files_and_trees() {
    let p = ok("grep", &["-rn", "TODO", "src"]);
    assert_eq!(p.read_dirs_recursive, ["src"]);
    assert!(!p.follows_symlinks_recursively);
    let p = ok("grep", &["-r", "x"]);
    assert_eq!(p.read_dirs_recursive, ["."]);
    assert!(ok("grep", &["-R", "x"]).follows_symlinks_recursively);
    // A prefix of --dereference-recursive (checked: grep accepts it).
    assert!(ok("grep", &["--dereference-r", "x", "d"]).follows_symlinks_recursively);
    let p = ok("grep", &["-e", "/etc/passwd", "f"]);
    assert_eq!(p.reads, ["f"]);
    let p = ok("grep", &["-f", "pats", "f"]);
    assert_eq!(p.reads, ["pats", "f"]);
    assert_eq!(ok("grep", &["-fpats", "f"]).reads, ["pats", "f"]);
    let p = ok("grep", &["TODO", "a", "-i", "b"]);
    assert_eq!(p.reads, ["a", "b"]);
    assert!(p.read_dirs_recursive.is_empty());
    assert!(ok("grep", &["x"]).reads.is_empty());
    assert_eq!(ok("grep", &["-5", "x", "f"]).reads, ["f"]);
    // --directories=recurse is -r (argmatch takes "rec" too).
    assert_eq!(
        ok("grep", &["-d", "rec", "x", "d"]).read_dirs_recursive,
        ["d"]
    );
    assert!(
        ok("grep", &["-d", "skip", "x", "d"])
            .read_dirs_recursive
            .is_empty()
    );
    assert_eq!(
        ok("grep", &["--exclude-from=ex", "-r", "x"]).reads,
        ["ex", "."]
    );
    ok(
        "grep",
        &["--include=*.rs", "--exclude-dir=target", "-rl", "fn", "."],
    );
}

#[test]
fn rg_exact_names_and_refusals() {
    let p = ok("rg", &["TODO"]);
    assert_eq!(p.read_dirs_recursive, ["."]);
    let p = ok("rg", &["-n", "fn main", "src", "tests"]);
    assert_eq!(p.read_dirs_recursive, ["src", "tests"]);
    assert!(ok("rg", &["-L", "x"]).follows_symlinks_recursively);
    assert!(ok("rg", &["--follow", "x"]).follows_symlinks_recursively);
    refused("rg", &["--pre", "sh", "x"], "runs a program");
    refused("rg", &["--pre=sh", "x"], "runs a program");
    ok("rg", &["--no-pre", "x"]);
    refused("rg", &["-z", "x"], "decompression");
    refused("rg", &["-iz", "x"], "decompression");
    refused("rg", &["--hostname-bin=/bin/sh", "x"], "runs a program");
    // ripgrep takes no abbreviations.
    refused("rg", &["--follo", "x"], "not known");
    refused("rg", &["--pr", "sh", "x"], "not known");
    // -f: patterns from a file; then every positional is a path.
    let p = ok("rg", &["-f", "/etc/passwd", "src"]);
    assert_eq!(p.reads, ["/etc/passwd", "src"]);
    // lexopt strips one `=` from a glued short value.
    assert_eq!(ok("rg", &["-f=/etc/passwd", "d"]).reads[0], "/etc/passwd");
    refused("rg", &["-n=1", "x"], "followed by `=`");
    assert_eq!(ok("rg", &["--ignore-file", "ig", "x"]).reads[0], "ig");
    assert_eq!(
        ok("rg", &["--files", "a", "b"]).read_dirs_recursive,
        ["a", "b"]
    );
    assert_eq!(ok("rg", &["-e", "x", "a"]).read_dirs_recursive, ["a"]);
    ok(
        "rg",
        &["-g", "*.rs", "-t", "rust", "--max-depth", "2", "-uu", "x"],
    );
}

// ------------------------------------------------------------ find

#[test]
fn find_expression_language() {
    let p = ok("find", &[".", "-name", "*.rs"]);
    assert_eq!(p.read_dirs_recursive, ["."]);
    let p = ok("find", &["-name", "*.rs"]);
    assert_eq!(p.read_dirs_recursive, ["."]);
    let p = ok(
        "find",
        &["src", "tests", "-type", "f", "-maxdepth", "2", "-print0"],
    );
    assert_eq!(p.read_dirs_recursive, ["src", "tests"]);
    // The value of -name is text even when it looks like a primary.
    ok("find", &[".", "-name", "-exec"]);
    ok(
        "find",
        &[
            ".", "(", "-name", "a", "-o", "-name", "b", ")", "-prune", "-o", "-print",
        ],
    );
    ok(
        "find",
        &[".", "!", "-path", "./target/*", "-printf", "%p\\n"],
    );
    ok("find", &[".", "-newermt", "2024-01-01"]);
    assert_eq!(ok("find", &[".", "-newer", "ref"]).reads, [".", "ref"]);
    assert_eq!(ok("find", &[".", "-neweram", "ref"]).reads, [".", "ref"]);
    assert!(ok("find", &["-L", "."]).follows_symlinks_recursively);
    assert!(ok("find", &[".", "-follow"]).follows_symlinks_recursively);
    assert!(!ok("find", &["-H", "."]).follows_symlinks_recursively);
    refused("find", &[".", "-exec", "rm", "{}", ";"], "runs a program");
    refused("find", &[".", "-execdir", "sh", "+"], "runs a program");
    refused("find", &[".", "-ok", "x", ";"], "runs a program");
    refused("find", &[".", "-delete"], "deletes");
    refused("find", &[".", "-fprint", "/tmp/x"], "writes a file");
    refused("find", &[".", "-fprintf", "/tmp/x", "%p"], "writes a file");
    refused("find", &[".", "-fls", "/tmp/x"], "writes a file");
    refused("find", &["-files0-from", "l"], "cannot see");
    refused("find", &[".", "-frobnicate"], "not known");
    refused("find", &[".", "-name"], "needs a value");
    refused("find", &[".", "-name", "x", "stray"], "starting point");
    refused("find", &[".", "-newerXY", "x"], "not valid");
}

// ------------------------------------------------------------ sed

#[test]
fn sed_scripts_are_analysed() {
    let p = ok("sed", &["-n", "1,5p", "f"]);
    assert_eq!(p.reads, ["f"]);
    assert!(!p.writes_anything);
    ok("sed", &["-E", "s/(a|b)+/x/g;/^#/d", "f"]);
    ok("sed", &["-e", "s/a/b/", "-e", "y/abc/xyz/", "f"]);
    ok("sed", &["/start/,/end/{s/x/y/2;p}", "f"]);
    ok("sed", &[":a;N;$!ba;s/\\n/ /g", "f"]);
    // The delimiter does not end a bracket expression (checked: works).
    ok("sed", &["s/[/]/X/", "f"]);
    // Text of `a` runs to the end of the line (checked: prints the text).
    ok("sed", &["a foo; e echo PWNED", "f"]);
    ok("sed", &["$a\\", "f"]);
    ok("sed", &["-e", "a\\", "-e", "e echo text", "f"]);
    refused("sed", &["--expression=1e id", "f"], "runs a command");
    refused("sed", &["-e", "s/x/y/e", "f"], "runs the result");
    refused("sed", &["s/x/y/ge", "f"], "runs the result");
    refused("sed", &["e id"], "runs a command");
    refused("sed", &["w /tmp/x", "f"], "writes a file");
    refused("sed", &["1W /tmp/x"], "writes a file");
    refused("sed", &["s/x/y/w /tmp/x", "f"], "writes a file");
    refused("sed", &["-n", "/x/{p;w out\n}", "f"], "writes a file");
    // `a\` followed by a backslash: the text ends at the newline and the
    // next line is a command (checked: GNU sed runs `echo PWNED`).
    refused("sed", &["1a\\\\\ne echo PWNED", "f"], "runs a command");
    // Addresses, `!`, blocks and comments do not hide commands.
    refused("sed", &["/x/!e", "f"], "runs a command");
    refused("sed", &["1{\ne\n}", "f"], "runs a command");
    refused("sed", &["s/a/b/ # c\ne", "f"], "runs a command");
    refused("sed", &["y/a/b/;e", "f"], "runs a command");
    let p = ok("sed", &["r /etc/passwd", "f"]);
    assert_eq!(p.reads, ["/etc/passwd", "f"]);
    // A filename runs to the end of the line, `;` included.
    assert_eq!(ok("sed", &["r foo; e echo x"]).reads, ["foo; e echo x"]);
    assert_eq!(ok("sed", &["1R other", "f"]).reads, ["other", "f"]);
    refused("sed", &["s/unterminated", "f"], "cannot check");
    refused("sed", &["k", "f"], "unknown command");
}

#[test]
fn sed_in_place_and_script_files() {
    let p = ok("sed", &["-i", "s/a/b/", "f", "g"]);
    assert_eq!(p.writes, ["f", "g"]);
    assert!(p.writes_anything);
    // `sed --in-pl` is --in-place (checked: edits the file).
    let p = ok("sed", &["--in-pl", "s/a/b/", "f"]);
    assert_eq!(p.writes, ["f"]);
    let p = ok("sed", &["--in-pl=.b", "s/a/b/", "f"]);
    assert_eq!(p.writes, ["f", "f.b"]);
    // `-iE` is in-place with suffix "E" (checked: creates fE), not -i -E.
    assert_eq!(ok("sed", &["-iE", "s/a/b/", "f"]).writes, ["f", "fE"]);
    // `-ni` is -n then -i (checked: the file is rewritten, empty).
    assert_eq!(ok("sed", &["-ni", "p", "f"]).writes, ["f"]);
    // `-in` is -i with suffix "n".
    assert_eq!(ok("sed", &["-in", "p", "f"]).writes, ["f", "fn"]);
    // A suffix with `*` and `/` puts the backup elsewhere.
    assert_eq!(
        ok("sed", &["-i/tmp/bak_*", "p", "f"]).writes,
        ["f", "/tmp/bak_f"]
    );
    refused("sed", &["--follow-symlinks", "-i.b", "p", "f"], "refuses");
    // A script file is unseen unless sed's own sandbox is on first.
    refused("sed", &["-f", "script.sed", "f"], "--sandbox");
    refused("sed", &["-f", "s.sed", "--sandbox", "f"], "--sandbox");
    let p = ok("sed", &["--sandbox", "-f", "s.sed", "f"]);
    assert_eq!(p.reads, ["s.sed", "f"]);
    ok(
        "sed",
        &["--posix", "-s", "-z", "-u", "--debug", "-l", "70", "p", "f"],
    );
}

// ------------------------------------------------------------ diff, file

#[test]
fn diff_and_file() {
    assert_eq!(ok("diff", &["-u", "a", "b"]).reads, ["a", "b"]);
    let p = ok("diff", &["-ru", "a", "b"]);
    assert_eq!(p.read_dirs_recursive, ["a", "b"]);
    assert!(p.follows_symlinks_recursively);
    assert!(!ok("diff", &["-r", "--no-dereference", "a", "b"]).follows_symlinks_recursively);
    assert_eq!(
        ok("diff", &["--from-file=a", "b", "c"]).reads,
        ["a", "b", "c"]
    );
    assert_eq!(ok("diff", &["-X", "ex", "a", "b"]).reads, ["ex", "a", "b"]);
    ok("diff", &["-U3", "--color=never", "-N", "a", "b"]);
    ok("diff", &["--unified=3", "a", "b"]);
    refused("diff", &["-l", "a", "b"], "runs `pr`");
    refused("diff", &["--pag", "a", "b"], "runs `pr`");
    assert_eq!(ok("file", &["-b", "x"]).reads, ["x"]);
    assert_eq!(ok("file", &["-m/abs/path", "x"]).reads, ["/abs/path", "x"]);
    assert_eq!(ok("file", &["-m", "a:b", "x"]).reads, ["a", "b", "x"]);
    refused("file", &["-C", "-m", "m"], "writes");
    refused("file", &["-z", "x.gz"], "decompression");
    refused("file", &["-f", "list"], "cannot see");
    refused("file", &["-p", "x"], "access times");
}

// ------------------------------------------------------------ git

#[test]
fn git_read_only_subcommands() {
    let p = ok("git", &["log", "--oneline", "-5"]);
    assert!(!p.writes_anything);
    assert_eq!(p.git_subcommand, Some(1));
    ok(
        "git",
        &[
            "log",
            "--oneline",
            "-n",
            "5",
            "--graph",
            "--all",
            "--decorate",
        ],
    );
    ok(
        "git",
        &[
            "log",
            "--format=%h %s",
            "--since=2.weeks",
            "--author",
            "me",
            "-p",
            "-U1",
        ],
    );
    ok("git", &["log", "--stat", "--follow", "--", "src/main.rs"]);
    ok(
        "git",
        &[
            "log",
            "-S",
            "needle",
            "-G",
            "re",
            "--name-status",
            "--no-merges",
        ],
    );
    ok(
        "git",
        &[
            "log",
            "--pretty=format:%H",
            "--date=iso",
            "--reverse",
            "HEAD~3..HEAD",
        ],
    );
    // Revision syntax is not a path; pathspecs are reads.
    assert!(ok("git", &["show", "HEAD:src/lib.rs"]).reads.is_empty());
    assert!(
        ok("git", &["log", "main..feature", "^old"])
            .reads
            .is_empty()
    );
    assert_eq!(
        ok("git", &["log", "HEAD", "--", "src"]).reads,
        ["HEAD", "src"]
    );
    assert_eq!(
        ok("git", &["grep", "x", "HEAD~1:src", "--", "lib"]).reads,
        ["lib"]
    );
    assert_eq!(
        ok("git", &["diff", "a.rs", "/etc/passwd"]).read_dirs_recursive,
        ["a.rs", "/etc/passwd"]
    );
    ok("git", &["merge-base", "--is-ancestor", "a", "b"]);
    ok("git", &["reflog", "-n", "5"]);
    refused("git", &["reflog", "expire", "--all"], "refused");
    refused("git", &["cat-file", "--batch"], "not in latchclaw's list");
    ok(
        "git",
        &["show", "--stat", "--word-diff", "--color=always", "HEAD"],
    );
    let p = ok("git", &["diff", "--cached", "--", "a.rs"]);
    assert_eq!(p.reads, ["a.rs"]);
    ok(
        "git",
        &[
            "diff",
            "--staged",
            "--name-only",
            "--no-ext-diff",
            "--no-textconv",
        ],
    );
    ok("git", &["status", "-sb"]);
    ok("git", &["status", "--porcelain", "-uno"]);
    ok(
        "git",
        &["status", "--porcelain=v2", "--untracked-files=all"],
    );
    ok("git", &["blame", "-L", "10,20", "src/lib.rs"]);
    ok("git", &["ls-files", "-z", "--others", "--exclude-standard"]);
    ok("git", &["rev-parse", "--show-toplevel"]);
    ok("git", &["rev-parse", "--abbrev-ref", "HEAD"]);
    ok("git", &["grep", "-n", "TODO"]);
    ok(
        "git",
        &["grep", "-in", "-e", "a", "--and", "-e", "b", "--", "*.rs"],
    );
    ok("git", &["shortlog", "-sn"]);
    ok("git", &["describe", "--tags", "--always", "--dirty"]);
    ok("git", &["rev-list", "--count", "HEAD"]);
    ok("git", &["cat-file", "-p", "HEAD"]);
    ok("git", &["cat-file", "-t", "HEAD"]);
    ok("git", &["ls-tree", "-r", "--name-only", "HEAD"]);
    ok("git", &["show-ref", "--tags"]);
    ok("git", &["count-objects", "-vH"]);
    ok("git", &["version"]);
    ok("git", &["--version"]);
    ok("git", &["remote", "-v"]);
    ok("git", &["remote", "get-url", "origin"]);
    ok("git", &["stash", "list"]);
    ok("git", &["stash", "show", "-p", "stash@{0}"]);
    for p in [
        ok("git", &["branch"]),
        ok("git", &["branch", "-a", "-v"]),
        ok("git", &["branch", "--list", "feat*"]),
        ok("git", &["branch", "--contains", "HEAD"]),
        ok("git", &["tag"]),
        ok("git", &["tag", "-l", "v*"]),
        ok("git", &["config", "--get", "user.name"]),
        ok("git", &["config", "user.name"]),
        ok("git", &["config", "--list"]),
        ok("git", &["config", "-l", "--show-origin"]),
        ok("git", &["config", "get", "user.email"]),
        ok("git", &["config", "list"]),
    ] {
        assert!(!p.writes_anything, "{p:?}");
    }
    assert_eq!(
        ok("git", &["config", "--global", "--get", "user.name"]).reads,
        ["~/.gitconfig"]
    );
}

#[test]
fn git_global_options() {
    let p = ok("git", &["-C", "sub", "status"]);
    assert_eq!(p.reads, ["sub"]);
    assert_eq!(p.git_subcommand, Some(3));
    let p = ok("git", &["-C", "/tmp/r", "log", "x"]);
    assert_eq!(p.reads, ["/tmp/r", "/tmp/r/x"]);
    let p = ok("git", &["-C", "a", "-C", "b", "status"]);
    assert_eq!(p.reads, ["a", "a/b"]);
    // Deliberate: a repository directory must be a `.git` directory. Any
    // other directory the model can write to could hold a `config` naming
    // programs to run (core.fsmonitor runs on `git status`).
    refused(
        "git",
        &["--git-dir=/tmp/evil", "status"],
        "not a .git directory",
    );
    refused(
        "git",
        &["--git-dir", "evil", "status"],
        "not a .git directory",
    );
    refused("git", &["--bare", "log"], "not a .git directory");
    refused("git", &["init", "--bare", "r"], "not a .git directory");
    assert_eq!(
        ok("git", &["--git-dir=/tmp/r/.git", "status"]).reads,
        ["/tmp/r/.git"]
    );
    assert_eq!(
        ok("git", &["--git-dir", "sub/.git/", "log"]).reads,
        ["sub/.git/"]
    );
    assert_eq!(
        ok("git", &["--work-tree", "/tmp/w", "status"]).reads,
        ["/tmp/w"]
    );
    ok(
        "git",
        &[
            "--no-pager",
            "-P",
            "--no-optional-locks",
            "--literal-pathspecs",
            "log",
        ],
    );
    refused("git", &["-c", "core.pager=sh", "log"], "configuration");
    refused(
        "git",
        &["--config-env=core.pager=X", "log"],
        "configuration",
    );
    refused("git", &["--exec-path=/x", "version"], "programs it runs");
    refused("git", &["--exec-path", "version"], "programs it runs");
    refused("git", &["-p", "log"], "pager");
    refused("git", &["--paginate", "log"], "pager");
    refused("git", &["--frobnicate", "log"], "global options");
    refused("git", &["help", "log"], "browser");
    refused("git", &["--help"], "browser");
    refused("git", &["frobnicate"], "not a git subcommand");
    refused("git", &["fetch", "origin"], "not a git subcommand");
    refused("git", &["push"], "not a git subcommand");
}

#[test]
fn git_refusals() {
    refused("git", &["grep", "-Ocat", "x"], "pager");
    refused("git", &["grep", "-O", "x"], "pager");
    refused("git", &["grep", "--open-files-in-pager=sh", "x"], "pager");
    refused("git", &["grep", "-iO", "x"], "pager");
    refused(
        "git",
        &["grep", "--no-index", "x", "/etc"],
        "outside the repository",
    );
    // After the pattern, git grep stops reading options.
    refused("git", &["grep", "x", "-O"], "after an operand");
    refused("git", &["grep", "--textconv", "x"], "textconv");
    refused("git", &["config", "core.fsmonitor", "x"], "configuration");
    refused(
        "git",
        &["config", "--add", "core.pager", "sh"],
        "configuration",
    );
    refused("git", &["config", "set", "a.b", "c"], "configuration");
    refused("git", &["config", "-e"], "editor");
    refused(
        "git",
        &["config", "--file", "x", "--includes", "--list"],
        "include.path",
    );
    assert_eq!(ok("git", &["config", "--file", "x", "--list"]).reads, ["x"]);
    refused("git", &["config", "--get", "a", "b", "c"], "configuration");
    refused(
        "git",
        &["diff", "--no-index", "/etc/passwd", "x"],
        "outside the repository",
    );
    refused("git", &["log", "--output=/tmp/x"], "writes a file");
    refused("git", &["log", "--output", "/tmp/x"], "writes a file");
    refused("git", &["diff", "--output=/tmp/x"], "writes a file");
    refused("git", &["log", "--show-signature"], "gpg");
    refused("git", &["show", "--textconv"], "textconv");
    refused("git", &["show", "--ext-diff"], "external diff");
    // Abbreviations are refused.
    refused("git", &["log", "--outp=/tmp/x"], "abbreviations");
    refused("git", &["log", "--onel"], "abbreviations");
    refused("git", &["status", "--porc"], "abbreviations");
    // Bundles are refused where git reads one option per word.
    refused("git", &["log", "-pz"], "not in latchclaw's list");
    // An option's separate value never crosses the splitting `--`.
    refused(
        "git",
        &["log", "--author", "--", "--output=/x"],
        "needs a value",
    );
    refused("git", &["log", "-L", "--", "x"], "needs a value");
    refused("git", &["cat-file", "--textconv", "HEAD:x"], "textconv");
    refused("git", &["cat-file", "--filters", "HEAD:x"], "filter");
    refused("git", &["remote", "add", "x", "y"], "only as");
    refused("git", &["remote", "show", "origin"], "only as");
    refused("git", &["branch", "--edit-description"], "editor");
    refused("git", &["tag", "-s", "v1", "-m", "x"], "gpg");
    refused("git", &["tag", "-a", "v1"], "editor");
    refused("git", &["tag", "-v", "v1"], "gpg");
    refused("git", &["commit", "-S", "-m", "x"], "gpg");
    refused("git", &["commit"], "editor");
    refused("git", &["commit", "--amend"], "editor");
    refused("git", &["commit", "-c", "HEAD"], "editor");
    refused("git", &["commit", "-p", "-m", "x"], "interactive");
    refused("git", &["add", "-p"], "interactive");
    refused("git", &["add", "--pathspec-from-file=l"], "cannot see");
    refused("git", &["init", "--template=/tmp/t"], "hooks");
    refused(
        "git",
        &["init", "--separate-git-dir=/tmp/g"],
        "somewhere else",
    );
    refused("git", &["merge", "-s", "evil", "x"], "git-merge-evil");
    refused("git", &["merge", "--strategy=evil", "x"], "git-merge-evil");
    refused("git", &["revert", "-e", "HEAD"], "editor");
    refused("git", &["apply", "--unsafe-paths", "p.diff"], "outside");
    refused(
        "git",
        &["ls-files", "-o", "--exclude-per-directory=.env"],
        "every directory",
    );
    refused("git", &["apply", "--directory=../x", "p.diff"], "moves");
    refused("git", &["clean", "-i"], "interactive");
    refused("git", &["rebase", "-x", "sh"], "not a git subcommand");
    refused("git", &["stash", "create"], "not a stash subcommand");
    refused("git", &["stash", "push", "-p"], "interactive");
}

#[test]
fn git_writing_subcommands() {
    let p = ok("git", &["add", "src/a.rs", "b"]);
    assert!(p.writes_anything);
    assert_eq!(p.writes, ["src/a.rs", "b"]);
    assert!(ok("git", &["add", "-A"]).writes_anything);
    let p = ok("git", &["commit", "-am", "msg"]);
    assert!(p.writes_anything);
    let p = ok("git", &["commit", "-F", "msg.txt"]);
    assert_eq!(p.reads, ["msg.txt"]);
    ok("git", &["commit", "--amend", "--no-edit"]);
    ok("git", &["commit", "--allow-empty", "-m", "x", "--", "a"]);
    assert!(!ok("git", &["commit", "--dry-run"]).writes_anything);
    let p = ok("git", &["checkout", "-b", "feature"]);
    assert!(p.writes_anything);
    assert_eq!(p.write_dirs_recursive, ["."]);
    assert!(
        ok("git", &["checkout", "--", "file"])
            .writes
            .contains(&"file".to_string())
    );
    assert!(ok("git", &["switch", "-c", "x"]).writes_anything);
    assert_eq!(ok("git", &["restore", "--staged", "f"]).writes, ["f"]);
    assert_eq!(
        ok("git", &["reset", "--hard", "HEAD~1"]).write_dirs_recursive,
        ["."]
    );
    assert!(ok("git", &["reset", "HEAD", "f"]).writes_anything);
    assert!(ok("git", &["stash"]).writes_anything);
    assert!(
        ok("git", &["stash", "push", "-m", "wip", "--", "f"])
            .writes
            .contains(&"f".into())
    );
    assert!(ok("git", &["stash", "pop"]).writes_anything);
    assert!(ok("git", &["stash", "drop"]).writes_anything);
    assert_eq!(ok("git", &["init", "repo"]).writes, ["repo"]);
    assert_eq!(ok("git", &["mv", "a", "b"]).writes, ["a", "b"]);
    assert_eq!(ok("git", &["rm", "--cached", "f"]).writes, ["f"]);
    assert!(ok("git", &["branch", "new"]).writes_anything);
    assert!(ok("git", &["branch", "-d", "old"]).writes_anything);
    assert!(ok("git", &["branch", "--list", "-D", "x"]).writes_anything);
    assert!(ok("git", &["tag", "v1"]).writes_anything);
    assert!(ok("git", &["tag", "-a", "v1", "-m", "release"]).writes_anything);
    assert!(ok("git", &["merge", "--no-ff", "-m", "m", "feature"]).writes_anything);
    assert!(ok("git", &["merge", "-s", "ort", "feature"]).writes_anything);
    assert!(ok("git", &["cherry-pick", "-x", "abc123"]).writes_anything);
    assert!(ok("git", &["revert", "--no-edit", "HEAD"]).writes_anything);
    let p = ok("git", &["apply", "p.diff"]);
    assert!(p.writes_anything);
    assert_eq!(p.reads, ["p.diff"]);
    assert!(!ok("git", &["apply", "--stat", "p.diff"]).writes_anything);
    let p = ok("git", &["clean", "-fd"]);
    assert_eq!(p.write_dirs_recursive, ["."]);
    let p = ok("git", &["clean", "-n"]);
    assert!(!p.writes_anything);
    assert_eq!(p.reads, ["."]);
    // With -C the work tree written is that directory; --work-tree too.
    let p = ok("git", &["-C", "/tmp/r", "checkout", "main"]);
    assert!(p.writes.contains(&"/tmp/r".to_string()));
    let p = ok("git", &["--work-tree=/tmp/w", "checkout", "main"]);
    assert!(p.writes.contains(&"/tmp/w".to_string()));
}

/// Differential check of the sed script reader against GNU sed itself:
/// with `--sandbox`, sed rejects exactly the commands that read, write or
/// run (`e`, `r`, `R`, `w`, `W`, `s///e`, `s///w`). Whenever the real sed
/// says so, our reader must have refused the script or found a read; it
/// must never call such a script harmless. Needs GNU sed 4.9 at /usr/bin/sed:
/// `cargo test --lib sed_reader_agrees_with_gnu_sed -- --ignored`.
#[test]
#[ignore]
fn sed_reader_agrees_with_gnu_sed() {
    use super::sed::{Chunk, analyse};
    let vocab = [
        "a",
        "i",
        "c",
        "\\",
        "\n",
        ";",
        "{",
        "}",
        "e",
        "w",
        "r",
        "R",
        "W",
        "s",
        "/",
        "[",
        "]",
        "x",
        " ",
        "p",
        "1",
        "$",
        ",",
        "!",
        "#",
        ":",
        "b",
        "y",
        "g",
        "I",
        "M",
        "~",
        "+",
        "=",
        "q",
        "l",
        ".",
        "^",
        "[:alpha:]",
        "[.",
        ".]",
        "e id",
        "w f",
        "s/a/b/",
        "s/a/b/e",
        "s/a/b/w f",
        "a\\",
        "\\n",
        "0",
        "N",
        "t",
        "T",
        "v",
        "z",
        "F",
        "\t",
        "\r",
        "|",
        "s|a|b|",
        "y/a/b/",
        "/x/",
        "\\%x%",
        "1~2",
        "0,/x/",
        "$!",
        "}\n",
        "{\n",
        ":a",
        "ba",
        "#n\n",
        "s/[/]/x/",
        "s/\\//x/",
    ];
    let seed = std::env::var("SED_FUZZ_SEED").map_or(4, |s| s.parse().unwrap_or(4));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut checked = 0;
    for _ in 0..20_000 {
        let chunks: Vec<String> = (0..rng.usize(1..3))
            .map(|_| {
                (0..rng.usize(1..10))
                    .map(|_| vocab[rng.usize(..vocab.len())])
                    .collect()
            })
            .collect();
        let mut cmd = std::process::Command::new("/usr/bin/sed");
        cmd.arg("--sandbox").arg("-n");
        for c in &chunks {
            cmd.arg("-e").arg(c);
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .expect("GNU sed at /usr/bin/sed");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ours: Vec<Chunk> = chunks.iter().map(|c| Chunk::Text(c)).collect();
        let verdict = analyse(&ours);
        if stderr.contains("disabled in sandbox mode") {
            checked += 1;
            let harmless = matches!(&verdict, Ok(reads) if reads.is_empty());
            assert!(
                !harmless,
                "sed refuses {chunks:?} in its sandbox; we said {verdict:?}"
            );
        } else if out.status.success() {
            // sed compiled it and found nothing to refuse: neither do we
            // (beyond r/R, which the sandbox also rejects).
            assert!(
                matches!(&verdict, Ok(reads) if reads.is_empty()),
                "sed accepts {chunks:?}; we said {verdict:?}"
            );
        }
    }
    assert!(
        checked > 100,
        "only {checked} scripts reached the sandbox check"
    );
}

/// The long option tables against the GNU binaries installed here: every
/// name we list is one the program knows, and every name the program lists
/// when a prefix is ambiguous is in our table. Runs the programs without
/// operands (each then stops with a usage error or reads the empty standard
/// input) in a scratch directory. The tables were taken from the `struct
/// option` arrays compiled into the Debian 12 binaries; run this after a
/// distribution upgrade: `cargo test --lib tables_match_installed -- --ignored`.
#[test]
#[ignore]
fn tables_match_installed_gnu_binaries() {
    let dir = std::env::temp_dir().join(crate::util::new_id("latchclaw-opts"));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |prog: &str, arg: &str| {
        let out = std::process::Command::new("timeout")
            .args(["2", prog, arg])
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let gnu = [
        "ls", "cat", "head", "tail", "wc", "grep", "sed", "sort", "uniq", "cut", "tr", "diff",
        "stat", "file", "du", "df", "basename", "dirname", "tee", "mkdir", "touch", "cp", "mv",
        "pwd", "date",
    ];
    for prog in gnu {
        let table = PROGRAMS
            .iter()
            .find(|e| e.name == prog)
            .unwrap()
            .spec
            .map(|s| s.opts)
            .unwrap();
        for o in table.iter().filter(|o| !o.l.is_empty()) {
            let e = run(prog, &format!("--{}", o.l));
            assert!(!e.contains("unrecognized option"), "{prog} --{}: {e}", o.l);
        }
        for c in ('a'..='z').chain('A'..='Z').chain(['-']) {
            let e = run(prog, &format!("--{c}"));
            let Some(list) = e.split("possibilities:").nth(1) else {
                continue;
            };
            for name in list.split('\'').filter(|w| w.starts_with("--")) {
                assert!(
                    table.iter().any(|o| o.l == &name[2..]),
                    "{prog} knows {name}, our table does not"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
