//! `http`: GET a URL the gate allowed. Connections go only to addresses the
//! network policy accepts (checked by our resolver at connect time, so DNS
//! cannot move the target after the decision), no proxy is used, and
//! redirects are followed by hand with the URL checked again at every hop.

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::security::net::NetPolicy;
use serde_json::{Value, json};
use std::fmt;
use std::io::Read;
use std::time::Duration;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

pub struct Http;

/// Resolves with the system resolver, then keeps only addresses the policy
/// accepts for the host.
#[derive(Debug)]
struct CheckedResolver {
    policy: NetPolicy,
}

#[derive(Debug)]
struct Refused(String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl Resolver for CheckedResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let all = DefaultResolver::default().resolve(uri, config, timeout)?;
        let host = uri.host().unwrap_or("");
        let mut kept = self.empty();
        let mut why = Vec::new();
        for addr in all.iter() {
            match self.policy.check_ip(host, addr.ip()) {
                Ok(()) => kept.push(*addr),
                Err(e) => why.push(e.reason),
            }
        }
        // Any refused address refuses the host: a name that mixes public and
        // private answers is a rebinding attempt.
        if !why.is_empty() || kept.is_empty() {
            return Err(ureq::Error::Other(Box::new(Refused(format!(
                "connection to {host} refused: {}",
                why.join("; ")
            )))));
        }
        Ok(kept)
    }
}

/// An agent that connects only where `policy` allows (checked at connect
/// time), through no proxy, following no redirect by itself.
pub(super) fn checked_agent(policy: &NetPolicy, timeout: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .user_agent(format!("latchclaw/{}", env!("CARGO_PKG_VERSION")));
    let config = crate::transport::with_tls(config, None).build();
    ureq::Agent::with_parts(
        config,
        crate::transport::connector(),
        CheckedResolver {
            policy: policy.clone(),
        },
    )
}

fn absolute_location(base: &str, location: &str) -> String {
    if location.starts_with("http://")
        || location.starts_with("https://")
        || location.contains("://")
    {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if let Some(l) = location.strip_prefix("//") {
        return format!("{scheme}://{l}");
    }
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = &rest[authority.len()..];
    let path = path.split(['?', '#']).next().unwrap_or("");
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    format!("{scheme}://{authority}{dir}/{location}")
}

fn is_text(content_type: &str) -> bool {
    let ct = content_type.to_ascii_lowercase();
    ct.is_empty()
        || ct.starts_with("text/")
        || [
            "json",
            "xml",
            "javascript",
            "yaml",
            "csv",
            "x-www-form-urlencoded",
        ]
        .iter()
        .any(|t| ct.contains(t))
}

impl Tool for Http {
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::Http
    }
    fn description(&self) -> &'static str {
        "HTTP GET of a URL on an allowed domain. Returns the status, content type and text or JSON body."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"url": {"type": "string", "description": "http:// or https:// URL"}},
            "required": ["url"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(url) = args.get("url").and_then(Value::as_str) else {
            return ToolResult::err("\"url\" (a string) is required");
        };
        let policy = ctx.gate.net_policy().clone();
        let own = ctx.cfg.tools.of(crate::types::ToolName::Http).timeout_secs;
        let timeout = Duration::from_secs(own.unwrap_or(ctx.cfg.http_timeout_secs)).min(
            ctx.deadline
                .saturating_duration_since(std::time::Instant::now()),
        );
        let agent = checked_agent(&policy, timeout);
        let limit = ctx.cfg.max_response_bytes;
        let mut current = url.to_string();
        let mut hops = 0;
        loop {
            if hops > 0
                && let Err(e) = policy.check_url(&current)
            {
                return ToolResult::err(format!("redirect to {current} refused: {e}"));
            }
            if let Err(e) = crate::features::check_url(&current) {
                return ToolResult::err(format!("GET {current}: {e}"));
            }
            let mut resp = match agent.get(&current).call() {
                Ok(r) => r,
                Err(e) => return ToolResult::err(format!("GET {current} failed: {e}")),
            };
            let status = resp.status().as_u16();
            if (300..400).contains(&status)
                && let Some(loc) = resp.headers().get("location").and_then(|v| v.to_str().ok())
            {
                if hops >= ctx.cfg.tools.http.max_redirects {
                    return ToolResult::err(format!(
                        "more than {} redirects (tools.http.max_redirects)",
                        ctx.cfg.tools.http.max_redirects
                    ));
                }
                current = absolute_location(&current, loc);
                // A body read to its end frees the connection for the next
                // hop (one connect, one TLS handshake); past 64 KiB it is not
                // worth it and the connection is dropped.
                let _ = std::io::copy(
                    &mut resp.body_mut().as_reader().take(64 * 1024),
                    &mut std::io::sink(),
                );
                hops += 1;
                continue;
            }
            let content_type = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let mut body = Vec::new();
            if let Err(e) = resp
                .body_mut()
                .as_reader()
                .take(limit + 1)
                .read_to_end(&mut body)
            {
                return ToolResult::err(format!("reading {current}: {e}"));
            }
            let truncated = body.len() as u64 > limit;
            body.truncate(limit as usize);
            let shown = match std::str::from_utf8(&body) {
                Ok(text) if is_text(&content_type) => {
                    crate::util::truncate_middle(text, ctx.cfg.tool_output_max_bytes)
                }
                _ => format!(
                    "[binary body: {} bytes of {}, sha256 {}; not shown]",
                    body.len(),
                    if content_type.is_empty() {
                        "unknown type"
                    } else {
                        &content_type
                    },
                    crate::util::sha256_hex(&body)
                ),
            };
            let mut output = format!("HTTP {status}\ncontent-type: {content_type}\n\n{shown}");
            if truncated {
                output.push_str(&format!("\n…[truncated at max_response_bytes = {limit}]"));
            }
            let meta = json!({"status": status, "url": current, "redirects": hops,
                              "bytes": body.len(), "content_type": content_type, "truncated": truncated});
            let mut r = ToolResult::ok(output);
            r.metadata = Some(meta);
            if status >= 400 {
                r.success = false;
                r.error = Some(format!("HTTP {status}"));
            }
            return r;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_current_url() {
        let b = "http://h:8/a/b?x=1";
        assert_eq!(absolute_location(b, "https://o/x"), "https://o/x");
        assert_eq!(absolute_location(b, "//o/x"), "http://o/x");
        assert_eq!(absolute_location(b, "/x"), "http://h:8/x");
        assert_eq!(absolute_location(b, "c"), "http://h:8/a/c");
    }
}
