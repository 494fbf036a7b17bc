//! The egress as an HTTP hop, against the fake Slack Web API: methods as sent, broken requests
//! answered 400, headers passed both ways (and replayed), answers of any size for reads.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::utils::*;

const TOKEN: &str = "xoxb-test-token-http-51d2";

struct Setup {
    _redis: RedisServer,
    slack: FakeSlack,
    _bot: Receiver,
    gw: Gateway,
}

async fn setup(name: &str) -> Setup {
    let redis = RedisServer::start();
    let slack = FakeSlack::start().await;
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.egress = format!("slack_api_url = \"{}\"\n", slack.api_url());
    let gw = Gateway::start(&cfg).await;
    Setup { _redis: redis, slack, _bot: bot, gw }
}

/// One call through the egress with `method` and `target`: status, headers, body.
async fn call(
    port: u16,
    method: &str,
    target: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, hyper::HeaderMap, Bytes) {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut b = hyper::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{target}"))
        .header("authorization", format!("Bearer {TOKEN}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req)).await.expect("answered").unwrap();
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    (status, headers, resp.into_body().collect().await.unwrap().to_bytes())
}

/// One raw request on its own connection; everything the egress sent back until it closed.
async fn raw(port: u16, request: &[u8]) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    c.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_goes_with_its_own_method_and_only_get_and_post_are_taken() {
    let s = setup("everb").await;
    let port = s.gw.egress_port;
    let (status, _, _) = call(port, "GET", "/api/users.info?user=U1&include_locale=true", "", &[]).await;
    assert_eq!(status, 200);
    let read = &s.slack.calls_of("users.info")[0];
    assert_eq!((read.verb.as_str(), read.query.as_deref()), ("GET", Some("user=U1&include_locale=true")));
    let (status, _, _) = call(port, "GET", "/api/chat.postMessage?channel=C1&text=hi", "", &[]).await;
    assert_eq!(status, 200);
    let write = &s.slack.calls_of("chat.postMessage")[0];
    assert_eq!((write.verb.as_str(), write.query.as_deref()), ("GET", Some("channel=C1&text=hi")));
    for verb in ["DELETE", "PUT", "PATCH", "HEAD"] {
        let (status, headers, _) = call(port, verb, "/api/chat.postMessage?channel=C1&text=gone", "", &[]).await;
        assert_eq!(status, 405, "{verb}");
        assert_eq!(headers.get("allow").unwrap(), "GET, POST");
    }
    assert_eq!(s.slack.calls_of("chat.postMessage").len(), 1, "nothing else was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_requests_get_400_and_an_absolute_target_is_its_path() {
    let s = setup("ebroken").await;
    let port = s.gw.egress_port;
    let secret = "xoxb-never-in-a-log-9a7c";
    let post = format!("POST /api/chat.postMessage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n");
    let broken = [
        format!("{post}X-Bare: a\rb\r\nContent-Length: 0\r\n\r\n"),
        format!("{post}X-Folded: a\r\n  b\r\nContent-Length: 0\r\n\r\n"),
        format!("{post}Content-Length: 4\r\nContent-Length: 12\r\n\r\nchannel=C1&t"),
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_string(),
    ];
    for request in &broken {
        let out = raw(port, request.as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 400"), "{request:?}: {out:?}");
        // The admin listener too, and neither writes the request's bytes to the log.
        let out = raw(s.gw.admin_port, request.replace("/api/chat.postMessage", "/stats").as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 400"), "admin: {request:?}: {out:?}");
    }
    assert!(!s.gw.log().contains(secret), "{}", s.gw.log());
    // A body over the cap is refused at once, not read (nor waited for).
    let out = raw(port, format!("{post}Content-Length: 9000000\r\n\r\nchannel=C1").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 413"), "{out:?}");
    assert!(s.slack.calls().is_empty(), "nothing of them reached Slack");
    let authority = format!("127.0.0.1:{port}");
    let absolute = format!(
        "POST http://{authority}/api/users.info HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 7\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n\r\nuser=U1"
    );
    let out = raw(port, absolute.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let read = &s.slack.calls_of("users.info")[0];
    assert_eq!(read.body, "user=U1".as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_cross_both_ways_and_a_replay_carries_the_first_answers() {
    let s = setup("eheaders").await;
    let port = s.gw.egress_port;
    let sdk = [
        ("user-agent", "Python/3.12 slackclient/3.33.0 Linux"),
        ("accept", "application/json"),
        ("accept-encoding", "gzip, deflate"),
        ("x-custom", "1"),
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "only-this-hop"),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    let (status, headers, _) = call(port, "POST", "/api/users.info", "user=U1", &sdk).await;
    assert_eq!(status, 200);
    assert!(headers.get("x-slack-req-id").is_some() && headers.get("x-oauth-scopes").is_some(), "{headers:?}");
    let read = &s.slack.calls_of("users.info")[0].headers;
    for (k, v) in &sdk[..4] {
        assert_eq!(read.get(*k).map(|v| v.to_str().unwrap()), Some(*v), "{k} reaches Slack on a read");
    }
    assert!(read.get("x-hop").is_none() && read.get("keep-alive").is_none(), "hop-by-hop stays: {read:?}");
    // A write asks for identity (its answer is parsed and kept) and keeps Slack's headers.
    let keyed = [sdk.as_slice(), &[("idempotency-key", "hk-1")]].concat();
    let (status, first, _) = call(port, "POST", "/api/chat.postMessage", "channel=C1&text=h", &keyed).await;
    assert_eq!(status, 200);
    let write = &s.slack.calls_of("chat.postMessage")[0].headers;
    assert_eq!(write.get("accept-encoding").unwrap(), "identity");
    assert_eq!(write.get("user-agent").unwrap(), sdk[0].1);
    assert_eq!(first.get("x-oauth-scopes").unwrap(), "chat:write,channels:history");
    let (_, replay, _) = call(port, "POST", "/api/chat.postMessage", "channel=C1&text=h", &keyed).await;
    assert_eq!(replay.get("idempotent-replayed").unwrap(), "true");
    for k in ["x-slack-req-id", "x-oauth-scopes", "x-accepted-oauth-scopes"] {
        assert_eq!(replay.get(k), first.get(k), "{k} replayed as it was first answered");
    }
    assert_eq!(s.slack.calls_of("chat.postMessage").len(), 1);
    // An empty POST says so.
    call(port, "POST", "/api/auth.revoke", "", &[]).await;
    let empty = &s.slack.calls_of("auth.revoke")[0].headers;
    assert_eq!(empty.get("content-length").map(|v| v.to_str().unwrap()), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_several_mib_streams_through() {
    let s = setup("elarge").await;
    let size = 6 << 20;
    let (status, headers, body) =
        call(s.gw.egress_port, "GET", &format!("/api/test.large?bytes={size}"), "", &[]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(200)]));
    assert!(body.len() > size && body.ends_with(b"\"}"), "whole: {} bytes", body.len());
    assert_eq!(headers.get("content-length").unwrap().to_str().unwrap(), body.len().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_retry_after_is_bounded_when_parsed() {
    let s = setup("ehostile").await;
    let port = s.gw.egress_port;
    let day = (24 * 3600).to_string();
    for value in ["18446744073709551615", "99999999999999999999999999999", "86401"] {
        s.slack.push(Behaviour::RateLimitedRaw(value));
        let (status, headers, body) = call(port, "POST", "/api/chat.update", "channel=C1&ts=1.2&text=x", &[]).await;
        assert_eq!(status, 429, "{value}: {}", String::from_utf8_lossy(&body));
        assert_eq!(headers.get("retry-after").unwrap().to_str().unwrap(), day, "{value}: a day at most");
    }
    // An HTTP-date is no hint: the egress waits its own second and sends again.
    s.slack.push(Behaviour::RateLimitedRaw("Wed, 21 Oct 2015 07:28:00 GMT"));
    let (status, _, _) = call(port, "POST", "/api/chat.update", "channel=C1&ts=1.2&text=y", &[]).await;
    assert_eq!(status, 200);
    assert!(!s.gw.log().contains("panicked"), "{}", s.gw.log());
}
