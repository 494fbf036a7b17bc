//! The shard register's scripts: which shards an app has had, when conversations began to
//! pick them, and the receipts a version before that left on another shard.

/// KEYS: the prefix's shard register. ARGV: now ms. When this version first ran on it: the
/// time its conversations began to pick their deliveries' shards (0 when no earlier version
/// ever ran: nothing was recorded by the older rule). Kept in the field `~conversations`, which
/// no app name can be.
pub const SHARDED_BY_CONVERSATION: &str = r#"
local since = redis.call('HGET', KEYS[1], '~conversations')
if since then return tonumber(since) end
since = (redis.call('HLEN', KEYS[1]) == 0) and 0 or tonumber(ARGV[1])
redis.call('HSET', KEYS[1], '~conversations', since)
return since
"#;

/// KEYS: a delivery's receipt and message claim (or the receipt again) on the shard a version
/// before turns gave it. ARGV: 1 the delivery id's prefix on its shard now (`<shard>-`), 2 its
/// id, 3 receipt ttl ms, 4 has receipt (0/1), 5 has claim (0/1).
/// Returns {0, id} when that version recorded the receipt, {2, id} when it claimed the message
/// (the delivery is a duplicate); else {1, ''}, having claimed both there too, so that a gateway
/// of that version still running finds them.
pub const EARLIER_RECEIPT: &str = r#"
local function earlier(k)
  local v = redis.call('GET', k)
  if v and string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then return v end
  return nil
end
if ARGV[4] == '1' then
  local v = earlier(KEYS[1])
  if v then return {0, v} end
end
if ARGV[5] == '1' then
  local v = earlier(KEYS[2])
  if v then return {2, v} end
end
if ARGV[4] == '1' then redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) end
if ARGV[5] == '1' then redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) end
return {1, ''}
"#;

/// KEYS: the prefix's shard register (a hash: app → the most shards it has had). ARGV: app,
/// configured shards. Raises the app's count to the configured one and returns the larger:
/// shards that a smaller `shards` no longer writes to keep being read until they are empty.
pub const SHARDS_IN_USE: &str = r#"
local had = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local now = tonumber(ARGV[2])
if now > had then
  redis.call('HSET', KEYS[1], ARGV[1], now)
  return now
end
return had
"#;
