//! Real parts for the integration tests: a `redis-server` per test, the real `slackgate` binary
//! on free ports, a recording HTTP receiver standing in for the bot, a signing client, and a
//! headless Chromium for the pages.

#![allow(dead_code)]

mod bolt_process;
pub mod browser;
mod child;
mod fake_slack;
pub mod fake_socket;
mod gateway;
pub mod otlp;
mod raw;
mod receiver;
mod redis_cluster;
mod redis_secure;
mod redis_sentinel;
mod redis_server;
mod relay;
mod tls;
mod traffic;
mod wait;

pub use bolt_process::{Bolt, BoltProcess};
pub use browser::{processes_of, Browser, PHONE};
pub use child::KillOnDrop;
pub use fake_slack::{messages::BotMessage, Behaviour, FakeSlack, Look};
pub use fake_socket::FakeSocket;
pub use gateway::{started_on, Gateway, GatewayConfig};
pub use otlp::OtlpReceiver;
pub use raw::{closed_within, connect, request_from};
pub use receiver::{Receiver, Reply, Reserved};
pub use redis_cluster::{free_low_port, RedisCluster};
pub use redis_secure::RedisSecurity;
pub use redis_sentinel::RedisSentinel;
pub use redis_server::RedisServer;
pub use relay::Relay;
pub use tls::TestCa;
pub use traffic::{pace, Traffic};
pub use wait::*;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

pub const SECRET: &str = "test-signing-secret-0123456789";

pub fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// A unique key prefix per test.
pub fn prefix(test: &str) -> String {
    format!("t{}{}", test.replace(['_', ':'], ""), rand::random::<u16>())
}

/// Slack's signature, computed here independently of the gateway's code.
pub fn sign(secret: &str, ts: i64, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// An Events API envelope for `event_id`: a mention of its own, at a `ts` of its own (see
/// [`event_ts`]), so that events of different ids are different messages (and conversations).
pub fn event(event_id: &str) -> Vec<u8> {
    event_in(event_id, "C1")
}

/// [`event`] in `channel`.
pub fn event_in(event_id: &str, channel: &str) -> Vec<u8> {
    serde_json::json!({
        "token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": 1700000000,
        "event": {"type": "app_mention", "user": "U1", "text": "<@B1> hi", "channel": channel, "ts": event_ts(event_id)}
    })
    .to_string()
    .into_bytes()
}

/// The message `ts` of [`event`]`(event_id)`: a hash of the id (FNV-1a), unique enough.
pub fn event_ts(event_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in event_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}.{:06}", 1_600_000_000 + h % 100_000_000, (h >> 32) % 1_000_000)
}

/// The shard of [`event`]`(event_id)` over `shards`: its conversation's (a top-level message of
/// channel C1 starts its own thread).
pub fn event_shard(event_id: &str, shards: u16) -> u16 {
    slackgate::outbox::shard_of(&format!("c:T1:C1:{}", event_ts(event_id)), shards)
}

/// One HTTP request as Slack (or an attacker) would send it.
pub struct Req {
    pub method: &'static str,
    pub path: String,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub headers: Vec<(String, String)>,
}

impl Req {
    /// A correctly signed POST of `body` with `secret`.
    pub fn signed(path: &str, body: Vec<u8>, secret: &str) -> Req {
        Self::signed_at(path, body, secret, unix_now())
    }

    pub fn signed_at(path: &str, body: Vec<u8>, secret: &str, ts: i64) -> Req {
        let sig = sign(secret, ts, &body);
        let ct = if body.first() == Some(&b'{') { "application/json" } else { "application/x-www-form-urlencoded" };
        Req {
            method: "POST",
            path: path.into(),
            body,
            content_type: ct,
            headers: vec![("X-Slack-Request-Timestamp".into(), ts.to_string()), ("X-Slack-Signature".into(), sig)],
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Req {
        self.headers.push((k.into(), v.into()));
        self
    }
}

/// Send one request; returns status and body.
pub async fn send(port: u16, req: Req) -> (u16, Bytes) {
    try_send(port, req).await.expect("gateway answered within 10s")
}

/// Send like Slack: retry (200 ms apart) until some gateway answers 200, up to `limit`.
pub async fn deliver(ports: &[u16], id: &str, limit: Duration) -> bool {
    deliver_counting(ports, id, limit, &std::sync::atomic::AtomicUsize::new(0)).await
}

/// [`deliver`], counting in `answered` once when the first answer (of any status) comes.
pub async fn deliver_counting(
    ports: &[u16],
    id: &str,
    limit: Duration,
    answered: &std::sync::atomic::AtomicUsize,
) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let mut i = 0;
    while tokio::time::Instant::now() < deadline {
        let port = ports[i % ports.len()];
        let got = try_send(port, Req::signed("/slack/events", event(id), SECRET)).await;
        if i == 0 {
            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Ok((200, _)) = got {
            return true;
        }
        i += 1;
        // Slack's own pace between retries (it backs off far longer).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Send one request on a new connection; a refused or broken connection is an `Err`.
pub async fn try_send(port: u16, req: Req) -> Result<(u16, Bytes), String> {
    exchange(port, req).await.map(|(status, _, body)| (status, body))
}

/// Send one request on a new connection; status, content type and body.
pub async fn exchange(port: u16, req: Req) -> Result<(u16, Option<String>, Bytes), String> {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut b = hyper::Request::builder()
        .method(req.method)
        .uri(format!("http://127.0.0.1:{port}{}", req.path))
        .header("Content-Type", req.content_type);
    for (k, v) in &req.headers {
        b = b.header(k, v);
    }
    let request = b.body(Full::new(Bytes::from(req.body))).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .map_err(|_| "no answer within 10s".to_string())?
        .map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).map(String::from);
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, content_type, body))
}

/// The sum of the samples of every series on the gateway's `/metrics` whose line starts with
/// `series` (e.g. `slackgate_deliveries_total{app="bot",outcome="retried"}`).
pub async fn metric(admin_port: u16, series: &str) -> f64 {
    let mut req = Req::signed("/metrics", Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    let body = send(admin_port, req).await.1;
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
