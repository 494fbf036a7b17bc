//! Operating it: `slackgate stats`, `slackgate dlq …` and the admin API behind its token.

use std::process::Command;
use std::time::Duration;

use crate::utils::*;

const TOKEN: &str = "admin-token-for-tests-0123456789";

fn cli(gw: &Gateway, args: &[&str]) -> (bool, String, String) {
    cli_at(&gw.config_path, args)
}

fn cli_at(config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("SG_TEST_SECRET", SECRET)
        .env("SG_ADMIN_TOKEN", TOKEN)
        .env_remove("SLACKGATE_REDIS_URL")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

async fn admin(gw: &Gateway, method: &'static str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut req = Req::signed(path, Vec::new(), SECRET);
    req.method = method;
    req.headers.clear();
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let (status, body) = send(gw.admin_port, req).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn setup(name: &str) -> (RedisServer, Receiver, Gateway, String) {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.server = r#"admin_token = "${SG_ADMIN_TOKEN}""#.into();
    let gw = Gateway::start_with_env(&cfg, &[("SG_ADMIN_TOKEN", TOKEN)]).await;
    (redis, bot, gw, cfg.prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_can_be_listed_shown_replayed_and_purged_from_the_cli() {
    let (redis, bot, gw, prefix) = setup("dlqcli").await;
    let dead = format!("{{{prefix}:bot:0}}:dead");
    bot.set_default(Reply::status(404));
    for i in 0..3 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvDlq{i}")), SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(5), || redis.xlen(&dead) == 3).await);

    let (ok, out, err) = cli(&gw, &["dlq", "list", "--json"]);
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3);
    assert_eq!(list[0]["status"], 404, "a status is a number");
    let id = list[0]["delivery"].as_str().unwrap().to_string();
    let (ok, out, _) = cli(&gw, &["dlq", "list"]);
    assert!(ok && out.contains(&id) && out.contains("404"), "{out}");

    let (ok, out, err) = cli(&gw, &["dlq", "show", &id]);
    assert!(ok, "{err}");
    assert!(out.contains("application/json"), "{out}");
    // The three were dead-lettered concurrently: find which event this one is.
    let shown = (0..3).map(|i| format!("EvDlq{i}")).find(|e| out.contains(e.as_str())).expect("the body is shown");
    let others: Vec<String> = (0..3).map(|i| format!("EvDlq{i}")).filter(|e| *e != shown).collect();

    bot.set_default(Reply::status(200));
    let (ok, out, err) = cli(&gw, &["dlq", "replay", &id]);
    assert!(ok && out.contains("replayed"), "{out}{err}");
    assert!(eventually(Duration::from_secs(5), || bot.count_body(&shown) == 2).await, "delivered again");
    assert_eq!(redis.xlen(&dead), 2);
    let (ok, _, err) = cli(&gw, &["dlq", "replay", &id]);
    assert!(!ok && err.contains("not in the dead-letter stream"), "{err}");

    let (ok, out, err) = cli(&gw, &["dlq", "purge", "--all"]);
    assert!(ok && out.contains("purged 2"), "{out}{err}");
    assert!(!out.contains("skipped"), "{out}");
    assert_eq!(redis.xlen(&dead), 0);
    assert!(redis.keys("*:d:*").is_empty(), "bodies are gone");
    gw.wait_idle_with(Some(TOKEN)).await;
    for e in &others {
        assert_eq!(bot.count_body(e), 1, "purged letters are not delivered");
    }

    let (ok, out, err) = cli(&gw, &["stats", "--json"]);
    assert!(ok, "{err}");
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats[0]["app"], "bot");
    assert_eq!(stats[0]["dead"], 0);
    let (ok, out, _) = cli(&gw, &["stats"]);
    assert!(ok && out.contains("in_flight") && out.contains("bot"), "{out}");
    // Operators need no signing secret to read the outbox.
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(["stats", "--config"])
        .arg(&gw.config_path)
        .env_remove("SG_TEST_SECRET")
        .env_remove("SG_ADMIN_TOKEN")
        .env_remove("SLACKGATE_REDIS_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (ok, _, err) = cli(&gw, &["dlq", "show", "not-an-id"]);
    assert!(!ok && err.contains("not a delivery id"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_wants_its_token_except_for_probes() {
    let (redis, bot, gw, prefix) = setup("dlqapi").await;
    bot.set_default(Reply::status(410));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvApi"), SECRET)).await.0, 200);
    let dead = format!("{{{prefix}:bot:0}}:dead");
    assert!(eventually(Duration::from_secs(5), || redis.xlen(&dead) == 1).await);

    assert_eq!(admin(&gw, "GET", "/healthz", None).await.0, 200);
    let mut ready = 0;
    until(Duration::from_secs(5), async || {
        ready = admin(&gw, "GET", "/readyz", None).await.0;
        ready == 200
    })
    .await;
    assert_eq!(ready, 200, "Redis answers and the workers run");
    assert_eq!(admin(&gw, "GET", "/metrics", None).await.0, 200, "scrapers need no token");
    for path in ["/dlq", "/stats"] {
        assert_eq!(admin(&gw, "GET", path, None).await.0, 401, "{path}");
        assert_eq!(admin(&gw, "GET", path, Some("wrong-token-wrong-token")).await.0, 401, "{path}");
    }
    let (status, body) = admin(&gw, "GET", "/dlq?app=bot", Some(TOKEN)).await;
    assert_eq!(status, 200);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = list[0]["delivery"].as_str().unwrap().to_string();
    assert_eq!(list[0]["status"], 410);
    let (status, body) = admin(&gw, "GET", &format!("/dlq/bot/{id}"), Some(TOKEN)).await;
    assert!(status == 200 && body.contains("EvApi"), "{body}");
    assert_eq!(admin(&gw, "GET", "/dlq/nobody/0-00", Some(TOKEN)).await.0, 404);
    bot.set_default(Reply::status(200));
    let (status, _) = admin(&gw, "POST", &format!("/dlq/bot/{id}/replay"), Some(TOKEN)).await;
    assert_eq!(status, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count_body("EvApi") == 2).await);
    assert_eq!(admin(&gw, "POST", &format!("/dlq/bot/{id}/purge"), Some(TOKEN)).await.0, 404, "no longer dead");
    let (status, body) = admin(&gw, "GET", "/metrics", Some(TOKEN)).await;
    assert!(status == 200 && body.contains("slackgate_requests_total"), "{body}");
    assert!(!body.contains(SECRET) && !body.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_have_one_audit_line_per_decision_and_never_a_secret_or_a_body() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let cfg = GatewayConfig::new(&redis.url(), &prefix("audit"), &bot.url());
    let gw = Gateway::start_with_env(&cfg, &[("SLACKGATE_LOG_FORMAT", "json")]).await;
    let body = serde_json::json!({
        "type": "event_callback", "event_id": "EvAudit1", "team_id": "T1",
        "event": {"type": "app_mention", "user": "U1", "text": "BODY-MARKER-7f3a", "channel": "C1", "ts": "1.1"}
    })
    .to_string()
    .into_bytes();
    let signed = Req::signed("/slack/events", body.clone(), SECRET);
    let signature = signed.headers[1].1.clone();
    assert_eq!(send(gw.port, signed).await.0, 200);
    let retry = Req::signed("/slack/events", body.clone(), SECRET)
        .header("X-Slack-Retry-Num", "1")
        .header("X-Slack-Retry-Reason", "http_timeout");
    assert_eq!(send(gw.port, retry).await.0, 200);
    assert_eq!(send(gw.port, Req::signed("/slack/events", body, "not-the-secret")).await.0, 401);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    // Nothing more is decided once the outbox is idle; the attempt's line follows its finish.
    gw.wait_idle().await;
    assert!(eventually(Duration::from_secs(5), || gw.log().contains(r#""message":"attempt""#)).await, "{}", gw.log());

    let log = gw.log();
    for secret in [SECRET, "BODY-MARKER-7f3a", signature.as_str(), "not-the-secret"] {
        assert!(!log.contains(secret), "`{secret}` leaked into the logs");
    }
    let lines: Vec<serde_json::Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(!lines.is_empty(), "--log-format json writes JSON lines:\n{log}");
    let audit = |msg: &str| -> Vec<&serde_json::Value> {
        lines.iter().filter(|l| l["target"] == "slackgate::audit" && l["fields"]["message"] == msg).collect()
    };
    let ingress = audit("ingress");
    assert_eq!(ingress.len(), 3, "one line per decision: {ingress:?}");
    // Each line is written after its answer (Pingora's logging phase), so two requests' lines
    // may come in either order: find each decision's line by its outcome.
    let f = |i: usize| {
        let outcome = ["accepted", "duplicate", "unauthorized"][i];
        let line = ingress.iter().find(|l| l["fields"]["outcome"] == outcome);
        &line.unwrap_or_else(|| panic!("no {outcome} line: {ingress:?}"))["fields"]
    };
    assert_eq!((f(0)["outcome"].as_str(), f(0)["receipt"].as_str()), (Some("accepted"), Some("e:EvAudit1")));
    assert!(f(0)["ack_ms"].as_f64().is_some() && !f(0)["delivery"].as_str().unwrap().is_empty());
    assert_eq!(
        (f(1)["outcome"].as_str(), f(1)["retry_num"].as_str(), f(1)["retry_reason"].as_str()),
        (Some("duplicate"), Some("1"), Some("http_timeout"))
    );
    assert_eq!((f(2)["outcome"].as_str(), f(2)["status"].as_u64()), (Some("unauthorized"), Some(401)));
    let attempts = audit("attempt");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["fields"]["status"], 200);
    assert_eq!(attempts[0]["span"]["delivery"], f(0)["delivery"]);
}

/// A raw admin request with a chosen Host and extra headers.
async fn admin_raw(gw: &Gateway, method: &'static str, path: &str, host: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = Req::signed(path, Vec::new(), SECRET);
    req.method = method;
    req.headers = vec![("Host".into(), host.into())];
    for (k, v) in headers {
        req = req.header(k, v);
    }
    send(gw.admin_port, req).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_is_closed_to_browsers_and_rebound_names() {
    // No token (loopback admin): reads are open, writes still want Authorization.
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("closed"), &bot.url());
    cfg.server = r#"admin_hosts = ["gw.internal"]"#.into();
    let gw = Gateway::start(&cfg).await;
    let dead = format!("{{{}:bot:0}}:dead", cfg.prefix);
    bot.set_default(Reply::status(404));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvClosed"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || redis.xlen(&dead) == 1).await);
    let local = format!("127.0.0.1:{}", gw.admin_port);
    let auth = [("Authorization", "Bearer x")];
    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends Host: evil.example.
    for path in ["/metrics", "/readyz", "/stats", "/dlq"] {
        assert_eq!(admin_raw(&gw, "GET", path, "evil.example", &[]).await, 403, "{path}");
        assert_eq!(admin_raw(&gw, "GET", path, &format!("evil.example:{}", gw.admin_port), &[]).await, 403);
    }
    assert_eq!(admin_raw(&gw, "GET", "/healthz", "evil.example", &[]).await, 200, "liveness never fails on Host");
    for host in [local.as_str(), "localhost", "gw.internal:9090", "[::1]:9090"] {
        assert_eq!(admin_raw(&gw, "GET", "/stats", host, &[]).await, 200, "{host}");
    }
    // Writes: POST only, with an Authorization header, never with an Origin.
    assert_eq!(admin_raw(&gw, "POST", "/dlq/bot/purge", &local, &[]).await, 401, "a simple POST is refused");
    let origin = [("Authorization", "Bearer x"), ("Origin", "https://evil.example")];
    assert_eq!(admin_raw(&gw, "POST", "/dlq/bot/purge", &local, &origin).await, 403);
    assert_eq!(admin_raw(&gw, "GET", "/dlq/bot/purge", &local, &auth).await, 405);
    assert_eq!(admin_raw(&gw, "DELETE", "/dlq/bot/purge", &local, &auth).await, 405);
    assert_eq!(redis.xlen(&dead), 1, "nothing was purged by the refused requests");
    assert_eq!(admin_raw(&gw, "POST", "/dlq/bot/purge", &local, &auth).await, 200);
    assert_eq!(redis.xlen(&dead), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_show_shows_dead_letters_only() {
    let (_redis, bot, gw, _) = setup("showdead").await;
    bot.set_default(Reply::status(200).delay(Duration::from_secs(3)));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvLive"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    let live = bot.received()[0].header("x-slackgate-delivery").unwrap();
    let (ok, _, err) = cli(&gw, &["dlq", "show", &live]);
    assert!(!ok && err.contains("not in the dead-letter stream"), "a live delivery is not shown: {err}");
    let (status, _) = admin(&gw, "GET", &format!("/dlq/bot/{live}"), Some(TOKEN)).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_all_ends_even_when_every_replay_dies_again() {
    let (redis, bot, gw, prefix) = setup("replayend").await;
    let dead = format!("{{{prefix}:bot:0}}:dead");
    bot.set_default(Reply::status(404)); // every attempt is final: each replay dies again at once
    for i in 0..30 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvLoop{i}")), SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(5), || redis.xlen(&dead) == 30).await);
    let config = gw.config_path.clone();
    let replay = tokio::task::spawn_blocking(move || cli_at(&config, &["dlq", "replay", "--all", "--json"]));
    let (ok, out, err) =
        tokio::time::timeout(Duration::from_secs(20), replay).await.expect("replay --all ends").unwrap();
    assert!(ok, "{err}");
    let counts: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(counts["replayed"], 30, "{out}");
    assert!(eventually(Duration::from_secs(5), || redis.xlen(&dead) == 30 && bot.count() == 60).await);
    // The admin API's replay-all ends the same way.
    let (status, body) = admin_after(&redis, &prefix).await;
    assert_eq!(status, 200, "{body}");
}

/// Replay-all over the admin API of a second gateway on the same data.
async fn admin_after(redis: &RedisServer, prefix: &str) -> (u16, String) {
    let bot = Receiver::start(SECRET).await;
    bot.set_default(Reply::status(404));
    let mut cfg = GatewayConfig::new(&redis.url(), prefix, &bot.url());
    cfg.server = r#"admin_token = "${SG_ADMIN_TOKEN}""#.into();
    let gw = Gateway::start_with_env(&cfg, &[("SG_ADMIN_TOKEN", TOKEN)]).await;
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(20), admin(&gw, "POST", "/dlq/bot/replay", Some(TOKEN)))
            .await
            .expect("replay-all over the API ends");
    let counts: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(counts["replayed"], 30, "{body}");
    (status, body)
}

async fn metrics_text(gw: &Gateway) -> String {
    admin(gw, "GET", "/metrics", None).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_bounded_counted_and_logged() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("deadmax"), &bot.url());
    cfg.delivery =
        r#"{ timeout = "2s", retry_initial = "100ms", retry_max = "400ms", lease = "5s", dead_max = 3 }"#.into();
    let gw = Gateway::start(&cfg).await;
    let dead = format!("{{{}:bot:0}}:dead", cfg.prefix);
    bot.set_default(Reply::status(404));
    for i in 0..8 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvMax{i}")), SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(5), || bot.count() == 8).await);
    assert!(eventually(Duration::from_secs(5), || redis.xlen(&dead) == 3).await, "trimmed to dead_max");
    assert!(eventually(Duration::from_secs(3), || redis.keys("*:d:*").len() == 3).await, "bodies dropped too");
    let evicted = r#"slackgate_dead_evicted_total{app="bot",reason="max"} 5"#;
    let mut m = String::new();
    until(Duration::from_secs(2), async || {
        m = metrics_text(&gw).await;
        m.contains(evicted)
    })
    .await;
    assert!(m.contains(evicted), "{m}");
    assert!(gw.log().contains("dead letters dropped"), "{}", gw.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_is_warned_about_at_start_and_in_readyz() {
    let redis = RedisServer::start();
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(&mut redis.conn()).unwrap();
    let bot = Receiver::start(SECRET).await;
    let gw = Gateway::start(&GatewayConfig::new(&redis.url(), &prefix("evict"), &bot.url())).await;
    let mut body = String::new();
    until(Duration::from_secs(5), async || {
        let (status, b) = admin(&gw, "GET", "/readyz", None).await;
        body = b;
        status == 200
    })
    .await;
    assert!(body.contains("ready") && body.contains("maxmemory-policy is allkeys-lru"), "{body}");
    assert!(eventually(Duration::from_secs(5), || gw.log().contains("maxmemory-policy may evict keys")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixed_series_is_exported_at_zero_from_the_start() {
    let (_redis, _bot, gw, _) = setup("zeros").await;
    let want = [
        r#"slackgate_requests_total{app="bot",kind="event",outcome="accepted"} 0"#,
        r#"slackgate_requests_total{app="bot",kind="unknown",outcome="unauthorized"} 0"#,
        r#"slackgate_deliveries_total{app="bot",outcome="dead"} 0"#,
        r#"slackgate_store_errors_total{app="bot",reason="record"} 0"#,
        r#"slackgate_response_url_posts_total{app="bot",outcome="refused"} 0"#,
        r#"slackgate_dead_evicted_total{app="bot",reason="ttl"} 0"#,
        r#"slackgate_inline_total{app="bot",kind="command",outcome="late"} 0"#,
        r#"slackgate_connections_closed_total{reason="header_timeout"} 0"#,
        r#"slackgate_ack_seconds_count{app="bot"} 0"#,
        r#"slackgate_shed_total{app="bot",reason="unverified_budget"} 0"#,
        // The dashboard's egress latency panels, before the first call.
        r#"slackgate_egress_slack_seconds_count{class="read"} 0"#,
        r#"slackgate_egress_slack_seconds_count{class="write"} 0"#,
    ];
    let mut m = String::new();
    until(Duration::from_secs(3), async || {
        m = metrics_text(&gw).await;
        want.iter().all(|w| m.contains(w))
    })
    .await;
    for w in want {
        assert!(m.contains(w), "{w} missing:\n{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_waiting_for_a_retry_sets_the_oldest_age() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("age"), &bot.url());
    cfg.delivery = r#"{ timeout = "1s", retry_initial = "10s", retry_max = "10s", lease = "5s" }"#.into();
    let gw = Gateway::start(&cfg).await;
    bot.set_default(Reply::status(503)); // the bot is down: the delivery waits in the retry schedule
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvAge"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    // Its age grows while it waits: poll until it passes a second.
    let stats = || {
        let (ok, out, err) = cli(&gw, &["stats", "--json"]);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let aged = eventually(Duration::from_secs(5), || stats()[0]["oldest_age_ms"].as_u64().unwrap() >= 1000).await;
    assert!(aged, "{}", stats());
    let s = stats();
    let out = s.to_string();
    assert_eq!(
        (s[0]["ready"].as_u64(), s[0]["in_flight"].as_u64(), s[0]["scheduled"].as_u64()),
        (Some(0), Some(0), Some(1))
    );
    assert!(s[0]["oldest_age_ms"].as_u64().unwrap() >= 1000, "{out}");
}

/// `GET /stats` from the local address `from` with `token`: the status and the answer's head.
async fn stats_from(gw: &Gateway, from: &str, token: &str) -> (u16, String) {
    let head = format!("GET /stats HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {token}", gw.admin_port);
    request_from(from, gw.admin_port, &head, "").await
}

/// A login to the pages from the local address `from`: its status.
async fn login_from(gw: &Gateway, from: &str, token: &str) -> u16 {
    let port = gw.admin_port;
    let head = format!(
        "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\nContent-Type: application/x-www-form-urlencoded"
    );
    request_from(from, port, &head, &format!("token={token}")).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bearer_tokens_are_throttled_per_address_with_the_pages_logins() {
    let (_redis, _bot, gw, _) = setup("apithrottle").await;
    let (a, b) = ("127.0.0.2", "127.0.0.3");
    for i in 0..10 {
        assert_eq!(stats_from(&gw, a, "wrong-token-wrong-token").await.0, 401, "wrong token {i}");
    }
    // Address A is over the limit: 429 with Retry-After, for the right token too.
    let (status, head) = stats_from(&gw, a, "wrong-token-wrong-token").await;
    assert_eq!(status, 429, "{head}");
    let retry = head.lines().find_map(|l| l.strip_prefix("Retry-After: ").or_else(|| l.strip_prefix("retry-after: ")));
    let retry: u64 = retry.unwrap_or_else(|| panic!("no Retry-After: {head}")).parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(stats_from(&gw, a, TOKEN).await.0, 429);
    // The pages' login counts the same failures: A waits there too.
    assert_eq!(login_from(&gw, a, TOKEN).await, 429);
    // Another address with the right token is served, by the API and the pages.
    assert_eq!(stats_from(&gw, b, TOKEN).await.0, 200);
    assert_eq!(login_from(&gw, b, TOKEN).await, 303);
    // A request with no token at all (a probe, a scraper) guesses nothing and is not counted.
    let bare = format!("GET /stats HTTP/1.1\r\nHost: 127.0.0.1:{}", gw.admin_port);
    for _ in 0..12 {
        assert_eq!(request_from(b, gw.admin_port, &bare, "").await.0, 401);
    }
    assert_eq!(stats_from(&gw, b, TOKEN).await.0, 200);
}
