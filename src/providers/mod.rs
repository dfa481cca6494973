//! Model providers behind one small trait. The runtime only sees
//! [`Provider`]; which server (or script) answers is decided here.

pub mod learned;
mod mock;
pub mod openai;
mod provider;
mod reliable;
mod router;
pub mod sse;
pub mod structured;
pub mod textcalls;
pub mod visible;

use crate::config::{Config, ProviderSettings};
use crate::error::{Error, Result};
use crate::security::redact::Redactor;
use std::sync::Arc;

pub use mock::MockProvider;
pub use provider::{
    ChatRequest, ChatResponse, Message, ModelOptions, Provider, ProviderError, ProviderErrorKind,
    Role, StreamSink, ToolCall, ToolSpec, Usage, provider_test_hint,
};

/// Builds the named provider (and, for `reliable`, the ones it wraps);
/// `redactor` scrubs its errors.
pub fn build(cfg: &Config, name: &str, redactor: &Arc<Redactor>) -> Result<Box<dyn Provider>> {
    build_inner(cfg, name, redactor, &mut Vec::new())
}

fn build_inner(
    cfg: &Config,
    name: &str,
    redactor: &Arc<Redactor>,
    stack: &mut Vec<String>,
) -> Result<Box<dyn Provider>> {
    if stack.iter().any(|s| s == name) {
        stack.push(name.to_string());
        return Err(Error::usage(format!(
            "provider cycle: {}",
            stack.join(" -> ")
        )));
    }
    let p = cfg.provider(name)?;
    log::info!(target: "event::provider_selected", "provider={name} kind={}", p.kind().as_str());
    match &p.settings {
        ProviderSettings::Mock(m) => Ok(Box::new(MockProvider::from_config(p, m)?)),
        ProviderSettings::Reliable(rel) => {
            stack.push(name.to_string());
            let inner = rel
                .providers
                .iter()
                .map(|n| build_inner(cfg, n, redactor, stack))
                .collect::<Result<Vec<_>>>()?;
            stack.pop();
            Ok(Box::new(reliable::Reliable::new(name, inner)))
        }
        ProviderSettings::OpenAiCompatible(o) => {
            crate::features::check_url(&o.base_url).map_err(|e| {
                Error::usage(format!(
                    "providers.models.{name}.base_url = \"{}\": {e}",
                    o.base_url
                ))
            })?;
            Ok(Box::new(openai::OpenAiCompatible::from_config(
                p,
                o,
                cfg.max_response_bytes,
                Arc::clone(redactor),
                Some(&cfg.state_dir),
            )))
        }
        ProviderSettings::Router(rt) => {
            stack.push(name.to_string());
            let mut names: Vec<&String> = rt
                .hints
                .iter()
                .chain(rt.routes.iter())
                .map(|(_, v)| v)
                .chain(std::iter::once(&rt.default_route))
                .collect();
            crate::util::sort::sort(&mut names);
            names.dedup();
            let providers = names
                .into_iter()
                .map(|n| build_inner(cfg, n, redactor, stack))
                .collect::<Result<Vec<_>>>()?;
            stack.pop();
            Ok(Box::new(router::Router {
                name: name.to_string(),
                providers,
                hints: rt.hints.clone(),
                routes: rt.routes.clone(),
                default_route: rt.default_route.clone(),
            }))
        }
    }
}
