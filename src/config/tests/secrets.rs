use super::*;

// ---------------------------------------------------------------- secrets

#[test]
fn literal_secret_is_refused_without_echoing_it() {
    let text = "[[app]]\nname = \"a\"\nsigning_secret = \"literal-hunter2\"\nupstream = \"http://127.0.0.1:8000\"\n";
    let err = load_err(text);
    assert_err(&err, "app[0].signing_secret");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn unset_env_var_is_named() {
    let text = "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_SURELY_NOT_SET_7f3a}\"\nupstream = \"http://127.0.0.1:8000\"\n";
    let err = load_err(text);
    assert_err(&err, "app[0].signing_secret");
    assert!(err.message.contains("SG_CFG_SURELY_NOT_SET_7f3a"), "{err}");
}

#[test]
fn empty_secret_is_refused() {
    set_env("SG_CFG_EMPTY_SECRET", "");
    let text =
        "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_EMPTY_SECRET}\"\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret");
}

#[test]
fn missing_secret_is_refused() {
    let text = "[[app]]\nname = \"a\"\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret");
}

#[test]
fn secret_list_for_rotation() {
    set_env("SG_CFG_ROT_NEW", "new-secret");
    set_env("SG_CFG_ROT_OLD", "old-secret");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = [\"${SG_CFG_ROT_NEW}\", \"${SG_CFG_ROT_OLD}\"]\nupstream = \"http://127.0.0.1:8000\"\n";
    let c = load(text).unwrap();
    let secrets: Vec<&[u8]> = c.apps[0].secrets.iter().map(Secret::expose).collect();
    assert_eq!(secrets, [&b"new-secret"[..], b"old-secret"]);
}

#[test]
fn secret_list_errors_name_the_entry() {
    set_env("SG_CFG_ROT_ERR", "x");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = [\"${SG_CFG_ROT_ERR}\", \"literal\"]\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret[1]");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = []\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].signing_secret");
}

#[test]
fn signing_secret_file_one_per_line() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, b"  first-secret  \n\nsecond-secret\r\n").unwrap();
    let path = file.path().display().to_string().replace('\\', "\\\\");
    let text =
        format!("[[app]]\nname = \"a\"\nsigning_secret_file = \"{path}\"\nupstream = \"http://127.0.0.1:8000\"\n");
    let c = load(&text).unwrap();
    let secrets: Vec<&[u8]> = c.apps[0].secrets.iter().map(Secret::expose).collect();
    assert_eq!(secrets, [&b"first-secret"[..], b"second-secret"]);
}

#[test]
fn signing_secret_file_is_relative_to_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("slack.secret"), "relative-secret\n").unwrap();
    let text = "[[app]]\nname = \"a\"\nsigning_secret_file = \"slack.secret\"\nupstream = \"http://127.0.0.1:8000\"\n";
    let c = Config::from_toml(text, &dir.path().join("gateway.toml"), &Overrides::default()).unwrap();
    assert_eq!(c.apps[0].secrets[0].expose(), b"relative-secret");
}

#[test]
fn signing_secret_file_missing_or_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope").display().to_string().replace('\\', "\\\\");
    let text =
        format!("[[app]]\nname = \"a\"\nsigning_secret_file = \"{missing}\"\nupstream = \"http://127.0.0.1:8000\"\n");
    assert_err(&load_err(&text), "app[0].signing_secret_file");

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n  \n").unwrap();
    let empty = empty.display().to_string().replace('\\', "\\\\");
    let text =
        format!("[[app]]\nname = \"a\"\nsigning_secret_file = \"{empty}\"\nupstream = \"http://127.0.0.1:8000\"\n");
    assert_err(&load_err(&text), "app[0].signing_secret");
}

#[test]
fn secret_and_secret_file_together_are_refused() {
    let text = app("a", "SG_CFG_BOTH", "signing_secret_file = \"/run/secrets/slack\"");
    assert_err(&load_err(&text), "app[0].signing_secret");
}

#[test]
fn secret_debug_is_redacted() {
    let s = Secret::new("xoxb-very-secret");
    let shown = format!("{s:?}");
    assert!(!shown.contains("very-secret"), "{shown}");
    assert_eq!(s.expose(), b"xoxb-very-secret");

    set_env("SG_CFG_DEBUG_SECRET", "the-real-signing-secret");
    let c = load(
        "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_DEBUG_SECRET}\"\nupstream = \"http://127.0.0.1:8000\"\n",
    )
    .unwrap();
    let shown = format!("{c:?} {c:#?}");
    assert!(!shown.contains("the-real-signing-secret"));
}

#[test]
fn redis_tls_files_and_sentinel_logins() {
    let a = app("a", "SG_CFG_REDIS_TLS", "");
    let dir = tempfile::tempdir().unwrap();
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    std::fs::write(dir.path().join("ca.pem"), pem).unwrap();
    std::fs::write(dir.path().join("gw.pem"), pem).unwrap();
    std::fs::write(dir.path().join("gw.key"), "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
        .unwrap();
    std::fs::write(dir.path().join("junk"), "not a certificate").unwrap();
    let path = dir.path().join("gateway.toml");
    let load_in = |redis: &str| Config::from_toml(&format!("[redis]\n{redis}\n{a}"), &path, &Overrides::default());
    let tls = "tls_ca_file = \"ca.pem\"\ntls_cert_file = \"gw.pem\"\ntls_key_file = \"gw.key\"";
    let c = load_in(&format!("cluster = [\"rediss://10.0.0.1:7000\"]\n{tls}")).unwrap();
    assert_eq!(c.redis.auth.tls.ca.as_deref(), Some(pem.as_bytes()));
    let (cert, key) = c.redis.auth.tls.client.as_ref().expect("a client certificate");
    assert_eq!(cert.as_slice(), pem.as_bytes());
    assert!(!format!("{:?}", c.redis.auth).contains("MIIE") && !format!("{key:?}").contains("MIIE"), "no key in Debug");
    let said = c.redis.describe_access();
    assert!(
        said.starts_with("no login, TLS trusting tls_ca_file, with a client certificate, durability local"),
        "{said}"
    );
    // TLS files without TLS, half a client certificate, a file that is not PEM: refused, named.
    let key_of = |redis: &str| load_in(redis).unwrap_err().key;
    assert_eq!(key_of("url = \"redis://10.0.0.1/\"\ntls_ca_file = \"ca.pem\""), "redis.tls_ca_file");
    assert_eq!(key_of("url = \"rediss://10.0.0.1/\"\ntls_cert_file = \"gw.pem\""), "redis.tls_cert_file");
    assert_eq!(key_of("url = \"rediss://10.0.0.1/\"\ntls_ca_file = \"junk\""), "redis.tls_ca_file");
    assert_eq!(key_of("url = \"rediss://10.0.0.1/\"\ntls_ca_file = \"absent.pem\""), "redis.tls_ca_file");
    // A key where the authority should be, an encrypted key, a certificate for a key.
    assert_eq!(key_of("url = \"rediss://10.0.0.1/\"\ntls_ca_file = \"gw.key\""), "redis.tls_ca_file");
    std::fs::write(
        dir.path().join("enc.key"),
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIE\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let client =
        |key: &str| format!("url = \"rediss://10.0.0.1/\"\ntls_cert_file = \"gw.pem\"\ntls_key_file = \"{key}\"");
    assert_eq!(key_of(&client("enc.key")), "redis.tls_key_file");
    assert_eq!(key_of(&client("gw.pem")), "redis.tls_key_file");
    // TLS is all or nothing in a node list.
    assert_eq!(key_of("cluster = [\"redis://10.0.0.1:7000\", \"rediss://10.0.0.2:7000\"]"), "redis.cluster");
    // The sentinels' own login, for Sentinel only.
    set_env("SG_CFG_SENTINEL_PW", "sentinel-secret");
    let s = "sentinel = [\"redis://10.0.0.5:26379\"]\nmaster_name = \"m\"";
    let c = load_in(&format!("{s}\nsentinel_username = \"watch\"\nsentinel_password = \"${{SG_CFG_SENTINEL_PW}}\""))
        .unwrap();
    assert_eq!(c.redis.auth.sentinel_username.as_deref(), Some("watch"));
    let said = c.redis.describe_access();
    assert!(said.contains("sentinels with a login of their own") && !said.contains("sentinel-secret"), "{said}");
    assert_eq!(c.redis.auth.sentinel_password.as_ref().map(|p| p.expose().to_vec()), Some(b"sentinel-secret".to_vec()));
    assert_eq!(key_of(&format!("{s}\nsentinel_password = \"literal\"")), "redis.sentinel_password");
    assert_eq!(
        key_of("url = \"redis://x/\"\nsentinel_password = \"${SG_CFG_SENTINEL_PW}\""),
        "redis.sentinel_password"
    );
}

#[test]
fn a_literal_password_in_a_redis_url_is_refused_with_the_key_named() {
    set_env("SG_CFG_URL_PW", "from-the-env");
    let a = app("a", "SG_CFG_URL_PW_SECRET", "");
    let load_redis = |redis: &str| load(&format!("[redis]\n{redis}\n{a}"));
    for (redis, key) in [
        ("url = \"redis://:hunter2@10.0.0.1:6379/\"", "redis.url"),
        ("url = \"rediss://gw:hunter2@10.0.0.1:6380/\"", "redis.url"),
        ("url = \"redis://gw:pre${SG_CFG_URL_PW}@10.0.0.1/\"", "redis.url"),
        ("url = \"unix:///run/redis.sock?pass=hunter2\"", "redis.url"),
        ("cluster = [\"redis://10.0.0.1:7000\", \"redis://:hunter2@10.0.0.2:7000\"]", "redis.cluster[1]"),
        ("sentinel = [\"redis://:hunter2@10.0.0.5:26379\"]\nmaster_name = \"m\"", "redis.sentinel[0]"),
    ] {
        let err = load_redis(redis).unwrap_err();
        assert_err(&err, key);
        assert!(!err.to_string().contains("hunter2"), "the password is not echoed: {err}");
    }
    for redis in [
        "url = \"redis://:${SG_CFG_URL_PW}@10.0.0.1:6379/\"",
        "url = \"rediss://gw:${SG_CFG_URL_PW}@10.0.0.1:6380/0\"",
        "url = \"redis://gw@10.0.0.1/\"",
        "url = \"unix:///run/redis.sock?db=1&pass=${SG_CFG_URL_PW}\"",
        "cluster = [\"redis://:${SG_CFG_URL_PW}@10.0.0.1:7000\"]",
    ] {
        load_redis(redis).unwrap_or_else(|e| panic!("{redis}: {e}"));
    }
    // The environment and the flag are not the TOML: a URL with its password stays allowed there.
    let ov = Overrides { redis_url: Some("redis://:literal@10.0.0.1/".into()), ..Overrides::default() };
    let c = load_with(&format!("[redis]\n{a}"), &ov).unwrap();
    assert!(matches!(c.redis.target, RedisTarget::Url(_)));
}

#[test]
fn a_read_token_comes_from_the_environment_beside_the_admin_token() {
    let a = app("a", "SG_CFG_READ_TOKEN_APP", "");
    set_env("SG_CFG_READ_TOKEN_ADMIN", "admin-token-0123456789");
    set_env("SG_CFG_READ_TOKEN_READ", "read-token-0123456789");
    set_env("SG_CFG_READ_TOKEN_SHORT", "short");
    let admin = "admin_token = \"${SG_CFG_READ_TOKEN_ADMIN}\"";
    let server = |extra: &str| format!("[server]\n{extra}\n{a}");
    let c = load(&server(&format!("{admin}\nadmin_read_token = \"${{SG_CFG_READ_TOKEN_READ}}\""))).unwrap();
    assert_eq!(c.server.admin_read_token.as_ref().map(Secret::expose), Some(&b"read-token-0123456789"[..]));
    assert_eq!(c.server.admin_token.as_ref().map(Secret::expose), Some(&b"admin-token-0123456789"[..]));
    assert!(!format!("{c:?}").contains("read-token-0123456789"), "never in Debug");
    assert_eq!(load(&server(admin)).unwrap().server.admin_read_token, None);
    // Literal, unset, short: refused, the key named, the literal not echoed.
    let err = load_err(&server(&format!("{admin}\nadmin_read_token = \"literal-read-hunter2\"")));
    assert_err(&err, "server.admin_read_token");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = load_err(&server(&format!("{admin}\nadmin_read_token = \"${{SG_CFG_READ_TOKEN_UNSET_9c1}}\"")));
    assert_err(&err, "server.admin_read_token");
    assert!(err.message.contains("SG_CFG_READ_TOKEN_UNSET_9c1"), "{err}");
    let err = load_err(&server(&format!("{admin}\nadmin_read_token = \"${{SG_CFG_READ_TOKEN_SHORT}}\"")));
    assert_err(&err, "server.admin_read_token");
    assert!(err.message.contains("16 characters"), "{err}");
}

#[test]
fn a_read_token_alone_or_equal_to_the_admin_token_is_refused() {
    let a = app("a", "SG_CFG_READ_ALONE_APP", "");
    set_env("SG_CFG_READ_ALONE_TOKEN", "read-token-0123456789");
    let read = "admin_read_token = \"${SG_CFG_READ_ALONE_TOKEN}\"";
    let err = load_err(&format!("[server]\n{read}\n{a}"));
    assert_err(&err, "server.admin_read_token");
    assert!(err.message.contains("needs server.admin_token"), "{err}");
    // The same value under two names: a read token that could write.
    set_env("SG_CFG_READ_ALONE_SAME", "read-token-0123456789");
    let err = load_err(&format!("[server]\nadmin_token = \"${{SG_CFG_READ_ALONE_SAME}}\"\n{read}\n{a}"));
    assert_err(&err, "server.admin_read_token");
    assert!(err.message.contains("must differ from server.admin_token"), "{err}");
    assert!(!err.to_string().contains("read-token-0123456789"), "{err}");
    // Operator commands read the file without the secrets: two unset variables are no clash,
    // but a read token without an admin token is still refused.
    let ov = Overrides { secrets_optional: true, ..Overrides::default() };
    let unset = "admin_token = \"${SG_CFG_READ_ALONE_UNSET_1}\"\nadmin_read_token = \"${SG_CFG_READ_ALONE_UNSET_2}\"";
    assert!(load_with(&format!("[server]\n{unset}\n{a}"), &ov).is_ok());
    assert_eq!(load_with(&format!("[server]\n{read}\n{a}"), &ov).unwrap_err().key, "server.admin_read_token");
}
