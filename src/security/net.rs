//! Network policy for the `http` tool: which URLs may be fetched and which
//! addresses may be connected to. The tool's resolver calls [`check_ip`] on
//! every address it is about to connect to, so a name that resolves
//! differently at connect time (DNS rebinding) is still checked.

use super::refusal::Refused;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A URL taken apart, after the policy's syntactic checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: String,
    /// Lowercase host without brackets or a trailing dot.
    pub host: String,
    pub port: u16,
    /// The host is an IP address literal (in any spelling).
    pub ip: Option<IpAddr>,
}

/// The `[tools.http]` policy.
#[derive(Debug, Clone, Default)]
pub struct NetPolicy {
    pub allowed_domains: Vec<String>,
    /// Hosts or addresses that may resolve to loopback/private addresses.
    pub allow_private: Vec<String>,
}

/// Parses an IPv4 address the way `inet_aton` does: 1 to 4 parts, each
/// decimal, octal (leading 0) or hex (0x), so `2130706433`, `0177.1` and
/// `0x7f.0.0.1` are all 127.0.0.1.
pub fn parse_ipv4_loose(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let mut nums = Vec::with_capacity(4);
    for p in &parts {
        let lower = p.to_ascii_lowercase();
        let n = if let Some(h) = lower.strip_prefix("0x") {
            if h.is_empty() {
                0
            } else {
                u64::from_str_radix(h, 16).ok()?
            }
        } else if lower.len() > 1 && lower.starts_with('0') {
            u64::from_str_radix(&lower[1..], 8).ok()?
        } else {
            lower.parse::<u64>().ok()?
        };
        nums.push(n);
    }
    let last = *nums.last()?;
    let head = &nums[..nums.len() - 1];
    if head.iter().any(|n| *n > 255) {
        return None;
    }
    let room = 8 * (4 - head.len() as u32);
    if room < 64 && last >= (1u64 << room) {
        return None;
    }
    let mut v: u64 = 0;
    for (i, n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i as u32);
    }
    Some(Ipv4Addr::from((v | last) as u32))
}

/// Why an address may not be connected to, or `None` for a public address.
pub fn refused_ip(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return refused_v4(v4).map(|_| "an IPv4-mapped IPv6 address of a refused range");
            }
            let s = v6.segments();
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if s[0] & 0xfe00 == 0xfc00 {
                // Includes the cloud metadata address fd00:ec2::254.
                Some("private (unique local)")
            } else if s[0] & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if s[0] & 0xffc0 == 0xfec0 {
                Some("site-local (deprecated)")
            } else if s[0..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0 {
                Some("IPv4-translated (embeds an IPv4 address)")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if s[0..6] == [0, 0, 0, 0, 0, 0] {
                Some("an IPv4-compatible IPv6 address")
            } else if s[0] == 0x64 && s[1] == 0xff9b {
                Some("NAT64 (embeds an IPv4 address)")
            } else if s[0] == 0x2002 {
                Some("6to4 (embeds an IPv4 address)")
            } else if s[0] == 0x2001 && s[1] == 0xdb8 {
                Some("documentation")
            } else {
                None
            }
        }
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if o == [169, 254, 169, 254] {
        Some("cloud metadata")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("carrier-grade NAT (100.64.0.0/10)")
    } else if o[0] == 0 {
        Some("unspecified (0.0.0.0/8)")
    } else if ip.is_broadcast() || o[0] >= 240 {
        Some("reserved")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        Some("benchmarking (198.18.0.0/15)")
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        Some("IETF protocol assignments (192.0.0.0/24)")
    } else if ip.is_documentation() {
        Some("documentation")
    } else {
        None
    }
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

impl NetPolicy {
    /// Syntactic checks on a URL: scheme, credentials, host form, allowlist.
    pub fn check_url(&self, url: &str) -> Result<Target, Refused> {
        if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(Refused::network(
                "the URL contains whitespace or control characters",
            ));
        }
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| Refused::network(format!("\"{url}\" is not an absolute http(s) URL")))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(Refused::network(format!(
                "scheme \"{scheme}\" is not allowed; only http and https"
            )));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.contains('@') {
            return Err(Refused::network(
                "URLs with credentials (user@host) are refused",
            ));
        }
        if authority.contains('\\') || authority.contains('%') {
            return Err(Refused::network("escaped or backslashed hosts are refused"));
        }
        let (host_raw, port) = split_host_port(authority)?;
        let port = port.unwrap_or_else(|| default_port(&scheme));
        let host = host_raw.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return Err(Refused::network("the URL has no host"));
        }
        if !host.is_ascii() {
            return Err(Refused::network(
                "non-ASCII host names are refused (write the punycode form)",
            ));
        }
        let ip = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(IpAddr::V6(inner.parse::<Ipv6Addr>().map_err(|_| {
                Refused::network(format!("\"{host}\" is not a valid IPv6 address"))
            })?))
        } else if host
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == '.' || c == 'x')
        {
            // Digits, dots and hex: an address in some spelling, or nothing.
            match parse_ipv4_loose(&host) {
                Some(v4) => Some(IpAddr::V4(v4)),
                None if host.chars().any(|c| c.is_ascii_digit())
                    && host
                        .split('.')
                        .all(|p| p.chars().all(|c| c.is_ascii_hexdigit() || c == 'x')) =>
                {
                    return Err(Refused::network(format!(
                        "\"{host}\" is not a valid address"
                    )));
                }
                None => None,
            }
        } else {
            None
        };
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.[]:".contains(c))
        {
            return Err(Refused::network(format!(
                "\"{host}\" is not a valid host name"
            )));
        }
        let canonical = match ip {
            Some(IpAddr::V6(v6)) => format!("[{v6}]"),
            Some(IpAddr::V4(v4)) => v4.to_string(),
            None => host.clone(),
        };
        if self.allowed_domains.is_empty() {
            return Err(Refused::network(
                "no domain is allowed: tools.http.allowed_domains is empty",
            ));
        }
        let allowed = self.allowed_domains.iter().any(|d| {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            match ip {
                Some(ip) => {
                    let bare = d.trim_matches(['[', ']']);
                    bare.parse::<IpAddr>()
                        .ok()
                        .or_else(|| parse_ipv4_loose(bare).map(IpAddr::V4))
                        == Some(ip)
                }
                None => canonical == d || canonical.ends_with(&format!(".{d}")),
            }
        });
        if !allowed {
            return Err(Refused::network(format!(
                "host \"{canonical}\" is not in tools.http.allowed_domains ({})",
                self.allowed_domains.join(", ")
            )));
        }
        let target = Target {
            scheme,
            host: canonical,
            port,
            ip,
        };
        if let Some(ip) = ip {
            self.check_ip(&target.host, ip)?;
        }
        Ok(target)
    }

    /// Whether `host` may connect to `ip`.
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        let Some(why) = refused_ip(ip) else {
            return Ok(());
        };
        let host = host.trim_matches(['[', ']']);
        let listed = self.allow_private.iter().any(|a| {
            let a = a.trim_matches(['[', ']']).to_ascii_lowercase();
            a == host || a.parse::<IpAddr>().is_ok_and(|x| x == ip)
        });
        if listed {
            Ok(())
        } else {
            Err(Refused::network(format!(
                "{ip} is {why}; refused (list the host in tools.http.allow_private to allow it)"
            )))
        }
    }
}

/// `host[:port]` or `[v6][:port]`: the host as written (brackets kept)
/// and the port, 1 to 65535.
pub(crate) fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), Refused> {
    let bad_port = |p: &str| format!("port \"{p}\" is not a number from 1 to 65535");
    if authority.starts_with('[') {
        let end = authority
            .find(']')
            .ok_or_else(|| Refused::network("unclosed \"[\" in the host"))?;
        let host = &authority[..=end];
        return match &authority[end + 1..] {
            "" => Ok((host, None)),
            p => match p.strip_prefix(':') {
                Some(n) => n
                    .parse::<u16>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(|n| (host, Some(n)))
                    .ok_or_else(|| Refused::network(bad_port(n))),
                None => Err(Refused::network("junk after the IPv6 host")),
            },
        };
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => p
            .parse::<u16>()
            .ok()
            .filter(|n| *n > 0)
            .map(|n| (h, Some(n)))
            .ok_or_else(|| Refused::network(bad_port(p))),
        None => Ok((authority, None)),
    }
}

/// A host an external tool is granted (`network = [...]` of an MCP server
/// or of a plugin that the config allows): `host`, `host:port`,
/// `[v6]:port`, or `*.domain` for any name under `domain`. Without a port,
/// 80 and 443.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Lowercase, no brackets, no trailing dot; `*.x` kept as written.
    host: String,
    port: Option<u16>,
}

impl Grant {
    pub fn parse(entry: &str) -> Result<Grant, String> {
        let e = entry.trim();
        // An IPv6 literal without brackets has no port.
        let (host, port) = if !e.starts_with('[') && e.matches(':').count() > 1 {
            (e, None)
        } else {
            split_host_port(e).map_err(|r| format!("\"{e}\": {}", r.reason))?
        };
        let host = host
            .trim_matches(['[', ']'])
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let wild = host.strip_prefix("*.").unwrap_or(&host);
        let ok = !wild.is_empty()
            && (wild.parse::<IpAddr>().is_ok()
                || wild
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
        if !ok || wild.contains('*') {
            return Err(format!("\"{e}\" is not a host, host:port or *.domain"));
        }
        Ok(Grant { host, port })
    }

    fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    fn covers_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => port == 80 || port == 443,
        }
    }
}

/// The entries of `declared` that `allowed` also names (spelled alike but
/// for case): what a plugin's tool is granted when its manifest declares
/// `declared` and the operator's `[plugins.NAME] network` is `allowed`.
pub fn granted(declared: &[String], allowed: &[String]) -> Vec<String> {
    declared
        .iter()
        .filter(|d| allowed.iter().any(|a| a.eq_ignore_ascii_case(d)))
        .cloned()
        .collect()
}

/// The grants as a reader would write them: `granted: a (80, 443), b:8080`.
fn granted_list(grants: &[Grant]) -> String {
    let each: Vec<String> = grants
        .iter()
        .map(|g| {
            let host = if g.host.contains(':') {
                format!("[{}]", g.host)
            } else {
                g.host.clone()
            };
            match g.port {
                Some(p) => format!("{host}:{p}"),
                None => format!("{host} (80, 443)"),
            }
        })
        .collect();
    if each.is_empty() {
        "none granted".into()
    } else {
        format!("granted: {}", each.join(", "))
    }
}

/// Where the egress proxy may connect for a child that asked for
/// `host:port`, given what it was granted: the addresses to connect to
/// (resolved once, here: the proxy connects to these, not to a second
/// answer). A name must match a grant and resolve to public addresses
/// only (a granted name that resolves to loopback or a private network is
/// refused: DNS rebinding); an address literal must match a grant naming
/// that address, and then any address may be reached (the operator wrote
/// it down).
pub fn egress_addrs(grants: &[Grant], host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let host = host
        .trim_matches(['[', ']'])
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let literal = host
        .parse::<IpAddr>()
        .ok()
        .or_else(|| parse_ipv4_loose(&host).map(IpAddr::V4));
    let shown: String = host.chars().take(255).collect::<String>();
    let shown = crate::util::printable(&shown);
    if let Some(ip) = literal {
        return if grants
            .iter()
            .any(|g| g.ip() == Some(ip) && g.covers_port(port))
        {
            Ok(vec![SocketAddr::new(ip, port)])
        } else {
            Err(format!(
                "{shown}:{port} is not among the hosts granted ({})",
                granted_list(grants)
            ))
        };
    }
    let named = grants.iter().any(|g| {
        g.covers_port(port)
            && match g.host.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
                None => g.host == host,
            }
    });
    if !named
        || host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err(format!(
            "{shown}:{port} is not among the hosts granted ({})",
            granted_list(grants)
        ));
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .map_err(|e| format!("{shown}: cannot resolve: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{shown}: no address"));
    }
    let own = crate::sys::net::local_addresses();
    let why_not = |ip: IpAddr| {
        refused_ip(ip).or_else(|| own.contains(&ip).then_some("this machine's own address"))
    };
    if let Some((a, why)) = addrs
        .iter()
        .find_map(|a| why_not(a.ip()).map(|why| (a, why)))
    {
        return Err(format!(
            "{shown} resolves to {} ({why}); a granted name may reach public addresses only \
             (grant the address itself to reach it)",
            a.ip()
        ));
    }
    Ok(addrs)
}

/// The GET a `web_search` call makes (the key travels in a header, never
/// here): the gate judges this URL and the tool fetches it.
pub fn web_search_url(s: &crate::config::WebSearch, query: &str, limit: u64) -> String {
    let q = encode(query);
    match s.provider {
        crate::config::SearchProvider::Searxng => format!("{}/search?q={q}&format=json", s.url),
        crate::config::SearchProvider::Brave => {
            format!("{}/res/v1/web/search?q={q}&count={limit}", s.url)
        }
    }
}

/// Percent-encoding of everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn policy() -> NetPolicy {
        NetPolicy {
            allowed_domains: vec!["example.com".into(), "127.0.0.1".into(), "[::1]".into()],
            allow_private: vec![],
        }
    }

    #[test]
    fn loose_ipv4_forms() {
        let lo = Ipv4Addr::new(127, 0, 0, 1);
        for s in [
            "127.0.0.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "0x7f000001",
            "127.1",
            "0177.1",
            "127.0.1",
        ] {
            assert_eq!(parse_ipv4_loose(s), Some(lo), "{s}");
        }
        assert_eq!(parse_ipv4_loose("256.0.0.1"), None);
        assert_eq!(parse_ipv4_loose("1.2.3.4.5"), None);
        assert_eq!(parse_ipv4_loose("example"), None);
    }

    #[test]
    fn url_refusals() {
        let p = policy();
        for (url, why) in [
            ("ftp://example.com/", "scheme"),
            ("file:///etc/passwd", "scheme"),
            ("gopher://example.com", "scheme"),
            ("example.com/x", "absolute"),
            ("https://evil.test/", "not in"),
            ("https://example.com.evil.test/", "not in"),
            ("https://evilexample.com/", "not in"),
            ("https://example.com@evil.test/", "credentials"),
            ("https://evil.test#@example.com", "not in"),
            ("https://user:pw@example.com/", "credentials"),
            ("http://127.0.0.1/", "loopback"),
            ("http://2130706433/", "loopback"),
            ("http://0x7f.1/", "loopback"),
            ("http://[::ffff:127.0.0.1]/", "not in"),
            ("http://[::1]/", "loopback"),
            ("http://exa mple.com/", "whitespace"),
            ("http://example.com:99999/", "port"),
            ("http://examp%6ce.com/", "escaped"),
            ("http://exämple.com/", "non-ASCII"),
        ] {
            let err = p.check_url(url).unwrap_err();
            assert!(err.reason.contains(why), "{url}: {err}");
            assert_eq!(
                err.kind,
                crate::security::refusal::Refusal::Network,
                "{url}"
            );
        }
        let t = p.check_url("https://API.Example.com./v1?q=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.scheme.as_str()),
            ("api.example.com", 443, "https")
        );
        let empty = NetPolicy::default();
        assert!(
            empty
                .check_url("https://example.com/")
                .unwrap_err()
                .reason
                .contains("empty")
        );
    }

    #[test]
    fn grants_parse_and_refuse_what_is_not_a_host() {
        let g = Grant::parse("API.Example.com.").unwrap();
        assert_eq!((g.host.as_str(), g.port), ("api.example.com", None));
        let g = Grant::parse("[::1]:8080").unwrap();
        assert_eq!((g.host.as_str(), g.port), ("::1", Some(8080)));
        let g = Grant::parse("fd00::1").unwrap();
        assert_eq!((g.host.as_str(), g.port), ("fd00::1", None));
        assert_eq!(Grant::parse("*.example.com").unwrap().host, "*.example.com");
        for bad in [
            "*",
            "*.",
            "a.*.com",
            "https://x.org/",
            "x.org:0",
            "x.org:99999",
            "",
            "a b",
        ] {
            assert!(Grant::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_proxy_reaches_only_what_is_granted() {
        let grants: Vec<Grant> = ["127.0.0.1:8080", "*.example.com", "localhost", "[::1]:9"]
            .iter()
            .map(|g| Grant::parse(g).unwrap())
            .collect();
        // An address granted as written, in any spelling of it.
        for host in ["127.0.0.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1"] {
            assert_eq!(
                egress_addrs(&grants, host, 8080).unwrap(),
                vec!["127.0.0.1:8080".parse().unwrap()],
                "{host}"
            );
        }
        assert_eq!(
            egress_addrs(&grants, "[::1]", 9).unwrap(),
            vec!["[::1]:9".parse().unwrap()]
        );
        // Another port of it, another address, an address no grant names.
        assert!(egress_addrs(&grants, "127.0.0.1", 8081).is_err());
        assert!(egress_addrs(&grants, "127.0.0.2", 8080).is_err());
        assert!(egress_addrs(&grants, "169.254.169.254", 80).is_err());
        // Names: only those granted, only on their ports; a wildcard covers
        // names under the domain, not the domain or look-alikes.
        for (host, port) in [
            ("example.com", 443),
            ("evilexample.com", 443),
            ("a.example.com.evil.org", 443),
            ("a.example.com", 22),
            ("other.org", 443),
            ("a.example.com@evil.org", 443),
        ] {
            let e = egress_addrs(&grants, host, port).unwrap_err();
            assert!(
                e.contains("not among the hosts granted"),
                "{host}:{port} {e}"
            );
        }
        // A granted name that resolves to loopback is refused (rebinding):
        // the operator grants the address to reach a local service.
        let e = egress_addrs(&grants, "localhost", 80).unwrap_err();
        assert!(e.contains("loopback"), "{e}");
    }

    #[test]
    fn this_machines_own_addresses_are_known() {
        let own = crate::sys::net::local_addresses();
        assert!(own.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{own:?}");
        assert_eq!(
            refused_ip("fec0::1".parse().unwrap()),
            Some("site-local (deprecated)")
        );
        assert!(refused_ip("::ffff:0:a00:1".parse().unwrap()).is_some());
    }

    #[test]
    fn a_plugin_gets_the_hosts_both_its_manifest_and_the_config_name() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            granted(
                &s(&["a.org", "B.org", "c.org"]),
                &s(&["b.ORG", "a.org", "d.org"])
            ),
            s(&["a.org", "B.org"])
        );
        assert!(granted(&s(&["a.org"]), &[]).is_empty());
    }

    #[test]
    fn refused_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "fd00:ec2::254",
            "198.18.0.1",
        ] {
            assert!(refused_ip(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(refused_ip(ip.parse().unwrap()).is_none(), "{ip}");
        }
        let mut p = policy();
        assert!(
            p.check_ip("localhost", "127.0.0.1".parse().unwrap())
                .is_err()
        );
        p.allow_private = vec!["127.0.0.1".into()];
        assert!(
            p.check_ip("127.0.0.1", "127.0.0.1".parse().unwrap())
                .is_ok()
        );
        assert!(
            p.check_ip("localhost", "127.0.0.2".parse().unwrap())
                .is_err()
        );
    }
}
