//! `router`: picks a provider per request, from the `--hint` in the request
//! metadata, else the first route whose text appears in the user message,
//! else the default route.

use super::provider::{
    Capabilities, ChatRequest, ChatResponse, Provider, ProviderError, Role, StreamSink,
};

pub struct Router {
    pub name: String,
    pub providers: Vec<Box<dyn Provider>>,
    pub hints: Vec<(String, String)>,
    pub routes: Vec<(String, String)>,
    pub default_route: String,
}

impl Router {
    /// The provider name for a request, and why.
    pub fn choose(&self, req: &ChatRequest) -> (String, String) {
        if let Some(hint) = req.metadata.get("hint") {
            if let Some((_, p)) = self.hints.iter().find(|(h, _)| h == hint) {
                return (p.clone(), format!("hint \"{hint}\""));
            }
            log::warn!(
                "router {}: no route for hint \"{hint}\"; using the rules",
                self.name
            );
        }
        let message = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.to_lowercase())
            .unwrap_or_default();
        for (needle, p) in &self.routes {
            if message.contains(&needle.to_lowercase()) {
                return (p.clone(), format!("message contains \"{needle}\""));
            }
        }
        (self.default_route.clone(), "default route".into())
    }
}

impl Provider for Router {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tool_calls: self
                .providers
                .iter()
                .all(|p| p.capabilities().native_tool_calls),
        }
    }

    fn chat_streaming(
        &self,
        req: &ChatRequest,
        sink: &mut dyn StreamSink,
    ) -> Result<ChatResponse, ProviderError> {
        let (target, why) = self.choose(req);
        log::info!(target: "event::provider_routed", "router {} chose \"{target}\" ({why})", self.name);
        match self.providers.iter().find(|p| p.name() == target) {
            Some(p) => p.chat_streaming(req, sink),
            None => Err(ProviderError {
                kind: super::provider::ProviderErrorKind::BadRequest,
                provider: self.name.clone(),
                message: format!("route target \"{target}\" was not built"),
            }),
        }
    }
}
