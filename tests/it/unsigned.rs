//! What arrives before a signature is checked: Slack's unsigned `ssl_check` is answered and
//! nothing else unsigned is, and the bytes of unverified bodies are bounded across all
//! connections (beyond the budget: 503 at once, nothing recorded).

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::utils::*;

fn unsigned_form(path: &str, body: &str) -> Req {
    Req {
        method: "POST",
        path: path.into(),
        body: body.as_bytes().to_vec(),
        content_type: "application/x-www-form-urlencoded",
        headers: Vec::new(),
    }
}

/// Keys a request may leave: the workers' outbox group and shard register, made at start.
fn stored(redis: &RedisServer) -> Vec<String> {
    redis
        .keys("*")
        .into_iter()
        .filter(|k| !k.ends_with(":outbox") && !k.ends_with(":stream") && !k.ends_with(":shards"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_ssl_check_gets_200_and_nothing_else_unsigned_passes() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let gw = Gateway::start(&GatewayConfig::new(&redis.url(), &prefix("sslcheck"), &bot.url())).await;
    // As Slack sends it when a slash command's Request URL is saved: no signature headers.
    let (status, ct, body) =
        exchange(gw.port, unsigned_form("/slack/events", "ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO")).await.unwrap();
    assert_eq!((status, body.len()), (200, 0), "answered, with an empty body");
    assert_eq!(ct.as_deref(), Some("text/plain"));
    let refused = [
        ("ssl_check=1&command=%2Fdeploy&text=prod&trigger_id=1.2.3", "application/x-www-form-urlencoded"),
        ("ssl_check=1&payload=%7B%22type%22%3A%22block_actions%22%7D", "application/x-www-form-urlencoded"),
        ("ssl_check=1&trigger_id=1.2.3", "application/x-www-form-urlencoded"),
        ("ssl_check=0&token=x", "application/x-www-form-urlencoded"),
        ("ssl_check=1&token=x", "application/json"),
        ("{\"ssl_check\":\"1\"}", "application/json"),
    ];
    for (body, content_type) in refused {
        let mut req = unsigned_form("/slack/events", body);
        req.content_type = content_type;
        assert_eq!(send(gw.port, req).await.0, 401, "unsigned {body} ({content_type}) is no ssl_check");
    }
    let long = format!("ssl_check=1&token={}", "a".repeat(400));
    assert_eq!(send(gw.port, unsigned_form("/slack/events", &long)).await.0, 401, "read only up to a few bytes");
    // Half-signed is not unsigned: a timestamp without a signature is refused.
    let half =
        unsigned_form("/slack/events", "ssl_check=1").header("X-Slack-Request-Timestamp", &unix_now().to_string());
    assert_eq!(send(gw.port, half).await.0, 401);
    assert_eq!(send(gw.port, unsigned_form("/nowhere", "ssl_check=1")).await.0, 404, "only on a Slack route");
    // Nothing recorded, nothing forwarded.
    assert!(stored(&redis).is_empty(), "stored: {:?}", stored(&redis));
    let signed = Req::signed("/slack/events", event("EvAfterSslCheck"), SECRET);
    assert_eq!(send(gw.port, signed).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await);
    assert_eq!(bot.count_body("ssl_check"), 0, "the check never reached the bot");
    let answered = r#"slackgate_requests_total{app="bot",kind="ssl_check",outcome="answered"}"#;
    assert_eq!(metric(gw.admin_port, answered).await, 1.0);
}

/// Signed headers and a declared body, then only a few of its bytes: a stalled upload.
async fn stalled_upload(port: u16, declared: usize) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = format!(
        "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\
         X-Slack-Request-Timestamp: {}\r\nX-Slack-Signature: v0={}\r\n\r\n{{\"type\":",
        unix_now(),
        "0".repeat(64)
    );
    c.write_all(head.as_bytes()).await.unwrap();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unverified_bodies_share_one_budget_and_past_it_get_503_at_once() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("unverified"), &bot.url());
    cfg.server = "max_body = \"16KiB\"\nunverified_budget = \"32KiB\"\nbody_timeout = \"20s\"\n".into();
    let gw = Gateway::start(&cfg).await;
    // Two uploads that declare 16,000 bytes each and stall hold 32,000 of the 32,768.
    let stalled = vec![stalled_upload(gw.port, 16_000).await, stalled_upload(gw.port, 16_000).await];
    let held = "slackgate_unverified_bytes";
    assert!(metric_reaches(gw.admin_port, held, 32_000.0, Duration::from_secs(10)).await, "both holds taken");
    // A real event of ~1 KB finds no room: 503 at once (Slack retries), not a wait behind the
    // stalled bodies, and nothing of it is recorded.
    let body = event(&format!("EvBudget{}", "x".repeat(1000)));
    assert_eq!(
        send(gw.port, Req::signed("/slack/events", body, SECRET)).await.0,
        503,
        "refused while the budget is held"
    );
    let shed = r#"slackgate_shed_total{app="bot",reason="unverified_budget"}"#;
    assert_eq!(metric(gw.admin_port, shed).await, 1.0);
    assert!(redis.keys("*:r:e:EvBudget*").is_empty(), "nothing recorded");
    // A body that fits in what is left (768 bytes) still passes.
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvSmall"), SECRET)).await.0, 200);
    // The stalled uploads go; their bytes come back and events are acked again.
    drop(stalled);
    let mut i = 0;
    let acked = until(Duration::from_secs(10), async || {
        i += 1;
        let body = event(&format!("EvBudgetBack{i}{}", "x".repeat(1000)));
        send(gw.port, Req::signed("/slack/events", body, SECRET)).await.0 == 200
    })
    .await;
    assert!(acked, "the budget came back when the stalled bodies went");
    let given_back = until(Duration::from_secs(10), async || metric(gw.admin_port, held).await == 0.0).await;
    assert!(given_back, "every hold given back");
}
