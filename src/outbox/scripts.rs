//! The Lua scripts that make each outbox transition atomic on one Redis node. Every key a script
//! touches shares one hash tag (`{prefix:app:shard}`), so they run unchanged on Redis Cluster.
//!
//! The fence is the pending-list entry itself: who owns it (`consumer`) and how many times it
//! has been handed out (`times delivered`, which XREADGROUP sets to 1 and every XAUTOCLAIM bumps).
//! A worker holds `(consumer, count)` as its claim token; once anyone re-claims the entry the
//! count moves on and the old holder's completion is refused.

/// KEYS: receipt, outbox stream, delivery hash.
/// ARGV: receipt ttl ms, delivery id, body, content type, path, kind, received-at ms.
/// Returns {1, id} when recorded, {0, existing id} for a duplicate.
pub const RECORD: &str = r#"
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[1]) then
  return {0, redis.call('GET', KEYS[1]) or ''}
end
redis.call('HSET', KEYS[3], 'b', ARGV[3], 'ct', ARGV[4], 'p', ARGV[5], 'k', ARGV[6],
  'rcv', ARGV[7], 'n', 0)
redis.call('XADD', KEYS[2], '*', 'd', ARGV[2])
return {1, ARGV[2]}
"#;

/// Shared head of the fenced scripts: ARGV[1] group, ARGV[2] entry id, ARGV[3] consumer,
/// ARGV[4] token. Returns 0 from the script when the caller no longer holds the lease.
macro_rules! fenced {
    ($body:literal) => {
        concat!(
            r#"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] or tonumber(p[1][4]) ~= tonumber(ARGV[4]) then
  return 0
end
"#,
            $body
        )
    };
}

/// KEYS: outbox stream. Resets the entry's idle time without bumping its delivery count.
pub const EXTEND: &str = fenced!(
    r#"
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
"#
);

/// KEYS: outbox stream, delivery hash, schedule zset, dead-letter stream.
/// ARGV[5] mode (done | retry | dead), ARGV[6] delivery id, ARGV[7] due ms (retry) or now ms
/// (dead), ARGV[8] last status, ARGV[9] last error.
pub const FINISH: &str = fenced!(
    r#"
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local mode = ARGV[5]
if mode == 'done' then
  redis.call('DEL', KEYS[2])
  return 1
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1
end
local n = redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('HSET', KEYS[2], 'st', ARGV[8], 'err', ARGV[9])
if mode == 'retry' then
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[6])
else
  redis.call('XADD', KEYS[4], '*', 'd', ARGV[6], 'st', ARGV[8], 'err', ARGV[9],
    'attempts', n, 'at', ARGV[7])
end
return 1
"#
);

/// KEYS: outbox stream. ARGV: group, consumer, min idle ms, max entries.
/// Takes over entries whose lease ran out; returns a flat list {entry, delivery, token, …}.
pub const RECLAIM: &str = r#"
local out = {}
local cursor = '0-0'
for _ = 1, 10 do
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], cursor,
    'COUNT', ARGV[4])
  for _, e in ipairs(r[2]) do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    local fields = e[2]
    local d = ''
    for i = 1, #fields, 2 do
      if fields[i] == 'd' then d = fields[i + 1] end
    end
    out[#out + 1] = e[1]
    out[#out + 1] = d
    out[#out + 1] = p[1][4]
  end
  cursor = r[1]
  if cursor == '0-0' or #out >= 3 * tonumber(ARGV[4]) then break end
end
return out
"#;

/// KEYS: schedule zset, outbox stream. ARGV: now ms, max entries.
/// Moves retries that are due back onto the stream; returns how many.
pub const PROMOTE: &str = r#"
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
for _, d in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', 'd', d)
  redis.call('ZREM', KEYS[1], d)
end
return #due
"#;
