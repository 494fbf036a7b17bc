//! Every listener's connection deadlines, on raw TCP: leading empty lines are no request (the
//! Slack listener), and the egress and admin listeners drop half-sent requests and cap their
//! connections as the Slack listener does.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::utils::*;

async fn gateway(name: &str, server: &str) -> (RedisServer, FakeSlack, Receiver, Gateway) {
    let redis = RedisServer::start();
    let slack = FakeSlack::start().await;
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.server = server.into();
    cfg.egress = format!("slack_api_url = \"{}\"\n", slack.api_url());
    let gw = Gateway::start(&cfg).await;
    (redis, slack, bot, gw)
}

/// Read one answer's head (and whatever came with it).
async fn answer_head(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await.expect("an answer").unwrap();
        assert!(n > 0, "closed before answering: {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn signed_event(id: &str) -> Vec<u8> {
    let body = event(id);
    let ts = unix_now();
    let mut req = format!(
        "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {}\r\n\r\n",
        body.len(),
        sign(SECRET, ts, &body)
    )
    .into_bytes();
    req.extend_from_slice(&body);
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_lines_before_a_request_are_no_request_and_do_not_keep_a_connection() {
    let (_redis, _slack, bot, gw) = gateway("crlf", "header_timeout = \"1s\"\nidle_timeout = \"1500ms\"\n").await;
    // A new connection that sends only empty lines is under header_timeout.
    let mut fresh = connect(gw.port).await;
    fresh.write_all(b"\r\n\r\n\r\n\r\n").await.unwrap();
    assert!(closed_within(&mut fresh, Duration::from_secs(5)).await, "closed at header_timeout");
    // A kept-alive connection that sends only CRLFs after its answer is closed at idle_timeout.
    let mut kept = connect(gw.port).await;
    kept.write_all(&signed_event("EvCrlf1")).await.unwrap();
    assert!(answer_head(&mut kept).await.starts_with("HTTP/1.1 200"));
    let started = tokio::time::Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(6) {
        if kept.write_all(b"\r\n").await.is_err() || closed_within(&mut kept, Duration::from_millis(200)).await {
            closed = true;
            break;
        }
    }
    assert!(closed, "CRLFs alone do not hold a connection open");
    // An empty line before a request line is skipped (RFC 9112 §2.2): the request is served.
    let mut leading = connect(gw.port).await;
    leading.write_all(b"\r\n").await.unwrap();
    leading.write_all(&signed_event("EvCrlf2")).await.unwrap();
    assert!(answer_head(&mut leading).await.starts_with("HTTP/1.1 200"));
    assert!(eventually(Duration::from_secs(5), || bot.count() == 2).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_and_admin_listeners_drop_half_sent_requests_on_time() {
    let (_redis, slack, _bot, gw) =
        gateway("halfsent", "header_timeout = \"1s\"\nbody_timeout = \"1s\"\nidle_timeout = \"2s\"\n").await;
    let mut half = Vec::new();
    for port in [gw.egress_port, gw.admin_port] {
        for _ in 0..20 {
            let mut c = connect(port).await;
            c.write_all(b"POST /api/chat.postMessage HTTP/1.1\r\nHost: x\r\n").await.unwrap();
            half.push(c);
        }
        half.push(connect(port).await);
    }
    for c in half.iter_mut() {
        assert!(closed_within(c, Duration::from_secs(5)).await, "header_timeout on the egress and admin ports");
    }
    // A body that stops coming: 408 at body_timeout, and nothing reaches Slack.
    let mut slow = connect(gw.egress_port).await;
    slow.write_all(
        b"POST /api/chat.postMessage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer xoxb-1\r\n\
          Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nchannel=C1&te",
    )
    .await
    .unwrap();
    assert!(answer_head(&mut slow).await.starts_with("HTTP/1.1 408"));
    assert!(closed_within(&mut slow, Duration::from_secs(2)).await);
    assert!(slack.calls_of("chat.postMessage").is_empty());
    // An idle kept-alive egress connection is closed at idle_timeout.
    let mut idle = connect(gw.egress_port).await;
    idle.write_all(b"GET /api/users.info?user=U1 HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert!(answer_head(&mut idle).await.starts_with("HTTP/1.1 200"));
    assert!(closed_within(&mut idle, Duration::from_secs(5)).await, "idle_timeout on the egress");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_and_admin_listeners_cap_their_connections() {
    let (_redis, _slack, _bot, gw) = gateway("lcap", "max_connections = 10\n").await;
    let requests = [
        (gw.egress_port, &b"GET /api/users.info?user=U1 HTTP/1.1\r\nHost: x\r\n\r\n"[..]),
        (gw.admin_port, &b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"[..]),
    ];
    for (port, request) in requests {
        // Each held connection was answered once, so it holds its place.
        let mut held = Vec::new();
        for _ in 0..10 {
            let mut c = connect(port).await;
            c.write_all(request).await.unwrap();
            assert!(answer_head(&mut c).await.starts_with("HTTP/1.1 200"));
            held.push(c);
        }
        let mut extra = connect(port).await;
        assert!(closed_within(&mut extra, Duration::from_secs(5)).await, "the 11th connection on {port} is closed");
        for c in held.iter_mut() {
            c.write_all(request).await.unwrap();
            assert!(answer_head(c).await.starts_with("HTTP/1.1 200"), "the first 10 stay served");
        }
        drop(held);
        // Room again once they are gone.
        assert!(
            until(Duration::from_secs(5), async || {
                let mut c = connect(port).await;
                c.write_all(request).await.is_ok() && answer_head_or_close(&mut c).await.starts_with("HTTP/1.1 200")
            })
            .await
        );
    }
    // The Slack listener still serves.
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvLcap"), SECRET)).await.0, 200);
}

/// An answer's head, or `""` when the connection is closed first.
async fn answer_head_or_close(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => return String::new(),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_egress_client_that_takes_no_answer_is_dropped_at_body_timeout() {
    let (_redis, slack, _bot, gw) = gateway("noread", "max_connections = 1\nbody_timeout = \"1s\"\n").await;
    let port = gw.egress_port;
    // A read of 64 MiB whose client never reads a byte of it: the kernel's buffers fill, and
    // the egress's writes stop.
    // (Until it has the place: the gateway's start-up probe may still hold it for a moment.)
    let mut stuck = None;
    for _ in 0..50 {
        let mut c = connect(port).await;
        let _ = c.write_all(b"GET /api/test.large?bytes=67108864 HTTP/1.1\r\nHost: x\r\n\r\n").await;
        if eventually(Duration::from_millis(200), || !slack.calls_of("test.large").is_empty()).await {
            stuck = Some(c);
            break;
        }
    }
    assert!(stuck.is_some(), "the read reached Slack");
    // It holds the egress's one place until its write deadline passes; then there is room.
    let request = &b"GET /api/users.info?user=U1 HTTP/1.1\r\nHost: x\r\n\r\n"[..];
    let served = until(Duration::from_secs(10), async || {
        let mut c = connect(port).await;
        c.write_all(request).await.is_ok() && answer_head_or_close(&mut c).await.starts_with("HTTP/1.1 200")
    });
    assert!(served.await, "the stuck client was dropped");
    drop(stuck);
}
