//! The dead-letter stream: list, inspect, replay, purge. Deliveries are parked there with their
//! body kept, so an operator can replay them after fixing the bot.

use redis::streams::StreamRangeReply;
use serde::Serialize;

use super::{ShardKeys, Store, StoreError};

/// One dead-lettered delivery.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// The entry in the dead-letter stream.
    #[serde(skip)]
    pub entry: String,
    pub delivery: String,
    /// The bot's last status; `None` when the last attempt got no answer (`error` says why).
    pub status: Option<u16>,
    pub error: String,
    pub attempts: u64,
    /// When it was parked (Unix ms).
    pub parked_ms: u64,
}

fn letter(e: redis::streams::StreamId) -> DeadLetter {
    DeadLetter {
        delivery: e.get("d").unwrap_or_default(),
        status: e.get::<String>("st").and_then(|s| s.parse().ok()),
        error: e.get("err").unwrap_or_default(),
        attempts: e.get::<String>("attempts").and_then(|a| a.parse().ok()).unwrap_or(0),
        parked_ms: e.get::<String>("at").and_then(|a| a.parse().ok()).unwrap_or(0),
        entry: e.id,
    }
}

impl Store {
    /// The oldest `limit` dead letters of one shard.
    pub async fn dead_letters(&self, keys: &ShardKeys, limit: usize) -> Result<Vec<DeadLetter>, StoreError> {
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(&keys.dead)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(reply.ids.into_iter().map(letter).collect())
    }

    /// The id of the newest dead letter of one shard, `None` when there is none: the end of a
    /// replay-all or purge-all, so letters that die again meanwhile are not read again.
    pub async fn dead_snapshot(&self, keys: &ShardKeys) -> Result<Option<String>, StoreError> {
        let reply: StreamRangeReply = redis::cmd("XREVRANGE")
            .arg(&keys.dead)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(reply.ids.into_iter().next().map(|e| e.id))
    }

    /// Up to `limit` dead letters after entry `after` (exclusive; `None` from the start) and
    /// at most `upto` (inclusive).
    pub async fn dead_letters_between(
        &self,
        keys: &ShardKeys,
        after: Option<&str>,
        upto: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let start = after.map_or_else(|| "-".to_string(), |a| format!("({a}"));
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(&keys.dead)
            .arg(start)
            .arg(upto)
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(reply.ids.into_iter().map(letter).collect())
    }

    /// Put a dead delivery back on the stream. `false`: it is not dead-lettered.
    pub async fn replay(&self, keys: &ShardKeys, delivery: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.dead_op(keys, delivery, "replay", now_ms).await
    }

    /// Forget a dead delivery and its body. `false`: it is not dead-lettered.
    pub async fn purge(&self, keys: &ShardKeys, delivery: &str) -> Result<bool, StoreError> {
        self.dead_op(keys, delivery, "purge", 0).await
    }

    /// Remove one entry from the dead-letter stream (one whose delivery no longer exists).
    pub async fn drop_dead_entry(&self, keys: &ShardKeys, entry: &str) -> Result<(), StoreError> {
        let _: i64 = redis::cmd("XDEL").arg(&keys.dead).arg(entry).query_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    async fn dead_op(&self, keys: &ShardKeys, delivery: &str, mode: &str, now_ms: u64) -> Result<bool, StoreError> {
        let ok: i64 = self
            .dead
            .key(&keys.dead)
            .key(&keys.stream)
            .key(keys.delivery(delivery))
            .key(&keys.wait)
            .arg(delivery)
            .arg(mode)
            .arg(now_ms)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(ok == 1)
    }
}
