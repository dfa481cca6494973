//! A unified diff of two texts, for the operator to read before a write
//! runs: lines escaped (`util::printable`), the whole capped.

/// Lines of diff shown before the rest is summed up.
pub const MAX_LINES: usize = 200;
/// Texts longer than this (lines, either side) are not compared line by
/// line: the LCS table would be too large; the diff says so instead.
const MAX_COMPARED: usize = 4000;
const CONTEXT: usize = 3;

enum Op {
    Same,
    Del,
    Add,
}

/// `old` → `new` as a unified diff of `name` (`--- a/name`, `+++ b/name`,
/// `@@` hunks with three lines of context); `old` None: a new file, every
/// line added. Empty when nothing changes.
pub fn unified(name: &str, old: Option<&str>, new: &str) -> String {
    let shown = crate::util::printable(name);
    let a: Vec<&str> = old.map_or_else(Vec::new, |o| o.lines().collect());
    let b: Vec<&str> = new.lines().collect();
    if old == Some(new) {
        return String::new();
    }
    let head = match old {
        Some(_) => format!("--- a/{shown}\n+++ b/{shown}\n"),
        None => format!("--- /dev/null (a new file)\n+++ b/{shown}\n"),
    };
    if a.len() > MAX_COMPARED || b.len() > MAX_COMPARED {
        return format!(
            "{head}[too long to compare line by line: {} lines replaced by {} lines]\n",
            a.len(),
            b.len()
        );
    }
    let ops = script(&a, &b);
    let mut out = head;
    let mut shown_lines = 0usize;
    let mut hidden = 0usize;
    // Hunks: runs of changes with CONTEXT lines around, merged when close.
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, (op, _, _))| !matches!(op, Op::Same))
        .map(|(i, _)| i)
        .collect();
    let mut i = 0;
    while i < changed.len() {
        let start = changed[i].saturating_sub(CONTEXT);
        let mut end = changed[i];
        while i + 1 < changed.len() && changed[i + 1] <= end + 2 * CONTEXT + 1 {
            i += 1;
            end = changed[i];
        }
        let end = (end + CONTEXT + 1).min(ops.len());
        let (a0, b0) = (ops[start].1, ops[start].2);
        let (mut na, mut nb) = (0, 0);
        for (op, _, _) in &ops[start..end] {
            match op {
                Op::Same => {
                    na += 1;
                    nb += 1;
                }
                Op::Del => na += 1,
                Op::Add => nb += 1,
            }
        }
        let at = |first: usize, n: usize| if n == 0 { first } else { first + 1 };
        let hunk = format!("@@ -{},{na} +{},{nb} @@", at(a0, na), at(b0, nb));
        let mut lines = vec![hunk];
        for (op, ai, bi) in &ops[start..end] {
            lines.push(match op {
                Op::Same => format!(" {}", crate::util::printable(a[*ai])),
                Op::Del => format!("-{}", crate::util::printable(a[*ai])),
                Op::Add => format!("+{}", crate::util::printable(b[*bi])),
            });
        }
        for l in lines {
            if shown_lines < MAX_LINES {
                out.push_str(&l);
                out.push('\n');
                shown_lines += 1;
            } else {
                hidden += 1;
            }
        }
        i += 1;
    }
    if hidden > 0 {
        out.push_str(&format!("[… {hidden} more diff lines not shown]\n"));
    }
    out
}

/// The edit script: each op with the index it stands at in `a` and `b`
/// (for an add, `a`'s index is where it goes; for a delete, `b`'s).
fn script(a: &[&str], b: &[&str]) -> Vec<(Op, usize, usize)> {
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if a[i] == b[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::with_capacity(n + m);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((Op::Same, i, j));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            // Lines taken out before the lines put in, as diff writes them.
            ops.push((Op::Del, i, j));
            i += 1;
        } else {
            ops.push((Op::Add, i, j));
            j += 1;
        }
    }
    ops
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_a_hunk_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nD\ne\nf\ng\nh\n";
        assert_eq!(
            unified("x.txt", Some(old), new),
            "--- a/x.txt\n+++ b/x.txt\n@@ -1,7 +1,7 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n"
        );
        assert_eq!(unified("x.txt", Some(old), old), "");
    }

    #[test]
    fn a_new_file_is_all_added_and_escaped() {
        assert_eq!(
            unified("n.txt", None, "one\n\u{1b}[2Jtwo\n"),
            "--- /dev/null (a new file)\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+one\n+\\u{1b}[2Jtwo\n"
        );
    }

    #[test]
    fn long_diffs_are_capped() {
        let new: String = (0..500).map(|i| format!("{i}\n")).collect();
        let d = unified("n.txt", Some(""), &new);
        assert_eq!(d.lines().count(), 2 + MAX_LINES + 1, "{d}");
        assert!(d.ends_with("[… 301 more diff lines not shown]\n"), "{d}");
    }
}
