//! The egress's records of one channel (under its tag `{P:e:<team>:<channel>}`): the pace of
//! each app's posts, and the writes of each run of a delivery (re-runs).

use std::time::Duration;

use redis::Value;

use super::{Cached, EgressStore, Place};
use crate::store::StoreError;

impl EgressStore {
    /// Reserve a post in the channel's pace of one app (`app_id`: the token's bot id, or its
    /// user id for a user token — Slack's limit is per app): the wait before it may go, or
    /// `None` when that would be longer than `most`.
    #[allow(clippy::too_many_arguments)]
    pub async fn pace(
        &self,
        p: &Place<'_>,
        app_id: &str,
        now_ms: u64,
        per: Duration,
        burst: u32,
        most: Duration,
    ) -> Result<Option<Duration>, StoreError> {
        let k = format!("{}:pace:{app_id}", self.channel_tag(p));
        let wait: i64 = self
            .s
            .pace
            .key(k)
            .arg(now_ms)
            .arg(per.as_secs_f64() * 1000.0)
            .arg(burst)
            .arg(most.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((wait >= 0).then(|| Duration::from_millis(wait as u64)))
    }

    /// Count a write of `method` made during run `run` of `delivery`: its number k in the run,
    /// and the k-th such write of any run, when one was made.
    pub async fn rerun_next(
        &self,
        p: &Place<'_>,
        delivery: &str,
        run: u64,
        method: &str,
        window: Duration,
    ) -> Result<(u64, Option<(u64, Cached)>), StoreError> {
        let tag = self.channel_tag(p);
        let reply: Vec<Value> = self
            .s
            .run_next
            .key(format!("{tag}:r:{delivery}:{run}:{method}"))
            .arg(window.as_millis() as u64)
            .arg(format!("{tag}:w:{delivery}:{method}:"))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let num = |i: usize| -> u64 {
            reply
                .get(i)
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        };
        let k = reply.first().and_then(|v| redis::from_redis_value_ref::<u64>(v).ok()).unwrap_or(0);
        let earlier = (reply.len() >= 6).then(|| Cached::from_parts(&reply[2..]).map(|c| (num(1), c))).flatten();
        Ok((k, earlier))
    }

    /// The k-th write of `method` for `delivery` was posted during run `run`.
    #[allow(clippy::too_many_arguments)]
    pub async fn rerun_record(
        &self,
        p: &Place<'_>,
        delivery: &str,
        method: &str,
        k: u64,
        run: u64,
        answer: &Cached,
        window: Duration,
    ) -> Result<(), StoreError> {
        let key = format!("{}:w:{delivery}:{method}:{k}", self.channel_tag(p));
        let _: i64 = self
            .s
            .run_record
            .key(key)
            .arg(run)
            .arg(&answer.args()[..])
            .arg(window.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}
