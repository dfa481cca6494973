//! GNU findutils 4.9 `find`: leading options, starting points, then the
//! expression, read the way `find/util.c` and `find/tree.c` read them.

use super::table::{Entry, Parsed, push_tree_named};
use crate::security::refusal::Refused;

/// What an expression word is and how many arguments follow it.
#[derive(Clone, Copy)]
enum K {
    /// Takes `n` plain arguments.
    Plain(u8),
    /// Takes one argument, a file whose metadata it reads.
    ReadFile,
    /// `-follow`: dereference every link from here on.
    Follow,
    Refuse(&'static str),
}

const RUNS: &str = "runs a program";
const WRITES_FILE: &str = "writes a file";

/// find's parse table, names without the leading dash (find strips one).
const PRIMARIES: &[(&str, K)] = &[
    ("!", K::Plain(0)),
    ("not", K::Plain(0)),
    ("(", K::Plain(0)),
    (")", K::Plain(0)),
    (",", K::Plain(0)),
    ("a", K::Plain(0)),
    ("and", K::Plain(0)),
    ("o", K::Plain(0)),
    ("or", K::Plain(0)),
    ("amin", K::Plain(1)),
    ("anewer", K::ReadFile),
    ("atime", K::Plain(1)),
    ("cmin", K::Plain(1)),
    ("cnewer", K::ReadFile),
    ("ctime", K::Plain(1)),
    ("context", K::Plain(1)),
    ("daystart", K::Plain(0)),
    ("delete", K::Refuse("deletes files")),
    ("d", K::Plain(0)),
    ("depth", K::Plain(0)),
    ("empty", K::Plain(0)),
    ("exec", K::Refuse(RUNS)),
    ("executable", K::Plain(0)),
    ("execdir", K::Refuse(RUNS)),
    (
        "files0-from",
        K::Refuse("reads starting points from a file the gate cannot see"),
    ),
    ("fls", K::Refuse(WRITES_FILE)),
    ("follow", K::Follow),
    ("fprint", K::Refuse(WRITES_FILE)),
    ("fprint0", K::Refuse(WRITES_FILE)),
    ("fprintf", K::Refuse(WRITES_FILE)),
    ("fstype", K::Plain(1)),
    ("gid", K::Plain(1)),
    ("group", K::Plain(1)),
    ("ignore_readdir_race", K::Plain(0)),
    ("ilname", K::Plain(1)),
    ("iname", K::Plain(1)),
    ("inum", K::Plain(1)),
    ("ipath", K::Plain(1)),
    ("iregex", K::Plain(1)),
    ("iwholename", K::Plain(1)),
    ("links", K::Plain(1)),
    ("lname", K::Plain(1)),
    ("ls", K::Plain(0)),
    ("maxdepth", K::Plain(1)),
    ("mindepth", K::Plain(1)),
    ("mmin", K::Plain(1)),
    ("mount", K::Plain(0)),
    ("mtime", K::Plain(1)),
    ("name", K::Plain(1)),
    ("newer", K::ReadFile),
    ("noleaf", K::Plain(0)),
    ("nogroup", K::Plain(0)),
    ("nouser", K::Plain(0)),
    ("noignore_readdir_race", K::Plain(0)),
    ("nowarn", K::Plain(0)),
    ("warn", K::Plain(0)),
    ("ok", K::Refuse(RUNS)),
    ("okdir", K::Refuse(RUNS)),
    ("path", K::Plain(1)),
    ("perm", K::Plain(1)),
    ("print", K::Plain(0)),
    ("print0", K::Plain(0)),
    ("printf", K::Plain(1)),
    ("prune", K::Plain(0)),
    ("quit", K::Plain(0)),
    ("readable", K::Plain(0)),
    ("regex", K::Plain(1)),
    ("regextype", K::Plain(1)),
    ("samefile", K::ReadFile),
    ("size", K::Plain(1)),
    ("type", K::Plain(1)),
    ("uid", K::Plain(1)),
    ("used", K::Plain(1)),
    ("user", K::Plain(1)),
    ("wholename", K::Plain(1)),
    ("writable", K::Plain(0)),
    ("xdev", K::Plain(0)),
    ("xtype", K::Plain(1)),
    ("false", K::Plain(0)),
    ("true", K::Plain(0)),
    ("help", K::Plain(0)),
    ("-help", K::Plain(0)),
    ("version", K::Plain(0)),
    ("-version", K::Plain(0)),
];

pub(super) const FIND: Entry = Entry {
    name: "find",
    parse: find,
    spec: None,
    summary: "starting points are trees read (default .); -L/-follow follow links; \
              -exec/-execdir/-ok/-okdir/-delete/-fprint*/-fls/-files0-from refused",
};

/// find's `looks_like_expression`.
fn looks_like_expression(arg: &str, leading: bool) -> bool {
    let b = arg.as_bytes();
    match b.first() {
        Some(b'-') => b.len() > 1,
        Some(b')' | b',') => b.len() == 1 && !leading,
        Some(b'!' | b'(') => b.len() == 1,
        _ => false,
    }
}

fn find(args: &[String]) -> Result<Parsed, Refused> {
    let mut p = Parsed::default();
    let mut follow = false;
    let mut i = 0;
    // Leading options (process_leading_options).
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "-H" | "-P" => {}
            "-L" => follow = true,
            "--" => {
                i += 1;
                break;
            }
            "-D" => {
                if args.get(i + 1).is_none() {
                    return Err(Refused::command("`find` option `-D` needs a value"));
                }
                i += 1;
            }
            s if s.starts_with("-O") => {}
            _ => break,
        }
        i += 1;
    }
    let mut starts = 0;
    while let Some(a) = args.get(i) {
        if looks_like_expression(a, true) {
            break;
        }
        // "-" is a directory named "-" here, not standard input.
        push_tree_named(&mut p, a);
        starts += 1;
        i += 1;
    }
    if starts == 0 {
        push_tree_named(&mut p, ".");
    }
    while let Some(a) = args.get(i) {
        i += 1;
        if !looks_like_expression(a, false) {
            return Err(Refused::command(format!(
                "`find`: `{a}` is neither a starting point (those come first) nor part of the expression"
            )));
        }
        let k = if a.len() == 8 && a.starts_with("-newer") {
            // -newerXY: a reference file unless Y is `t` (a date string).
            let b = a.as_bytes();
            if !b"aBcm".contains(&b[6]) || !b"aBcmt".contains(&b[7]) {
                return Err(Refused::command(format!(
                    "`find` primary `{a}` is not valid"
                )));
            }
            if b[7] == b't' {
                K::Plain(1)
            } else {
                K::ReadFile
            }
        } else {
            let name = a.strip_prefix('-').unwrap_or(a);
            match PRIMARIES.iter().find(|(n, _)| *n == name) {
                Some((_, k)) => *k,
                None => {
                    return Err(Refused::command(format!(
                        "`find` primary `{a}` is not known to latchclaw's table for `find`"
                    )));
                }
            }
        };
        match k {
            K::Plain(n) => {
                let n = usize::from(n);
                if args.len() < i + n {
                    return Err(Refused::command(format!(
                        "`find` primary `{a}` needs a value"
                    )));
                }
                i += n;
            }
            K::ReadFile => {
                let Some(f) = args.get(i) else {
                    return Err(Refused::command(format!(
                        "`find` primary `{a}` needs a file"
                    )));
                };
                p.reads.push(f.clone());
                i += 1;
            }
            K::Follow => follow = true,
            K::Refuse(why) => return Err(Refused::command(format!("`find` primary `{a}` {why}"))),
        }
    }
    p.follows_symlinks_recursively = follow;
    Ok(p)
}

/// How deep a `find` walk lists: `-maxdepth N` names entries down to N.
/// find takes the last `-maxdepth`; a value that is not plain digits is
/// taken as no limit.
pub(in crate::security) fn walk_depth(args: &[String]) -> usize {
    args.windows(2)
        .rfind(|w| w[0] == "-maxdepth")
        .and_then(|w| {
            w[1].bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| w[1].parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(usize::MAX)
}
