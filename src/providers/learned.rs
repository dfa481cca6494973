//! What a provider learned about its server's tool calling, kept between
//! runs in `<state>/tool_modes.json`: `auto` that the model writes its
//! calls as text (so structured from the first request), `auto` or
//! `structured` that the server refuses `response_format` (so text). An
//! entry holds only for the same `base_url` and model; `provider test`
//! writes it afresh. Losing the file costs one request, never a wrong
//! answer, so it is read and written best effort.

use crate::config::ToolMode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const FILE: &str = "tool_modes.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `structured` or `text`.
    pub mode: String,
    pub base_url: String,
    pub model: String,
    /// Why, in a few words (`prompt show` and `provider test` print it).
    pub why: String,
    pub at: String,
}

impl Entry {
    pub fn tool_mode(&self) -> Option<ToolMode> {
        ToolMode::parse(&self.mode).filter(|m| matches!(m, ToolMode::Structured | ToolMode::Text))
    }
}

/// Where one provider's entry lives.
#[derive(Debug, Clone)]
pub struct Store {
    pub path: PathBuf,
    pub provider: String,
    pub base_url: String,
    pub model: String,
}

impl Store {
    pub fn new(state_dir: &Path, provider: &str, base_url: &str, model: &str) -> Store {
        Store {
            path: state_dir.join(FILE),
            provider: provider.into(),
            base_url: base_url.into(),
            model: model.into(),
        }
    }

    fn all(&self) -> BTreeMap<String, Entry> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// This provider's entry, when it was learned of the same server and
    /// model.
    pub fn get(&self) -> Option<Entry> {
        self.all()
            .remove(&self.provider)
            .filter(|e| e.base_url == self.base_url && e.model == self.model)
            .filter(|e| e.tool_mode().is_some())
    }

    /// Records `mode` (or, with none, forgets); only where the state
    /// directory already exists (`provider test` creates nothing).
    pub fn set(&self, mode: Option<ToolMode>, why: &str) {
        if !self.path.parent().is_some_and(Path::is_dir) {
            return;
        }
        let mut all = self.all();
        match mode {
            Some(m) => {
                all.insert(
                    self.provider.clone(),
                    Entry {
                        mode: m.as_str().into(),
                        base_url: self.base_url.clone(),
                        model: self.model.clone(),
                        why: why.into(),
                        at: crate::util::now_rfc3339(),
                    },
                );
            }
            None if all.remove(&self.provider).is_none() => return,
            None => {}
        }
        let text = serde_json::to_string_pretty(&all).unwrap_or_default();
        if let Err(e) = crate::util::write_file_atomic(&self.path, text.as_bytes(), 0o600, true) {
            log::info!(
                "cannot record the tool mode in {}: {e}",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_holds_for_its_server_and_model_only() {
        let dir = std::env::temp_dir().join(format!("lc-learned-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = Store::new(&dir, "p", "http://h/v1", "m");
        assert_eq!(s.get(), None);
        s.set(Some(ToolMode::Structured), "calls as text");
        assert_eq!(s.get().unwrap().tool_mode(), Some(ToolMode::Structured));
        assert_eq!(Store::new(&dir, "p", "http://h/v1", "other").get(), None);
        assert_eq!(Store::new(&dir, "p", "http://g/v1", "m").get(), None);
        Store::new(&dir, "q", "http://h/v1", "m").set(Some(ToolMode::Text), "refused");
        assert_eq!(s.get().unwrap().why, "calls as text");
        s.set(None, "");
        assert_eq!(s.get(), None);
        // Garbage in the file is no entry, and is replaced on the next write.
        std::fs::write(dir.join(FILE), "{not json").unwrap();
        assert_eq!(s.get(), None);
        s.set(Some(ToolMode::Text), "refused");
        assert_eq!(s.get().unwrap().mode, "text");
        // No state directory: nothing is created.
        let gone = Store::new(&dir.join("absent"), "p", "u", "m");
        gone.set(Some(ToolMode::Text), "x");
        assert!(!dir.join("absent").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
