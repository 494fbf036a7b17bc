//! Invariant 1: durable before ack. With Redis gone Slack gets 503 inside the budget, never a
//! 200; when Redis is back deliveries are accepted again.

use std::time::{Duration, Instant};

use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_means_503_never_200_and_back_means_accepted() {
    let mut redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("outage"), &bot.url());
    cfg.server = r#"ack_budget = "500ms""#.into();
    let gw = Gateway::start(&cfg).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvBefore"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);

    redis.stop();
    for i in 0..5 {
        let started = Instant::now();
        let (status, _) = send(gw.port, Req::signed("/slack/events", event(&format!("EvDown{i}")), SECRET)).await;
        assert_eq!(status, 503, "not recorded, so not acked");
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "answered within the budget ({:?})",
            started.elapsed()
        );
    }

    redis.restart();
    let mut accepted = None;
    for i in 0..100 {
        let (status, _) = send(gw.port, Req::signed("/slack/events", event(&format!("EvBack{i}")), SECRET)).await;
        assert!(status == 200 || status == 503, "{status}");
        if status == 200 {
            accepted = Some(i);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let i = accepted.expect("accepted again once Redis is back");
    assert!(eventually(Duration::from_secs(10), || bot.count_body(&format!("EvBack{i}")) == 1).await, "{}", gw.log());
    for i in 0..5 {
        assert_eq!(bot.count_body(&format!("EvDown{i}")), 0, "a 503'd delivery is Slack's to retry");
    }
}
