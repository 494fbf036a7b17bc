use super::*;
use values::parse_upstream;

const FILE: &str = "gateway.toml";

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new(FILE), &Overrides::default())
}

fn load_with(text: &str, ov: &Overrides) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new(FILE), ov)
}

fn load_err(text: &str) -> ConfigError {
    match load(text) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    }
}

/// Set an environment variable whose name no other test uses (tests run in parallel).
fn set_env(name: &str, value: &str) {
    std::env::set_var(name, value);
}

/// One `[[app]]` whose secret comes from `env`, which is set to a fixed value.
fn app(name: &str, env: &str, extra: &str) -> String {
    set_env(env, "s3cr3t-value");
    format!(
        "[[app]]\nname = \"{name}\"\nsigning_secret = \"${{{env}}}\"\nupstream = \"http://127.0.0.1:8000\"\n{extra}\n"
    )
}

fn assert_err(err: &ConfigError, key: &str) {
    assert_eq!(err.key, key, "unexpected error: {err}");
    assert_eq!(err.file, FILE);
    assert!(err.to_string().starts_with("gateway.toml: "), "{err}");
}

// ---------------------------------------------------------------- minimal config and defaults

#[test]
fn minimal_config_has_documented_defaults() {
    let config = load(&app("bot", "SG_CFG_MINIMAL", "")).unwrap();
    assert_eq!(config.source, Path::new(FILE));

    let s = &config.server;
    assert_eq!(s.listen, "0.0.0.0:3000");
    assert_eq!(s.admin_listen.as_deref(), Some("127.0.0.1:9090"));
    assert_eq!(s.max_body, 1 << 20);
    assert_eq!(s.ack_budget, Duration::from_secs(2));
    assert_eq!(s.threads, 2);
    assert_eq!(s.shutdown_grace, Duration::from_secs(10));

    let r = &config.redis;
    assert_eq!(r.target, RedisTarget::Embedded);
    assert_eq!(r.key_prefix, "slackgate");
    assert_eq!(r.shards, 1);

    assert_eq!(config.apps.len(), 1);
    let a = &config.apps[0];
    assert_eq!(a.name, "bot");
    assert_eq!(a.secrets.len(), 1);
    assert_eq!(a.secrets[0].expose(), b"s3cr3t-value");
    assert_eq!(a.upstream.url, "http://127.0.0.1:8000");
    assert!(!a.upstream.tls);
    assert_eq!(a.upstream.host, "127.0.0.1");
    assert_eq!(a.upstream.port, 8000);
    assert_eq!(a.upstream.path, None);
    assert_eq!(a.events_path, "/slack/events");
    assert_eq!(a.commands_path, "/slack/events");
    assert_eq!(a.interactivity_path, "/slack/events");
    assert!(a.passthrough.is_empty());
    assert_eq!(a.receipt_ttl, Duration::from_secs(25 * 3600));

    let d = &a.delivery;
    assert_eq!(d.timeout, Duration::from_secs(10));
    assert_eq!(d.max_in_flight, 32);
    assert_eq!(d.retry_initial, Duration::from_secs(1));
    assert_eq!(d.retry_max, Duration::from_secs(300));
    assert_eq!(d.give_up_after, Duration::from_secs(24 * 3600));
    assert_eq!(d.lease, Duration::from_secs(60));
}

#[test]
fn every_key_can_be_set() {
    set_env("SG_CFG_ALL_KEYS", "abc");
    let text = r#"
        [server]
        listen = "127.0.0.1:3001"
        admin_listen = "127.0.0.1:9091"
        max_body = "512KiB"
        ack_budget = "1500ms"
        threads = 4
        shutdown_grace = "30s"

        [redis]
        url = "rediss://redis.internal:6380/"
        key_prefix = "sg"
        shards = 8

        [[app]]
        name = "my-bot_2"
        signing_secret = "${SG_CFG_ALL_KEYS}"
        upstream = "https://bot.example.com/slack/events"
        events_path = "/e"
        commands_path = "/c"
        interactivity_path = "/i"
        passthrough = ["/install", "/oauth"]
        dedupe = { ttl = "2h" }
        delivery = { timeout = "5s", max_in_flight = 7, retry_initial = "2s", retry_max = "1m", give_up_after = "1h", lease = "20s" }
    "#;
    let c = load(text).unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:3001");
    assert_eq!(c.server.admin_listen.as_deref(), Some("127.0.0.1:9091"));
    assert_eq!(c.server.max_body, 512 << 10);
    assert_eq!(c.server.ack_budget, Duration::from_millis(1500));
    assert_eq!(c.server.threads, 4);
    assert_eq!(c.server.shutdown_grace, Duration::from_secs(30));
    assert_eq!(c.redis.target, RedisTarget::Url("rediss://redis.internal:6380/".into()));
    assert_eq!(c.redis.key_prefix, "sg");
    assert_eq!(c.redis.shards, 8);
    let a = &c.apps[0];
    assert_eq!(a.name, "my-bot_2");
    assert!(a.upstream.tls);
    assert_eq!(a.upstream.port, 443);
    assert_eq!(a.upstream.path.as_deref(), Some("/slack/events"));
    assert_eq!((a.events_path.as_str(), a.commands_path.as_str(), a.interactivity_path.as_str()), ("/e", "/c", "/i"));
    assert_eq!(a.passthrough, ["/install", "/oauth"]);
    assert_eq!(a.receipt_ttl, Duration::from_secs(7200));
    let d = &a.delivery;
    assert_eq!(d.timeout, Duration::from_secs(5));
    assert_eq!(d.max_in_flight, 7);
    assert_eq!(d.retry_initial, Duration::from_secs(2));
    assert_eq!(d.retry_max, Duration::from_secs(60));
    assert_eq!(d.give_up_after, Duration::from_secs(3600));
    assert_eq!(d.lease, Duration::from_secs(20));
}

#[test]
fn max_body_as_plain_number_and_bounds() {
    let c = load(&format!("[server]\nmax_body = 2048\n{}", app("a", "SG_CFG_MAXBODY", ""))).unwrap();
    assert_eq!(c.server.max_body, 2048);
    for bad in ["100", "\"65MiB\"", "\"1GB\""] {
        let err = load_err(&format!("[server]\nmax_body = {bad}\n{}", app("a", "SG_CFG_MAXBODY", "")));
        assert_err(&err, "server.max_body");
    }
}

#[test]
fn default_lease_follows_a_long_timeout() {
    let c = load(&app("a", "SG_CFG_LEASE_DEFAULT", "delivery = { timeout = \"45s\" }")).unwrap();
    assert_eq!(c.apps[0].delivery.lease, Duration::from_secs(90));
}

#[test]
fn no_app_is_refused() {
    assert_err(&load_err(""), "app");
    assert_err(&load_err("[server]\nlisten = \"0.0.0.0:3000\"\n"), "app");
}

#[test]
fn the_shipped_gateway_toml_is_valid() {
    // Point its secret at a variable of our own rather than touching SLACK_SIGNING_SECRET.
    set_env("SG_CFG_SHIPPED", "shipped-example");
    let text = include_str!("../../../gateway.toml").replace("${SLACK_SIGNING_SECRET}", "${SG_CFG_SHIPPED}");
    let c = load(&text).unwrap();
    assert_eq!(c.apps.len(), 1);
    assert_eq!(c.apps[0].passthrough, ["/slack/install", "/slack/oauth_redirect"]);
}

// ---------------------------------------------------------------- unknown keys

#[test]
fn unknown_keys_are_refused_everywhere() {
    let a = app("a", "SG_CFG_UNKNOWN", "");
    let cases = [
        format!("bogus_top = 1\n{a}"),
        format!("[server]\nbogus_server = 1\n{a}"),
        format!("[redis]\nbogus_redis = 1\n{a}"),
        format!("{a}bogus_app = 1\n"),
        format!("{a}dedupe = {{ ttl = \"25h\", bogus_dedupe = 1 }}\n"),
        format!("{a}delivery = {{ timeout = \"10s\", bogus_delivery = 1 }}\n"),
        format!("{a}[app.delivery]\nbogus_delivery_table = 1\n"),
    ];
    for text in &cases {
        let err = load_err(text);
        assert_err(&err, "(toml)");
        let bogus = text.split_whitespace().find(|w| w.starts_with("bogus_")).unwrap();
        assert!(err.message.contains(bogus), "{err} does not name {bogus}");
    }
}

#[test]
fn malformed_toml_is_refused() {
    assert_err(&load_err("[server\nlisten = "), "(toml)");
    assert_err(&load_err(&format!("[server]\nthreads = \"two\"\n{}", app("a", "SG_CFG_MALFORMED", ""))), "(toml)");
}

// ---------------------------------------------------------------- interpolation

#[test]
fn interpolate_cases() {
    set_env("SG_CFG_INTERP_A", "alpha");
    set_env("SG_CFG_INTERP_B", "${SG_CFG_INTERP_A}");
    assert_eq!(interpolate("plain"), Ok("plain".into()));
    assert_eq!(interpolate(""), Ok(String::new()));
    assert_eq!(interpolate("${SG_CFG_INTERP_A}"), Ok("alpha".into()));
    assert_eq!(interpolate("x-${SG_CFG_INTERP_A}-y-${SG_CFG_INTERP_A}"), Ok("x-alpha-y-alpha".into()));
    assert_eq!(interpolate("$SG_CFG_INTERP_A and $ and {}"), Ok("$SG_CFG_INTERP_A and $ and {}".into()));
    // A value is not interpolated again.
    assert_eq!(interpolate("${SG_CFG_INTERP_B}"), Ok("${SG_CFG_INTERP_A}".into()));

    let err = interpolate("a${SG_CFG_INTERP_UNSET_9c1}b").unwrap_err();
    assert!(err.contains("SG_CFG_INTERP_UNSET_9c1"), "{err}");
    assert!(interpolate("${SG_CFG_INTERP_A").unwrap_err().contains("unclosed"));
    assert!(interpolate("${}").is_err());
}

#[test]
fn redis_url_is_interpolated() {
    set_env("SG_CFG_REDIS_PW", "pw");
    let c = load(&format!(
        "[redis]\nurl = \"redis://:${{SG_CFG_REDIS_PW}}@10.0.0.1:6379/\"\n{}",
        app("a", "SG_CFG_REDIS_INTERP", "")
    ))
    .unwrap();
    assert_eq!(c.redis.target, RedisTarget::Url("redis://:pw@10.0.0.1:6379/".into()));
}

// ---------------------------------------------------------------- upstream

#[test]
fn upstream_must_be_http_or_https() {
    for bad in
        ["ftp://127.0.0.1:21", "127.0.0.1:8000", "not a url", "http://u:p@127.0.0.1:8000", "http://127.0.0.1:8000/?a=1"]
    {
        let text =
            format!("[[app]]\nname = \"a\"\nsigning_secret = \"${{SG_CFG_UPSTREAM_BAD}}\"\nupstream = \"{bad}\"\n");
        set_env("SG_CFG_UPSTREAM_BAD", "x");
        assert_err(&load_err(&text), "app[0].upstream");
    }
    let text = "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_UPSTREAM_BAD}\"\n";
    assert_err(&load_err(text), "app[0].upstream");
}

#[test]
fn upstream_path_is_kept() {
    let u = parse_upstream("http://127.0.0.1:8000/bolt").unwrap();
    assert_eq!(u.path.as_deref(), Some("/bolt"));
    assert_eq!((u.host.as_str(), u.port, u.tls), ("127.0.0.1", 8000, false));
    assert_eq!(parse_upstream("http://127.0.0.1:8000").unwrap().path, None);
    assert_eq!(parse_upstream("http://127.0.0.1:8000/").unwrap().path, None);
    assert_eq!(parse_upstream("https://x.example/a/b").unwrap().path.as_deref(), Some("/a/b"));

    set_env("SG_CFG_UPSTREAM_PATH", "x");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_UPSTREAM_PATH}\"\nupstream = \"http://127.0.0.1:8000/bolt\"\n";
    assert_eq!(load(text).unwrap().apps[0].upstream.path.as_deref(), Some("/bolt"));
}

#[test]
fn upstream_authority() {
    let cases = [
        ("http://127.0.0.1", "127.0.0.1"),
        ("http://127.0.0.1:80", "127.0.0.1"),
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://bot.local:443", "bot.local:443"),
        ("https://bot.example.com", "bot.example.com"),
        ("https://bot.example.com:443/x", "bot.example.com"),
        ("https://bot.example.com:8443", "bot.example.com:8443"),
        ("https://bot.example.com:80", "bot.example.com:80"),
        ("http://[::1]:8000", "[::1]:8000"),
        ("http://[::1]", "[::1]"),
        ("https://[2001:db8::1]:443", "[2001:db8::1]"),
    ];
    for (url, authority) in cases {
        assert_eq!(parse_upstream(url).unwrap().authority(), authority, "{url}");
    }
}

// ---------------------------------------------------------------- delivery and server limits

#[test]
fn lease_must_exceed_timeout() {
    for extra in
        ["delivery = { timeout = \"30s\", lease = \"30s\" }", "delivery = { timeout = \"30s\", lease = \"10s\" }"]
    {
        assert_err(&load_err(&app("a", "SG_CFG_LEASE", extra)), "app[0].delivery.lease");
    }
    assert!(load(&app("a", "SG_CFG_LEASE", "delivery = { timeout = \"30s\", lease = \"31s\" }")).is_ok());
}

#[test]
fn retry_initial_must_not_exceed_retry_max() {
    let err = load_err(&app("a", "SG_CFG_RETRY", "delivery = { retry_initial = \"10s\", retry_max = \"5s\" }"));
    assert_err(&err, "app[0].delivery.retry_initial");
    let err = load_err(&app("a", "SG_CFG_RETRY", "delivery = { retry_initial = \"0s\" }"));
    assert_err(&err, "app[0].delivery.retry_initial");
    assert!(load(&app("a", "SG_CFG_RETRY", "delivery = { retry_initial = \"5s\", retry_max = \"5s\" }")).is_ok());
}

#[test]
fn delivery_bounds() {
    let err = load_err(&app("a", "SG_CFG_DELIVERY_BOUNDS", "delivery = { timeout = \"0s\" }"));
    assert_err(&err, "app[0].delivery.timeout");
    let err = load_err(&app("a", "SG_CFG_DELIVERY_BOUNDS", "delivery = { max_in_flight = 0 }"));
    assert_err(&err, "app[0].delivery.max_in_flight");
    let err = load_err(&app("a", "SG_CFG_DELIVERY_BOUNDS", "delivery = { timeout = \"ten seconds\" }"));
    assert_err(&err, "app[0].delivery.timeout");
    let err = load_err(&app("a", "SG_CFG_DELIVERY_BOUNDS", "dedupe = { ttl = \"30s\" }"));
    assert_err(&err, "app[0].dedupe.ttl");
}

#[test]
fn ack_budget_is_capped_below_slacks_deadline() {
    let a = app("a", "SG_CFG_ACK", "");
    for bad in ["2901ms", "3s", "0ms"] {
        assert_err(&load_err(&format!("[server]\nack_budget = \"{bad}\"\n{a}")), "server.ack_budget");
    }
    let c = load(&format!("[server]\nack_budget = \"2900ms\"\n{a}")).unwrap();
    assert_eq!(c.server.ack_budget, Duration::from_millis(2900));
}

#[test]
fn server_and_redis_bounds() {
    let a = app("a", "SG_CFG_SERVER_BOUNDS", "");
    assert_err(&load_err(&format!("[server]\nthreads = 0\n{a}")), "server.threads");
    assert_err(&load_err(&format!("[server]\nlisten = \"localhost\"\n{a}")), "server.listen");
    assert_err(&load_err(&format!("[server]\nadmin_listen = \"nowhere\"\n{a}")), "server.admin_listen");
    assert_err(&load_err(&format!("[redis]\nshards = 0\n{a}")), "redis.shards");
    assert_err(&load_err(&format!("[redis]\nkey_prefix = \"a{{b}}\"\n{a}")), "redis.key_prefix");
    assert_err(&load_err(&format!("[redis]\nkey_prefix = \"\"\n{a}")), "redis.key_prefix");
}

mod apps;
mod limits;
mod routes;
mod secrets;
mod socket;
mod telemetry;

// ---------------------------------------------------------------- [redis]: topologies, auth, durability

#[test]
fn redis_cluster_and_sentinel_forms() {
    let a = app("a", "SG_CFG_REDIS_FORMS", "");
    let c = load(&format!("[redis]\ncluster = [\"redis://10.0.0.1:7000\", \"redis://10.0.0.2:7000\"]\n{a}")).unwrap();
    assert_eq!(
        c.redis.target,
        RedisTarget::Cluster(vec!["redis://10.0.0.1:7000".into(), "redis://10.0.0.2:7000".into()])
    );
    let c = load(&format!("[redis]\nsentinel = [\"redis://10.0.0.5:26379\"]\nmaster_name = \"main\"\n{a}")).unwrap();
    assert_eq!(
        c.redis.target,
        RedisTarget::Sentinel { sentinels: vec!["redis://10.0.0.5:26379".into()], master_name: "main".into() }
    );
    assert_eq!(c.redis.durability, Durability::Local);
    let both = format!("[redis]\nurl = \"redis://x/\"\ncluster = [\"redis://y:1\"]\n{a}");
    assert_err(&load_err(&both), "redis");
    assert_err(&load_err(&format!("[redis]\ncluster = []\n{a}")), "redis.cluster");
    assert_err(&load_err(&format!("[redis]\ncluster = [\"10.0.0.1:7000\"]\n{a}")), "redis.cluster");
    assert_err(&load_err(&format!("[redis]\nsentinel = [\"redis://s:26379\"]\n{a}")), "redis.master_name");
    assert_err(&load_err(&format!("[redis]\nurl = \"redis://x/\"\nmaster_name = \"m\"\n{a}")), "redis.master_name");
    // The flag replaces whichever form the file names.
    let ov = Overrides { redis_url: Some("redis://127.0.0.1:6380/".into()), ..Overrides::default() };
    let c = load_with(&format!("[redis]\ncluster = [\"redis://y:1\"]\n{a}"), &ov).unwrap();
    assert_eq!(c.redis.target, RedisTarget::Url("redis://127.0.0.1:6380/".into()));
}

#[test]
fn redis_passwords_come_from_the_environment_or_a_file() {
    let a = app("a", "SG_CFG_REDIS_AUTH", "");
    set_env("SG_CFG_REDIS_PASSWORD", "hunter2-but-long");
    let c = load(&format!("[redis]\nusername = \"gw\"\npassword = \"${{SG_CFG_REDIS_PASSWORD}}\"\n{a}")).unwrap();
    assert_eq!(c.redis.auth.username.as_deref(), Some("gw"));
    assert_eq!(c.redis.auth.password.as_ref().map(|p| p.expose().to_vec()), Some(b"hunter2-but-long".to_vec()));
    assert_err(&load_err(&format!("[redis]\npassword = \"literal\"\n{a}")), "redis.password");
    assert_err(&load_err(&format!("[redis]\npassword = \"${{SG_CFG_REDIS_UNSET_PW}}\"\n{a}")), "redis.password");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pw"), "from-a-file\n").unwrap();
    let text = format!("[redis]\npassword_file = \"pw\"\n{a}");
    let c = Config::from_toml(&text, &dir.path().join("gateway.toml"), &Overrides::default()).unwrap();
    assert_eq!(c.redis.auth.password.as_ref().map(|p| p.expose().to_vec()), Some(b"from-a-file".to_vec()));
    let missing = Config::from_toml(&text, Path::new("/nonexistent/gateway.toml"), &Overrides::default());
    assert_eq!(missing.unwrap_err().key, "redis.password_file");
}

#[test]
fn replicated_durability_waits_inside_the_ack_budget() {
    let a = app("a", "SG_CFG_REDIS_DURABLE", "");
    let c = load(&format!("[redis]\ndurability = \"replicated\"\n{a}")).unwrap();
    assert_eq!(c.redis.durability, Durability::Replicated { replicas: 1, timeout: Duration::from_millis(500) });
    let c =
        load(&format!("[redis]\ndurability = \"replicated\"\nwait_replicas = 2\nwait_timeout = \"1s\"\n{a}")).unwrap();
    assert_eq!(c.redis.durability, Durability::Replicated { replicas: 2, timeout: Duration::from_secs(1) });
    let late = format!("[redis]\ndurability = \"replicated\"\nwait_timeout = \"2s\"\n{a}");
    assert_err(&load_err(&late), "redis.wait_timeout");
    let none = format!("[redis]\ndurability = \"replicated\"\nwait_replicas = 0\n{a}");
    assert_err(&load_err(&none), "redis.wait_replicas");
    assert_err(&load_err(&format!("[redis]\ndurability = \"quorum\"\n{a}")), "redis.durability");
}
