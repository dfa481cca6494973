//! `[providers.models.NAME] max_tools = N`: a small model picks the right
//! tool more often from a few than from many, and every schema costs
//! prompt tokens. The tools offered for a turn are the ones a model needs
//! to look before it guesses (`file_list`, `file_read`), then those whose
//! name, description and arguments best match the message by BM25, then
//! the rest in table order, N in all; they keep the table's order.

use crate::providers::ToolSpec;
use std::collections::{BTreeMap, BTreeSet};

/// Offered whenever enabled, ahead of any match.
const ALWAYS: [&str; 2] = ["file_list", "file_read"];

/// BM25's usual constants.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// At most `n` of `tools` for `message`.
pub fn pick_tools(tools: Vec<ToolSpec>, message: &str, n: usize) -> Vec<ToolSpec> {
    if tools.len() <= n {
        return tools;
    }
    let docs: Vec<Vec<String>> = tools.iter().map(document).collect();
    let query: BTreeSet<String> = words(message).collect();
    let scores = bm25(&docs, &query);
    let mut order: Vec<usize> = (0..tools.len()).collect();
    // Stable: equal scores keep the table's order.
    crate::util::sort::sort_by(&mut order, |&a, &b| {
        let always = |i: usize| ALWAYS.contains(&tools[i].name.as_str());
        always(b)
            .cmp(&always(a))
            .then(scores[b].total_cmp(&scores[a]))
    });
    let chosen: BTreeSet<usize> = order.into_iter().take(n).collect();
    tools
        .into_iter()
        .enumerate()
        .filter(|(i, _)| chosen.contains(i))
        .map(|(_, t)| t)
        .collect()
}

/// A tool's words: its name (split at `_`), description, and its
/// arguments' names and descriptions.
fn document(t: &ToolSpec) -> Vec<String> {
    let mut text = format!("{} {}", t.name.replace('_', " "), t.description);
    if let Some(props) = t.parameters["properties"].as_object() {
        for (name, p) in props {
            text.push(' ');
            text.push_str(&name.replace('_', " "));
            if let Some(d) = p["description"].as_str() {
                text.push(' ');
                text.push_str(d);
            }
        }
    }
    words(&text).collect()
}

/// Lower-case words of letters and digits, a plural `s` dropped.
pub(super) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let w = w.to_lowercase();
            match w.strip_suffix('s') {
                Some(stem) if stem.chars().count() >= 3 && !stem.ends_with('s') => stem.to_string(),
                _ => w,
            }
        })
}

pub(super) fn bm25(docs: &[Vec<String>], query: &BTreeSet<String>) -> Vec<f64> {
    let n = docs.len() as f64;
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
    let mut df: BTreeMap<&str, f64> = BTreeMap::new();
    for d in docs {
        let unique: BTreeSet<&str> = d.iter().map(String::as_str).collect();
        for w in unique {
            *df.entry(w).or_default() += 1.0;
        }
    }
    docs.iter()
        .map(|d| {
            let len = d.len() as f64;
            query
                .iter()
                .map(|q| {
                    let tf = d.iter().filter(|w| *w == q).count() as f64;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    let nq = df.get(q.as_str()).copied().unwrap_or(0.0);
                    let idf = ((n - nq + 0.5) / (nq + 0.5) + 1.0).ln();
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg.max(1.0)))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tools::ToolName;

    fn all() -> Vec<ToolSpec> {
        ToolName::ALL
            .into_iter()
            .map(crate::tools::tool)
            .map(|t| ToolSpec {
                name: t.name().as_str().into(),
                description: t.description().into(),
                parameters: t.parameters(),
                example: serde_json::Value::Null,
                bounds: serde_json::Value::Null,
            })
            .collect()
    }

    fn names(message: &str, n: usize) -> Vec<String> {
        pick_tools(all(), message, n)
            .into_iter()
            .map(|t| t.name)
            .collect()
    }

    #[test]
    fn the_always_needed_then_the_best_matches_in_table_order() {
        assert_eq!(
            names("Use the shell to count the lines of notes.txt", 3),
            ["file_list", "file_read", "shell"]
        );
        assert_eq!(
            names("What time is it now?", 3),
            ["time", "file_list", "file_read"]
        );
        assert_eq!(
            names("Search the web for the latest Rust release", 4),
            ["file_list", "file_read", "memory_search", "web_search"]
        );
        let git = names("What does git log say about the last commit?", 3);
        assert!(git.contains(&"git".to_string()), "{git:?}");
        let grep = names(
            "Which files mention the word pelican? Search with a regex.",
            3,
        );
        assert!(grep.contains(&"grep".to_string()), "{grep:?}");
        // Enough room: everything, as it was.
        assert_eq!(pick_tools(all(), "hi", 99).len(), ToolName::ALL.len());
        // Nothing matches: the first in table order fill the rest.
        assert_eq!(names("zzz", 3), ["time", "file_list", "file_read"]);
        assert_eq!(names("", 1), ["file_list"]);
    }
}
