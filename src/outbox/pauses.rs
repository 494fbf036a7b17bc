//! Pauses in Redis: the register every process reads (`{prefix}:pauses`, one field a pause:
//! `app\tteam\tchannel` → who and when, as JSON), and the paused deliveries of a shard — in its
//! schedule at [`PAUSED`], which no promotion reaches, their `team\tchannel` in their record
//! (`pp`) and when they were paused (`pz`). A release puts every paused delivery no pause holds
//! any more back on the schedule, due now, in the order Slack sent them, and adds the time it
//! waited to its record's paused total (`pd`), which `give_up_after` does not count.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use super::{ShardKeys, Store, StoreError};
use crate::pauses::Pause;

/// The schedule's score of a paused delivery: past any due time (ms) a promotion reads.
pub const PAUSED: u64 = 9_000_000_000_000_000;
/// At most this many paused deliveries are released by one call.
pub const RELEASE_BATCH: usize = 500;

/// KEYS: schedule zset. ARGV: key tag, now ms, batch, [`PAUSED`], offset (how many paused
/// deliveries still held to skip), then the scope (`team\tchannel`, `*` for any) of each
/// pause of the app that remains. Returns the ids it released, in the order they are due, and
/// how many it looked at.
const RELEASE: &str = r#"
local ids = redis.call('ZRANGE', KEYS[1], ARGV[4], ARGV[4], 'BYSCORE', 'LIMIT', ARGV[5], ARGV[3])
local function covered(place)
  local team, channel = string.match(place or '', '^([^\t]*)\t(.*)$')
  for i = 6, #ARGV do
    local pt, pc = string.match(ARGV[i], '^([^\t]*)\t(.*)$')
    if (pt == '*' or pt == team) and (pc == '*' or pc == channel) then return true end
  end
  return false
end
local now, free = tonumber(ARGV[2]), {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[1] .. ':d:' .. id, 'pp', 'pz', 'rcv')
  if not f[2] then
    -- Its record is gone (cancelled, replayed elsewhere): nothing to release.
    redis.call('ZREM', KEYS[1], id)
  elseif not covered(f[1]) then
    free[#free + 1] = {id, tonumber(f[3]) or 0, tonumber(f[2]) or now}
  end
end
table.sort(free, function(a, b) return a[2] < b[2] end)
for i, e in ipairs(free) do
  local hk = ARGV[1] .. ':d:' .. e[1]
  redis.call('HINCRBY', hk, 'pd', math.max(0, now - e[3]))
  redis.call('HDEL', hk, 'pz', 'pp')
  redis.call('ZADD', KEYS[1], now - #free + i, e[1])
  free[i] = e[1]
end
return {free, #ids}
"#;

/// KEYS: the register. ARGV: the field. Returns the pause's value it removed, or false.
const RESUME: &str = r#"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then redis.call('HDEL', KEYS[1], ARGV[1]) end
return v
"#;

fn register(prefix: &str) -> String {
    format!("{{{prefix}}}:pauses")
}

/// Who and when, as the register keeps them.
#[derive(serde::Serialize, serde::Deserialize)]
struct Set {
    by: String,
    at_ms: u64,
}

impl Store {
    /// Every pause, as the register holds it (a field it cannot read is skipped).
    pub async fn pauses(&self, prefix: &str) -> Result<Vec<Pause>, StoreError> {
        let all: Vec<(String, String)> = self.conn.clone().hgetall(register(prefix)).await?;
        Ok(all.into_iter().filter_map(|(field, value)| parse(&field, &value)).collect())
    }

    /// Set `p`; `false` when that scope was paused already (then the first pause stays).
    pub async fn pause(&self, prefix: &str, p: &Pause) -> Result<bool, StoreError> {
        let value = serde_json::to_string(&Set { by: p.by.clone(), at_ms: p.at_ms }).expect("plain fields");
        let field = Pause::field(&p.app, &p.team, &p.channel);
        Ok(self.conn.clone().hset_nx(register(prefix), field, value).await?)
    }

    /// End the pause of `app`'s scope; the pause it ended, or `None` when there was none.
    pub async fn resume(
        &self,
        prefix: &str,
        app: &str,
        team: &str,
        channel: &str,
    ) -> Result<Option<Pause>, StoreError> {
        static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RESUME));
        let field = Pause::field(app, team, channel);
        let v: Option<String> = SCRIPT.key(register(prefix)).arg(&field).invoke_async(&mut self.conn.clone()).await?;
        Ok(v.and_then(|v| parse(&field, &v)))
    }

    /// Release the shard's paused deliveries that none of `remain` (the app's pauses now)
    /// holds, [`RELEASE_BATCH`] looked at a call, past the first `skip` (held still): the ids
    /// released, and how many it looked at.
    pub async fn release_paused(
        &self,
        keys: &ShardKeys,
        remain: &[Pause],
        now_ms: u64,
        skip: usize,
    ) -> Result<(Vec<String>, usize), StoreError> {
        static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
        let mut call = SCRIPT.key(&keys.sched);
        call.arg(&keys.tag).arg(now_ms).arg(RELEASE_BATCH).arg(PAUSED).arg(skip);
        for p in remain {
            call.arg(p.scope());
        }
        Ok(call.invoke_async(&mut self.conn.clone()).await?)
    }
}

fn parse(field: &str, value: &str) -> Option<Pause> {
    let mut parts = field.splitn(3, '\t');
    let (app, team, channel) = (parts.next()?, parts.next()?, parts.next()?);
    let set: Set = serde_json::from_str(value).ok()?;
    Some(Pause { app: app.into(), team: team.into(), channel: channel.into(), by: set.by, at_ms: set.at_ms })
}
