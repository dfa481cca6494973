use super::*;

/// Test values built at run time, so no scanner of this repository takes
/// them for real secrets.
fn aws_id() -> String {
    format!("AKIA{}", "IOSFODNN7EXAMPLE")
}
fn aws_secret() -> String {
    format!("wJalrXUtnFEMI/K7MDENG/{}", "bPxRfiCYEXAMPLEKEY")
}
fn sk() -> String {
    format!("sk-{}", "proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z")
}
fn pem() -> String {
    format!(
        "-----BEGIN RSA {}-----\nMIIEpAIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aozN3tihPmljnnudb9G3HcTjJ\n\
         BA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC7+9z5Pad7OejecsQ0bu3aozN3t==\n\
         -----END RSA PRIVATE KEY-----",
        "PRIVATE KEY"
    )
}

fn r() -> Redactor {
    Redactor::new()
}

fn red(text: &str) -> String {
    r().redact(text).into_owned()
}

#[test]
fn aws_access_key_ids_and_secrets() {
    let id = aws_id();
    assert_eq!(
        red(&format!("id {id} here")),
        "id [REDACTED:aws_access_key_id] here"
    );
    let asia = format!("ASIA{}", "Y34FZKBOKMUTVV7A");
    assert_eq!(red(&asia), "[REDACTED:aws_access_key_id]");
    let s = aws_secret();
    let file = format!("[default]\naws_access_key_id = {id}\naws_secret_access_key = {s}\n");
    assert_eq!(
        red(&file),
        "[default]\naws_access_key_id = [REDACTED:aws_access_key_id]\n\
         aws_secret_access_key = [REDACTED:aws_secret_access_key]\n"
    );
    assert_eq!(
        red(&format!("export AWS_SECRET_ACCESS_KEY=\"{s}\"")),
        "export AWS_SECRET_ACCESS_KEY=\"[REDACTED:aws_secret_access_key]\""
    );
    assert_eq!(
        red(&format!("{{\"SecretAccessKey\": \"{s}\"}}")),
        "{\"SecretAccessKey\": \"[REDACTED:aws_secret_access_key]\"}"
    );
    // The console's credentials CSV: the secret right after the id.
    assert_eq!(
        red(&format!("user,{id},{s}\n")),
        "user,[REDACTED:aws_access_key_id],[REDACTED:aws_secret_access_key]\n"
    );
    // Near misses: too short, lower case, inside a longer word.
    for t in [
        "AKIA1234",
        "akiaiosfodnn7example",
        "xAKIAIOSFODNN7EXAMPLE",
        "AKIAIOSFODNN7EXAMPLEX",
        "ASIA is a continent",
        "KEYS SPLIT",
    ] {
        assert_eq!(red(t), t);
    }
}

#[test]
fn provider_keys() {
    let k = sk();
    assert_eq!(
        red(&format!("key={k}")),
        "key=[REDACTED:openai_key]",
        "bare key= is not an assignment rule, the sk- rule takes it"
    );
    assert_eq!(
        red(&format!("OPENAI_API_KEY={k} next")),
        "OPENAI_API_KEY=[REDACTED:api_key] next"
    );
    let ant = format!(
        "sk-ant-api03-{}",
        "R2D2c3po-AbCdEfGhIjKlMnOpQrStUv_wxyz0123"
    );
    assert_eq!(red(&format!("use {ant}.")), "use [REDACTED:anthropic_key].");
    let legacy = format!("sk-{}", "T3BlbkFJabcdefghijklmnopqrstuvwxyz012345");
    assert_eq!(red(&format!("'{legacy}'")), "'[REDACTED:openai_key]'");
    for t in [
        "task-force",
        "sk-learn-the-basics-of-machine-learning",
        "disk-usage-is-high-on-the-root-volume",
        "sk-Short1",
    ] {
        assert_eq!(red(t), t);
    }
}

#[test]
fn github_gitlab_and_slack_tokens() {
    for p in ["ghp", "gho", "ghu", "ghs", "ghr"] {
        let t = format!("{p}_{}", "16C7e42F292c6912E7710c838347Ae178B4a");
        assert_eq!(red(&format!("x {t} y")), "x [REDACTED:github_token] y");
    }
    let pat = format!(
        "github_pat_{}",
        "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    );
    assert_eq!(red(&pat), "[REDACTED:github_token]");
    let gl = format!("glpat-{}", "xxxxXXXX1234_abcd-EFGH");
    assert_eq!(red(&format!("({gl})")), "([REDACTED:gitlab_token])");
    let slack = format!(
        "xoxb-{}",
        "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
    );
    assert_eq!(red(&slack), "[REDACTED:slack_token]");
    for t in [
        "ghp_short",
        "the ghost_of_a_variable_name_that_is_long_enough",
        "github_pat_short",
        "glpat-short",
        "xoxb-noDigitsHereAtAll",
    ] {
        assert_eq!(red(t), t);
    }
}

#[test]
fn jwts() {
    let jwt = format!(
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{}.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    );
    assert_eq!(red(&format!("Bearer {jwt}")), "Bearer [REDACTED:jwt]");
    // As an assignment's value, the assignment names it.
    assert_eq!(
        red(&format!("Authorization: Bearer {jwt}")),
        "Authorization: Bearer [REDACTED:token]"
    );
    assert_eq!(red(&format!("t={jwt};")), "t=[REDACTED:jwt];");
    for t in [
        "eyJhbGci.foo.bar",
        "eyJhbGciOiJIUzI1NiJ9 alone",
        "eyJhbGciOiJIUzI1NiJ9.no-second-dot",
        "keyJumps",
    ] {
        assert_eq!(red(t), t);
    }
}

#[test]
fn pem_private_keys_whole_cut_and_escaped() {
    let p = pem();
    assert_eq!(
        red(&format!("before\n{p}\nafter")),
        "before\n[REDACTED:private_key]\nafter"
    );
    for label in ["", "EC ", "OPENSSH ", "ENCRYPTED ", "DSA "] {
        let k = p.replace("RSA ", label);
        assert_eq!(red(&k), "[REDACTED:private_key]", "{label}");
    }
    // Cut short with no END: to the last line of key material.
    let cut = &p[..p.find("BA0G").unwrap() + 20];
    assert_eq!(red(cut), "[REDACTED:private_key]");
    assert_eq!(
        red(&format!(
            "{cut}\n…[truncated: showing the first 100 of 999 bytes]"
        )),
        "[REDACTED:private_key]\n…[truncated: showing the first 100 of 999 bytes]"
    );
    assert_eq!(
        red(&format!("{cut}\nthat was the key")),
        "[REDACTED:private_key]\nthat was the key"
    );
    // The head cut off: the tail before END goes with it.
    let tail = &p[p.find("BA0G").unwrap() + 4..];
    assert_eq!(
        red(&format!("…[truncated: 9 of 99 bytes omitted]…\n{tail}\nok")),
        "…[truncated: 9 of 99 bytes omitted]…\n[REDACTED:private_key]\nok"
    );
    assert_eq!(
        red(&format!("prose then\n{tail}")),
        "prose then\n[REDACTED:private_key]"
    );
    // Written out in JSON (`\n` escapes), and flattened with spaces.
    let escaped = p.replace('\n', "\\n");
    assert_eq!(
        red(&format!("{{\"key_data\": \"{escaped}\\n\", \"x\": 1}}")),
        "{\"key_data\": \"[REDACTED:private_key]\\n\", \"x\": 1}"
    );
    assert_eq!(
        red(&format!("{{\"private_key\": \"{escaped}\\n\", \"x\": 1}}")),
        "{\"private_key\": \"[REDACTED:private_key]\", \"x\": 1}"
    );
    let flat = p.replace('\n', " ");
    assert_eq!(red(&format!("K={flat}")), "K=[REDACTED:private_key]");
    // An encrypted key's headers.
    let enc = p.replacen(
        "-----\n",
        "-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17F5316E2BAC89\n\n",
        1,
    );
    assert_eq!(red(&enc), "[REDACTED:private_key]");
    // Indented in YAML.
    let yaml = format!("key: |\n  {}\nnext: 1", p.replace('\n', "\n  "));
    assert_eq!(red(&yaml), "key: |\n  [REDACTED:private_key]\nnext: 1");
    for t in [
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
        "-----END RSA PRIVATE KEY----- on its own",
        "a ---- line",
    ] {
        assert_eq!(red(t), t);
    }
}

#[test]
fn assignments_keep_the_key_and_lose_the_value() {
    for (input, want) in [
        ("password=hunter2", "password=[REDACTED:password]"),
        (
            "DB_PASSWORD = 'c0rrect horse'",
            "DB_PASSWORD = '[REDACTED:password]'",
        ),
        ("passwd: s3cr3t!", "passwd: [REDACTED:password]"),
        (
            "{\"password\":\"a\\\"b\"}",
            "{\"password\":\"[REDACTED:password]\"}",
        ),
        ("GITHUB_TOKEN=abc123", "GITHUB_TOKEN=[REDACTED:token]"),
        (
            "https://x.io/cb?access_token=abc&x=1",
            "https://x.io/cb?access_token=[REDACTED:token]&x=1",
        ),
        ("client_secret: 'xyz'", "client_secret: '[REDACTED:secret]'"),
        ("secret=foo bar", "secret=[REDACTED:secret] bar"),
        ("x-api-key: abcdef", "x-api-key: [REDACTED:api_key]"),
        ("apiKey := \"k1\"", "apiKey := \"[REDACTED:api_key]\""),
        ("'password' => 'pw1'", "'password' => '[REDACTED:password]'"),
        ("--password=pw9", "--password=[REDACTED:password]"),
        (
            "Authorization: Bearer abc.def",
            "Authorization: Bearer [REDACTED:token]",
        ),
        (
            "authorization: \"Basic dXNlcjpwYXNz\"",
            "authorization: \"Basic [REDACTED:token]\"",
        ),
        ("password: hunter\n", "password: [REDACTED:password]\n"),
    ] {
        assert_eq!(red(input), want, "{input}");
    }
    // Prose, empty values, other keys, comparisons, placeholders.
    for t in [
        "Enter your password: ",
        "the password is stored hashed",
        "password: please reset it",
        "Secret: the ingredient is love",
        "password=",
        "password_hint=blue",
        "passwords.txt",
        "max_tokens: 1024",
        "token_count=3",
        "tokens=5",
        "bypass=on",
        "LC_PASS=passed-3",
        "compass: north",
        "if password == other {",
        "is_secret: true",
        "password: null",
        "PWD=/home/ada",
        "password=[REDACTED:password]",
        "a = b",
        "::",
        "=",
        "key: value",
    ] {
        assert_eq!(red(t), t);
    }
}

#[test]
fn urls_lose_their_userinfo() {
    assert_eq!(
        red("git clone https://ada:hunter2@example.com/r.git"),
        "git clone https://[REDACTED:url_userinfo]@example.com/r.git"
    );
    assert_eq!(
        red("postgres://app:pw@db:5432/x"),
        "postgres://[REDACTED:url_userinfo]@db:5432/x"
    );
    assert_eq!(
        red("https://oauth2-long-user-token-value@gitlab.com/x"),
        "https://[REDACTED:url_userinfo]@gitlab.com/x"
    );
    for t in [
        "ssh://git@github.com/a/b",
        "https://example.com/a@b",
        "mail ada@example.com",
        "https://example.com:8443/x?y=1",
        "https://[REDACTED:url_userinfo]@h/",
    ] {
        assert_eq!(red(t), t);
    }
}

#[test]
fn ordinary_identifiers_are_left_alone() {
    let sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let git = "4802639e3f1c2b7a9d8e6f5a4b3c2d1e0f9a8b7c";
    let uuid = "123e4567-e89b-12d3-a456-426614174000";
    let text = format!(
        "commit {git}\nsha256:{sha256}\nid={uuid}\nrequest {uuid}: done\n\
         Merge: 4802639 3a2c939\nlatchclaw approve approval-1d2f\n\
         base64: SGVsbG8gd29ybGQ=\ntime 12:30:45 and a=b, c:d\n\
         see https://docs.rs/memchr/2.7.4/memchr/ for more\n"
    );
    assert_eq!(red(&text), text);
    assert_eq!(r().redact(&text), Cow::Borrowed(text.as_str()));
}

#[test]
fn known_values_are_redacted_exactly_and_at_cuts() {
    let key = "Zq8vL2pX0wR5tY7uK3mN";
    let mut r = Redactor::new();
    assert!(r.add_secret("LC_KEY", key));
    assert!(!r.add_secret("LC_SHORT", "pin1234"), "under 8 bytes");
    assert_eq!(r.known_count(), 1);
    assert_eq!(
        r.redact(&format!("a{key}b {key}")),
        "a[REDACTED:env:LC_KEY]b [REDACTED:env:LC_KEY]"
    );
    assert_eq!(r.redact("pin1234 stays"), "pin1234 stays");
    // A cut through the value: pieces of 8 or more bytes at the cut go.
    let cut = format!(
        "x {}\n…[truncated: 5 of 50 bytes omitted]…\n{} y",
        &key[..9],
        &key[12..]
    );
    assert_eq!(
        r.redact(&cut),
        "x [REDACTED:env:LC_KEY]\n…[truncated: 5 of 50 bytes omitted]…\n[REDACTED:env:LC_KEY] y"
    );
    assert_eq!(r.redact(&key[..12]), "[REDACTED:env:LC_KEY]");
    assert_eq!(
        r.redact(&format!("{} end", &key[5..])),
        "[REDACTED:env:LC_KEY] end"
    );
    // Under 8 bytes at a cut, or a piece in the middle of text, stays.
    assert_eq!(r.redact(&key[..7]), &key[..7]);
    assert_eq!(
        r.redact(&format!("a {} b", &key[..10])),
        format!("a {} b", &key[..10])
    );
    // Non-ASCII values cut mid-character widen to whole characters.
    let mut u = Redactor::new();
    u.add_secret("LC_U", "ключ-секрет-42");
    let v = "ключ-секрет-42";
    assert_eq!(u.redact(&v[..9]), "[REDACTED:env:LC_U]");
    // From a config: the provider's key and the listed variables, names
    // of values too short kept apart.
    let cfg = Config::from_text(
        "[security]\nsecret_env = [\"LC_REDACT_TEST_LONG\", \"LC_REDACT_TEST_SHORT\", \
         \"LC_REDACT_TEST_UNSET\"]\n\
         [providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n\
         api_key_env = \"LC_REDACT_TEST_KEY\"\n",
        std::path::Path::new("/nonexistent/config.toml"),
        std::path::PathBuf::from("/nonexistent"),
    )
    .unwrap();
    let from = Redactor::from_config_with(&cfg, |name| match name {
        "LC_REDACT_TEST_LONG" => Some("long-enough-value-1".into()),
        "LC_REDACT_TEST_SHORT" => Some("short".into()),
        "LC_REDACT_TEST_KEY" => Some("provider-key-0123".into()),
        _ => None,
    });
    assert_eq!(from.known_count(), 2);
    assert_eq!(from.too_short(), ["LC_REDACT_TEST_SHORT"]);
    assert_eq!(
        from.redact("x long-enough-value-1 short provider-key-0123"),
        "x [REDACTED:env:LC_REDACT_TEST_LONG] short [REDACTED:env:LC_REDACT_TEST_KEY]"
    );
    let dbg = format!("{r:?}");
    assert!(dbg.contains("env:LC_KEY") && !dbg.contains(key), "{dbg}");
}

#[test]
fn scrub_cut_redacts_before_it_cuts() {
    let key = "Zq8vL2pX0wR5tY7uK3mN0123456789";
    let r = Redactor::new().with_secret("LC_KEY", key);
    let text = format!("{}{key} and more", "x".repeat(290));
    let out = r.scrub_cut(&text, 300);
    assert!(out.contains("x[REDACTED:"), "{out}");
    for w in key.as_bytes().windows(8) {
        assert!(!out.contains(std::str::from_utf8(w).unwrap()), "{out}");
    }
    assert!(out.ends_with('…') && out.chars().count() == 301, "{out}");
    assert_eq!(r.scrub_cut("a\u{1b}b", 10), "a\\u{1b}b");
}

#[test]
fn redacting_again_keeps_every_mark_and_random_text_never_panics() {
    let key = "Zq8vL2pX0wR5tY7uK3mN";
    let r = Redactor::new().with_secret("LC_KEY", key);
    let pieces = [
        "password=",
        "token: ",
        "\"secret\": \"",
        "AKIA",
        "IOSFODNN7EXAMPLE",
        "sk-",
        "proj-",
        "ghp_",
        "glpat-",
        "xoxb-",
        "eyJ",
        ".",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "\n",
        "\\n",
        "https://",
        "a:b@",
        "@",
        key,
        "Zq8vL2pX",
        "\n…[truncated: 1 of 2 bytes omitted]…\n",
        "MIIEpAIBAAKCAQEA1c7",
        "[REDACTED:",
        "]",
        "é",
    ];
    let mut rng = fastrand::Rng::with_seed(13);
    for _ in 0..20_000 {
        let t = crate::util::arbitrary::text(&mut rng, &pieces, 16);
        let once = r.redact(&t).into_owned();
        let twice = r.redact(&once).into_owned();
        assert!(!once.contains(key), "input {t:?}");
        // A mark is never taken apart; a redaction can only give its
        // neighbour a word boundary it lacked, and then that goes too.
        for (at, _) in once.match_indices(MARK) {
            let Some(len) = once[at..].find(']') else {
                continue;
            };
            let end = at + len + 1;
            assert!(twice.contains(&once[at..end]), "input {t:?}");
        }
        assert!(
            twice.matches(MARK).count() >= once.matches(MARK).count(),
            "input {t:?}"
        );
    }
}

/// Linear time: 10 MB built to make a backtracking matcher (or a rule that
/// rescans its run at every trigger) go quadratic finishes in well under a
/// second per input in an optimised build; the bound allows a debug build.
#[test]
fn adversarial_inputs_take_linear_time() {
    let r = Redactor::new().with_secret("LC_KEY", "Zq8vL2pX0wR5tY7uK3mN");
    const N: usize = 10 << 20;
    let fill = |unit: &str| unit.repeat(N / unit.len());
    let inputs = [
        fill("AKIA"),
        fill("ASIA"),
        fill("-----BEGIN"),
        fill("-----BEGIN RSA PRIVATE KEY-----"),
        fill("-----END RSA PRIVATE KEY-----\n"),
        fill("eyJ"),
        fill("eyJaaaaaaaaaa."),
        fill("sk-"),
        fill("sk-a"),
        fill("ghp_"),
        fill("xoxb-"),
        fill("glpat-"),
        fill("password:"),
        fill("token: a "),
        fill("a=b"),
        fill("::"),
        fill("https://a"),
        fill("x://@"),
        fill("Zq8vL2pX"),
        fill("\n…[truncated"),
        fill("=\""),
        format!("password=\"{}", "a".repeat(N)),
        format!("token: {}", "a".repeat(N)),
        format!("-----BEGIN RSA PRIVATE KEY-----\n{}", "A".repeat(N)),
        format!("{}\n-----END RSA PRIVATE KEY-----", "A\n".repeat(N / 2)),
    ];
    // The bound scales with how fast this machine redacts plain text of
    // the same size right now (a loaded 2-core CI runner is several times
    // slower): a super-linear scan of 10 MiB is slower by orders of
    // magnitude, far past any constant factor.
    let plain = fill("the quick brown fox ");
    let started = std::time::Instant::now();
    let _ = r.redact(&plain);
    let limit = std::time::Duration::from_secs(4) + started.elapsed() * 40;
    for input in &inputs {
        let started = std::time::Instant::now();
        let out = r.redact(input);
        let took = started.elapsed();
        assert!(
            took < limit,
            "{:?}…: {took:?} for {} bytes (limit {limit:?})",
            &input[..20],
            input.len()
        );
        drop(out);
    }
}
