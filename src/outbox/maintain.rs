//! Housekeeping of a shard: promote due retries, re-claim expired leases, bound the dead
//! letters, forget consumers of processes that are gone, and count what waits.

use std::time::Duration;

use redis::{AsyncCommands, Value};

use super::{Lease, ShardKeys, Store, StoreError, GROUP};

/// What an app's outbox holds right now.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutboxStats {
    pub ready: u64,
    pub in_flight: u64,
    pub scheduled: u64,
    pub dead: u64,
    /// Age of the oldest delivery still waiting, wherever it waits (on the stream, in flight,
    /// scheduled for a retry); 0 when none does.
    pub oldest_age_ms: u64,
    /// Deliveries completed in the previous whole minute.
    pub delivered_last_minute: u64,
    /// Deliveries held for their conversation's turn (counted in `oldest_age_ms` too).
    pub held: u64,
    /// Conversations with deliveries held.
    pub conversations_waiting: u64,
    /// Deliveries `order = "latest"` passed over, ever (until Redis forgets).
    pub superseded: u64,
    /// Deliveries held by a pause (counted in `oldest_age_ms` too).
    pub paused: u64,
}

/// Dead letters dropped by one trim: parked longer than `dead_ttl`, or beyond `dead_max`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Trimmed {
    pub by_age: u64,
    pub by_count: u64,
}

impl Trimmed {
    /// How many went for each reason.
    pub fn by_reason(self) -> [(Eviction, u64); 2] {
        [(Eviction::Ttl, self.by_age), (Eviction::Max, self.by_count)]
    }
}

/// Why a dead letter was dropped, as the `dead_evicted_total` reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Parked longer than `delivery.dead_ttl`.
    Ttl,
    /// The oldest beyond `delivery.dead_max`.
    Max,
}

impl Eviction {
    pub const ALL: [Eviction; 2] = [Eviction::Ttl, Eviction::Max];

    pub fn as_label(self) -> &'static str {
        match self {
            Eviction::Ttl => "ttl",
            Eviction::Max => "max",
        }
    }
}

/// Sum the stats of an app's shards.
pub async fn app_stats(store: &Store, shards: &[ShardKeys], now_ms: u64) -> Result<OutboxStats, StoreError> {
    let mut total = OutboxStats::default();
    for keys in shards {
        let s = store.shard_stats(keys, now_ms).await?;
        total.ready += s.ready;
        total.in_flight += s.in_flight;
        total.scheduled += s.scheduled;
        total.dead += s.dead;
        total.oldest_age_ms = total.oldest_age_ms.max(s.oldest_age_ms);
        total.delivered_last_minute += s.delivered_last_minute;
        total.held += s.held;
        total.conversations_waiting += s.conversations_waiting;
        total.superseded += s.superseded;
        total.paused += s.paused;
    }
    Ok(total)
}

impl Store {
    /// One shard's counts.
    pub async fn shard_stats(&self, keys: &ShardKeys, now_ms: u64) -> Result<OutboxStats, StoreError> {
        type Counts = (u64, u64, u64, u64, String, u64, u64, u64, u64);
        let (ready, in_flight, scheduled, dead, oldest, held, conversations_waiting, superseded, paused): Counts = self
            .stats
            .key(&keys.stream)
            .key(&keys.sched)
            .key(&keys.dead)
            .key(&keys.wait)
            .key(keys.turns_waiting())
            .key(keys.superseded_count())
            .key(keys.legacy())
            .arg(GROUP)
            .arg(&keys.tag)
            .arg(super::pauses::PAUSED)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let oldest_ms = oldest.parse::<f64>().ok().map(|ms| ms as u64);
        let minute = now_ms / 60_000;
        let delivered: Option<u64> =
            self.conn.clone().get(format!("{}:delivered:{}", keys.tag, minute.saturating_sub(1))).await?;
        Ok(OutboxStats {
            ready,
            in_flight,
            scheduled,
            dead,
            oldest_age_ms: oldest_ms.map(|ms| now_ms.saturating_sub(ms)).unwrap_or(0),
            delivered_last_minute: delivered.unwrap_or(0),
            held,
            conversations_waiting,
            superseded,
            paused,
        })
    }

    /// Take over entries idle longer than `lease`.
    pub async fn reclaim(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        lease: Duration,
        max: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        let flat: Vec<Value> = self
            .reclaim
            .key(&keys.stream)
            .arg(GROUP)
            .arg(consumer)
            .arg(lease.as_millis() as u64)
            .arg(max)
            .invoke_async(&mut self.conn.clone())
            .await?;
        flat.chunks_exact(3)
            .map(|c| {
                let entry: String = redis::from_redis_value_ref(&c[0])?;
                let delivery: String = redis::from_redis_value_ref(&c[1])?;
                let token: u64 = redis::from_redis_value_ref(&c[2])?;
                Ok(Lease { entry, delivery, token, legacy: false })
            })
            .collect::<Result<_, redis::RedisError>>()
            .map_err(StoreError::from)
    }

    /// Move due retries back onto the stream.
    pub async fn promote(&self, keys: &ShardKeys, now_ms: u64, max: usize) -> Result<usize, StoreError> {
        let n: usize = self
            .promote
            .key(&keys.sched)
            .key(&keys.stream)
            .arg(now_ms)
            .arg(max)
            .arg(&keys.tag)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(n)
    }

    /// Drop (with their bodies) up to `batch` dead letters parked before `oldest_kept_ms`, and
    /// the oldest beyond `max_kept`.
    pub async fn trim_dead(
        &self,
        keys: &ShardKeys,
        oldest_kept_ms: u64,
        max_kept: usize,
        batch: usize,
    ) -> Result<Trimmed, StoreError> {
        let (by_age, by_count): (u64, u64) = self
            .trim_dead
            .key(&keys.dead)
            .arg(oldest_kept_ms)
            .arg(max_kept)
            .arg(&keys.tag)
            .arg(batch)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(Trimmed { by_age, by_count })
    }

    /// Drop the shard's acked entries still on the stream (those the batched completion left
    /// behind an entry that was pending then); returns how many went.
    pub async fn trim_acked(&self, keys: &ShardKeys) -> Result<u64, StoreError> {
        let mut trimmed = 0;
        for stream in keys.streams() {
            let n: u64 = self.trim_acked.key(stream).arg(GROUP).invoke_async(&mut self.conn.clone()).await?;
            trimmed += n;
        }
        Ok(trimmed)
    }

    /// Remove the consumers of one shard's group that hold nothing and have not read for
    /// `idle` (gateway processes that are gone); never `me`.
    pub async fn remove_idle_consumers(&self, keys: &ShardKeys, idle: Duration, me: &str) -> Result<u64, StoreError> {
        let mut removed = 0;
        for stream in keys.streams() {
            let n: u64 = self
                .remove_idle_consumers
                .key(stream)
                .arg(GROUP)
                .arg(idle.as_millis() as u64)
                .arg(me)
                .invoke_async(&mut self.conn.clone())
                .await?;
            removed += n;
        }
        Ok(removed)
    }
}
