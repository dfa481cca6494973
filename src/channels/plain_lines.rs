//! The REPL's lines in a build without the `lineedit` feature: read plain,
//! as the line editor reads them off a terminal or with `TERM=dumb`. The
//! terminal's own line discipline edits them (Backspace, Ctrl-U, Ctrl-W);
//! there is no history and the terminal never leaves cooked mode.

use std::io::{BufRead, Write};
use std::path::Path;

pub struct LineReader;

impl LineReader {
    /// Plain lines; `history` is not kept.
    pub fn new(_history: Option<&Path>) -> LineReader {
        LineReader
    }

    /// Whether lines are edited: never in this build.
    pub fn editing(&self) -> bool {
        false
    }

    /// Nothing to warn about: no history file is used.
    pub fn take_warning(&mut self) -> Option<String> {
        None
    }

    /// The next line without its line end; `None` at the end of input.
    pub fn read_line(&mut self, prompt: &str) -> std::io::Result<Option<String>> {
        let mut err = std::io::stderr().lock();
        err.write_all(prompt.as_bytes())?;
        err.flush()?;
        let mut line = String::new();
        if std::io::stdin().lock().read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let end = line.trim_end_matches(['\n', '\r']).len();
        line.truncate(end);
        Ok(Some(line))
    }
}

/// Nothing to put back: the terminal is never put in raw mode.
pub fn restore_terminal() {}

/// No signal ends a plain read at the prompt on its own (the run's control
/// handles them, as for any command).
pub fn stop_signal() -> Option<i32> {
    None
}
