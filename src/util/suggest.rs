//! "Did you mean": the valid name nearest to a mistyped one (a command, a
//! flag, a config key, a tool), by edit distance, and only when it is near
//! enough to be a typo: a suggestion that is far off misleads more than the
//! list of valid names that follows it.

/// Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`,
/// counted in characters, case ignored.
pub fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    // Three rows of the optimal-string-alignment table.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        std::mem::swap(&mut before, &mut last);
        std::mem::swap(&mut last, &mut row);
    }
    last[b.len()]
}

/// The edits a word of `len` characters may be off by and still be taken
/// for a typo: one up to 5 characters, two up to 8, three beyond. Below 3
/// characters, only a difference of case (`-M` for `-m`).
fn allowed(len: usize) -> usize {
    match len {
        0..=2 => 0,
        3..=5 => 1,
        6..=8 => 2,
        _ => 3,
    }
}

/// The candidate nearest to `word`, if one is near enough (the first of
/// equals, so callers list the likeliest first). `word` itself is never
/// suggested.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = allowed(word.chars().count());
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        if c == word {
            continue;
        }
        let d = distance(word, c);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn distances_count_swaps_as_one_edit() {
        assert_eq!(distance("agent", "agent"), 0);
        assert_eq!(distance("agnet", "agent"), 1);
        assert_eq!(distance("tempreature", "temperature"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("JSON", "json"), 0);
        assert_eq!(distance("déjà", "deja"), 2);
    }

    #[test]
    fn only_near_names_are_suggested() {
        let commands = ["agent", "approve", "approvals", "memory", "estop"];
        assert_eq!(nearest("agnet", commands), Some("agent"));
        assert_eq!(nearest("aprove", commands), Some("approve"));
        assert_eq!(nearest("memroy", commands), Some("memory"));
        assert_eq!(nearest("frobnicate", commands), None);
        assert_eq!(nearest("agent", commands), None, "never itself");
        // Short words: only case.
        assert_eq!(nearest("x", ["c", "m"]), None);
        assert_eq!(nearest("M", ["m", "q"]), Some("m"));
        assert_eq!(nearest("base_ur", ["base_url", "model"]), Some("base_url"));
        assert_eq!(nearest("api_key", ["api_key_env", "model"]), None);
        // The first of equals.
        assert_eq!(nearest("lisp", ["list", "lisa"]), Some("list"));
    }
}
