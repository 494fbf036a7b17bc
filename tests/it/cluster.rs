//! Redis Cluster: 3 primaries + 3 replicas made by the test, 3 gateway processes on it, an
//! app split over 6 shards. Every delivery's keys share its shard's hash tag, so the record is
//! one atomic script on one primary and nothing is ever CROSSSLOT.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::utils::*;

/// Events per failover run: 60 in the suite; `bench/failover.sh` runs longer ones.
pub fn failover_events() -> usize {
    std::env::var("SG_FAILOVER_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(60)
}

fn cluster_config(cluster: &RedisCluster, bot: &Receiver, name: &str, extra: &str) -> GatewayConfig {
    let mut cfg = GatewayConfig::new("", &prefix(name), &bot.url());
    cfg.redis = format!("{}\nshards = 6\n{extra}", cluster.toml());
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_a_cluster_deliver_each_event_once_from_every_master() {
    let cluster = RedisCluster::start(3, 1);
    let bot = Receiver::start(SECRET).await;
    let cfg = cluster_config(&cluster, &bot, "cluster", "");
    let gateways = [Gateway::start(&cfg).await, Gateway::start(&cfg).await, Gateway::start(&cfg).await];
    let ports: Vec<u16> = gateways.iter().map(|g| g.port).collect();
    let ids: Vec<String> = (0..60).map(|i| format!("EvCl{i:03}")).collect();
    // Every event twice at the same moment, on two different gateways (Slack's duplicates).
    let sends = ids.iter().enumerate().flat_map(|(i, id)| {
        [ports[i % 3], ports[(i + 1) % 3]]
            .map(|port| tokio::spawn(send(port, Req::signed("/slack/events", event(id), SECRET))))
    });
    for s in sends.collect::<Vec<_>>() {
        assert_eq!(s.await.unwrap().0, 200);
    }
    assert!(eventually(Duration::from_secs(20), || ids.iter().all(|id| bot.count_body(id) >= 1)).await);
    gateways[0].wait_idle().await; // one cluster, one outbox: any gateway reads it
    for id in &ids {
        assert_eq!(bot.count_body(id), 1, "{id} delivered once");
    }
    // The shards' streams live on all three primaries.
    let with_streams: BTreeSet<u16> = cluster
        .masters()
        .into_iter()
        .filter(|m| !cluster.keys_on(*m, &format!("{{{}:bot:*}}:stream", cfg.prefix)).is_empty())
        .collect();
    assert_eq!(with_streams.len(), 3, "6 shards spread over 3 masters: {with_streams:?}");
    for g in &gateways {
        assert_eq!(metric(g.admin_port, "slackgate_store_errors_total{app=\"bot\",reason=\"record\"}").await, 0.0);
        let body = reqwest_readyz(g.admin_port).await;
        assert!(body.contains("redis: cluster, state ok, 3 masters"), "{body}");
    }
}

async fn reqwest_readyz(admin: u16) -> String {
    let (status, body) = send(
        admin,
        Req { method: "GET", path: "/readyz".into(), body: vec![], content_type: "text/plain", headers: vec![] },
    )
    .await;
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body).into_owned()
}

/// What a failover costs: the replica of one primary is frozen and cut off (so it confirms
/// nothing), the
/// bot is down (so nothing is delivered yet), 60 events are sent like Slack sends them; the
/// primary is killed, its replica thawed and promoted, the killed node restarted as the new
/// primary's replica (as a restarted pod would be), and the bot comes up. Returns the events
/// acked and the events acked that the bot never got.
async fn failover_run(name: &str, durability: &str) -> (usize, Vec<String>, Vec<String>) {
    let mut cluster = RedisCluster::start(3, 1);
    let bot_port = Reserved::new();
    let mut cfg = GatewayConfig::new("", &prefix(name), &bot_port.url());
    cfg.redis = format!("{}\nshards = 6\ndurability = \"{durability}\"\nwait_timeout = \"300ms\"", cluster.toml());
    let gateways = [Gateway::start(&cfg).await, Gateway::start(&cfg).await];
    let ports: Vec<u16> = gateways.iter().map(|g| g.port).collect();
    // The primary of shard 0 (of 6 shards, about one event in six goes there).
    let victim = cluster.owner_of(&format!("{{{}:bot:0}}:stream", cfg.prefix));
    let replica = cluster.replica_of(victim);
    let owners: Vec<u16> = (0..6).map(|shard| cluster.owner_of(&format!("{{{}:bot:{shard}}}:x", cfg.prefix))).collect();
    let on_victim = |id: &String| owners[usize::from(event_shard(id, 6))] == victim;
    // Frozen, and cut off: what the primary records from now on reaches no replica (a frozen
    // process's socket would still take the stream into its kernel buffer).
    cluster.signal(replica, "STOP");
    let _: () =
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut cluster.node(victim).unwrap()).unwrap();
    let ids: Vec<String> = (0..failover_events()).map(|i| format!("Ev{name}{i:05}")).collect();
    let victims: Vec<String> = ids.iter().filter(|id| on_victim(id)).cloned().collect();
    let answered = Arc::new(AtomicUsize::new(0));
    let sends: Vec<_> = ids
        .iter()
        .map(|id| {
            let (ports, id, answered) = (ports.clone(), id.clone(), answered.clone());
            tokio::spawn(async move { deliver_counting(&ports, &id, Duration::from_secs(60), &answered).await })
        })
        .collect();
    let mut acked = 0;
    let mut sends = Some(sends);
    if durability == "local" {
        // Acked at once by the primary alone: count them before it dies, so that every ack
        // counted was made by the primary that then dies (once, on a busy machine, acks took
        // longer than the 2 s this waited before, and some came only after the failover).
        for s in sends.take().unwrap() {
            acked += usize::from(s.await.unwrap());
        }
    } else {
        // Every event has had its first answer (the victim's a 503: its replica confirms nothing).
        let all = eventually(Duration::from_secs(30), || answered.load(Ordering::Relaxed) == ids.len()).await;
        assert!(all, "every event answered once before the kill");
    }
    cluster.kill(victim);
    cluster.signal(replica, "CONT");
    assert!(cluster.wait_primary(replica, Duration::from_secs(20)), "the replica took over");
    assert!(cluster.wait_ok(Duration::from_secs(20)), "the cluster is whole again");
    cluster.restart(victim);
    assert!(cluster.wait_ok(Duration::from_secs(20)), "the old primary is back, as a replica");
    let bot = bot_port.start(SECRET).await;
    for s in sends.into_iter().flatten() {
        acked += usize::from(s.await.unwrap());
    }
    // Every acked event that survived reaches the bot; wait until the outbox is idle (nothing
    // ready, in flight or scheduled on any shard), so that what is counted lost is lost, not late.
    let idle = outbox_idle(gateways[0].admin_port, Duration::from_secs(90)).await;
    assert!(
        idle,
        "the outbox never went idle: {}\n{}",
        outbox_stats(gateways[0].admin_port, None).await,
        gateways[0].log()
    );
    (acked, ids.iter().filter(|id| bot.count_body(id) == 0).cloned().collect(), victims)
}

/// With `durability = "replicated"` an ack waits until a replica has the record: the events
/// sent while the replica was frozen are answered 503 until the failover is over, and Slack's
/// retries then record them on the new primary. Nothing acked is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replicated_acks_a_failover_loses_nothing() {
    let (acked, lost, _) = failover_run("Repl", "replicated").await;
    assert_eq!(acked, failover_events(), "every event is acked in the end");
    eprintln!("durability = replicated: 0 of {acked} acked events lost in the failover");
    assert!(lost.is_empty(), "acked but never delivered: {lost:?}");
}

/// With `durability = "local"` (the default) an ack means the primary has it: what the frozen
/// replica never got is lost when the primary dies. The run counts it — which is what the
/// README tells operators to expect of `local`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_local_acks_a_failover_loses_what_the_replica_had_not_got() {
    let (acked, lost, on_victim) = failover_run("Local", "local").await;
    assert_eq!(acked, failover_events(), "every event is acked (at once)");
    assert!(!lost.is_empty(), "the records only the dead primary had are lost");
    let elsewhere: Vec<_> = lost.iter().filter(|id| !on_victim.contains(id)).collect();
    assert!(elsewhere.is_empty(), "lost, yet on a primary that lived: {elsewhere:?}");
    eprintln!(
        "durability = local: {} of {acked} acked events lost in the failover ({} were on the dead primary's shards)",
        lost.len(),
        on_victim.len()
    );
}

/// One primary killed (no replica to take over), events keep coming for every shard, five to
/// the dead primary's shards for each one to the others'. The dead shards' records hold their
/// slots while the client tries to reconnect, but once they are seen to record nothing they
/// are held to their probes (the rest answered 503 at once, for Slack to retry), so the other
/// primaries' shards keep getting slots: every one of their events is acked. (Without the
/// shard gate, the dead shards' records take every slot and these events get 503.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_primary_does_not_take_the_acks_of_the_other_shards() {
    let mut cluster = RedisCluster::start(3, 0);
    // The other primaries go on serving their slots while one is down (else the whole cluster
    // says CLUSTERDOWN once the dead one is marked failed).
    cluster.config_set("cluster-require-full-coverage", "no");
    let bot = Receiver::start(SECRET).await;
    let mut cfg = cluster_config(&cluster, &bot, "deadprimary", "");
    cfg.server = "max_pending = 16\nadmission_wait = \"200ms\"\nack_budget = \"2s\"".into();
    let owners: Vec<u16> = (0..6).map(|shard| cluster.owner_of(&format!("{{{}:bot:{shard}}}:x", cfg.prefix))).collect();
    // The primary with the fewest of the 6 shards (at least one) dies: the fewer its lanes, the
    // fewer probes, and some shards always stay alive.
    let shards_on = |m: u16| owners.iter().filter(|o| **o == m).count();
    let dead = *owners.iter().min_by_key(|m| shards_on(**m)).unwrap();
    assert!(shards_on(dead) < 6, "all 6 shards on one primary: {owners:?}");
    let on_dead = |id: &str| owners[usize::from(event_shard(id, 6))] == dead;
    let (mut stuck, mut healthy) = (Vec::new(), Vec::new());
    for i in 0..100_000 {
        let id = format!("EvFz{i:05}");
        match on_dead(&id) {
            true if stuck.len() < 250 => stuck.push(id),
            false if healthy.len() < 50 => healthy.push(id),
            _ if stuck.len() == 250 && healthy.len() == 50 => break,
            _ => {}
        }
    }
    let gw = Gateway::start(&cfg).await;
    // Up, as an operator's gateway is before a primary dies: the delivery workers have read the
    // shard register (which may live on the primary that dies).
    let started = eventually(Duration::from_secs(10), || gw.log().contains("delivery workers started")).await;
    assert!(started, "the delivery workers never started:\n{}", gw.log());
    cluster.kill(dead);
    let killed_at = tokio::time::Instant::now();
    let mut stuck = stuck.into_iter();
    let mut settled = Vec::new();
    // Slack's pace: the events are spread over the seconds after the kill.
    let mut slack = pace(Duration::from_millis(100));
    for id in &healthy {
        slack.tick().await;
        for id in stuck.by_ref().take(5) {
            tokio::spawn(try_send(gw.port, Req::signed("/slack/events", event(&id), SECRET)));
        }
        let sent_at = killed_at.elapsed();
        let status = send(gw.port, Req::signed("/slack/events", event(id), SECRET)).await.0;
        // At first the dead shards' records hold every slot: those admitted before their lanes
        // were seen stalled (half the budget) give up at the latest at the budget (2 s).
        if sent_at > Duration::from_millis(3500) {
            settled.push((id.clone(), status));
        }
    }
    assert!(settled.len() >= 10, "sent after the first slots gave up: {}", settled.len());
    let refused: Vec<_> = settled.iter().filter(|(_, s)| *s != 200).collect();
    eprintln!(
        "healthy shards' events after the first slots gave up: {} sent, {} refused",
        settled.len(),
        refused.len()
    );
    let limit = metric(gw.admin_port, "slackgate_admission_limit").await;
    assert!(refused.is_empty(), "the healthy shards' events refused: {refused:?} (limit {limit})\n{}", gw.log());
    let stalled = metric(gw.admin_port, "slackgate_shed_total{app=\"bot\",reason=\"stalled_shard\"}").await;
    assert!(stalled > 0.0, "the dead shards' extra records were turned away");
}
