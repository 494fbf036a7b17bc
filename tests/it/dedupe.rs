//! Invariant 2: one forward per accepted delivery; duplicates are acked and never forwarded
//! again, including two copies arriving at the same moment on two gateway processes.

use std::sync::Arc;
use std::time::Duration;

use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_retries_are_acked_and_never_reach_the_bot_twice() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let gw = Gateway::start(&GatewayConfig::new(&redis.url(), &prefix("dup"), &bot.url())).await;
    let body = event("EvDup1");
    assert_eq!(send(gw.port, Req::signed("/slack/events", body.clone(), SECRET)).await.0, 200);
    // Slack's retry while the first is in flight, then again after delivery.
    let retry = Req::signed("/slack/events", body.clone(), SECRET)
        .header("X-Slack-Retry-Num", "1")
        .header("X-Slack-Retry-Reason", "http_timeout");
    assert_eq!(send(gw.port, retry).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    let retry = Req::signed("/slack/events", body, SECRET)
        .header("X-Slack-Retry-Num", "2")
        .header("X-Slack-Retry-Reason", "http_timeout");
    assert_eq!(send(gw.port, retry).await.0, 200);
    // A double-submitted slash command (same trigger_id) is absorbed the same way.
    let cmd =
        b"command=%2Fdeploy&text=prod&trigger_id=111.222.abc&response_url=https%3A%2F%2Fhooks.slack.com%2Fx".to_vec();
    assert_eq!(send(gw.port, Req::signed("/slack/events", cmd.clone(), SECRET)).await.0, 200);
    assert_eq!(send(gw.port, Req::signed("/slack/events", cmd, SECRET)).await.0, 200);
    gw.wait_idle().await;
    assert_eq!(bot.count_body("EvDup1"), 1);
    assert_eq!(bot.count_body("trigger_id=111.222.abc"), 1);
    assert_eq!(bot.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_copies_on_two_gateways_are_forwarded_once() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let cfg = GatewayConfig::new(&redis.url(), &prefix("race"), &bot.url());
    let (a, b) = (Gateway::start(&cfg).await, Gateway::start(&cfg).await);
    const N: usize = 40;
    for i in 0..N {
        let body = event(&format!("EvRace{i:03}"));
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let copies = [a.port, b.port].map(|port| {
            let (body, barrier) = (body.clone(), barrier.clone());
            tokio::spawn(async move {
                let req = Req::signed("/slack/events", body, SECRET);
                barrier.wait().await;
                send(port, req).await.0
            })
        });
        for c in copies {
            assert_eq!(c.await.unwrap(), 200, "both copies are acked");
        }
    }
    assert!(eventually(Duration::from_secs(10), || bot.count() >= N).await, "all delivered");
    a.wait_idle().await; // one Redis, one outbox: either gateway reads it
    for i in 0..N {
        assert_eq!(bot.count_body(&format!("EvRace{i:03}")), 1, "EvRace{i:03} forwarded exactly once");
    }
    assert_eq!(bot.count(), N);
}
