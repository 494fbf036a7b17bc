use super::*;

// ---------------------------------------------------------------- the edges (issue 8)

#[test]
fn listener_limits_and_allow_lists_have_defaults() {
    let c = load(&app("a", "SG_CFG_LIMITS_DEFAULTS", "")).unwrap();
    let l = c.server.limits;
    assert_eq!(l.header_timeout, Duration::from_secs(10));
    assert_eq!(l.body_timeout, Duration::from_secs(10));
    assert_eq!(l.idle_timeout, Duration::from_secs(60));
    assert_eq!(l.max_connections, 4096);
    assert_eq!(c.server.response_url_hosts, ["hooks.slack.com"]);
    assert!(c.server.admin_hosts.is_empty());
    let d = &c.apps[0].delivery;
    assert_eq!(d.dead_ttl, Duration::from_secs(7 * 86400));
    assert_eq!(d.dead_max, 100_000);
}

#[test]
fn listener_limits_can_be_set_and_are_bounded() {
    let a = app("a", "SG_CFG_LIMITS_SET", "delivery = { dead_ttl = \"2d\", dead_max = 50 }");
    let text = format!(
        "[server]\nheader_timeout = \"2s\"\nbody_timeout = \"3s\"\nidle_timeout = \"4s\"\nmax_connections = 9\n{a}"
    );
    let c = load(&text).unwrap();
    let l = c.server.limits;
    assert_eq!(
        (l.header_timeout, l.body_timeout, l.idle_timeout, l.max_connections),
        (Duration::from_secs(2), Duration::from_secs(3), Duration::from_secs(4), 9)
    );
    assert_eq!(c.apps[0].delivery.dead_ttl, Duration::from_secs(2 * 86400));
    assert_eq!(c.apps[0].delivery.dead_max, 50);
    for (key, value) in [
        ("header_timeout", "\"0s\""),
        ("body_timeout", "\"2h\""),
        ("idle_timeout", "\"50ms\""),
        ("max_connections", "0"),
    ] {
        let err = load_err(&format!("[server]\n{key} = {value}\n{a}"));
        assert_err(&err, &format!("server.{key}"));
    }
    let err = load_err(&app("a", "SG_CFG_LIMITS_SET", "delivery = { dead_max = 0 }"));
    assert_err(&err, "app[0].delivery.dead_max");
}

#[test]
fn receipts_must_outlive_the_signature_window() {
    let err = load_err(&app("a", "SG_CFG_TTL_MIN", "dedupe = { ttl = \"9m\" }"));
    assert_err(&err, "app[0].dedupe.ttl");
    assert!(err.message.contains("10m"), "{err}");
    let c = load(&app("a", "SG_CFG_TTL_MIN", "dedupe = { ttl = \"10m\" }")).unwrap();
    assert_eq!(c.apps[0].receipt_ttl, Duration::from_secs(600));
}

#[test]
fn an_upstream_with_a_password_is_refused_without_echoing_it() {
    set_env("SG_CFG_UPSTREAM_PASSWORD", "x");
    for url in ["http://:hunter2@bot.example.com/", "https://u:hunter2@bot.example.com/"] {
        let text = format!(
            "[[app]]\nname = \"a\"\nsigning_secret = \"${{SG_CFG_UPSTREAM_PASSWORD}}\"\nupstream = \"{url}\"\n"
        );
        let err = load_err(&text);
        assert_err(&err, "app[0].upstream");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

#[test]
fn urls_are_redacted_for_printing() {
    assert_eq!(redact_url("redis://:hunter2@r:6379/"), "redis://:***@r:6379/");
    assert_eq!(redact_url("rediss://u:hunter2@r:6380/0"), "rediss://u:***@r:6380/0");
    assert_eq!(redact_url("redis://r:6379/"), "redis://r:6379/");
    assert_eq!(redact_url("redis+unix:///run/r.sock?db=1&pass=hunter2"), "redis+unix:///run/r.sock?db=1&pass=***");
    assert!(!redact_url("not a url:hunter2@x").contains("hunter2"));
}

#[test]
fn a_non_loopback_admin_listener_needs_a_token() {
    let a = app("a", "SG_CFG_ADMIN_OPEN", "");
    let err = load_err(&format!("[server]\nadmin_listen = \"0.0.0.0:9090\"\n{a}"));
    assert_err(&err, "server.admin_listen");
    assert!(err.message.contains("admin_token"), "{err}");
    // The environment override is held to the same rule.
    let ov = Overrides { admin_listen: Some("10.1.2.3:9090".into()), ..Overrides::default() };
    assert_err(&load_with(&a, &ov).unwrap_err(), "server.admin_listen");
    // Loopback (v4 or v6) needs none; with a token any address is fine.
    assert!(load(&format!("[server]\nadmin_listen = \"[::1]:9090\"\n{a}")).is_ok());
    set_env("SG_CFG_ADMIN_OPEN_TOKEN", "0123456789abcdef-token");
    let text =
        format!("[server]\nadmin_listen = \"0.0.0.0:9090\"\nadmin_token = \"${{SG_CFG_ADMIN_OPEN_TOKEN}}\"\n{a}");
    assert!(load(&text).is_ok());
    // Operator commands (`stats`, `dlq`) read the file without the secrets.
    let ov = Overrides { secrets_optional: true, ..Overrides::default() };
    assert!(load_with(&format!("[server]\nadmin_listen = \"0.0.0.0:9090\"\n{a}"), &ov).is_ok());
}

#[test]
fn host_allow_lists_are_checked() {
    let a = app("a", "SG_CFG_HOSTS", "");
    let text = format!(
        "[server]\nadmin_hosts = [\"Slackgate\", \"gw.internal:9090\"]\nresponse_url_hosts = [\"hooks.slack-gov.com\"]\n{a}"
    );
    let c = load(&text).unwrap();
    assert_eq!(c.server.admin_hosts, ["slackgate", "gw.internal:9090"]);
    assert_eq!(c.server.response_url_hosts, ["hooks.slack.com", "hooks.slack-gov.com"]);
    for bad in ["https://hooks.example.com", "*.slack.com", "host/path", "host:0", "host:99999", ""] {
        let err = load_err(&format!("[server]\nresponse_url_hosts = [\"{bad}\"]\n{a}"));
        assert_err(&err, "server.response_url_hosts[0]");
    }
    assert_err(&load_err(&format!("[server]\nadmin_hosts = [\"a b\"]\n{a}")), "server.admin_hosts[0]");
}
