//! Slack's budget for the history reads, kept in Redis and shared by every replica: per app
//! (a bot token's bot id, a user token's user), per workspace and per method
//! (`conversations.history` and `.replies` are separate budgets at Slack), the calls of the
//! last minute against `egress.history_tier`, and Slack's own `Retry-After` after a 429.
//!
//! The bots' own reads through the egress are counted whatever is left (Slack decides those);
//! the egress's looks for uncertain posts take a call only when one is left, so the egress
//! knows what remains and a look never spends what Slack would refuse.

use std::time::Duration;

use redis::Script;

use super::model::Identity;
use super::store::EgressStore;
use crate::store::StoreError;

/// The calls of one method of one app in the last minute (a sorted set of call times) and
/// Slack's "not before" after a 429. `take`: only when a call is left (else how long until
/// one is, in ms); `count`: whatever is left. Returns 0 when the call was counted.
const TAKE: &str = r#"
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
if ARGV[3] == 'take' then
  local until_ = tonumber(redis.call('GET', KEYS[2]) or '0')
  if until_ > now then return until_ - now end
  if redis.call('ZCARD', KEYS[1]) >= limit then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return math.max(tonumber(oldest[2]) + 60000 - now, 1)
  end
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(limit + 1))
redis.call('PEXPIRE', KEYS[1], 60000)
return 0
"#;

/// Whose budget: an app in a workspace, for one method.
pub(super) struct Budget<'a> {
    pub who: &'a Identity,
    pub method: &'a str,
    pub per_minute: u32,
}

impl Budget<'_> {
    fn keys(&self, store: &EgressStore) -> (String, String) {
        let app = if self.who.bot_id.is_empty() { &self.who.user_id } else { &self.who.bot_id };
        let calls = format!("{{{}:hb:{}:{app}}}:{}", store.prefix(), self.who.team, self.method);
        let until = format!("{calls}:until");
        (calls, until)
    }
}

impl EgressStore {
    /// Take one call of `b` for a look: `Ok(None)` taken, `Ok(Some(wait))` none left for
    /// `wait`.
    pub(super) async fn history_take(&self, b: &Budget<'_>, now_ms: u64) -> Result<Option<Duration>, StoreError> {
        self.history_call(b, now_ms, "take").await
    }

    /// Count one call of the bot's own against `b`.
    pub(super) async fn history_count(&self, b: &Budget<'_>, now_ms: u64) -> Result<(), StoreError> {
        self.history_call(b, now_ms, "count").await.map(|_| ())
    }

    async fn history_call(&self, b: &Budget<'_>, now_ms: u64, how: &str) -> Result<Option<Duration>, StoreError> {
        let (calls, until) = b.keys(self);
        let member = format!("{now_ms}-{:08x}", rand::random::<u32>());
        static SCRIPT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(TAKE));
        let wait_ms: u64 = SCRIPT
            .key(calls)
            .key(until)
            .arg(now_ms)
            .arg(b.per_minute.max(1))
            .arg(how)
            .arg(member)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((wait_ms > 0).then(|| Duration::from_millis(wait_ms)))
    }

    /// Slack refused a call of `b` (429) for `retry_after`: no look until then.
    pub(super) async fn history_refused(
        &self,
        b: &Budget<'_>,
        now_ms: u64,
        retry_after: Duration,
    ) -> Result<(), StoreError> {
        let (_, until) = b.keys(self);
        let ms = retry_after.as_millis().max(1) as u64;
        let mut conn = self.conn.clone();
        let () = redis::cmd("SET").arg(until).arg(now_ms + ms).arg("PX").arg(ms).query_async(&mut conn).await?;
        Ok(())
    }
}
