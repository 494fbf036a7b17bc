//! Overload: past the admission limit the ingress answers 503 at once and records nothing,
//! while the requests it admitted are recorded, acked and delivered. No timing is asserted:
//! the store is made slow on purpose (`CLIENT PAUSE … WRITE` holds every record script), so
//! the flood meets a full limit whatever the machine's speed.

use std::time::Duration;

use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_requests_get_503_and_record_nothing_while_admitted_ones_are_recorded() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("shed"), &bot.url());
    cfg.server = "max_pending = 2\nadmission_wait = \"200ms\"\n".into();
    let gw = Gateway::start(&cfg).await;
    // Connected and its scripts loaded before the store is held.
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvShedWarm"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);

    // Every record now waits for the pause to end (well inside the 2 s ack budget).
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(1200).arg("WRITE").query(&mut redis.conn()).unwrap();
    let flood: Vec<_> = (0..40)
        .map(|i| {
            let id = format!("EvShed{i:02}");
            let port = gw.port;
            tokio::spawn(async move { (send(port, Req::signed("/slack/events", event(&id), SECRET)).await.0, id) })
        })
        .collect();
    let mut acked = Vec::new();
    let mut shed = Vec::new();
    for answer in flood {
        match answer.await.unwrap() {
            (200, id) => acked.push(id),
            (503, id) => shed.push(id),
            (status, id) => panic!("{id}: {status}, only 200 or 503 under overload"),
        }
    }
    assert!(!acked.is_empty(), "the admitted ones are acked");
    assert!(!shed.is_empty(), "the excess is shed");
    assert!(acked.len() <= 2 + 2, "at most the limit plus its queue were admitted: {acked:?}");

    // The admitted are delivered; the shed left nothing behind — no receipt, no entry — and
    // reach the bot only when Slack sends them again.
    assert!(eventually(Duration::from_secs(10), || acked.iter().all(|id| bot.count_body(id) == 1)).await);
    for id in &shed {
        assert!(redis.keys(&format!("*{id}*")).is_empty(), "{id} was shed but left a key");
        assert_eq!(bot.count_body(id), 0, "{id} was shed but delivered");
    }
    assert_eq!(metric(gw.admin_port, "slackgate_shed_total{app=\"bot\"").await, shed.len() as f64);
    assert_eq!(metric(gw.admin_port, "slackgate_admitted_total{app=\"bot\"}").await, acked.len() as f64 + 1.0);
    let retried = &shed[0];
    assert_eq!(send(gw.port, Req::signed("/slack/events", event(retried), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count_body(retried) == 1).await, "a retry is a new delivery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shed_request_leaves_its_connection_open_for_the_next_one() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("shedka"), &bot.url());
    cfg.server = "max_pending = 1\nack_budget = \"2900ms\"\nadmission_wait = \"900ms\"\n".into();
    let gw = Gateway::start(&cfg).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvKaWarm"), SECRET)).await.0, 200);
    // Long enough for a loaded CI machine, short enough for the holder's record to finish
    // inside its 2.9 s budget.
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(2500).arg("WRITE").query(&mut redis.conn()).unwrap();
    // One request holds the only slot and one waits for it: the queue is full, and the next
    // requests are answered before their bodies are verified.
    let port = gw.port;
    let holder =
        tokio::spawn(async move { send(port, Req::signed("/slack/events", event("EvKaHold"), SECRET)).await.0 });
    assert!(metric_reaches(gw.admin_port, "slackgate_admission_pending", 1.0, Duration::from_secs(5)).await);
    let waiter =
        tokio::spawn(async move { send(port, Req::signed("/slack/events", event("EvKaWait"), SECRET)).await.0 });
    assert!(metric_reaches(gw.admin_port, "slackgate_admission_waiting", 1.0, Duration::from_secs(5)).await);
    // Past 100 ms the queue stands and the store is seen stalled: no room for a second waiter.
    // The condition is the queue's age (`admission::STANDING`) with the waiter still in it.
    let queued = tokio::time::Instant::now();
    let standing = until(Duration::from_secs(2), async || {
        queued.elapsed() > Duration::from_millis(150)
            && metric(gw.admin_port, "slackgate_admission_waiting").await >= 1.0
    })
    .await;
    assert!(standing, "the waiter left the queue before it stood\n{}", gw.log());
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let mut answers = String::new();
    for id in ["EvKa1", "EvKa2"] {
        conn.write_all(&raw_request(id)).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = conn.read(&mut buf).await.unwrap();
        answers.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(answers.matches("HTTP/1.1 503").count(), 2, "both answered on one connection: {answers}");
    assert_eq!(metric(gw.admin_port, "slackgate_shed_total{app=\"bot\",reason=\"full\"}").await, 2.0);
    assert_eq!(holder.await.unwrap(), 200);
    let _ = waiter.await;
}

/// A signed event as raw HTTP/1.1 bytes, for a hand-held connection.
fn raw_request(id: &str) -> Vec<u8> {
    let body = event(id);
    let ts = unix_now();
    let head = format!(
        "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {}\r\n\r\n",
        body.len(),
        sign(SECRET, ts, &body)
    );
    [head.into_bytes(), body].concat()
}
