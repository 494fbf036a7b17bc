//! The Slack-facing listener's edges: slow and idle clients are dropped on time, open
//! connections are capped, unsigned requests are refused before their body is read, and
//! passthrough never hangs, never trusts the client's forwarding headers or request target.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::utils::*;

async fn gateway(name: &str, server: &str) -> (RedisServer, Receiver, Gateway) {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.server = server.into();
    let gw = Gateway::start(&cfg).await;
    (redis, bot, gw)
}

/// Whether the peer has closed the connection right now (no waiting).
async fn is_closed(conn: &mut TcpStream) -> bool {
    closed_within(conn, Duration::from_millis(20)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_dropped_on_time_while_events_are_acked() {
    let (_redis, bot, gw) =
        gateway("slow", "header_timeout = \"1500ms\"\nbody_timeout = \"1500ms\"\nidle_timeout = \"2s\"\n").await;
    let started = Instant::now();
    // 150 clients that trickle their headers, 100 that send headers and a trickle of body,
    // 100 that answered one request and then sit idle, 50 that never send a byte.
    let mut slow_headers = Vec::new();
    for _ in 0..150 {
        let mut c = connect(gw.port).await;
        c.write_all(b"POST /slack/events HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        slow_headers.push(c);
    }
    let mut slow_bodies = Vec::new();
    for _ in 0..100 {
        let mut c = connect(gw.port).await;
        let ts = unix_now();
        let head = format!(
            "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\
             X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: v0={}\r\n\r\n{{\"type\":",
            "0".repeat(64)
        );
        c.write_all(head.as_bytes()).await.unwrap();
        slow_bodies.push(c);
    }
    let mut idle = Vec::new();
    for i in 0..100 {
        let mut c = connect(gw.port).await;
        let body = event(&format!("EvIdle{i}"));
        let sig = sign(SECRET, unix_now(), &body);
        let req = format!(
            "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             X-Slack-Request-Timestamp: {}\r\nX-Slack-Signature: {sig}\r\n\r\n",
            body.len(),
            unix_now()
        );
        c.write_all(req.as_bytes()).await.unwrap();
        c.write_all(&body).await.unwrap();
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "kept alive after a 200");
        idle.push(c);
    }
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(connect(gw.port).await);
    }
    // Trickle: one more header byte (never the blank line) every 200 ms, while real events flow.
    let mut acked = 0;
    // The slow clients' pace: time passing is what this test feeds the header deadline.
    let mut trickle = pace(Duration::from_millis(100));
    for i in 0..8 {
        trickle.tick().await;
        for c in slow_headers.iter_mut() {
            let _ = c.write_all(b"X").await;
        }
        let req = Req::signed("/slack/events", event(&format!("EvFlow{i}")), SECRET);
        assert_eq!(send(gw.port, req).await.0, 200, "a signed event is acked while slow clients hang on");
        acked += 1;
    }
    assert_eq!(acked, 8);
    // By now (≈1 s in) nothing is past a deadline: the slow clients are still connected.
    if started.elapsed() < Duration::from_millis(1200) {
        assert!(!is_closed(&mut slow_headers[0]).await, "closed before header_timeout");
    }
    for c in slow_headers.iter_mut().chain(silent.iter_mut()) {
        assert!(closed_within(c, Duration::from_secs(4)).await, "header_timeout: dropped");
    }
    for c in slow_bodies.iter_mut() {
        assert!(closed_within(c, Duration::from_secs(4)).await, "body_timeout: dropped");
    }
    for c in idle.iter_mut() {
        assert!(closed_within(c, Duration::from_secs(5)).await, "idle_timeout: dropped");
    }
    assert!(eventually(Duration::from_secs(5), || bot.count() == 108).await, "every acked event delivered");
    let metrics = String::from_utf8_lossy(&send(gw.admin_port, get("/metrics")).await.1).into_owned();
    for reason in ["header_timeout", "idle_timeout"] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("slackgate_connections_closed_total{{reason=\"{reason}\"}}")))
            .unwrap_or_else(|| panic!("{reason} counted:\n{metrics}"));
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n >= 100.0, "{line}");
    }
    assert!(metrics.contains("outcome=\"body_timeout\""), "slow bodies answered 408 and counted");
}

fn get(path: &str) -> Req {
    let mut r = Req::signed(path, Vec::new(), SECRET);
    r.method = "GET";
    r.headers.clear();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_connections_are_capped_and_the_excess_closed_at_once() {
    let (_redis, _bot, gw) = gateway("cap", "max_connections = 20\n").await;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(connect(gw.port).await);
    }
    // Every one of them accepted and counted before the next arrives.
    let mut open = 0.0;
    until(Duration::from_secs(5), async || {
        open = metric(gw.admin_port, "slackgate_connections_open").await;
        open >= 20.0
    })
    .await;
    assert_eq!(open, 20.0);
    let mut extra = connect(gw.port).await;
    // Closed as soon as it is accepted; the limit is generous because the test running beside
    // this one (a TLS cluster, a flood) can hold both cores for a while.
    assert!(closed_within(&mut extra, Duration::from_secs(5)).await, "the 21st connection is closed");
    let refused = try_send(gw.port, Req::signed("/slack/events", event("EvCap0"), SECRET)).await;
    assert!(refused.is_err(), "no answer over the cap: {refused:?}");
    for c in held.iter_mut() {
        assert!(!is_closed(c).await, "the first 20 stay open");
    }
    held.truncate(10);
    let closed =
        until(Duration::from_secs(5), async || metric(gw.admin_port, "slackgate_connections_open").await <= 10.0);
    assert!(closed.await, "the 10 dropped connections are counted closed");
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvCap1"), SECRET)).await.0, 200, "room again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_request_is_refused_before_its_body_is_read() {
    let (redis, bot, gw) = gateway("early", "body_timeout = \"5s\"\n").await;
    for headers in [
        String::new(),
        format!("X-Slack-Request-Timestamp: {}\r\nX-Slack-Signature: v0=nothex\r\n", unix_now()),
        format!("X-Slack-Request-Timestamp: {}\r\nX-Slack-Signature: v0={}\r\n", unix_now() - 400, "0".repeat(64)),
    ] {
        let mut c = connect(gw.port).await;
        let head = format!("POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: 900000\r\n{headers}\r\n");
        c.write_all(head.as_bytes()).await.unwrap();
        // The body never comes; the answer must not wait for it.
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf))
            .await
            .expect("answered without the body")
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 401"), "{}", String::from_utf8_lossy(&buf));
    }
    assert!(redis.keys("*:r:*").is_empty() && redis.keys("*:d:*").is_empty() && bot.count() == 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_normalises_the_target_and_owns_the_forwarding_headers() {
    let (_redis, bot, gw) = gateway("fwd", "").await;
    let raw = |head: &'static str| async move {
        let mut c = connect(gw.port).await;
        c.write_all(head.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    // An absolute-form target whose authority is not its Host is refused outright.
    let out = raw("GET http://169.254.169.254/slack/install HTTP/1.1\r\nHost: gw.example.com\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert_eq!(bot.count(), 0, "nothing forwarded");
    let out = raw("GET http://gw.example.com/slack/install?state=1 HTTP/1.1\r\nHost: gw.example.com\r\n\
         X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: evil.example\r\nForwarded: for=6.6.6.6\r\n\
         Connection: close\r\n\r\n")
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let got = bot.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/slack/install?state=1", "origin form");
    assert_eq!(got[0].header("host"), Some(format!("127.0.0.1:{}", bot.port)));
    assert_eq!(got[0].header("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(got[0].header("x-forwarded-host").as_deref(), Some("gw.example.com"));
    assert!(got[0].header("forwarded").is_none());
    assert_eq!(got[0].headers.get_all("x-forwarded-for").iter().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_to_an_unreachable_bot_is_a_prompt_502() {
    let redis = RedisServer::start();
    // A listener that accepts and never answers: the read timeout must end the wait.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mute_port = mute.local_addr().unwrap().port();
    let closed = Reserved::new(); // bound, not listening: connections are refused
    let delivery = r#"{ timeout = "1s", retry_initial = "100ms", retry_max = "400ms", lease = "5s" }"#;
    for (name, upstream) in [
        ("nxdomain", "http://no-such-host.invalid:8000".to_string()),
        ("refused", closed.url()),
        ("mute", format!("http://127.0.0.1:{mute_port}")),
    ] {
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &upstream);
        cfg.delivery = delivery.into();
        let gw = Gateway::start(&cfg).await;
        let mut req = get("/slack/install");
        req.headers.push(("Connection".into(), "close".into()));
        let (status, _) = send(gw.port, req).await;
        assert!(status == 502 || status == 504, "{name}: {status}");
        // Still serving Slack.
        assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvAfter502"), SECRET)).await.0, 200, "{name}");
        assert!(!gw.log().contains("panicked"), "{name}: {}", gw.log());
    }
    drop(mute);
}
