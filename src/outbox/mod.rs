//! The durable outbox in Redis: receipts that absorb Slack's retries, one stream per app shard
//! with a consumer group whose pending list is the lease table, a sorted set of scheduled retries
//! and a dead-letter stream. Knows no HTTP and no workers.
//!
//! Keys of one shard share the hash tag `{prefix:app:shard}`:
//! `…:r:<receipt>` receipt (value: delivery id) · `…:stream` the outbox stream (`d` = delivery
//! id; a carried delivery's entry holds its fields too, and it has no hash: the common delivery,
//! see `scripts::RECORD`) · `…:outbox` the stream of versions before carried deliveries, still
//! read until what they left there is delivered ·
//! `…:d:<id>` delivery hash (body, content type, path, kind, received-at, retries) ·
//! `…:sched` zset of due retries · `…:dead` dead-letter stream · `…:wait` the waiting
//! deliveries off the stream or back on it, by received-at · `…:r:m:…:alt` the other copies of a claimed message.

mod carried;
mod conversations;
mod dead;
mod lazy;
mod maintain;
mod model;
mod notes;
pub mod pauses;
mod read;
mod runs;
mod scripts;
pub mod shadow;
mod shards;
mod turns;

use crate::store::Conn;
pub use crate::store::{Endpoint, StoreError};
pub use conversations::{channel_tag, Change, Channel, Conversations, Source};
pub use dead::DeadLetter;
pub use lazy::LazyStore;
pub use maintain::{app_stats, Eviction, OutboxStats, Trimmed};
use model::stored;
pub use model::{Delivered, Finish, Kept, Lease, Loaded, NewDelivery, Placement, Recorded, StoreOp, Stored};
pub use notes::{is_cursor, NoteList, NotePage, Notes};
pub use read::{read_new, Read};
pub use runs::{RunTrack, BEAT_STALE_MS};
pub use turns::{
    Due, Finished, Rerun, RerunReason, Superseded, TurnEnd, TurnEnded, TurnRules, TurnVerdict, TurnWrite, Turns,
    WriteKind,
};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use redis::{AsyncCommands, Script, Value};

use crate::config::Durability;

/// The consumer group every gateway process joins.
pub const GROUP: &str = "slackgate";

/// The Redis keys of one app shard.
#[derive(Debug, Clone)]
pub struct ShardKeys {
    tag: String,
    stream: String,
    legacy: String,
    sched: String,
    dead: String,
    wait: String,
}

impl ShardKeys {
    pub fn new(prefix: &str, app: &str, shard: u16) -> Self {
        let tag = format!("{{{prefix}:{app}:{shard}}}");
        ShardKeys {
            stream: format!("{tag}:stream"),
            legacy: format!("{tag}:outbox"),
            sched: format!("{tag}:sched"),
            dead: format!("{tag}:dead"),
            wait: format!("{tag}:wait"),
            tag,
        }
    }

    /// The shard's outbox stream (for tools and tests that look at it).
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The stream versions before carried deliveries wrote (`…:outbox`): read until empty.
    pub fn legacy(&self) -> &str {
        &self.legacy
    }

    /// Both streams, the live one first.
    pub fn streams(&self) -> [&str; 2] {
        [&self.stream, &self.legacy]
    }

    /// The stream a lease's entry is on.
    pub fn stream_of(&self, lease: &Lease) -> &str {
        self.on(lease.legacy)
    }

    /// The live stream, or with `legacy` the stream of versions before.
    pub fn on(&self, legacy: bool) -> &str {
        if legacy {
            &self.legacy
        } else {
            &self.stream
        }
    }

    /// The shard's dead-letter stream.
    pub fn dead(&self) -> &str {
        &self.dead
    }

    pub fn receipt(&self, receipt: &str) -> String {
        format!("{}:r:{receipt}", self.tag)
    }

    pub fn delivery(&self, id: &str) -> String {
        format!("{}:d:{id}", self.tag)
    }
}

/// Which shard a receipt key lives on: FNV-1a, stable across processes and versions.
pub fn shard_of(key: &str, shards: u16) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(shards.max(1))) as u16
}

/// The store handle: cheap to clone, one multiplexed connection underneath.
#[derive(Clone)]
pub struct Store {
    conn: Conn,
    durability: Durability,
    /// With `replicated`: the connections records (and their `WAIT`s) take turns on.
    waiters: Arc<[Conn]>,
    turn: Arc<AtomicUsize>,
    record: Script,
    record_carried: Script,
    inline_finish: Script,
    extend: Script,
    finish: Script,
    finish_done_many: Script,
    reclaim: Script,
    promote: Script,
    stats: Script,
    dead: Script,
    load: Script,
    read_loaded: Script,
    reclaim_loaded: Script,
    trim_dead: Script,
    trim_acked: Script,
    remove_idle_consumers: Script,
    shards_in_use: Script,
}

impl Store {
    pub fn new(conn: Conn) -> Self {
        Store {
            conn,
            durability: Durability::Local,
            waiters: Arc::new([]),
            turn: Arc::new(AtomicUsize::new(0)),
            record: Script::new(scripts::RECORD),
            record_carried: Script::new(scripts::RECORD_CARRIED),
            inline_finish: Script::new(scripts::INLINE_FINISH),
            extend: Script::new(scripts::EXTEND),
            finish: Script::new(scripts::FINISH),
            finish_done_many: Script::new(scripts::FINISH_DONE_MANY),
            reclaim: Script::new(scripts::RECLAIM),
            promote: Script::new(scripts::PROMOTE),
            stats: Script::new(scripts::STATS),
            dead: Script::new(scripts::DEAD),
            load: Script::new(scripts::LOAD),
            read_loaded: Script::new(scripts::READ_LOADED),
            reclaim_loaded: Script::new(scripts::RECLAIM_LOADED),
            trim_dead: Script::new(scripts::TRIM_DEAD),
            trim_acked: Script::new(scripts::TRIM_ACKED),
            remove_idle_consumers: Script::new(scripts::REMOVE_IDLE_CONSUMERS),
            shards_in_use: Script::new(scripts::SHARDS_IN_USE),
        }
    }

    /// The connection underneath, for what reads Redis beside the outbox (the delivery
    /// history).
    pub fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// Records (and their duplicates) answered only once `durability` holds; `waiters` are
    /// the connections to record on when that means waiting for replicas.
    pub fn durable(mut self, durability: Durability, waiters: Vec<Conn>) -> Self {
        self.durability = durability;
        self.waiters = waiters.into();
        self
    }

    /// The one round trip before the ack: claim the receipt and append to the outbox, or report
    /// a duplicate.
    pub async fn record(&self, keys: &ShardKeys, d: &NewDelivery<'_>) -> Result<Recorded, StoreError> {
        if let (true, Placement::Stream, None, None, Some(receipt)) =
            (d.carry, d.placement, d.claim, d.cancel, d.receipt)
        {
            return self.record_carried(keys, d, receipt).await;
        }
        let hash = keys.delivery(d.id);
        let receipt = d.receipt.map(|r| keys.receipt(r));
        let claim = d.claim.map(|c| keys.receipt(c));
        let cancel = d.cancel.map(|c| keys.receipt(c));
        let (mode, due) = match d.placement {
            Placement::Stream => ("stream", 0),
            Placement::Inline { due_ms } => ("inline", due_ms),
            Placement::Discard => ("discard", 0),
        };
        let replicated = matches!(self.durability, Durability::Replicated { .. });
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(self.record.get_hash()).arg(8);
        eval.arg(receipt.as_deref().unwrap_or(&hash)).arg(&keys.stream).arg(&hash).arg(&keys.sched);
        eval.arg(claim.as_deref().unwrap_or(&hash)).arg(cancel.as_deref().unwrap_or(&hash)).arg(&keys.wait);
        eval.arg(&keys.legacy);
        eval.arg(d.ttl.as_millis() as u64).arg(d.id).arg(d.body).arg(d.content_type).arg(d.path);
        eval.arg(d.kind.as_str()).arg(d.received_ms).arg(mode).arg(due);
        eval.arg(u8::from(claim.is_some())).arg(u8::from(cancel.is_some())).arg(&keys.tag).arg(GROUP);
        eval.arg(d.detail).arg(d.response_url).arg(u8::from(receipt.is_some())).arg(u8::from(replicated));
        eval.arg(d.conversation);
        let (status, id, cancelled): (i64, String, i64) = self.record_call(&self.record, eval).await?;
        Ok(match status {
            1 => Recorded::New { cancelled: cancelled == 1 },
            2 => Recorded::DuplicateMessage(id),
            _ => Recorded::Duplicate(id),
        })
    }

    /// The common record, in a script of its own (`RECORD_CARRIED`): a receipt claimed and the
    /// delivery carried in its entry, its fields packed (RECORD's other keys and arguments, each
    /// a Lua string made per call, cost more than its two commands).
    async fn record_carried(
        &self,
        keys: &ShardKeys,
        d: &NewDelivery<'_>,
        receipt: &str,
    ) -> Result<Recorded, StoreError> {
        let replicated = matches!(self.durability, Durability::Replicated { .. });
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(self.record_carried.get_hash()).arg(2).arg(keys.receipt(receipt)).arg(&keys.stream);
        eval.arg(d.ttl.as_millis() as u64).arg(u8::from(replicated)).arg(d.id).arg(carried::pack(d));
        Ok(match self.record_call(&self.record_carried, eval).await? {
            Value::Int(_) => Recorded::New { cancelled: false },
            original => {
                Recorded::Duplicate(redis::from_redis_value(original).map_err(|e| StoreError::Protocol(e.to_string()))?)
            }
        })
    }

    /// A record's script (`script`), loading it where the node does not have it. With `replicated`, RECORD
    /// and `WAIT` go as one pipeline on one connection to one node, so the `WAIT` counts the
    /// replicas that have this very record — never another node's, whatever a failover or a
    /// reconnect does in between (then the pair fails or runs again as a whole).
    async fn record_call<T: redis::FromRedisValue>(&self, script: &Script, eval: redis::Cmd) -> Result<T, StoreError> {
        let mut conn = match self.waiters.len() {
            0 => self.conn.clone(),
            n => self.waiters[self.turn.fetch_add(1, Ordering::Relaxed) % n].clone(),
        };
        for attempt in 0..2 {
            let reply = match self.durability {
                Durability::Local => eval.query_async::<T>(&mut conn).await.map(|r| (r, None)),
                Durability::Replicated { replicas, timeout } => {
                    let mut pipe = redis::pipe();
                    pipe.add_command(eval.clone()).cmd("WAIT").arg(replicas).arg(timeout.as_millis() as u64);
                    pipe.query_async::<(T, u32)>(&mut conn).await.map(|(r, n)| (r, Some((n, replicas))))
                }
            };
            match reply {
                Ok((_, Some((confirmed, wanted)))) if confirmed < wanted => {
                    return Err(StoreError::NotReplicated { confirmed, wanted })
                }
                Ok((r, _)) => return Ok(r),
                Err(e) if attempt == 0 && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    script.prepare_invoke().load_async(&mut conn).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Protocol("RECORD: NOSCRIPT after loading it".into()))
    }

    /// Fenced completion of an inline delivery by the ingress that holds it. `false`: its
    /// hold ran out and the workers own it now; nothing was changed.
    pub async fn inline_finish(&self, keys: &ShardKeys, delivery: &str, how: Finish<'_>) -> Result<bool, StoreError> {
        let (mode, at, status, error, _) = how.parts();
        let ok: i64 = self
            .inline_finish
            .key(&keys.sched)
            .key(keys.delivery(delivery))
            .key(&keys.dead)
            .key(&keys.wait)
            .arg(delivery)
            .arg(mode)
            .arg(at)
            .arg(status)
            .arg(error)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(ok == 1)
    }

    /// Create the consumer group if it is missing, reading from the start of the stream so
    /// entries appended before any worker ran are not skipped.
    pub async fn ensure_group(&self, keys: &ShardKeys) -> Result<(), StoreError> {
        for stream in keys.streams() {
            let r: Result<(), _> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(stream)
                .arg(GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut self.conn.clone())
                .await;
            match r {
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Load a delivery's stored fields; `None` when it no longer exists.
    pub async fn load(&self, keys: &ShardKeys, delivery: &str) -> Result<Option<Stored>, StoreError> {
        let map: HashMap<String, Vec<u8>> = self.conn.clone().hgetall(keys.delivery(delivery)).await?;
        Ok((!map.is_empty()).then(|| stored(&map)))
    }

    /// Keep holding an entry during a long attempt. `false`: the lease was lost.
    pub async fn extend(&self, keys: &ShardKeys, consumer: &str, lease: &Lease) -> Result<bool, StoreError> {
        let ok: i64 = fenced(&self.extend, keys, consumer, lease).invoke_async(&mut self.conn.clone()).await?;
        Ok(ok == 1)
    }

    /// Fenced completion. `false`: another worker holds the entry now, nothing was changed.
    pub async fn finish(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        lease: &Lease,
        how: Finish<'_>,
    ) -> Result<bool, StoreError> {
        Ok(self.finish_in_turn(keys, consumer, lease, how, None, None).await? != Finished::Fenced)
    }

    /// Fenced completion of several delivered entries of an app without turns, all of one
    /// stream, in one call: `true` for each done, `false` for each whose lease another worker
    /// holds now.
    pub async fn finish_done_many(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        entries: &[&Delivered],
    ) -> Result<Vec<bool>, StoreError> {
        // One stream a call: the finisher splits a batch by stream.
        let legacy = entries.first().is_some_and(|d| d.lease.legacy);
        let mut invocation = self.finish_done_many.key(keys.on(legacy));
        invocation.key(&keys.wait).arg(GROUP).arg(consumer).arg(&keys.tag).arg(crate::clock::now_ms());
        // The batch's range of entry ids, for one range read of the pending list.
        let ids = entries.iter().map(|d| (stream_id(&d.lease.entry), &d.lease.entry));
        let (lo, hi) = (ids.clone().min(), ids.max());
        invocation.arg(lo.map_or("0-0", |(_, id)| id.as_str())).arg(hi.map_or("0-0", |(_, id)| id.as_str()));
        for Delivered { lease, claim } in entries {
            invocation.arg(&lease.entry).arg(lease.token).arg(&lease.delivery).arg(claim);
        }
        let done: Vec<i64> = invocation.invoke_async(&mut self.conn.clone()).await?;
        if done.len() != entries.len() {
            return Err(StoreError::Protocol(format!("{} answers for {} entries", done.len(), entries.len())));
        }
        Ok(done.into_iter().map(|d| d == 1).collect())
    }

    /// Fenced completion of a delivery of `conversation` (its key) for an app that takes turns
    /// (`rules`): with the turn the delivery's end ended, if it did (it answered or was
    /// refused).
    pub async fn finish_in_turn(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        lease: &Lease,
        how: Finish<'_>,
        turn: Option<(&TurnRules, &str)>,
        run: Option<RunTrack<'_>>,
    ) -> Result<Finished, StoreError> {
        let (mode, at, status, error, final_) = how.parts();
        let (order, end, quiet, pass_after, timeout) = turns::finish_args(turn.map(|(r, _)| r));
        let reply: Value = fenced(&self.finish, keys, consumer, lease)
            .key(keys.delivery(&lease.delivery))
            .key(&keys.sched)
            .key(&keys.dead)
            .key(&keys.wait)
            .arg(mode)
            .arg(&lease.delivery)
            .arg(at)
            .arg(status)
            .arg(error)
            .arg(&keys.tag)
            .arg(u8::from(final_))
            .arg(order)
            .arg(end)
            .arg(quiet)
            .arg(pass_after)
            .arg(timeout)
            .arg(crate::clock::now_ms())
            .arg(turn.map_or("", |(_, conversation)| conversation))
            .arg(run.map_or("", |r| r.socket))
            .arg(u8::from(run.is_some()))
            .arg(u8::from(run.is_some_and(|r| r.addressed)))
            .invoke_async(&mut self.conn.clone())
            .await?;
        turns::finished(reply)
    }

    /// Redis' `maxmemory-policy` (from `INFO memory`, which managed Redis services allow where
    /// they refuse `CONFIG GET`); `None` when it does not say.
    pub async fn eviction_policy(&self) -> Result<Option<String>, StoreError> {
        let infos = self.conn.clone().info("memory").await?;
        // Of several nodes, the first that would evict.
        let policies = infos.iter().filter_map(|i| i.lines().find_map(|l| l.strip_prefix("maxmemory_policy:")));
        let mut policies: Vec<String> = policies.map(|p| p.trim().to_string()).collect();
        policies.sort_by_key(|p| p == "noeviction");
        Ok(policies.into_iter().next())
    }

    /// What the connection sees, for `/readyz`: a cluster's state and size, or a node's role
    /// and replicas.
    pub async fn topology(&self) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        let field = |text: &str, key: &str| {
            text.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).unwrap_or_else(|| "?".into())
        };
        if let Conn::Cluster(_) = conn {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut conn).await?;
            return Ok(format!(
                "cluster, state {}, {} masters serving slots, {} nodes",
                field(&info, "cluster_state:"),
                field(&info, "cluster_size:"),
                field(&info, "cluster_known_nodes:")
            ));
        }
        let kind = if let Conn::Sentinel(_) = conn { "primary named by the sentinels" } else { "one node" };
        let info = conn.info("replication").await?.concat();
        Ok(format!("{kind}, role {}, {} replicas connected", field(&info, "role:"), field(&info, "connected_slaves:")))
    }

    /// The conversation records of `prefix`, kept for `window`, on this store's connection.
    pub fn conversations(&self, prefix: &str, window: Duration) -> Conversations {
        Conversations::new(self.conn.clone(), prefix, window)
    }

    /// PING, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let _: String = redis::cmd("PING").query_async(&mut self.conn.clone()).await?;
        Ok(())
    }
}

/// A stream entry id (`ms-seq`) as numbers, to compare ids as Redis does (not as text).
fn stream_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// A fenced script's invocation: the lease's stream as the first key, and the lease's fence
/// (group, entry, consumer, token) as the first arguments; the caller adds the rest.
fn fenced<'a>(script: &'a Script, keys: &ShardKeys, consumer: &str, lease: &Lease) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.key(keys.stream_of(lease));
    invocation.arg(GROUP).arg(&lease.entry).arg(consumer).arg(lease.token);
    invocation
}
