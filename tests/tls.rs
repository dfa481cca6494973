//! https trusts the system's CA certificates (or `SSL_CERT_FILE`), not a
//! list compiled in: a local TLS server whose certificate a test CA signed
//! is trusted exactly when that CA is in the bundle.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, fixture};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

/// Serves `body` as JSON over TLS to each connection, until dropped.
fn tls_server(body: &'static str) -> String {
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(fixture("tls/server.pem"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(fixture("tls/server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut b) {
                        Ok(1) => head.push(b[0]),
                        _ => return,
                    }
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let len = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                let mut rest = vec![0u8; len];
                if tls.read_exact(&mut rest).is_err() {
                    return;
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes());
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    url
}

fn http_env() -> Env {
    let env = Env::new();
    env.config(
        "[channels.cli]\ntools_allow = [\"http\"]\n[tools.http]\n\
         allowed_domains = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\n",
    );
    env
}

#[test]
fn the_http_tool_trusts_the_ca_bundle_it_is_given_and_nothing_else() {
    let url = tls_server("{\"hello\": \"over tls\"}");
    let env = http_env();
    let args = serde_json::json!({ "url": format!("{url}/") }).to_string();
    let ca = fixture("tls/ca.pem");
    let r = env.run_env(
        &["tool", "run", "http", "--json", &args],
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("over tls"), "{r:?}");

    // The server's own certificate is no CA: nothing vouches for it.
    let leaf = fixture("tls/server.pem");
    let r = env.run_env(
        &["tool", "run", "http", "--json", &args],
        &[("SSL_CERT_FILE", leaf.to_str().unwrap())],
    );
    // The call ran and failed (exit 3), the certificate named.
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!((r.code, v["status"].as_str()), (3, Some("failed")), "{r:?}");
    assert!(!r.stdout.contains("over tls"), "{r:?}");
    assert!(r.stdout.to_lowercase().contains("certificate"), "{r:?}");

    // No bundle at all: refused, and the log says what to do.
    let r = env.run_env(
        &["tool", "run", "http", "--json", &args],
        &[("SSL_CERT_FILE", "/nonexistent/bundle.pem")],
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!((r.code, v["status"].as_str()), (3, Some("failed")), "{r:?}");
    assert!(!r.stdout.contains("over tls"), "{r:?}");
    assert!(
        r.stderr.contains("no CA certificates found") && r.stderr.contains("SSL_CERT_FILE"),
        "{r:?}"
    );
}

#[test]
fn an_https_provider_is_verified_against_the_bundle() {
    let url = tls_server(
        "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\
         \"message\":{\"role\":\"assistant\",\"content\":\"answer over tls\"},\
         \"finish_reason\":\"stop\"}]}",
    );
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"cloud\"\n[providers.models.cloud]\nkind = \"openai-compatible\"\n\
         base_url = \"{url}/v1\"\nmodel = \"m\"\ntimeout_secs = 5\nretries = 0\nstream = false\n"
    ));
    let ca = fixture("tls/ca.pem");
    let r = env.run_env(
        &["agent", "-m", "hi"],
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("answer over tls"), "{r:?}");
    let leaf = fixture("tls/server.pem");
    let r = env.run_env(
        &["agent", "-m", "hi"],
        &[("SSL_CERT_FILE", leaf.to_str().unwrap())],
    );
    // A provider error of the network kind (exit 3), not an answer.
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("(network)"), "{r:?}");
    assert!(!r.stdout.contains("answer over tls"), "{r:?}");
}
