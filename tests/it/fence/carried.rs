//! Invariant 4 for carried deliveries (an app without turns: the delivery lives in its stream
//! entry alone) and for the stream a version before left behind: read, fenced and finished.

use std::time::Duration;

use slackgate::outbox::{self, Finish, Loaded, NewDelivery, Placement, Recorded, ShardKeys, Store};
use slackgate::slack::Kind;

use super::{delivered, record_carried, setup};
use crate::utils::*;

/// The entries a reader takes from the stream (as a worker of an app without turns reads
/// them), with their deliveries.
async fn read_both(reader: &slackgate::store::Conn, keys: &ShardKeys, consumer: &str) -> Vec<(outbox::Lease, Loaded)> {
    Store::new(reader.clone()).read_then_load(keys, consumer, 10, Duration::from_millis(100), false).await.unwrap()
}

/// Entries of one stream whose 100 ms lease ran out, taken over (up to 2 s).
async fn expired_on(store: &Store, keys: &ShardKeys, consumer: &str, legacy: bool) -> Vec<outbox::Lease> {
    let mut taken = Vec::new();
    until(Duration::from_secs(2), async || {
        let how = (Duration::from_millis(100), 10);
        taken = store.reclaim_loaded(keys, consumer, how, None, legacy).await.unwrap();
        !taken.is_empty()
    })
    .await;
    taken.into_iter().map(|(lease, _)| lease).collect()
}

#[tokio::test]
async fn a_carried_delivery_is_its_entry_alone_and_leaves_nothing_once_delivered() {
    let (redis, store, reader, keys) = setup().await;
    assert_eq!(record_carried(&store, &keys, "0-k1", "e:EvK1").await, Recorded::New { cancelled: false });
    assert_eq!((redis.xlen(keys.stream()), redis.xlen(keys.legacy())), (1, 0), "on the stream");
    assert!(store.load(&keys, "0-k1").await.unwrap().is_none(), "no hash beside it");
    let read = read_both(&reader, &keys, "w").await;
    assert_eq!(read.len(), 1);
    let (lease, loaded) = &read[0];
    assert!(!lease.legacy && lease.delivery == "0-k1" && lease.token == 1, "{lease:?}");
    match loaded {
        Loaded::Stored(d) => {
            assert_eq!(&d.body[..], b"{\"type\":\"event_callback\"}");
            assert_eq!(
                (d.content_type.as_str(), d.path.as_str(), d.detail.as_str()),
                ("application/json", "/slack/events", "app_mention")
            );
            assert_eq!((d.kind, d.retries, d.dead), (Kind::Event, 0, false));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.finish_done_many(&keys, "w", &[&delivered(lease)]).await.unwrap(), [true]);
    assert_eq!(redis.xlen(keys.stream()), 0, "trimmed once acked");
    let left: Vec<String> =
        redis.keys("*").into_iter().filter(|k| !k.ends_with(":stream") && !k.ends_with(":outbox")).collect();
    assert!(
        left.iter().all(|k| k.contains(":r:") || k.contains(":delivered:")),
        "only its receipt and the count: {left:?}"
    );
    assert_eq!(record_carried(&store, &keys, "0-k2", "e:EvK1").await, Recorded::Duplicate("0-k1".into()));
}

#[tokio::test]
async fn a_worker_whose_carried_lease_was_taken_cannot_complete() {
    let (redis, store, reader, keys) = setup().await;
    record_carried(&store, &keys, "0-k3", "e:EvK3").await;
    let held: Vec<outbox::Lease> = read_both(&reader, &keys, "worker-a").await.into_iter().map(|(l, _)| l).collect();
    assert_eq!(held.len(), 1);
    let taken = expired_on(&store, &keys, "worker-b", false).await;
    assert_eq!(taken.len(), 1);
    assert!(!taken[0].legacy && taken[0].token > held[0].token, "{taken:?}");
    assert!(!store.extend(&keys, "worker-a", &held[0]).await.unwrap(), "old holder cannot extend");
    assert_eq!(store.finish_done_many(&keys, "worker-a", &[&delivered(&held[0])]).await.unwrap(), [false]);
    let retry = Finish::Retry { due_ms: slackgate::clock::now_ms(), status: Some(503), error: "" };
    assert!(!store.finish(&keys, "worker-a", &held[0], retry).await.unwrap(), "old holder cannot schedule it");
    assert_eq!(redis.xlen(keys.stream()), 1, "entry untouched by the fenced calls");
    assert!(store.load(&keys, "0-k3").await.unwrap().is_none(), "and no hash made for it");
    assert!(store.extend(&keys, "worker-b", &taken[0]).await.unwrap());
    assert_eq!(store.finish_done_many(&keys, "worker-b", &[&delivered(&taken[0])]).await.unwrap(), [true]);
    assert_eq!(redis.xlen(keys.stream()), 0);
}

#[tokio::test]
async fn a_carried_delivery_that_waits_off_the_stream_gets_its_hash_from_its_entry() {
    let (redis, store, reader, keys) = setup().await;
    record_carried(&store, &keys, "0-k4", "e:EvK4").await;
    let (lease, _) = read_both(&reader, &keys, "w").await.remove(0);
    let now = slackgate::clock::now_ms();
    let retry = Finish::Retry { due_ms: now + 1_000, status: Some(503), error: "busy" };
    assert!(store.finish(&keys, "w", &lease, retry).await.unwrap());
    assert_eq!(redis.xlen(keys.stream()), 0, "off the stream");
    let kept = store.load(&keys, "0-k4").await.unwrap().expect("a hash, made from its entry");
    assert_eq!((&kept.body[..], kept.retries, kept.last_status), (&b"{\"type\":\"event_callback\"}"[..], 1, Some(503)));
    assert_eq!(kept.detail, "app_mention");
    assert_eq!(store.promote(&keys, now + 1_001, 100).await.unwrap(), 1);
    // Back on the stream, its entry naming its record: loaded from its hash.
    let back = read_both(&reader, &keys, "w").await;
    assert_eq!(back.len(), 1);
    assert!(!back[0].0.legacy && back[0].0.delivery == "0-k4");
    assert!(matches!(&back[0].1, Loaded::Stored(d) if d.retries == 1 && d.path == "/slack/events"), "{:?}", back[0].1);
    let dead = Finish::Dead { now_ms: now, status: Some(404), error: "", final_: true };
    assert!(store.finish(&keys, "w", &back[0].0, dead).await.unwrap());
    assert_eq!(redis.xlen(keys.dead()), 1);
    assert!(store.load(&keys, "0-k4").await.unwrap().unwrap().dead, "kept for replay");
    // Dead at once, from the carrying stream, it is kept the same way.
    record_carried(&store, &keys, "0-k5", "e:EvK5").await;
    let (lease, _) = read_both(&reader, &keys, "w").await.remove(0);
    let dead = Finish::Dead { now_ms: now, status: Some(400), error: "", final_: true };
    assert!(store.finish(&keys, "w", &lease, dead).await.unwrap());
    let parked = store.load(&keys, "0-k5").await.unwrap().expect("parked with its hash");
    assert!(parked.dead && parked.kind == Kind::Event && &parked.body[..] == b"{\"type\":\"event_callback\"}");
}

#[tokio::test]
async fn carried_deliveries_of_an_app_that_takes_turns_wait_for_their_turn() {
    let (redis, store, reader, keys) = setup().await;
    let rules = slackgate::config::TurnsConfig { order: slackgate::config::Order::Queue, ..Default::default() };
    // Carried (as while the app took no turns), two messages of one thread.
    for (id, ts) in [("0-q1", "1.5"), ("0-q2", "2.5")] {
        let d = NewDelivery {
            id,
            receipt: Some(id),
            body: b"{\"type\":\"event_callback\"}",
            content_type: b"application/json",
            path: "/slack/events",
            kind: Kind::Event,
            received_ms: slackgate::clock::now_ms(),
            ttl: Duration::from_secs(60),
            placement: Placement::Stream,
            claim: None,
            cancel: None,
            detail: "message",
            response_url: "",
            conversation: &format!("T1\tC1\t{ts}\t1.5"),
            carry: true,
        };
        store.record(&keys, &d).await.unwrap();
    }
    let reads = Store::new(reader.clone());
    let read = reads.read_loaded(&keys, "w", 10, Some(&rules), false).await.unwrap();
    assert_eq!(read.leased.len(), 2);
    assert!(read.leased.iter().all(|(l, _)| !l.legacy));
    assert!(matches!(&read.leased[0].1, Loaded::Stored(d) if d.detail == "message"), "{:?}", read.leased[0].1);
    assert!(matches!(read.leased[1].1, Loaded::Held), "the second waits for the first's turn");
    assert_eq!(redis.xlen(keys.stream()), 1, "the held one left the stream");
    assert!(store.load(&keys, "0-q2").await.unwrap().is_some(), "held with a hash made from its entry");
    // The first's answer ends the turn and hands it to the second, back on the stream.
    let finished =
        store.finish_in_turn(&keys, "w", &read.leased[0].0, Finish::Done, Some((&rules, "T1:C1:1.5")), None).await;
    assert!(matches!(finished, Ok(outbox::Finished::Recorded(Some(_)))), "{finished:?}");
    let next = reads.read_loaded(&keys, "w", 10, Some(&rules), false).await.unwrap();
    assert_eq!(next.leased.len(), 1);
    assert!(!next.leased[0].0.legacy && next.leased[0].0.delivery == "0-q2");
    assert!(matches!(&next.leased[0].1, Loaded::Stored(d) if &d.body[..] == b"{\"type\":\"event_callback\"}"));
}

#[tokio::test]
async fn what_a_version_before_left_on_its_stream_is_read_fenced_and_finished() {
    let (redis, store, reader, keys) = setup().await;
    // As a version before carried deliveries recorded it: a hash, and an entry on `…:outbox`
    // naming it (`e`).
    let mut c = redis.conn();
    let entry: String = redis::cmd("XADD").arg(keys.legacy()).arg("*").arg("d").arg("0-old").query(&mut c).unwrap();
    let fields = [("b", "{}"), ("ct", "application/json"), ("p", "/slack/events"), ("k", "event"), ("rcv", "1")];
    let mut hset = redis::cmd("HSET");
    hset.arg(keys.delivery("0-old")).arg("n").arg(0).arg("e").arg(&entry);
    for (k, v) in fields {
        hset.arg(k).arg(v);
    }
    let _: () = hset.query(&mut c).unwrap();
    assert!(read_both(&reader, &keys, "worker-a").await.is_empty(), "not on the stream");
    let reads = Store::new(reader.clone());
    let held = reads.read_then_load(&keys, "worker-a", 10, Duration::ZERO, true).await.unwrap();
    assert_eq!(held.len(), 1);
    assert!(held[0].0.legacy && held[0].0.entry == entry);
    assert!(matches!(&held[0].1, Loaded::Stored(d) if d.path == "/slack/events"), "{:?}", held[0].1);
    let taken = expired_on(&store, &keys, "worker-b", true).await;
    assert_eq!(taken.len(), 1);
    assert!(taken[0].legacy);
    assert!(!store.extend(&keys, "worker-a", &held[0].0).await.unwrap(), "old holder cannot extend");
    assert_eq!(store.finish_done_many(&keys, "worker-a", &[&delivered(&held[0].0)]).await.unwrap(), [false]);
    assert_eq!(store.finish_done_many(&keys, "worker-b", &[&delivered(&taken[0])]).await.unwrap(), [true]);
    assert_eq!(redis.xlen(keys.legacy()), 0, "trimmed");
    assert!(store.load(&keys, "0-old").await.unwrap().is_none(), "its record dropped");
}
