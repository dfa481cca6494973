//! `reliable`: tries providers in order, falling back on errors another
//! provider might not share (network, timeout, auth, rate limit, server).

use super::provider::{
    Capabilities, ChatRequest, ChatResponse, Provider, ProviderError, StreamSink,
};

pub struct Reliable {
    name: String,
    inner: Vec<Box<dyn Provider>>,
}

impl Reliable {
    pub fn new(name: &str, inner: Vec<Box<dyn Provider>>) -> Reliable {
        Reliable {
            name: name.to_string(),
            inner,
        }
    }
}

impl Provider for Reliable {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tool_calls: self
                .inner
                .iter()
                .all(|p| p.capabilities().native_tool_calls),
        }
    }

    fn chat_streaming(
        &self,
        req: &ChatRequest,
        sink: &mut dyn StreamSink,
    ) -> Result<ChatResponse, ProviderError> {
        let mut last = None;
        for (i, p) in self.inner.iter().enumerate() {
            match p.chat_streaming(req, sink) {
                Ok(r) => return Ok(r),
                Err(e) if e.kind.falls_back() => {
                    match self.inner.get(i + 1) {
                        Some(next) => log::warn!(
                            target: "event::provider_fallback",
                            "provider fallback: {e}; trying \"{}\"", next.name()
                        ),
                        None => log::warn!(
                            target: "event::provider_fallback",
                            "provider fallback: {e}; no provider left in \"{}\"", self.name
                        ),
                    }
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ProviderError {
            kind: super::provider::ProviderErrorKind::BadRequest,
            provider: self.name.clone(),
            message: "no providers configured".into(),
        }))
    }
}
