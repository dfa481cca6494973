//! What `code_run` may do, decided here: a call's arguments and the
//! secrets its code must not carry, and each request a snippet's `http()`
//! makes: the network policy of the `http` tool, then which placeholders
//! (`⟦secret:NAME⟧`) it may carry and to which host. A snippet never holds
//! a secret's value: latchclaw puts it into the request's headers and body
//! here, only for a host the secret is bound to
//! (`[tools.code_run.secrets]`).

use super::Risk;
use super::gate::Gate;
use super::refusal::{Refusal, Refused};
use crate::config::{Autonomy, DeclaredRisk};

const OPEN: &str = "⟦secret:";
const CLOSE: char = '⟧';

/// What a snippet holds in place of the secret `name`.
pub fn placeholder(name: &str) -> String {
    format!("{OPEN}{name}{CLOSE}")
}

/// The secret names of every placeholder in `text`, in order.
pub fn placeholders(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        rest = &rest[i + OPEN.len()..];
        match rest.find(CLOSE) {
            Some(j) => {
                out.push(&rest[..j]);
                rest = &rest[j + CLOSE.len_utf8()..];
            }
            None => break,
        }
    }
    out
}

/// Values shorter than this are not looked for in code (they would match
/// ordinary text); the redactor has the same floor.
const SCAN_MIN: usize = 8;

/// A request `http()` may send, with its secrets put in.
pub struct Request {
    pub method: String,
    pub url: String,
    pub host: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The secrets it carries, by name.
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for Request {
    // Never prints a header or the body: they hold values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("secrets", &self.secrets)
            .finish()
    }
}

pub const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

impl Gate {
    /// The risk of a `code_run` call: `[tools.code_run] risk`, high unless
    /// lowered.
    pub(super) fn code_risk(&self) -> Risk {
        match self.code_run.risk {
            DeclaredRisk::Low => Risk::Low,
            DeclaredRisk::Medium => Risk::Medium,
            DeclaredRisk::High => Risk::High,
        }
    }

    /// A `code_run` call's arguments, and its code scanned for the value of
    /// every secret latchclaw knows of (a bound secret's, a provider's key):
    /// code that carries one is refused, naming the secret, never its value.
    pub(super) fn judge_code(&self, args: &serde_json::Value) -> Result<String, Refused> {
        let a =
            crate::types::args::code_args(args).map_err(|e| Refused::new(Refusal::Arguments, e))?;
        for name in self.code_secret_envs() {
            if let Ok(value) = std::env::var(&name)
                && value.len() >= SCAN_MIN
                && (a.code.contains(&value) || a.stdin.is_some_and(|s| s.contains(&value)))
            {
                return Err(Refused::new(
                    Refusal::Arguments,
                    format!(
                        "the code carries the value of the secret in ${name}; a snippet names \
                         a secret with latchclaw.secret(\"NAME\") and never holds its value"
                    ),
                ));
            }
        }
        Ok(format!("{} snippet", a.language))
    }

    /// Every variable whose value a snippet must not carry.
    fn code_secret_envs(&self) -> Vec<String> {
        let mut names: Vec<String> = self.secret_envs.clone();
        for s in self.code_run.secrets.values() {
            if !names.contains(&s.env) {
                names.push(s.env.clone());
            }
        }
        names
    }

    /// The names `secrets()` lists.
    pub fn code_secret_names(&self) -> Vec<String> {
        self.code_run.secrets.keys().cloned().collect()
    }

    /// Whether `name` is a secret a snippet may use.
    pub fn code_secret_known(&self, name: &str) -> bool {
        self.code_run.secrets.contains_key(name)
    }

    /// One `http()` request of a snippet, judged: the method, the URL by the
    /// `http` tool's network policy (`[tools.http] allowed_domains`), then
    /// every placeholder in its headers and body: a secret the config
    /// binds to this very host is put in, anything else refuses the
    /// request. A placeholder in the URL is refused (URLs end up in logs).
    pub fn code_request(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> Result<Request, Refused> {
        let method = method.to_ascii_uppercase();
        if !METHODS.contains(&method.as_str()) {
            return Err(Refused::new(
                Refusal::Arguments,
                format!(
                    "method \"{}\" is not allowed; allowed: {}",
                    crate::util::printable(&method),
                    METHODS.join(", ")
                ),
            ));
        }
        if self.autonomy == Autonomy::ReadOnly && !matches!(method.as_str(), "GET" | "HEAD") {
            return Err(Refused::new(
                Refusal::Autonomy,
                format!("autonomy \"readonly\" sends only GET and HEAD, not {method}"),
            ));
        }
        if !placeholders(url).is_empty() {
            return Err(Refused::new(
                Refusal::Network,
                "a secret's placeholder in the URL; secrets go in headers or the body only",
            ));
        }
        let target = self.net.check_url(url)?;
        let mut used: Vec<String> = Vec::new();
        let mut check = |text: &str| -> Result<(), Refused> {
            for name in placeholders(text) {
                let Some(s) = self.code_run.secrets.get(name) else {
                    return Err(Refused::new(
                        Refusal::Arguments,
                        format!(
                            "unknown secret \"{}\"; [tools.code_run.secrets] names: {}",
                            crate::util::printable(name),
                            self.code_secret_names().join(", ")
                        ),
                    ));
                };
                if !s.hosts.contains(&target.host) {
                    return Err(Refused::new(
                        Refusal::Network,
                        format!(
                            "the secret \"{name}\" may go only to {}, not {}",
                            s.hosts.join(", "),
                            target.host
                        ),
                    ));
                }
                if !used.iter().any(|u| u == name) {
                    used.push(name.to_string());
                }
            }
            Ok(())
        };
        for (k, v) in headers {
            check(k)?;
            check(v)?;
        }
        check(body)?;
        let mut values = Vec::new();
        for name in &used {
            let env = &self.code_run.secrets[name].env;
            match std::env::var(env) {
                Ok(v) if !v.is_empty() => values.push((placeholder(name), v)),
                _ => {
                    return Err(Refused::new(
                        Refusal::Unavailable,
                        format!("the secret \"{name}\" is not set (${env} is empty or unset)"),
                    ));
                }
            }
        }
        let put = |text: &str| {
            let mut t = text.to_string();
            for (p, v) in &values {
                t = t.replace(p, v);
            }
            t
        };
        Ok(Request {
            method,
            url: url.to_string(),
            host: target.host,
            headers: headers.iter().map(|(k, v)| (put(k), put(v))).collect(),
            body: put(body),
            secrets: used,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_in_order() {
        let t = format!("a {} b {} {OPEN}open", placeholder("X"), placeholder("Y_2"));
        assert_eq!(placeholders(&t), ["X", "Y_2"]);
        assert!(placeholders("plain").is_empty());
    }
}
