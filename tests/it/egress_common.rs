//! What the egress tests of issue 16 share: a gateway with an egress in front of a fake Slack,
//! one call through it (path with its query, body, headers), the admin's note list.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

use crate::utils::*;

pub const TOKEN: &str = "xoxb-test-token-7f3a9c";

pub struct Setup {
    pub redis: RedisServer,
    pub slack: FakeSlack,
    pub bot: Receiver,
    pub gw: Gateway,
}

pub async fn setup(name: &str, egress: &str) -> Setup {
    let redis = RedisServer::start();
    let slack = FakeSlack::start().await;
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.egress = format!("slack_api_url = \"{}\"\n{egress}", slack.api_url());
    let gw = Gateway::start(&cfg).await;
    Setup { redis, slack, bot, gw }
}

pub struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        serde_json::from_str::<serde_json::Value>(&self.body).is_ok_and(|v| v["ok"] == true)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }
}

/// One Web API call: `target` is `<method>` or `<method>?<query>` (or a whole path, from its
/// `/`); the bearer token is [`TOKEN`] unless `headers` names another.
pub async fn call(port: u16, target: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
    try_call(port, target, body, headers).await.unwrap_or_else(|e| panic!("{target}: {e}"))
}

pub async fn try_call(port: u16, target: &str, body: &str, headers: &[(&str, &str)]) -> Result<Answer, String> {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    let path = if target.starts_with('/') { target.to_string() } else { format!("/api/{target}") };
    let mut b = hyper::Request::post(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/x-www-form-urlencoded");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization")) {
        b = b.header("authorization", format!("Bearer {TOKEN}"));
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .map_err(|_| "no answer in 30 s".to_string())?
        .map_err(|e| format!("{e:?}"))?;
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// Call until the answer is not `status` (e.g. 409), up to `limit`: the answer, and how long
/// `status` lasted.
pub async fn call_past(
    port: u16,
    target: &str,
    body: &str,
    headers: &[(&str, &str)],
    status: u16,
    limit: Duration,
) -> (Answer, Duration) {
    let started = Instant::now();
    let mut last = None;
    until(limit, async || {
        let a = call(port, target, body, headers).await;
        let past = a.status != status;
        last = Some(a);
        past
    })
    .await;
    (last.expect("called at least once"), started.elapsed())
}

/// `GET /egress` on the admin port, with `query`: status and the JSON.
pub async fn notes(admin_port: u16, query: &str) -> (u16, usize, serde_json::Value) {
    let mut req = Req::signed(&format!("/egress{query}"), Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    let (status, body) = send(admin_port, req).await;
    (status, body.len(), serde_json::from_slice(&body).unwrap_or_default())
}

/// What `slackgate egress --json` lists for the gateway's config.
pub fn egress_cli(gw: &Gateway) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(["egress", "--json", "--config"])
        .arg(&gw.config_path)
        .env("SG_TEST_SECRET", SECRET)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// An app_mention in channel C1 at `ts`, delivered through the gateway to the bot.
pub async fn deliver_mention(s: &Setup, event_id: &str, ts: &str) {
    let body = serde_json::json!({
        "type": "event_callback", "event_id": event_id, "team_id": "T1", "api_app_id": "A1",
        "authorizations": [{"user_id": "UBOT", "is_bot": true}],
        "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> help", "channel": "C1", "ts": ts}
    });
    assert_eq!(send(s.gw.port, Req::signed("/slack/events", body.to_string().into_bytes(), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || s.bot.count_body(event_id) == 1).await);
}

pub async fn delete_message(s: &Setup, event_id: &str, ts: &str) {
    let body = serde_json::json!({
        "type": "event_callback", "event_id": event_id, "team_id": "T1",
        "event": {"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "1800000001.000001",
                  "deleted_ts": ts, "previous_message": {"ts": ts, "user": "U1", "text": "<@UBOT> help"}}
    });
    assert_eq!(send(s.gw.port, Req::signed("/slack/events", body.to_string().into_bytes(), SECRET)).await.0, 200);
}

/// The egress's counter of calls with this outcome.
pub async fn outcomes(admin_port: u16, outcome: &str) -> f64 {
    metric(admin_port, &format!(r#"slackgate_egress_calls_total{{class="write",outcome="{outcome}"}}"#)).await
}
