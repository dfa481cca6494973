//! `web_search`: a query to the configured search service (a SearXNG
//! instance or Brave Search), results as title, URL and snippet. The request
//! URL is built by [`request_url`] for the gate, which judges it with the
//! `http` tool's network policy, and again here from the same arguments;
//! the connection goes through the same checked resolver as `http`.

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::config::SearchProvider;
use crate::types::ToolName;
use serde_json::{Value, json};
use std::io::Read;
use std::time::Duration;

pub struct WebSearch;

pub use crate::types::args::{MAX_QUERY_BYTES, MAX_RESULTS, NOT_CONFIGURED, read_args};
const TITLE_MAX_CHARS: usize = 200;
const URL_MAX_CHARS: usize = 500;
const SNIPPET_MAX_CHARS: usize = 400;
/// A search reply is a page of results; more than this is not one.
const BODY_MAX_BYTES: u64 = 2 << 20;

pub use crate::security::net::web_search_url as request_url;

/// Text of a result field: tags dropped (Brave marks matches with
/// `<strong>`), common entities decoded, whitespace folded, controls
/// escaped, cut at `max` characters.
fn clean(v: Option<&Value>, max: usize) -> String {
    let raw = v.and_then(Value::as_str).unwrap_or("");
    let mut text = String::with_capacity(raw.len());
    let mut in_tag = false;
    for c in raw.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            _ => text.push(c),
        }
    }
    for (entity, c) in [
        ("&quot;", "\""),
        ("&#39;", "'"),
        ("&#x27;", "'"),
        ("&lt;", "<"),
        ("&gt;", ">"),
        ("&nbsp;", " "),
        ("&amp;", "&"),
    ] {
        text = text.replace(entity, c);
    }
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let shown = crate::util::printable(&folded);
    match shown.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &shown[..at]),
        None => shown,
    }
}

#[derive(Debug)]
struct Hit {
    title: String,
    url: String,
    snippet: String,
}

/// The results list of a reply, or why it is not one.
fn parse(provider: SearchProvider, body: &[u8], limit: usize) -> Result<Vec<Hit>, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the search service's reply is not JSON ({e})"))?;
    let (list, snippet_key) = match provider {
        SearchProvider::Searxng => (v.get("results"), "content"),
        // A query with no web results has no `web` object at all.
        SearchProvider::Brave => match v.get("web") {
            None if v.is_object() && v.get("type").is_some() => return Ok(Vec::new()),
            web => (web.and_then(|w| w.get("results")), "description"),
        },
    };
    let Some(list) = list.and_then(Value::as_array) else {
        return Err(format!(
            "the search service's reply has no results list ({} expected)",
            match provider {
                SearchProvider::Searxng => "\"results\"",
                SearchProvider::Brave => "\"web.results\"",
            }
        ));
    };
    Ok(list
        .iter()
        .filter(|r| r.get("url").and_then(Value::as_str).is_some())
        .take(limit)
        .map(|r| Hit {
            title: clean(r.get("title"), TITLE_MAX_CHARS),
            url: clean(r.get("url"), URL_MAX_CHARS),
            snippet: clean(r.get(snippet_key), SNIPPET_MAX_CHARS),
        })
        .collect())
}

impl Tool for WebSearch {
    fn name(&self) -> ToolName {
        ToolName::WebSearch
    }
    fn description(&self) -> &'static str {
        "Web search. Returns results as title, URL and snippet."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "description": "1 to 10, default 5"}
            },
            "required": ["query"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(settings) = &ctx.cfg.tools.web_search else {
            return ToolResult::err(NOT_CONFIGURED);
        };
        let (query, limit) = match read_args(args) {
            Ok(a) => a,
            Err(e) => return ToolResult::err(e),
        };
        let key = match (&settings.api_key_env, settings.provider) {
            (Some(var), SearchProvider::Brave) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    return ToolResult::err(format!(
                        "environment variable {var} (tools.web_search.api_key_env) is not set"
                    ));
                }
            },
            _ => None,
        };
        let url = request_url(settings, query, limit);
        if let Err(e) = crate::features::check_url(&url) {
            return ToolResult::err(format!("tools.web_search.url: {e}"));
        }
        let own = ctx.cfg.tools.of(ToolName::WebSearch).timeout_secs;
        let timeout = Duration::from_secs(own.unwrap_or(ctx.cfg.http_timeout_secs)).min(
            ctx.deadline
                .saturating_duration_since(std::time::Instant::now()),
        );
        let agent = super::http::checked_agent(ctx.gate.net_policy(), timeout);
        let mut req = agent.get(&url).header("Accept", "application/json");
        if let Some(k) = &key {
            req = req.header("X-Subscription-Token", k);
        }
        let provider = settings.provider.as_str();
        // The error names the service, never the request: nothing of the
        // key is in it, and the query is the model's own.
        let mut resp = match req.call() {
            Ok(r) => r,
            Err(e) => return ToolResult::err(format!("the {provider} search request failed: {e}")),
        };
        let status = resp.status().as_u16();
        let limit_bytes = BODY_MAX_BYTES.min(ctx.cfg.max_response_bytes);
        let mut body = Vec::new();
        if let Err(e) = resp
            .body_mut()
            .as_reader()
            .take(limit_bytes + 1)
            .read_to_end(&mut body)
        {
            return ToolResult::err(format!("reading the {provider} reply: {e}"));
        }
        if status != 200 {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
            return ToolResult::err(format!(
                "the {provider} search service answered HTTP {status}{}{}",
                if text.trim().is_empty() { "" } else { ": " },
                crate::util::printable(text.trim())
            ));
        }
        if body.len() as u64 > limit_bytes {
            return ToolResult::err(format!(
                "the {provider} reply is larger than {limit_bytes} bytes; not read"
            ));
        }
        let hits = match parse(settings.provider, &body, limit as usize) {
            Ok(h) => h,
            Err(e) => return ToolResult::err(e),
        };
        let mut out = String::new();
        for (i, h) in hits.iter().enumerate() {
            out.push_str(&format!("{}. {}\n   {}\n", i + 1, h.title, h.url));
            if !h.snippet.is_empty() {
                out.push_str(&format!("   {}\n", h.snippet));
            }
        }
        if hits.is_empty() {
            out = format!("no results for \"{}\"", crate::util::printable(query));
        }
        let mut r = ToolResult::ok(crate::util::truncate_middle(
            out.trim_end(),
            ctx.cfg.tool_output_max_bytes,
        ));
        r.metadata = Some(json!({"provider": provider, "results": hits.len()}));
        r
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn settings(provider: SearchProvider, url: &str) -> crate::config::WebSearch {
        crate::config::WebSearch {
            provider,
            url: url.into(),
            api_key_env: None,
        }
    }

    #[test]
    fn request_urls_encode_the_query() {
        let s = settings(SearchProvider::Searxng, "https://searx.example/sx");
        assert_eq!(
            request_url(&s, "rust & sqlite?#/é", 5),
            "https://searx.example/sx/search?q=rust%20%26%20sqlite%3F%23%2F%C3%A9&format=json"
        );
        let b = settings(SearchProvider::Brave, "https://api.search.brave.com");
        assert_eq!(
            request_url(&b, "a+b", 3),
            "https://api.search.brave.com/res/v1/web/search?q=a%2Bb&count=3"
        );
    }

    #[test]
    fn arguments_are_bounded() {
        assert_eq!(read_args(&json!({"query": " x "})), Ok(("x", 5)));
        assert_eq!(
            read_args(&json!({"query": "x", "limit": 10})),
            Ok(("x", 10))
        );
        for bad in [
            json!({"query": ""}),
            json!({"query": "   "}),
            json!({"query": "x", "limit": 0}),
            json!({"query": "x", "limit": 11}),
            json!({"query": "q".repeat(401)}),
            json!({}),
        ] {
            assert!(read_args(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn replies_are_read_capped_and_cleaned() {
        let body = json!({"web": {"results": [
            {"title": "A <strong>b</strong> &amp; c", "url": "https://a.example/",
             "description": "x\u{1b}[31m  y\n z"},
            {"title": "no url"},
            {"title": "T".repeat(300), "url": "https://b.example/", "description": ""},
            {"title": "third", "url": "https://c.example/"}
        ]}});
        let hits = parse(SearchProvider::Brave, body.to_string().as_bytes(), 2).unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].title, "A b & c");
        assert_eq!(hits[0].snippet, "x\\u{1b}[31m y z");
        assert_eq!(hits[1].title.chars().count(), TITLE_MAX_CHARS + 1);
        let none = json!({"type": "search", "query": {"original": "x"}});
        assert!(
            parse(SearchProvider::Brave, none.to_string().as_bytes(), 5)
                .unwrap()
                .is_empty()
        );
        let e = parse(SearchProvider::Searxng, b"{\"answers\": []}", 5).unwrap_err();
        assert!(e.contains("\"results\""), "{e}");
        let e = parse(SearchProvider::Searxng, b"<html>", 5).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
    }
}
