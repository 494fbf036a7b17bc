//! Redis Sentinel: one primary, two replicas, three sentinels. The gateway finds the primary
//! through the sentinels and, when it is killed mid-run and a replica promoted, follows the
//! failover. With `durability = "replicated"` every acked event is delivered.

use std::time::Duration;

use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_follows_a_sentinel_failover_and_loses_no_replicated_ack() {
    let mut set = RedisSentinel::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new("", &prefix("sentinel"), &bot.url());
    cfg.redis = format!("{}\ndurability = \"replicated\"\nwait_timeout = \"300ms\"", set.toml());
    let gw = Gateway::start(&cfg).await;
    let first = set.primary().expect("the sentinels name a primary");
    let n = crate::cluster::failover_events() * 2 / 3;
    let ids: Vec<String> = (0..n).map(|i| format!("EvSn{i:05}")).collect();
    let mut sends = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        if i == n * 3 / 8 {
            set.kill(first);
        }
        let (port, id) = (gw.port, id.clone());
        sends.push(tokio::spawn(async move {
            // Like Slack: retry until acked.
            for _ in 0..300 {
                if let Ok((200, _)) = try_send(port, Req::signed("/slack/events", event(&id), SECRET)).await {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            false
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for s in sends {
        assert!(s.await.unwrap(), "every event is acked in the end");
    }
    let now = set.primary().unwrap();
    assert_ne!(now, first, "a replica was promoted");
    assert!(
        eventually(Duration::from_secs(20), || ids.iter().all(|id| bot.count_body(id) >= 1)).await,
        "lost: {:?}",
        ids.iter().filter(|id| bot.count_body(id) == 0).collect::<Vec<_>>()
    );
    let (_, body) = send(
        gw.admin_port,
        Req { method: "GET", path: "/readyz".into(), body: vec![], content_type: "text/plain", headers: vec![] },
    )
    .await;
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("redis: primary named by the sentinels, role master"), "{body}");
}
