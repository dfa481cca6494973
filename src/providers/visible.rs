//! What of a streaming answer may be shown while it arrives: never
//! `<think>` reasoning, never tool-call syntax written as text. Text is held
//! back from the first place such a marker could begin until the marker is
//! settled; what is held back and turns out to be plain text is shown then,
//! and a tool call ends what is shown of the round (the final answer,
//! printed in full when the turn ends, puts back anything held too long).
//! Leading and trailing blank space is held too, as the final answer is
//! trimmed.

use super::textcalls::{CALL_OPENERS, find_ci};

const THINK: &str = "<think>";
const THINK_END: &str = "</think>";
/// A fence (```` ```json ````, bare ```` ``` ````, any info word) may hold a call
/// (`{"name": …}`, or arguments alone) or plain text.
const FENCE: &str = "```";

/// The length of a fence's opening: the backticks and the info word.
fn fence_open_len(s: &str) -> usize {
    FENCE.len()
        + s[FENCE.len()..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len() - FENCE.len())
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum State {
    #[default]
    Text,
    Think,
    /// Inside a ```` ```json ```` fence, held until it closes.
    Fence,
    /// A tool call began: the rest of the round is not shown.
    Hidden,
}

#[derive(Debug, Default)]
pub struct Visible<'t> {
    state: State,
    /// Raw text not decided yet.
    pending: String,
    /// Blank space held until more text follows it.
    space: String,
    started: bool,
    /// Inside a code fence shown as text: the next ```` ``` ```` closes it.
    in_code: bool,
    /// The tools of the request: a fence is a call exactly when the text
    /// call parser would read one from it.
    tools: &'t [super::provider::ToolSpec],
}

enum Scan {
    /// A marker (or the start of one) at this byte offset.
    At(usize, Marker),
    None,
}

#[derive(PartialEq)]
enum Marker {
    /// Could still become a marker: wait for more text.
    Partial,
    Think,
    ThinkEnd,
    Fence,
    HideRest,
}

impl<'t> Visible<'t> {
    pub fn new(tools: &'t [super::provider::ToolSpec]) -> Visible<'t> {
        Visible {
            tools,
            ..Visible::default()
        }
    }

    /// Takes the next raw piece; returns what may be shown now (often "").
    pub fn push(&mut self, delta: &str) -> String {
        let mut out = String::new();
        self.pending.push_str(delta);
        loop {
            match self.state {
                State::Hidden => {
                    self.pending.clear();
                    return out;
                }
                State::Think => match find_ci(&self.pending, THINK_END) {
                    Some(i) => {
                        self.pending.drain(..i + THINK_END.len());
                        self.state = State::Text;
                    }
                    None => {
                        // Keep only what could be the start of `</think>`.
                        let keep = partial_suffix(&self.pending, THINK_END);
                        self.pending.drain(..self.pending.len() - keep);
                        return out;
                    }
                },
                State::Fence => {
                    let open = fence_open_len(&self.pending);
                    let Some(end) = self.pending[open..].find(FENCE) else {
                        return out;
                    };
                    let end = open + end;
                    let inner = self.pending[open..end].trim();
                    // Judged as the final parse will see it: reasoning gone.
                    let inner = super::textcalls::strip_think(inner);
                    let fenced = format!("```\n{}\n```", inner.trim());
                    if !super::textcalls::parse_text_calls(&fenced, self.tools)
                        .0
                        .is_empty()
                    {
                        self.state = State::Hidden;
                    } else {
                        // Not a call: show the opening, and read what it
                        // holds like any other text (it may hold a marker)
                        // up to its closing fence.
                        let open: String = self.pending.drain(..open).collect();
                        self.in_code = true;
                        self.emit(&open, &mut out);
                        self.state = State::Text;
                    }
                }
                State::Text => match scan(&self.pending) {
                    Scan::None => {
                        let text = std::mem::take(&mut self.pending);
                        self.emit(&text, &mut out);
                        return out;
                    }
                    Scan::At(i, m) => {
                        let before: String = self.pending.drain(..i).collect();
                        self.emit(&before, &mut out);
                        match m {
                            Marker::Partial => return out,
                            Marker::Think => {
                                self.pending.drain(..THINK.len());
                                self.state = State::Think;
                            }
                            // A closing tag with no opening one: the model's
                            // template opened it; drop the tag.
                            Marker::ThinkEnd => {
                                self.pending.drain(..THINK_END.len());
                            }
                            Marker::Fence if self.in_code => {
                                let close: String = self.pending.drain(..FENCE.len()).collect();
                                self.emit(&close, &mut out);
                                self.in_code = false;
                            }
                            Marker::Fence => self.state = State::Fence,
                            Marker::HideRest => self.state = State::Hidden,
                        }
                    }
                },
            }
        }
    }

    /// Shows `text`, holding blank space at the start of the answer and at
    /// the end of what has arrived.
    fn emit(&mut self, text: &str, out: &mut String) {
        let text = if self.started {
            text
        } else {
            text.trim_start()
        };
        let body = text.trim_end();
        if body.is_empty() {
            self.space.push_str(text);
            return;
        }
        out.push_str(&self.space);
        out.push_str(body);
        self.space = text[body.len()..].to_string();
        self.started = true;
    }
}

/// The first place in `s` where a marker is, or could be once more text
/// arrives.
fn scan(s: &str) -> Scan {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if !matches!(c, b'<' | b'`' | b'{' | b'[') {
            continue;
        }
        let rest = &s[i..];
        if c == b'{' {
            match bare_call(rest) {
                Some(true) => return Scan::At(i, Marker::HideRest),
                None => return Scan::At(i, Marker::Partial),
                Some(false) => continue,
            }
        }
        let tags = CALL_OPENERS.iter().map(|t| (*t, Marker::HideRest)).chain([
            (THINK, Marker::Think),
            (THINK_END, Marker::ThinkEnd),
            (FENCE, Marker::Fence),
        ]);
        let mut partial = false;
        for (tag, m) in tags {
            if starts_with_ci(rest, tag) {
                return Scan::At(i, m);
            }
            partial |= rest.len() < tag.len() && starts_with_ci(tag, rest);
        }
        if partial {
            return Scan::At(i, Marker::Partial);
        }
    }
    Scan::None
}

/// For text starting with `{`: is it a bare `{"name": …` (or `"tool"`)
/// object? `None`: cannot tell yet.
fn bare_call(s: &str) -> Option<bool> {
    let after = s[1..].trim_start();
    if after.is_empty() {
        return None;
    }
    for key in ["\"name\"", "\"tool\""] {
        if after.starts_with(key) {
            return Some(true);
        }
        if key.starts_with(after) {
            return None;
        }
    }
    Some(false)
}

fn starts_with_ci(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// The length of the longest end of `s` that `tag` starts with (ASCII
/// case ignored); always at a char boundary, as `tag` is ASCII.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| {
            s.is_char_boundary(s.len() - n)
                && tag.as_bytes()[..n].eq_ignore_ascii_case(&s.as_bytes()[s.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::providers::textcalls::{parse_text_calls, strip_think};

    /// Feeds `text` in pieces of `n` bytes (at char boundaries).
    fn shown(text: &str, n: usize) -> String {
        let tools: Vec<crate::providers::provider::ToolSpec> = ["time", "file_list", "t"]
            .iter()
            .map(|n| crate::providers::provider::ToolSpec {
                name: n.to_string(),
                description: String::new(),
                parameters: serde_json::json!({"properties": {"path": {}}}),
                example: serde_json::Value::Null,
                bounds: serde_json::Value::Null,
            })
            .collect();
        let mut v = Visible::new(&tools);
        let mut out = String::new();
        let mut i = 0;
        while i < text.len() {
            let mut j = (i + n).min(text.len());
            while !text.is_char_boundary(j) {
                j += 1;
            }
            out.push_str(&v.push(&text[i..j]));
            i = j;
        }
        out
    }

    fn every_split(text: &str) -> Vec<String> {
        (1..=text.len().max(1)).map(|n| shown(text, n)).collect()
    }

    #[test]
    fn plain_text_passes_trimmed() {
        for s in every_split("  Hello, world.\n\nBye. ") {
            assert_eq!(s, "Hello, world.\n\nBye.");
        }
        // Brackets, braces and backticks that are not markers.
        for s in every_split("a < b, {x: 1} [1] `c` ```python\nx\n``` {\"nam\": 1}") {
            assert_eq!(s, "a < b, {x: 1} [1] `c` ```python\nx\n``` {\"nam\": 1}");
        }
    }

    #[test]
    fn think_is_never_shown() {
        for s in every_split("<think>secret plan</think>\nThe answer is 42.") {
            assert_eq!(s, "The answer is 42.");
        }
        for s in every_split("A<THINK>x</Think>B<think>unfinished secret") {
            assert_eq!(s, "AB");
        }
    }

    #[test]
    fn text_calls_are_never_shown() {
        let cases = [
            "Let me look.\n<tool_call>{\"name\": \"file_list\", \"arguments\": {}}</tool_call>",
            "Let me look. ```tool_call\n{\"name\": \"time\"}\n```",
            "Let me look. ```json\n{\"name\": \"time\", \"arguments\": {}}\n``` after",
            "Let me look. {\"name\": \"time\", \"arguments\": {}}",
            "Let me look. { \"tool\": \"time\"}",
            "Let me look. <function=time>{}</function>",
        ];
        for c in cases {
            for s in every_split(c) {
                assert_eq!(s, "Let me look.", "{c:?}");
                for bad in ["tool_call", "\"name\"", "\"tool\"", "function=", "```"] {
                    assert!(!s.contains(bad), "{c:?} showed {s:?}");
                }
            }
        }
    }

    #[test]
    fn held_text_that_is_plain_is_shown() {
        let c = "Here:\n```json\n{\"a\": [1, 2]}\n```\nDone.";
        for s in every_split(c) {
            assert_eq!(s, c);
        }
        for s in every_split("A ```json\n<think>x</think>[1]``` B") {
            assert_eq!(s, "A ```json\n[1]``` B");
        }
    }

    #[test]
    fn shown_text_is_a_prefix_of_the_final_answer() {
        // What the channel relies on: the final answer (think dropped, text
        // calls taken out, trimmed) starts with what was shown.
        let mut rng = fastrand::Rng::with_seed(7);
        let parts = [
            "Hello",
            " ",
            "\n",
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "```json\n",
            "```",
            "{\"name\": \"t\"}",
            "{",
            "}",
            "é",
            "İ",
            "[",
            "`",
            "<",
        ];
        let known = [crate::providers::provider::ToolSpec {
            name: "t".into(),
            description: String::new(),
            parameters: serde_json::json!({"properties": {}}),
            example: serde_json::Value::Null,
            bounds: serde_json::Value::Null,
        }];
        for _ in 0..3000 {
            let n = rng.usize(0..10);
            let t: String = (0..n).map(|_| parts[rng.usize(..parts.len())]).collect();
            let split = rng.usize(1..6);
            let s = shown(&t, split);
            let answer = parse_text_calls(&strip_think(&t), &known).1;
            let answer = answer.trim();
            if !t.to_ascii_lowercase().contains("</think>") {
                assert!(
                    answer.starts_with(&s),
                    "{t:?} showed {s:?}, answer {answer:?}"
                );
            }
            assert!(
                !s.contains("<think>") && !s.contains("<tool_call>"),
                "{t:?} showed {s:?}"
            );
        }
    }
}
