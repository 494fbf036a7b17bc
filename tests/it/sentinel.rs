//! Redis Sentinel: one primary, two replicas, three sentinels. The gateway finds the primary
//! through the sentinels and, when it is killed mid-run and a replica promoted, follows the
//! failover. With `durability = "replicated"` every acked event is delivered; with `local`,
//! what the replicas had not got when the primary died is lost, and counted.

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
    // Slack's pace: the primary dies while events keep coming.
    let mut slack = pace(Duration::from_millis(50));
    for (i, id) in ids.iter().enumerate() {
        slack.tick().await;
        if i == n * 3 / 8 {
            set.kill(first);
        }
        let (port, id) = (gw.port, id.clone());
        sends.push(tokio::spawn(async move { deliver(&[port], &id, Duration::from_secs(60)).await }));
    }
    for s in sends {
        assert!(s.await.unwrap(), "every event is acked in the end");
    }
    // The sentinel asked may hear of the promotion a hello later than the one the gateway asked.
    set.wait_new_primary(first, Duration::from_secs(30)).expect("a replica was promoted");
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

/// The primary's replicas are frozen and cut off, the bot is down, events are sent like Slack
/// sends them; the primary is killed, the replicas thawed, one promoted by the sentinels, and
/// the bot comes up. Returns the events acked and those acked that the bot never got.
async fn sentinel_failover_run(name: &str, durability: &str) -> (usize, Vec<String>) {
    let mut set = RedisSentinel::start();
    let bot_port = Reserved::new();
    let mut cfg = GatewayConfig::new("", &prefix(name), &bot_port.url());
    cfg.redis = format!("{}\ndurability = \"{durability}\"\nwait_timeout = \"300ms\"", set.toml());
    let gw = Gateway::start(&cfg).await;
    let first = set.primary().expect("the sentinels name a primary");
    let replicas: Vec<u16> = set.nodes.iter().copied().filter(|p| *p != first).collect();
    for r in &replicas {
        set.signal(*r, "STOP");
    }
    let _: () =
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut set.conn(first).unwrap()).unwrap();
    let ids: Vec<String> = (0..crate::cluster::failover_events() / 2).map(|i| format!("Ev{name}{i:05}")).collect();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sends: Vec<_> = ids
        .iter()
        .map(|id| {
            let (port, id, answered) = (gw.port, id.clone(), answered.clone());
            tokio::spawn(async move { deliver_counting(&[port], &id, Duration::from_secs(60), &answered).await })
        })
        .collect();
    // Every event has had its first answer before the primary dies (with `replicated`, a 503:
    // the frozen replicas confirm nothing).
    let all = eventually(Duration::from_secs(30), || answered.load(std::sync::atomic::Ordering::Relaxed) == ids.len());
    assert!(all.await, "every event answered once before the kill");
    set.kill(first);
    for r in &replicas {
        set.signal(*r, "CONT");
    }
    let now = set.wait_new_primary(first, Duration::from_secs(30)).expect("a replica was promoted");
    assert!(set.wait_replicas(now, 1, Duration::from_secs(30)), "the other replica follows the new primary");
    let bot = bot_port.start(SECRET).await;
    let mut acked = 0;
    for s in sends {
        acked += usize::from(s.await.unwrap());
    }
    // What is counted lost is lost, not late: nothing waits in the outbox any more.
    let idle = outbox_idle(gw.admin_port, Duration::from_secs(60)).await;
    assert!(idle, "the outbox never went idle: {}\n{}", outbox_stats(gw.admin_port, None).await, gw.log());
    (acked, ids.iter().filter(|id| bot.count_body(id) == 0).cloned().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_loses_no_replicated_ack_and_counts_the_local_ones() {
    let (acked, lost) = sentinel_failover_run("SnRepl", "replicated").await;
    assert_eq!(acked, crate::cluster::failover_events() / 2, "every event is acked in the end");
    assert!(lost.is_empty(), "replicated: acked but never delivered: {lost:?}");
    let (acked, lost) = sentinel_failover_run("SnLocal", "local").await;
    assert_eq!(acked, crate::cluster::failover_events() / 2, "every event is acked (at once)");
    assert!(!lost.is_empty(), "local: what only the dead primary had is lost");
    eprintln!("sentinel, durability = local: {} of {acked} acked events lost in the failover", lost.len());
}
