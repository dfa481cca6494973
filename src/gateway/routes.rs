//! The endpoints. Everything but `/health` needs the bearer token and
//! counts against the rate limit; a turn (`POST /chat`) is built in the
//! worker that serves it (a `Runtime` is not `Send`) and takes the same
//! gate, receipts and memory as `latchclaw agent`; a call that needs an
//! approval waits as a pending approval, decided at the CLI.

use super::Gateway;
use super::server::{Handler, Request, Response};
use crate::error::Kind;
use crate::runtime::{Approval, Approver, NoProgress, Runtime};
use crate::security::Decision;
use crate::tools::{Reply, User};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Nobody at the gateway answers for the operator: every approval waits
/// (`latchclaw approve ID`), every question gets "no user present".
struct NoOperator;

impl Approver for NoOperator {
    fn ask(
        &self,
        _: &str,
        _: &Decision,
        _: &Value,
        _: Option<&str>,
        _: bool,
        _: &crate::control::RunControl,
    ) -> Approval {
        Approval::Unavailable(
            "asked through the gateway, where no operator answers; approving is a local \
             CLI act"
                .into(),
        )
    }
}

/// A SOP's approval step through the gateway: parked, decided at the CLI
/// (`latchclaw sop approve RUN`).
impl crate::sop::Operator for NoOperator {
    fn confirm(&self, _: &str, _: &str, _: &str, _: &crate::control::RunControl) -> Approval {
        Approval::Unavailable(
            "run through the gateway, where no operator answers; approving is a local CLI act"
                .into(),
        )
    }
}

impl User for NoOperator {
    fn ask_user(&self, _: &str, _: &crate::control::RunControl, _: Instant) -> Reply {
        Reply::NoUser
    }
}

const MAX_LIMIT: u64 = 1000;

impl Handler for Gateway {
    fn admit(&self, req: &Request) -> Option<Response> {
        let r = self.refusal(req)?;
        Some(self.cors(req, r))
    }

    fn handle(&self, req: &Request) -> Response {
        let r = self.route(req);
        self.cors(req, r)
    }

    fn served(&self, path: Option<&str>, status: u16, took: Duration) {
        self.metrics.request(path, status, took);
        log::info!(
            target: "event::gateway_request",
            "path={} status={status} ms={}",
            super::metrics::path_label(path),
            took.as_millis()
        );
    }
}

fn method_not_allowed(allow: &'static str) -> Response {
    Response::error(
        405,
        "method_not_allowed",
        &format!("this endpoint takes {allow}"),
    )
    .with("Allow", allow)
}

/// A query parameter as a number in `1..=max` (or `0..` for `since`).
fn number(req: &Request, name: &str, default: u64, min: u64, max: u64) -> Result<u64, Response> {
    match req.param(name) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(Response::error(
                400,
                "bad_request",
                &format!(
                    "{name}: \"{}\" is not a number from {min} to {max}",
                    crate::util::printable(&v)
                ),
            )),
        },
    }
}

impl Gateway {
    /// Why a request may not go on, from its head alone (the server asks
    /// before it reads a body): 400 for an ambiguous `Authorization`, 401
    /// without the token, 429 over the rate limit.
    fn refusal(&self, req: &Request) -> Option<Response> {
        if req
            .headers
            .iter()
            .filter(|(n, _)| n == "authorization")
            .count()
            > 1
        {
            return Some(Response::error(
                400,
                "bad_request",
                "more than one Authorization header; send one",
            ));
        }
        if req.path == "/health" || self.preflight(req) {
            // Open to strangers, so no body is read: a worker would wait for it.
            let body = req
                .header("content-length")
                .is_some_and(|v| v.trim_matches([' ', '\t']) != "0");
            return match (body, req.method.as_str()) {
                (false, _) => None,
                (true, "GET" | "OPTIONS") => Some(Response::error(
                    400,
                    "bad_request",
                    "this endpoint takes no request body",
                )),
                (true, _) => Some(method_not_allowed("GET")),
            };
        }
        if !self.token.check(req.header("authorization")) {
            return Some(
                Response::error(
                    401,
                    "unauthorized",
                    "a valid `Authorization: Bearer TOKEN` header is required (`latchclaw gateway token`)",
                )
                .with("WWW-Authenticate", "Bearer"),
            );
        }
        let secs = self.limit.take().err()?;
        Some(
            Response::error(
                429,
                "rate_limited",
                &format!(
                    "over gateway.rate_limit_per_minute ({}); retry in {secs} s",
                    self.cfg.gateway.rate_limit_per_minute
                ),
            )
            .with("Retry-After", secs.to_string()),
        )
    }

    /// A browser's preflight (it carries no credentials) from a listed origin.
    fn preflight(&self, req: &Request) -> bool {
        req.method == "OPTIONS" && self.allowed_origin(req).is_some()
    }

    /// An admitted request.
    fn route(&self, req: &Request) -> Response {
        let path = req.path.as_str();
        if path == "/health" {
            return match req.method.as_str() {
                "GET" => Response::json(200, &json!({"status": "ok"})),
                _ => method_not_allowed("GET"),
            };
        }
        if self.preflight(req) {
            return Response::text(204, "text/plain", String::new())
                .with("Access-Control-Allow-Methods", "GET, POST, DELETE")
                .with(
                    "Access-Control-Allow-Headers",
                    "Authorization, Content-Type",
                )
                .with("Access-Control-Max-Age", "600");
        }
        let m = req.method.as_str();
        match path {
            "/status" if m == "GET" => self.status(),
            "/status" => method_not_allowed("GET"),
            "/tools" if m == "GET" => self.tools(),
            "/tools" => method_not_allowed("GET"),
            "/chat" if m == "POST" => self.chat(req),
            "/chat" => method_not_allowed("POST"),
            "/memory/search" if m == "GET" => self.memory_search(req),
            "/memory/search" => method_not_allowed("GET"),
            "/receipts" if m == "GET" => self.receipts(req),
            "/receipts" => method_not_allowed("GET"),
            "/estop" if m == "POST" => self.estop_engage(req),
            "/estop" if m == "DELETE" => self.estop_clear(),
            "/estop" => method_not_allowed("POST, DELETE"),
            "/metrics" if m == "GET" => Response::text(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                self.metrics.render(&self.cfg),
            ),
            "/metrics" => method_not_allowed("GET"),
            // Without the feature the routes are unknown (404, below).
            p if !cfg!(feature = "sop") && p.starts_with("/sop/") => {
                Response::error(404, "not_built", &crate::features::how("sop"))
            }
            p if p.starts_with("/sop/runs/") => match m {
                "GET" => self.sop_show(&p["/sop/runs/".len()..]),
                _ => method_not_allowed("GET"),
            },
            p if p.starts_with("/sop/") && p.ends_with("/run") && p.len() > 9 => match m {
                "POST" => self.sop_run(&p["/sop/".len()..p.len() - "/run".len()]),
                _ => method_not_allowed("POST"),
            },
            _ => Response::error(
                404,
                "not_found",
                "no such endpoint; see README: gateway (/health, /status, /tools, /chat, \
                 /memory/search, /receipts, /estop, /metrics, POST /sop/NAME/run, \
                 GET /sop/runs/ID)",
            ),
        }
    }

    /// The request's `Origin` when `gateway.cors_origins` lists it.
    fn allowed_origin<'r>(&self, req: &'r Request) -> Option<&'r str> {
        let origin = req.header("origin")?;
        self.cfg
            .gateway
            .cors_origins
            .iter()
            .any(|o| o == origin)
            .then_some(origin)
    }

    fn cors(&self, req: &Request, r: Response) -> Response {
        match self.allowed_origin(req) {
            Some(origin) => r
                .with("Access-Control-Allow-Origin", origin)
                .with("Vary", "Origin"),
            None => r,
        }
    }

    /// The error's text goes out redacted, as every body does (server.rs).
    fn internal(e: crate::error::Error) -> Response {
        match e.kind {
            Kind::Usage => Response::error(400, "bad_request", &e.msg),
            Kind::Integrity => Response::error(500, "integrity", &e.msg),
            _ => Response::error(500, "internal", &e.msg),
        }
    }

    fn status(&self) -> Response {
        let cfg = &self.cfg;
        let provider = cfg.provider(&cfg.default_provider).ok();
        let estop_path = cfg.estop_path();
        let engaged = crate::security::estop_engaged(&estop_path).is_some();
        let reason = engaged.then(|| estop_reason(&estop_path));
        let receipts = match self.metrics.chain(cfg) {
            None => json!({"enabled": false}),
            Some(Ok(at)) => {
                json!({"enabled": true, "chain_valid": true, "count": at.count, "head": at.head})
            }
            Some(Err(why)) => json!({"enabled": true, "chain_valid": false, "error": why}),
        };
        Response::json(
            200,
            &json!({
                "version": env!("CARGO_PKG_VERSION"),
                "provider": {
                    "name": cfg.default_provider,
                    "kind": provider.map(|p| p.kind().as_str()),
                    "model": provider.map(|p| p.model.clone()),
                },
                "autonomy": cfg.security.autonomy.as_str(),
                "estop": {"engaged": engaged, "reason": reason},
                "confinement": {"mode": cfg.security.confinement.as_str(), "description": self.confinement},
                "receipts": receipts,
            }),
        )
    }

    fn tools(&self) -> Response {
        let mut rows: Vec<Value> = crate::tools::ToolName::ALL
            .into_iter()
            .map(|name| {
                json!({
                    "name": name,
                    "enabled": self.cfg.channels.cli.tools_allow.contains(&name),
                    "built": crate::features::tool_missing(name).is_none(),
                    "risk": crate::security::risk_summary(name),
                    "description": crate::tools::tool(name).description(),
                })
            })
            .collect();
        // Then the plugins' tools, as `tool list` shows them.
        let external = crate::plugins::registry(&self.cfg);
        for t in &external.tools {
            rows.push(json!({
                "name": t.name,
                "enabled": external.offered(&self.cfg).any(|o| o.name == t.name),
                "built": true,
                "risk": t.risk.as_str(),
                "read_only": t.read_only,
                "description": t.description,
                "source": t.origin(),
                "approved": t.unapproved.is_none(),
            }));
        }
        Response::json(200, &Value::Array(rows))
    }

    fn memory_search(&self, req: &Request) -> Response {
        let Some(q) = req.param("q").filter(|q| !q.trim().is_empty()) else {
            return Response::error(400, "bad_request", "q: a search query is required (?q=...)");
        };
        let limit = match number(req, "limit", 20, 1, MAX_LIMIT) {
            Ok(n) => n as u32,
            Err(r) => return r,
        };
        let hits = match crate::memory::Memory::open_existing(
            &self.cfg.memory.path,
            self.cfg.memory.busy_timeout_ms,
            std::sync::Arc::clone(&self.redactor),
        ) {
            Ok(Some(m)) => m.search(&q, limit),
            Ok(None) => Ok(Vec::new()),
            Err(e) => Err(e),
        };
        match hits {
            Ok(h) => Response::json(200, &json!(h)),
            Err(e) => Gateway::internal(e),
        }
    }

    fn receipts(&self, req: &Request) -> Response {
        let (since, limit) = match (
            number(req, "since", 0, 0, u64::MAX >> 1),
            number(req, "limit", 100, 1, MAX_LIMIT),
        ) {
            (Ok(s), Ok(l)) => (s, l as usize),
            (Err(r), _) | (_, Err(r)) => return r,
        };
        let log = crate::receipts::ReceiptLog::new(&self.cfg.receipts.path);
        match log.page(since, limit) {
            Ok((rows, total)) => {
                let next = rows.last().map_or(since, |(p, _)| *p);
                let receipts: Vec<Value> = rows
                    .into_iter()
                    .map(|(position, r)| {
                        let mut v = r.unwrap_or_else(|raw| json!({"unparsable": raw}));
                        if let Some(o) = v.as_object_mut() {
                            o.insert("position".into(), position.into());
                        }
                        v
                    })
                    .collect();
                Response::json(
                    200,
                    &json!({"receipts": receipts, "total": total, "next_since": next}),
                )
            }
            Err(e) => Gateway::internal(e),
        }
    }

    fn estop_engage(&self, req: &Request) -> Response {
        let reason = if req.body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            match serde_json::from_slice::<Value>(&req.body) {
                Ok(v) => match v.get("reason") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => {
                        return Response::error(400, "bad_request", "reason: expected a string");
                    }
                },
                Err(e) => {
                    return Response::error(
                        400,
                        "bad_request",
                        &format!("the body is not JSON: {e}"),
                    );
                }
            }
        };
        // Redacted before it is written: the ESTOP file and `/status` show it.
        let reason = crate::util::one_line(
            &crate::util::printable(
                &self
                    .redactor
                    .redact(reason.as_deref().unwrap_or("engaged through the gateway")),
            ),
            200,
        );
        match crate::security::engage_estop(&self.cfg, &format!("via gateway: {reason}")) {
            Ok(()) => Response::json(200, &json!({"estop": true, "reason": reason})),
            Err(e) => Gateway::internal(e),
        }
    }

    fn estop_clear(&self) -> Response {
        match crate::security::clear_estop(&self.cfg) {
            Ok(was) => Response::json(200, &json!({"estop": false, "was_engaged": was})),
            Err(e) => Gateway::internal(e),
        }
    }

    fn chat(&self, req: &Request) -> Response {
        let body: Value = match serde_json::from_slice(&req.body) {
            Ok(v) => v,
            Err(e) => {
                return Response::error(400, "bad_request", &format!("the body is not JSON: {e}"));
            }
        };
        let message = match body.get("message") {
            Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
            _ => {
                return Response::error(
                    400,
                    "bad_request",
                    "message: a non-empty string is required ({\"message\": \"...\"})",
                );
            }
        };
        if message.len() > self.cfg.max_input_bytes {
            return Response::error(
                413,
                "message_too_large",
                &format!(
                    "message is {} bytes; the limit is {} (max_input_bytes)",
                    message.len(),
                    self.cfg.max_input_bytes
                ),
            );
        }
        let conversation = match body.get("conversation_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.clone()),
            Some(_) => {
                return Response::error(400, "bad_request", "conversation_id: expected a string");
            }
        };
        // The gateway's token (and any other known secret) never reaches
        // the model, the memory or the receipts.
        let message = self.redactor.redact(&message).into_owned();
        let conversation = conversation.map(|c| self.redactor.redact(&c).into_owned());
        match self.turn(&message, conversation.as_deref()) {
            Ok(v) => Response::json(200, &v),
            Err(r) => r,
        }
    }

    /// `POST /sop/NAME/run`: the SOP run as `latchclaw sop run NAME` runs
    /// it with no terminal; an approval parks it (`status`
    /// `waiting_approval`, `approval_id`), decided at the CLI.
    fn sop_run(&self, name: &str) -> Response {
        let cfg = &self.cfg;
        let sop = match crate::sop::load(cfg, name) {
            Ok(s) => s,
            Err(e) if e.msg.starts_with("no SOP") => {
                return Response::error(404, "not_found", &e.msg);
            }
            Err(e) => return Gateway::internal(e),
        };
        let provider = match crate::providers::build(cfg, &cfg.default_provider, &self.redactor) {
            Ok(p) => p,
            Err(e) => return Gateway::internal(e),
        };
        let operator = NoOperator;
        let mut rt = match Runtime::new(cfg, &operator, std::sync::Arc::clone(&self.redactor)) {
            Ok(rt) => rt,
            Err(e) => return Gateway::internal(e),
        };
        rt.prepare_receipts();
        rt.recall = false;
        rt.control = self.control.child(None);
        let id = crate::sop::new_run_id();
        rt.rerun = Some(format!("latchclaw sop resume {id}"));
        let runner = crate::sop::Runner {
            rt: &rt,
            approver: &operator,
            operator: &operator,
            provider: provider.as_ref(),
        };
        let report = runner.start(&sop, &id);
        if let Err(e) = rt.anchor_head() {
            log::warn!(target: "event::gateway_anchor", "{e}");
        }
        match report {
            Ok(r) => {
                let mut v = serde_json::to_value(&r.run).unwrap_or_default();
                v["run_id"] = r.run.id.clone().into();
                v["exit_code"] = r.outcome.code().into();
                v["exit_reason"] = r.outcome.reason().into();
                v["message"] = r.message.into();
                v["approval_id"] = r
                    .run
                    .steps
                    .iter()
                    .find_map(|s| {
                        s.approval_id
                            .clone()
                            .filter(|_| s.state.as_str() == "waiting_approval")
                    })
                    .into();
                Response::json(200, &v)
            }
            Err(e) => Gateway::internal(e),
        }
    }

    /// `GET /sop/runs/ID`: as `latchclaw sop show ID --json`.
    fn sop_show(&self, id: &str) -> Response {
        let cfg = &self.cfg;
        let memory = match crate::memory::Memory::open_existing(
            &cfg.memory.path,
            cfg.memory.busy_timeout_ms,
            std::sync::Arc::clone(&self.redactor),
        ) {
            Ok(m) => m,
            Err(e) => return Gateway::internal(e),
        };
        let run = match memory.map(|m| m.sop_run(id)).transpose() {
            Ok(r) => r.flatten(),
            Err(e) => return Gateway::internal(e),
        };
        match run {
            Some(r) => {
                let mut v = serde_json::to_value(&r).unwrap_or_default();
                v["run_id"] = r.id.clone().into();
                Response::json(200, &v)
            }
            None => Response::error(404, "not_found", "no SOP run with this id"),
        }
    }

    /// One turn, as `latchclaw agent -m MESSAGE [--conversation ID]` runs it.
    fn turn(&self, message: &str, conversation: Option<&str>) -> Result<Value, Response> {
        let cfg = &self.cfg;
        let provider = crate::providers::build(cfg, &cfg.default_provider, &self.redactor)
            .map_err(Gateway::internal)?;
        let approver = NoOperator;
        let mut rt = Runtime::new(cfg, &approver, std::sync::Arc::clone(&self.redactor))
            .map_err(Gateway::internal)?;
        rt.prepare_receipts();
        let run_id = rt
            .memory
            .run_started("gateway POST /chat", None)
            .map_err(Gateway::internal)?;
        rt.control = self.control.child(None);
        // `[memory] session`: a conversation continued past the boundary
        // goes on as a new one (the answer names it); the old one is
        // summarised when `summarize_conversations` asks.
        let m = &cfg.memory;
        let conversation = match conversation {
            Some(c)
                if rt
                    .memory
                    .session_over(c, m.session, m.session_hour)
                    .unwrap_or(false) =>
            {
                if m.summarize_conversations
                    && let Err(e) = crate::rollup::Rollup::new(cfg, &rt.memory, provider.as_ref())
                        .and_then(|mut r| r.conversation(c, false))
                {
                    log::warn!("conversation {c}: no summary written: {e}");
                }
                None
            }
            other => other,
        };
        let result = rt.agent_turn_with(provider.as_ref(), conversation, message, &NoProgress);
        if let Err(e) = rt.anchor_head() {
            log::warn!(target: "event::gateway_anchor", "{e}");
        }
        let (code, reason) = match &result {
            Ok(o) => (o.exit_code(), o.outcome().reason().to_string()),
            Err(e) => (
                crate::error::Outcome::Failed(e.kind).code(),
                format!("error: {}", self.redactor.redact(&e.msg)),
            ),
        };
        // This run's own count: another chat's failure says nothing of it.
        let provider_failed = rt.provider_errors.get() > 0;
        self.metrics.provider_errors(rt.provider_errors.get());
        let conv = rt.conversation.borrow().clone();
        let usage = rt.run_usage.borrow().clone();
        let _ = rt
            .memory
            .run_finished(&run_id, code, &reason, conv.as_deref(), Some(&usage));
        let o = match result {
            Ok(o) => o,
            Err(e) if e.msg.starts_with("no conversation ") => {
                return Err(Response::error(404, "not_found", &e.msg));
            }
            Err(e) if provider_failed => {
                return Err(Response::error(502, "provider", &e.msg));
            }
            Err(e) => return Err(Gateway::internal(e)),
        };
        self.metrics.turn(conversation.is_none(), &o.tool_calls);
        let pending: Vec<&str> = o
            .tool_calls
            .iter()
            .filter_map(|c| c.pending_approval.as_deref())
            .collect();
        let v = json!({
            "conversation_id": o.conversation_id,
            "answer": o.answer,
            "tool_calls": o.tool_calls,
            "pending_approvals": pending,
            "exit_reason": o.outcome().reason(),
            "turn_reason": o.exit_reason.reason(),
            "receipts_head": o.receipts_head,
        });
        // A model may repeat a secret it was sent (the token, a key):
        // `Response::json` redacts the answer as memory read-outs are.
        Ok(v)
    }
}

/// What the ESTOP file says about why (its first line), for `/status`.
fn estop_reason(path: &std::path::Path) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(1024).read_to_end(&mut buf);
    }
    let text = String::from_utf8_lossy(&buf);
    crate::util::one_line(
        &crate::util::printable(text.lines().next().unwrap_or("")),
        300,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A gateway over the mock provider; `fixture` is its script.
    fn gateway(name: &str, fixture: &str) -> (Gateway, std::path::PathBuf) {
        let top = std::env::temp_dir().join(crate::util::new_id(name));
        std::fs::create_dir_all(top.join("state")).unwrap();
        std::fs::write(top.join("script.toml"), fixture).unwrap();
        let text = format!(
            "default_provider = \"m\"\nworkspace_dir = {:?}\n[providers.models.m]\n\
             kind = \"mock\"\nfixture = {:?}\n",
            top.join("ws").display().to_string(),
            top.join("script.toml").display().to_string()
        );
        let cfg = crate::config::Config::from_text(
            &text,
            &top.join("state/config.toml"),
            top.join("state"),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let redactor = Arc::new(crate::security::redact::Redactor::new());
        let gw = Gateway {
            token: super::super::auth::TokenFile::new(&cfg.state_dir, Arc::clone(&redactor)),
            limit: super::super::auth::RateLimit::new(60),
            metrics: super::super::metrics::Metrics::new(),
            control: crate::control::RunControl::new(None),
            confinement: String::new(),
            cfg,
            redactor,
        };
        (gw, top)
    }

    fn errors_total(gw: &Gateway) -> String {
        let text = gw.metrics.render(&gw.cfg);
        let line = text
            .lines()
            .find(|l| l.starts_with("latchclaw_provider_errors_total "));
        line.unwrap_or_else(|| panic!("{text}")).to_string()
    }

    #[test]
    fn a_turn_failed_by_its_provider_is_a_502_counted_in_the_metrics() {
        let (gw, top) = gateway("latchclaw-gw-fail", "error = \"server\"\n");
        assert_eq!(errors_total(&gw), "latchclaw_provider_errors_total 0");
        let r = gw.turn("hello", None).unwrap_err();
        assert_eq!(r.status, 502, "{r:?}");
        let r = gw.turn("again", None).unwrap_err();
        assert_eq!(r.status, 502, "{r:?}");
        assert_eq!(errors_total(&gw), "latchclaw_provider_errors_total 2");
        let _ = std::fs::remove_dir_all(&top);

        // A turn that fails for another reason is not the provider's.
        let (gw, top) = gateway(
            "latchclaw-gw-ok",
            "[[script]]\n[[script.responses]]\ntext = \"hi\"\n",
        );
        assert!(gw.turn("hello", None).is_ok());
        let r = gw.turn("hello", Some("no-such-conversation")).unwrap_err();
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(errors_total(&gw), "latchclaw_provider_errors_total 0");
        let _ = std::fs::remove_dir_all(&top);
    }
}
