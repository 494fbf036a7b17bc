//! Runs (`rerun_lost`): what the bot does with one human post, from the delivery to its last
//! reply, tracked as a turn is (with `order = "off"` as a turn of its own, order `watch`). A
//! run still open after the bot's 2xx keeps its delivery's record; a run lost with its bot —
//! the Socket Mode socket that carried it closed, the gateway process that held that socket
//! stopped beating, or (`addressed`) silence on a message addressed to the bot — puts its
//! delivery back on the stream, its turn held through the re-run, up to `rerun_limit` times.
//!
//! Keys, under the shard's tag: the delivery's record `…:d:<id>` with `ro` (run open), `sk`
//! (the socket that carried it, `holder/socket`), `rk` (its turn's key), `ad` (addressed),
//! `rr` (re-runs so far), `rn` (its retries when the latest began), `rq` (a re-run on its
//! way) · `…:skh:<holder>` the runs open on one gateway process's sockets. Outside any shard:
//! `<prefix>:bots`, each process holding bot sockets and when it last beat.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script, Value};

use super::turns::{Rerun, RerunReason, TurnEnded};
use super::{scripts, ShardKeys, Store, StoreError};
use crate::config::{RunsConfig, TurnsConfig};

/// What a delivered run's completion tracks: the socket that carried it (`holder/socket`,
/// empty over HTTP) and whether its message is addressed to the bot.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunTrack<'a> {
    pub socket: &'a str,
    pub addressed: bool,
}

struct Scripts {
    lost: Script,
    orphaned: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    lost: Script::new(scripts::RERUN_LOST),
    orphaned: Script::new(scripts::RERUN_ORPHANED),
});

/// After how long without a beat a process's sockets count as gone with it.
pub const BEAT_STALE_MS: u64 = 10_000;

impl Store {
    /// The socket `socket` that carried `delivery`'s run closed: the run, if still open on it,
    /// runs again (or ends lost). `None` when it was not open there.
    pub async fn rerun_lost(
        &self,
        keys: &ShardKeys,
        delivery: &str,
        socket: &str,
        (rules, runs): (&TurnsConfig, &RunsConfig),
        now_ms: u64,
    ) -> Result<Option<(Rerun, Option<TurnEnded>)>, StoreError> {
        let reply: Vec<Value> = SCRIPTS
            .lost
            .key(keys.turn_index())
            .arg(&keys.tag)
            .arg(delivery)
            .arg(socket)
            .arg(now_ms)
            .arg(runs.limit)
            .arg(rules.timeout.as_millis() as u64)
            .arg(rules.order.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        let rerun = |run| Rerun { delivery: delivery.to_string(), reason: RerunReason::SocketClosed, run };
        match reply.first() {
            Some(Value::Int(1)) => {
                let run = reply.get(1).and_then(|v| redis::from_redis_value(v.clone()).ok()).unwrap_or(1);
                Ok(Some((rerun(run), None)))
            }
            Some(Value::Int(2)) => Ok(Some((rerun(0), Some(TurnEnded::from_reply(&reply[1..])?)))),
            _ => Ok(None),
        }
    }

    /// The runs open on the sockets of gateway process `holder`, which stopped beating: each
    /// runs again (or ends lost).
    pub async fn rerun_orphaned(
        &self,
        keys: &ShardKeys,
        holder: &str,
        (rules, runs): (&TurnsConfig, &RunsConfig),
        now_ms: u64,
    ) -> Result<Vec<(Rerun, Option<TurnEnded>)>, StoreError> {
        let reply: Vec<(String, u64, Vec<Value>)> = SCRIPTS
            .orphaned
            .key(keys.turn_index())
            .arg(&keys.tag)
            .arg(holder)
            .arg(now_ms)
            .arg(runs.limit)
            .arg(rules.timeout.as_millis() as u64)
            .arg(rules.order.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        reply
            .into_iter()
            .map(|(delivery, run, ended)| {
                let ended = if ended.is_empty() { None } else { Some(TurnEnded::from_reply(&ended)?) };
                Ok((Rerun { delivery, reason: RerunReason::SocketClosed, run }, ended))
            })
            .collect()
    }

    /// This process (`holder`) holds bot sockets, as of `now_ms`.
    pub async fn beat(&self, prefix: &str, holder: &str, now_ms: u64) -> Result<(), StoreError> {
        self.conn.clone().hset::<_, _, _, ()>(beats_key(prefix), holder, now_ms).await?;
        Ok(())
    }

    /// This process stops holding bot sockets (a clean stop).
    pub async fn beat_off(&self, prefix: &str, holder: &str) -> Result<(), StoreError> {
        self.conn.clone().hdel::<_, _, ()>(beats_key(prefix), holder).await?;
        Ok(())
    }

    /// The processes that held bot sockets and have not beaten for [`BEAT_STALE_MS`].
    pub async fn silent_holders(&self, prefix: &str, now_ms: u64) -> Result<Vec<String>, StoreError> {
        let beats: Vec<(String, u64)> = self.conn.clone().hgetall(beats_key(prefix)).await?;
        Ok(beats.into_iter().filter(|(_, at)| now_ms.saturating_sub(*at) > BEAT_STALE_MS).map(|(h, _)| h).collect())
    }

    /// `holder`'s runs were all run again: forget it.
    pub async fn forget_holder(&self, prefix: &str, holder: &str) -> Result<(), StoreError> {
        self.beat_off(prefix, holder).await
    }
}

fn beats_key(prefix: &str) -> String {
    format!("{prefix}:bots")
}
