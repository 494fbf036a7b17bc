//! How long the history keeps what it keeps: the trim by age and by `history_max` (records,
//! bodies and filter fields with their index entries), the purge when `history = "off"`, and
//! the expiry given once to keys that versions before wrote without one. The writer runs these
//! between its batches.

use redis::Script;

use super::tag;
use crate::clock::now_ms;
use crate::config::UiConfig;
use crate::store::Conn;

/// The overview's minutes live this long.
pub const MINUTES_KEPT_SECS: u64 = 2 * 3600;
/// At most this many deliveries go per trim script call (each call holds Redis while it runs);
/// a trim calls it again until it removes fewer, up to [`TRIM_CALLS`] times.
const TRIM_MAX: usize = 2_000;
const TRIM_CALLS: usize = 20;

/// Drop what is past `[ui] history`, then the oldest past `history_max`, with their records
/// and bodies. An index left empty is gone with its last member.
const TRIM: &str = r"
local idx, records, bodies, sifted = KEYS[1], ARGV[1], ARGV[5], ARGV[6]
local limit = tonumber(ARGV[4])
local n = 0
local old = redis.call('ZRANGEBYSCORE', idx, '-inf', '(' .. ARGV[2], 'LIMIT', 0, limit)
for _, id in ipairs(old) do
  redis.call('UNLINK', records .. id, bodies .. id, sifted .. id)
  redis.call('ZREM', idx, id)
  n = n + 1
end
local over = redis.call('ZCARD', idx) - tonumber(ARGV[3])
if over > 0 then
  local ids = redis.call('ZRANGE', idx, 0, math.min(over, limit) - 1)
  for _, id in ipairs(ids) do redis.call('UNLINK', records .. id, bodies .. id, sifted .. id) end
  redis.call('ZREMRANGEBYRANK', idx, 0, #ids - 1)
  n = n + #ids
end
return n
";

/// Give every key of one app's history that has none an expiry: `[ui] history` past its
/// arrival (records and bodies written before every key expired), `ARGV[3]` ids from rank
/// `ARGV[2]`; how many ids it looked at.
const EXPIRE_OLD: &str = r"
local idx, records, bodies, ttl = KEYS[1], ARGV[1], ARGV[4], tonumber(ARGV[5])
if redis.call('PTTL', idx) == -1 then redis.call('PEXPIRE', idx, ttl) end
local ids = redis.call('ZRANGE', idx, tonumber(ARGV[2]), tonumber(ARGV[2]) + tonumber(ARGV[3]) - 1, 'WITHSCORES')
for i = 1, #ids, 2 do
  local at = tonumber(ids[i + 1]) + ttl
  for _, key in ipairs({records .. ids[i], bodies .. ids[i]}) do
    if redis.call('PTTL', key) == -1 then redis.call('PEXPIREAT', key, at) end
  end
end
return #ids / 2
";

/// What to keep of one app's history: everything since `oldest_ms`, at most `max` deliveries.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub oldest_ms: u64,
    pub max: usize,
}

impl Keep {
    /// What `[ui]` keeps now.
    pub fn of(ui: &UiConfig) -> Keep {
        Keep { oldest_ms: now_ms().saturating_sub(ui.history.as_millis() as u64), max: ui.history_max }
    }

    /// Nothing (the history is off).
    pub const NOTHING: Keep = Keep { oldest_ms: u64::MAX, max: 0 };
}

/// Trim every app's history to `keep`; how many deliveries went.
pub async fn trim_apps(conn: &mut Conn, prefix: &str, apps: &[String], keep: Keep) -> redis::RedisResult<u64> {
    let script = Script::new(TRIM);
    let mut gone = 0;
    for app in apps {
        let tag = tag(prefix, app);
        for _ in 0..TRIM_CALLS {
            let n: u64 = script
                .key(format!("{tag}:idx"))
                .arg(format!("{tag}:t:"))
                .arg(keep.oldest_ms)
                .arg(keep.max)
                .arg(TRIM_MAX)
                .arg(format!("{tag}:b:"))
                .arg(format!("{tag}:s:"))
                .invoke_async(conn)
                .await?;
            gone += n;
            if n < TRIM_MAX as u64 {
                break;
            }
        }
    }
    Ok(gone)
}

/// Every key of `apps`' histories gone (`history = "off"`): their deliveries, their indexes,
/// the overview's minutes, and the registry.
pub async fn purge(conn: &mut Conn, prefix: &str, apps: &[String]) -> redis::RedisResult<u64> {
    let mut gone = 0;
    for app in apps {
        // An index holds at most `history_max` (and the trim takes TRIM_MAX a call), so a few
        // calls empty it; one a tick more is harmless.
        gone += trim_apps(conn, prefix, std::slice::from_ref(app), Keep::NOTHING).await?;
        let tag = tag(prefix, app);
        let now = now_ms() / 60_000;
        let mut p = redis::pipe();
        for m in now.saturating_sub(MINUTES_KEPT_SECS / 60)..=now + 1 {
            p.cmd("UNLINK").arg(format!("{tag}:m:{m}")).ignore();
        }
        p.query_async::<()>(conn).await?;
    }
    let _: () = redis::cmd("UNLINK").arg(registry(prefix)).query_async(conn).await?;
    Ok(gone)
}

/// Give the keys that versions before this one wrote without an expiry theirs.
pub async fn expire_old(conn: &mut Conn, prefix: &str, apps: &[String], ui: &UiConfig) -> redis::RedisResult<()> {
    let script = Script::new(EXPIRE_OLD);
    for app in apps {
        let tag = tag(prefix, app);
        let mut from = 0;
        loop {
            let n: usize = script
                .key(format!("{tag}:idx"))
                .arg(format!("{tag}:t:"))
                .arg(from)
                .arg(TRIM_MAX)
                .arg(format!("{tag}:b:"))
                .arg(ui.history.as_millis() as u64)
                .invoke_async(conn)
                .await?;
            from += n;
            if n < TRIM_MAX {
                break;
            }
        }
    }
    Ok(())
}

/// The set of apps that have a history (so that one removed from the config, or every one
/// when the history is turned off, is still found and emptied). Its own hash tag: it is read
/// and written by itself.
pub fn registry(prefix: &str) -> String {
    format!("{{{prefix}:h}}:apps")
}
