//! The housekeeping's scripts: due retries promoted, the counts, a dead letter replayed or
//! purged, dead letters held to their bounds, consumers of gone processes forgotten.

/// KEYS: schedule zset, outbox stream. ARGV: now ms, max entries, key tag.
/// Moves retries that are due back onto the stream, noting the new entry in the delivery;
/// returns how many.
pub const PROMOTE: &str = r#"
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
for _, d in ipairs(due) do
  local hk = ARGV[3] .. ':d:' .. d
  if redis.call('EXISTS', hk) == 1 then
    redis.call('HSET', hk, 'se', redis.call('XADD', KEYS[2], '*', 'd', d))
  end
  redis.call('ZREM', KEYS[1], d)
end
return #due
"#;

/// KEYS: outbox stream, schedule zset, dead-letter stream, waiting index, conversations with
/// deliveries held for a turn (by how many), deliveries superseded (a counter), the stream of
/// versions before carried deliveries.
/// ARGV: group, key tag, the schedule's score of a paused delivery. Returns {ready, in flight,
/// scheduled (not paused), dead, received-at ms of the oldest waiting delivery or '', held,
/// conversations waiting, superseded, paused}. Ready is the group's lag
/// on each stream (Redis 7), or, where Redis cannot tell it, what is on the stream and not
/// pending, which counts too the acked entries the trim has not reached yet (for at most a
/// second). A stream is trimmed up to its oldest entry still pending or unread, so its first
/// entry's id is when the oldest of those was recorded; the waiting index holds the others that
/// wait. An index entry whose delivery is gone (finished by a version that indexed every
/// delivery) is dropped here.
pub const STATS: &str = r#"
local ready, pending, oldest = 0, 0, nil
local function count(stream)
  local len = redis.call('XLEN', stream)
  local waiting = 0
  local p = redis.pcall('XPENDING', stream, ARGV[1])
  if type(p) == 'table' and type(p[1]) == 'number' then waiting = p[1] end
  local lag = len - waiting
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if type(groups) == 'table' then
    for _, g in ipairs(groups) do
      local f = {}
      for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
      if f['name'] == ARGV[1] and type(f['lag']) == 'number' then lag = f['lag'] end
    end
  end
  ready, pending = ready + lag, pending + waiting
  local head = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
  if #head > 0 then
    local ms = tonumber(string.match(head[1][1], '^(%d+)'))
    if ms and (not oldest or ms < oldest) then oldest = ms end
  end
end
count(KEYS[1])
count(KEYS[7])
for _ = 1, 100 do
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if #first == 0 then break end
  if redis.call('EXISTS', ARGV[2] .. ':d:' .. first[1]) == 1 then
    local ms = tonumber(first[2])
    if not oldest or ms < oldest then oldest = ms end
    break
  end
  redis.call('ZREM', KEYS[4], first[1])
end
local held, conversations = 0, 0
local waiting = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
for i = 2, #waiting, 2 do
  held = held + tonumber(waiting[i])
  conversations = conversations + 1
end
local paused = redis.call('ZCOUNT', KEYS[2], ARGV[3], ARGV[3])
return {ready, pending, redis.call('ZCARD', KEYS[2]) - paused, redis.call('XLEN', KEYS[3]),
  oldest and tostring(oldest) or '', held, conversations, tonumber(redis.call('GET', KEYS[6]) or '0'), paused}
"#;

/// KEYS: dead-letter stream, outbox stream, delivery hash, waiting index. ARGV: delivery id,
/// mode (replay | purge), now ms. Replay puts a dead delivery back on the stream with a fresh
/// give-up window; purge forgets it. Returns 0 when it is not dead-lettered.
pub const DEAD: &str = r#"
local de = redis.call('HGET', KEYS[3], 'de')
if not de then
  return 0
end
redis.call('XDEL', KEYS[1], de)
if ARGV[2] == 'purge' then
  redis.call('DEL', KEYS[3])
  return 1
end
redis.call('HDEL', KEYS[3], 'de', 'fin')
redis.call('HSET', KEYS[3], 'rcv', ARGV[3], 'se', redis.call('XADD', KEYS[2], '*', 'd', ARGV[1]))
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
return 1
"#;

/// KEYS: dead-letter stream. ARGV: oldest id kept (ms), most letters kept, key tag, batch.
/// Drops letters parked before the first and the oldest beyond the second, with their bodies;
/// returns {dropped for age, dropped for count}.
pub const TRIM_DEAD: &str = r#"
local function drop(e)
  local fields = e[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'd' then
      local hk = ARGV[3] .. ':d:' .. fields[i + 1]
      if redis.call('HGET', hk, 'de') == e[1] then
        redis.call('DEL', hk)
      end
    end
  end
  redis.call('XDEL', KEYS[1], e[1])
end
local by_age = 0
for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '(' .. ARGV[1], 'COUNT', ARGV[4])) do
  drop(e)
  by_age = by_age + 1
end
local by_count = 0
local over = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[2])
if over > 0 then
  for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', math.min(over, tonumber(ARGV[4])))) do
    drop(e)
    by_count = by_count + 1
  end
end
return {by_age, by_count}
"#;

/// KEYS: outbox stream. ARGV: group, min idle ms, this process's consumer name.
/// Removes consumers that hold nothing and have not read for that long (processes that are
/// gone); returns how many.
pub const REMOVE_IDLE_CONSUMERS: &str = r#"
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then
  return 0
end
local removed = 0
for _, c in ipairs(consumers) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) and f['name'] ~= ARGV[3] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed = removed + 1
  end
end
return removed
"#;
