//! Invariant 4: leases expire and completion is fenced — exercised on the outbox itself against
//! a real Redis, with leases short enough to expire inside the test.

use std::time::Duration;

use slackgate::outbox::{self, Delivered, Finish, Loaded, NewDelivery, Placement, Recorded, ShardKeys, Store};
use slackgate::slack::Kind;

use crate::utils::*;

mod carried;

pub(super) async fn setup() -> (RedisServer, Store, slackgate::store::Conn, ShardKeys) {
    let redis = RedisServer::start();
    let endpoint = outbox::Endpoint::url(&redis.url());
    let store = Store::new(slackgate::store::connect_lazy(&endpoint, Duration::from_secs(2)).unwrap());
    let reader = slackgate::store::connect_lazy(&endpoint, Duration::from_secs(5)).unwrap();
    let keys = ShardKeys::new(&prefix("fence"), "bot", 0);
    store.ensure_group(&keys).await.unwrap();
    (redis, store, reader, keys)
}

pub(super) async fn record(store: &Store, keys: &ShardKeys, id: &str, receipt: &str) -> Recorded {
    record_as(store, keys, id, receipt, false).await
}

/// Recorded as an app without turns records it: carried in its entry.
pub(super) async fn record_carried(store: &Store, keys: &ShardKeys, id: &str, receipt: &str) -> Recorded {
    record_as(store, keys, id, receipt, true).await
}

async fn record_as(store: &Store, keys: &ShardKeys, id: &str, receipt: &str, carry: bool) -> Recorded {
    let d = NewDelivery {
        id,
        receipt: Some(receipt),
        body: b"{\"type\":\"event_callback\"}",
        content_type: b"application/json",
        path: "/slack/events",
        kind: Kind::Event,
        received_ms: slackgate::clock::now_ms(),
        ttl: Duration::from_secs(60),
        placement: Placement::Stream,
        claim: None,
        cancel: None,
        detail: "app_mention",
        response_url: "",
        conversation: "",
        carry,
    };
    store.record(keys, &d).await.unwrap()
}

#[tokio::test]
async fn a_worker_whose_lease_was_taken_cannot_complete() {
    let (redis, store, mut reader, keys) = setup().await;
    assert_eq!(record(&store, &keys, "0-a", "e:Ev1").await, Recorded::New { cancelled: false });
    let held = outbox::read_new(&mut reader, &keys, "worker-a", 10, Duration::from_millis(100)).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].delivery, "0-a");
    // Not yet expired: nobody can take it.
    assert!(store.reclaim(&keys, "worker-b", Duration::from_secs(30), 10).await.unwrap().is_empty());
    let taken = expired(&store, &keys, "worker-b", 10).await;
    assert_eq!(taken.len(), 1);
    assert!(taken[0].token > held[0].token);

    assert!(!store.extend(&keys, "worker-a", &held[0]).await.unwrap(), "old holder cannot extend");
    assert!(!store.finish(&keys, "worker-a", &held[0], Finish::Done).await.unwrap(), "old holder cannot complete");
    assert_eq!(redis.xlen(keys.stream()), 1, "entry untouched by the fenced call");
    assert!(store.load(&keys, "0-a").await.unwrap().is_some());

    assert!(store.extend(&keys, "worker-b", &taken[0]).await.unwrap());
    assert!(store.finish(&keys, "worker-b", &taken[0], Finish::Done).await.unwrap(), "new holder completes");
    assert_eq!(redis.xlen(keys.stream()), 0);
    assert!(store.load(&keys, "0-a").await.unwrap().is_none());
    // The receipt outlives the delivery, so a late Slack retry is still absorbed.
    assert_eq!(record(&store, &keys, "0-b", "e:Ev1").await, Recorded::Duplicate("0-a".into()));
}

#[tokio::test]
async fn re_claiming_its_own_expired_entry_fences_the_old_attempt() {
    let (_redis, store, mut reader, keys) = setup().await;
    record(&store, &keys, "0-c", "e:Ev2").await;
    let first = outbox::read_new(&mut reader, &keys, "worker-a", 10, Duration::from_millis(100)).await.unwrap();
    let again = expired(&store, &keys, "worker-a", 10).await;
    assert_eq!(again.len(), 1);
    assert!(!store.finish(&keys, "worker-a", &first[0], Finish::Done).await.unwrap());
    assert!(store.finish(&keys, "worker-a", &again[0], Finish::Done).await.unwrap());
}

#[tokio::test]
async fn a_scheduled_retry_comes_back_when_due_and_counts_the_attempt() {
    let (redis, store, mut reader, keys) = setup().await;
    record(&store, &keys, "0-d", "e:Ev3").await;
    let lease = outbox::read_new(&mut reader, &keys, "w", 10, Duration::from_millis(100)).await.unwrap().remove(0);
    let now = slackgate::clock::now_ms();
    let retry = Finish::Retry { due_ms: now + 1_000, status: Some(503), error: "" };
    assert!(store.finish(&keys, "w", &lease, retry).await.unwrap());
    assert_eq!(redis.xlen(keys.stream()), 0);
    assert_eq!(store.promote(&keys, now, 100).await.unwrap(), 0, "not due yet");
    assert_eq!(store.promote(&keys, now + 1_001, 100).await.unwrap(), 1);
    assert_eq!(store.promote(&keys, now + 1_001, 100).await.unwrap(), 0, "promoted once");
    let back = outbox::read_new(&mut reader, &keys, "w", 10, Duration::from_millis(100)).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].delivery, "0-d");
    assert_eq!(store.load(&keys, "0-d").await.unwrap().unwrap().retries, 1);
    let dead = Finish::Dead { now_ms: now, status: Some(404), error: "", final_: true };
    assert!(store.finish(&keys, "w", &back[0], dead).await.unwrap());
    assert_eq!(redis.xlen(keys.dead()), 1);
    assert_eq!(store.load(&keys, "0-d").await.unwrap().unwrap().retries, 2, "kept for replay");
}

#[tokio::test]
async fn an_attempt_loads_its_delivery_only_while_it_holds_the_lease() {
    let (_redis, store, mut reader, keys) = setup().await;
    record(&store, &keys, "0-l", "e:EvLoad").await;
    record(&store, &keys, "0-m", "e:EvLoad2").await;
    let held = outbox::read_new(&mut reader, &keys, "worker-a", 10, Duration::from_millis(100)).await.unwrap();
    assert_eq!(held.len(), 2);
    let loaded = store.load_leased(&keys, "worker-a", &held).await.unwrap();
    assert!(loaded.iter().all(|l| matches!(l, Loaded::Stored(_))), "{loaded:?}");
    let taken = expired(&store, &keys, "worker-b", 1).await;
    assert_eq!(taken.len(), 1);
    // One read's leases are loaded in one call, each fenced on its own: the one taken over is
    // refused to the old holder (still waiting for a permit, it must not send it), the other
    // is still its own.
    let again = store.load_leased(&keys, "worker-a", &held).await.unwrap();
    let lost = held.iter().position(|l| l.entry == taken[0].entry).unwrap();
    assert!(matches!(again[lost], Loaded::LeaseLost), "{again:?}");
    assert!(matches!(again[1 - lost], Loaded::Stored(_)), "{again:?}");
    match &store.load_leased(&keys, "worker-b", &taken).await.unwrap()[0] {
        Loaded::Stored(d) => assert_eq!(d.detail, "app_mention"),
        other => panic!("{other:?}"),
    }
    assert!(store.finish(&keys, "worker-b", &taken[0], Finish::Done).await.unwrap());
    // Finished, the entry is nobody's lease any more.
    assert!(matches!(store.load_leased(&keys, "worker-b", &taken).await.unwrap()[0], Loaded::LeaseLost));
}

#[tokio::test]
async fn consumers_of_gone_processes_are_forgotten_unless_they_hold_something() {
    let (_redis, store, mut reader, keys) = setup().await;
    record(&store, &keys, "0-c1", "e:EvC1").await;
    record(&store, &keys, "0-c2", "e:EvC2").await;
    let gone = outbox::read_new(&mut reader, &keys, "gone-idle", 1, Duration::from_millis(100)).await.unwrap();
    assert!(store.finish(&keys, "gone-idle", &gone[0], Finish::Done).await.unwrap());
    let holding = outbox::read_new(&mut reader, &keys, "gone-holding", 1, Duration::from_millis(100)).await.unwrap();
    assert_eq!(holding.len(), 1);
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg(keys.stream())
        .arg(outbox::GROUP)
        .arg("me")
        .query_async(&mut reader)
        .await
        .unwrap();
    // `gone-idle` has been idle past 20 ms (Redis's own clock, in XINFO CONSUMERS).
    let idle =
        until(Duration::from_secs(2), async || consumer_idle_ms(&mut reader, &keys, "gone-idle").await > 20).await;
    assert!(idle);
    // Not idle long enough: nothing goes.
    assert_eq!(store.remove_idle_consumers(&keys, Duration::from_secs(60), "me").await.unwrap(), 0);
    assert_eq!(store.remove_idle_consumers(&keys, Duration::from_millis(20), "me").await.unwrap(), 1);
    let names: Vec<String> = consumers(&mut reader, &keys).await;
    assert_eq!(names, ["gone-holding", "me"], "the idle one without pending entries is removed");
}

/// A lease delivered, as the batched completion takes it (no message claim).
pub(super) fn delivered(lease: &outbox::Lease) -> Delivered {
    Delivered { lease: lease.clone(), claim: String::new() }
}

/// Re-claim with a 100 ms lease, as soon as one has run out (up to 2 s).
async fn expired(store: &Store, keys: &ShardKeys, consumer: &str, max: usize) -> Vec<outbox::Lease> {
    let mut taken = Vec::new();
    until(Duration::from_secs(2), async || {
        taken = store.reclaim(keys, consumer, Duration::from_millis(100), max).await.unwrap();
        !taken.is_empty()
    })
    .await;
    taken
}

/// How long Redis has seen `name` idle, in ms.
async fn consumer_idle_ms(conn: &mut slackgate::store::Conn, keys: &ShardKeys, name: &str) -> u64 {
    let info: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("XINFO").arg("CONSUMERS").arg(keys.stream()).arg(outbox::GROUP).query_async(conn).await.unwrap();
    let me =
        info.iter().find(|c| redis::from_redis_value_ref::<String>(&c["name"]).unwrap() == name).expect("a consumer");
    redis::from_redis_value_ref(&me["idle"]).unwrap()
}

async fn consumers(conn: &mut slackgate::store::Conn, keys: &ShardKeys) -> Vec<String> {
    let info: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("XINFO").arg("CONSUMERS").arg(keys.stream()).arg(outbox::GROUP).query_async(conn).await.unwrap();
    let mut names: Vec<String> =
        info.iter().map(|c| redis::from_redis_value_ref::<String>(&c["name"]).unwrap()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn dead_letters_past_their_age_or_count_are_dropped_with_their_bodies() {
    let (redis, store, mut reader, keys) = setup().await;
    // One letter parked long ago (its stream id carries its time).
    let mut c = redis.conn();
    let _: () =
        redis::cmd("HSET").arg(keys.delivery("0-old")).arg("b").arg("x").arg("de").arg("1000-0").query(&mut c).unwrap();
    let _: String = redis::cmd("XADD").arg(keys.dead()).arg("1000-0").arg("d").arg("0-old").query(&mut c).unwrap();
    for i in 0..6 {
        record(&store, &keys, &format!("0-t{i}"), &format!("e:EvT{i}")).await;
    }
    let held = outbox::read_new(&mut reader, &keys, "w", 10, Duration::from_millis(100)).await.unwrap();
    let now = slackgate::clock::now_ms();
    for lease in &held {
        let dead = Finish::Dead { now_ms: now, status: Some(404), error: "", final_: true };
        assert!(store.finish(&keys, "w", lease, dead).await.unwrap());
    }
    assert_eq!(redis.xlen(keys.dead()), 7);
    let t = store.trim_dead(&keys, now - 60_000, 4, 1000).await.unwrap();
    assert_eq!((t.by_age, t.by_count), (1, 2));
    assert_eq!(redis.xlen(keys.dead()), 4);
    let bodies = redis.keys(&keys.delivery("*"));
    assert_eq!(bodies.len(), 4, "the dropped letters' bodies went with them: {bodies:?}");
    assert!(!bodies.contains(&keys.delivery("0-old")));
    let again = store.trim_dead(&keys, now - 60_000, 4, 1000).await.unwrap();
    assert_eq!((again.by_age, again.by_count), (0, 0));
}

/// The batched completion of delivered entries (`finish_done_many`) fences each entry on its
/// own: in one call, the stale holder's entry is refused and left as it was, the current
/// holders' are done, and the minute's delivered count counts only those.
#[tokio::test]
async fn a_batched_completion_fences_each_entry_on_its_own() {
    let (redis, store, mut reader, keys) = setup().await;
    for (id, receipt) in [("0-a", "e:EvB1"), ("0-b", "e:EvB2"), ("0-c", "e:EvB3")] {
        record(&store, &keys, id, receipt).await;
    }
    let held = outbox::read_new(&mut reader, &keys, "worker-a", 10, Duration::from_millis(100)).await.unwrap();
    assert_eq!(held.len(), 3);
    // 0-a's lease runs out and worker-b takes it over.
    let taken = expired(&store, &keys, "worker-b", 1).await;
    let stale = held.iter().find(|l| l.delivery == taken[0].delivery).unwrap();
    let fresh: Vec<_> = held.iter().filter(|l| l.delivery != taken[0].delivery).collect();
    let mut batch = vec![delivered(stale)];
    batch.extend(fresh.iter().map(|l| delivered(l)));
    let done = store.finish_done_many(&keys, "worker-a", &batch.iter().collect::<Vec<_>>()).await.unwrap();
    assert_eq!(done, [false, true, true], "the stale holder refused, the others done");
    let stats = store.shard_stats(&keys, slackgate::clock::now_ms()).await.unwrap();
    assert_eq!((stats.ready, stats.in_flight), (0, 1), "only the taken-over entry is left");
    assert!(store.load(&keys, &taken[0].delivery).await.unwrap().is_some(), "its delivery untouched");
    for l in &fresh {
        assert!(store.load(&keys, &l.delivery).await.unwrap().is_none());
    }
    assert_eq!(store.finish_done_many(&keys, "worker-b", &[&delivered(&taken[0])]).await.unwrap(), [true]);
    assert_eq!(redis.xlen(keys.stream()), 0, "nothing pending or unread: every acked entry trimmed");
    let minute: Vec<String> = redis.keys("*:delivered:*");
    let n: i64 = redis::cmd("GET").arg(&minute[0]).query(&mut redis.conn()).unwrap();
    assert_eq!(n, 3, "three delivered, each counted once");
}

/// The waiting index holds only what waits off the stream (it is one command less for each
/// delivery each way): a delivery fresh on the stream is not in it, and the stream's first entry
/// gives its age; a retry joins it and is still in it, with its first age, once back on the
/// stream; delivered, it leaves. An index entry whose delivery is gone (as a version that indexed
/// every delivery leaves it) is dropped by the stats instead of aging for ever.
#[tokio::test]
async fn only_what_waits_off_the_stream_is_in_the_waiting_index() {
    let (redis, store, mut reader, keys) = setup().await;
    let wait = keys.delivery("").replace(":d:", ":wait");
    let zcard = |redis: &RedisServer| -> usize { redis::cmd("ZCARD").arg(&wait).query(&mut redis.conn()).unwrap() };
    record(&store, &keys, "0-f", "e:EvWait1").await;
    assert_eq!(zcard(&redis), 0, "fresh on the stream: not indexed");
    let lease = outbox::read_new(&mut reader, &keys, "w", 10, Duration::from_millis(100)).await.unwrap().remove(0);
    let aged = until(Duration::from_secs(5), async || {
        store.shard_stats(&keys, slackgate::clock::now_ms()).await.unwrap().oldest_age_ms >= 200
    });
    assert!(aged.await, "in flight, its age is its entry's");

    let now = slackgate::clock::now_ms();
    let retry = Finish::Retry { due_ms: now, status: Some(503), error: "" };
    assert!(store.finish(&keys, "w", &lease, retry).await.unwrap());
    assert_eq!(zcard(&redis), 1, "waiting for its retry: indexed");
    assert_eq!(store.promote(&keys, now + 1, 100).await.unwrap(), 1);
    let back = outbox::read_new(&mut reader, &keys, "w", 10, Duration::from_millis(100)).await.unwrap();
    let Loaded::Stored(stored) = store.load_leased(&keys, "w", &back).await.unwrap().remove(0) else {
        panic!("the retry is not loaded");
    };
    assert_eq!(zcard(&redis), 1, "back on the stream, still indexed (its entry is younger than it is)");
    let done = store.finish_done_many(&keys, "w", &[&Delivered::new(&back[0], &stored)]).await.unwrap();
    assert_eq!(done, [true]);
    assert_eq!((zcard(&redis), redis.xlen(keys.stream())), (0, 0), "delivered: out of the index and the stream");

    let _: () = redis::cmd("ZADD").arg(&wait).arg(1).arg("0-ghost").query(&mut redis.conn()).unwrap();
    let stats = store.shard_stats(&keys, slackgate::clock::now_ms()).await.unwrap();
    assert_eq!(stats.oldest_age_ms, 0, "a delivery that is gone has no age");
    assert_eq!(zcard(&redis), 0, "and leaves the index");
}

/// The batched completion trims the stream instead of deleting each entry, and the trim never
/// takes an entry still being tried or not yet read: with the oldest entry in flight and a newer
/// one unread, finishing the two between leaves both, re-claimable and readable; once the oldest
/// is finished on its own (FINISH deletes just its entry), the housekeeping's trim takes the
/// acked ones it left behind, and still not the unread one.
#[tokio::test]
async fn the_trim_takes_acked_entries_only() {
    let (redis, store, mut reader, keys) = setup().await;
    for (id, receipt) in [("0-t1", "e:EvT1"), ("0-t2", "e:EvT2"), ("0-t3", "e:EvT3")] {
        record(&store, &keys, id, receipt).await;
    }
    let held = outbox::read_new(&mut reader, &keys, "worker-a", 10, Duration::from_millis(100)).await.unwrap();
    record(&store, &keys, "0-t4", "e:EvT4").await;
    let later: Vec<Delivered> = held[1..].iter().map(delivered).collect();
    let done = store.finish_done_many(&keys, "worker-a", &later.iter().collect::<Vec<_>>()).await.unwrap();
    assert_eq!(done, [true, true]);
    let stats = store.shard_stats(&keys, slackgate::clock::now_ms()).await.unwrap();
    assert_eq!((stats.ready, stats.in_flight), (1, 1), "the oldest in flight and the unread one are left");
    let taken = expired(&store, &keys, "worker-b", 1).await;
    assert_eq!(taken[0].delivery, "0-t1", "the entry in flight can still be taken over");
    assert!(store.finish(&keys, "worker-b", &taken[0], Finish::Done).await.unwrap());
    assert_eq!(redis.xlen(keys.stream()), 3, "FINISH deletes only its own entry");
    assert_eq!(store.trim_acked(&keys).await.unwrap(), 2, "the acked ones left behind go");
    assert_eq!(store.trim_acked(&keys).await.unwrap(), 0);
    let unread = outbox::read_new(&mut reader, &keys, "worker-a", 10, Duration::from_millis(100)).await.unwrap();
    assert_eq!(unread.iter().map(|l| l.delivery.as_str()).collect::<Vec<_>>(), ["0-t4"], "never the unread one");
}

/// A shard whose stream has no group yet (no reader started on it: a Socket Mode app on another
/// process, say) has nothing acked, and its trim says so instead of failing every second.
#[tokio::test]
async fn the_trim_of_a_stream_without_its_group_is_nothing() {
    let (redis, store, _reader, _) = setup().await;
    let keys = ShardKeys::new(&prefix("nogroup"), "bot", 0);
    assert_eq!(store.trim_acked(&keys).await.unwrap(), 0, "no stream at all");
    let _: String =
        redis::cmd("XADD").arg(keys.stream()).arg("*").arg("d").arg("0-x").query(&mut redis.conn()).unwrap();
    assert_eq!(store.trim_acked(&keys).await.unwrap(), 0, "a stream without the group");
    assert_eq!(redis.xlen(keys.stream()), 1, "and nothing taken");
}
