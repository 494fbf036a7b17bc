//! The Lua scripts that make each outbox transition atomic on one Redis node. Every key a script
//! touches shares one hash tag (`{prefix:app:shard}`); keys built inside a script from that tag
//! or from a declared key live in the same slot, so they run unchanged on Redis Cluster.
//!
//! The fence is the pending-list entry itself: who owns it (`consumer`) and how many times it
//! has been handed out (`times delivered`, which XREADGROUP sets to 1 and every XAUTOCLAIM bumps).
//! A worker holds `(consumer, count)` as its claim token; once anyone re-claims the entry the
//! count moves on and the old holder's completion is refused.
//!
//! The waiting index (`…:wait`, scored by received-at) holds every delivery that is not done or
//! dead, wherever it waits (on the stream, in flight, held inline or scheduled for a retry), so
//! the age of the oldest waiting delivery is one read.
//!
//! A message claim's other copies (`<claim>:alt`, a list of delivery ids whose hashes expire with
//! the claim) are kept while the copy holding the claim waits: if the bot refuses the holder
//! with a final 4xx (it has no listener for `app_mention`, say) the next copy is delivered
//! instead; once the holder is delivered they are dropped.

/// Helpers shared by the scripts that touch message claims. `tag` is the shard's key tag.
macro_rules! with_claim_helpers {
    ($body:expr) => {
        concat!(
            r#"
local function drop_alternates(claim, tag)
  for _, id in ipairs(redis.call('LRANGE', claim .. ':alt', 0, -1)) do
    redis.call('DEL', tag .. ':d:' .. id)
  end
  redis.call('DEL', claim .. ':alt')
end
local function promote_alternate(claim, tag, stream, wait)
  local alt = redis.call('LPOP', claim .. ':alt')
  while alt do
    local hk = tag .. ':d:' .. alt
    if redis.call('EXISTS', hk) == 1 then
      redis.call('PERSIST', hk)
      redis.call('HSET', hk, 'e', redis.call('XADD', stream, '*', 'd', alt))
      redis.call('ZADD', wait, redis.call('HGET', hk, 'rcv'), alt)
      redis.call('SET', claim, alt, 'XX', 'KEEPTTL')
      return
    end
    alt = redis.call('LPOP', claim .. ':alt')
  end
end
"#,
            $body
        )
    };
}

/// A turn as kept (a string: `holder|ts|begun ms|answered|writes|last write ms|waiters|
/// cancelled`), and a delivery's conversation from its `cv`. A turn key lives for its
/// timeout and a minute: what ends a turn on time is the housekeeping's index, where a turn is
/// only while something waits for it (deliveries held, the bot's replies, a cancellation).
macro_rules! with_turn_codec {
    ($body:expr) => {
        concat!(
            r#"
local function conv_of(cv)
  if not cv then return nil end
  local team, channel, ts, thread = string.match(cv, '^([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)$')
  if not thread then return nil end
  return team .. ':' .. channel .. ':' .. thread, ts
end
local function turn_get(tk)
  local v = redis.call('GET', tk)
  if not v then return nil end
  local d, ts, at, ok, w, lw, q, x =
    string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if not d then return nil end
  return {d = d, ts = ts, at = tonumber(at) or 0, ok = ok == '1', w = tonumber(w) or 0, lw = tonumber(lw),
    q = q == '1', x = x}
end
local function turn_put(tk, t, ttl)
  local v = table.concat({t.d, t.ts, t.at, t.ok and '1' or '', t.w or 0, t.lw or '', t.q and '1' or '',
    t.x or ''}, '|')
  if ttl then
    redis.call('SET', tk, v, 'PX', ttl)
  else
    redis.call('SET', tk, v, 'KEEPTTL')
  end
end
"#,
            $body
        )
    };
}

/// Helpers shared by the scripts that move a conversation's turn (see `turns`); they build on
/// the claim helpers and the turn codec. `tag` is the shard's key tag; `now` and `timeout` are
/// numbers (ms).
macro_rules! with_turn_helpers {
    ($body:expr) => {
        with_claim_helpers!(with_turn_codec!(concat!(
            r#"
local function supersede(tag, id, by, now)
  local hk = tag .. ':d:' .. id
  local mc = redis.call('HGET', hk, 'mc')
  if mc then drop_alternates(mc, tag) end
  redis.call('XADD', tag .. ':superseded', 'MAXLEN', '~', 1000, '*', 'd', id, 'by', by, 'at', now,
    'cv', redis.call('HGET', hk, 'cv') or '')
  redis.call('INCR', tag .. ':superseded:n')
  redis.call('DEL', hk)
  redis.call('ZREM', tag .. ':wait', id)
end
local function release(tag, conv, now, order, timeout)
  local qk = tag .. ':tq:' .. conv
  local superseded = {}
  while true do
    local first
    if order == 'latest' then
      first = redis.call('ZRANGE', qk, -1, -1, 'WITHSCORES')
    else
      first = redis.call('ZRANGE', qk, 0, 0, 'WITHSCORES')
    end
    if #first == 0 then
      redis.call('ZREM', tag .. ':waiting', conv)
      return '', superseded
    end
    local id = first[1]
    redis.call('ZREM', qk, id)
    local hk = tag .. ':d:' .. id
    local cv = redis.call('HGET', hk, 'cv')
    if cv then
      if order == 'latest' then
        for _, old in ipairs(redis.call('ZRANGE', qk, '-inf', '(' .. first[2], 'BYSCORE')) do
          if redis.call('EXISTS', tag .. ':d:' .. old) == 1 then
            supersede(tag, old, id, now)
            superseded[#superseded + 1] = old
          end
        end
        redis.call('ZREMRANGEBYSCORE', qk, '-inf', '(' .. first[2])
      end
      redis.call('HSET', hk, 'e', redis.call('XADD', tag .. ':outbox', '*', 'd', id))
      local left = redis.call('ZCARD', qk)
      if left == 0 then
        redis.call('ZREM', tag .. ':waiting', conv)
      else
        redis.call('ZADD', tag .. ':waiting', left, conv)
      end
      if order ~= 'off' then
        local _, ts = conv_of(cv)
        turn_put(tag .. ':tn:' .. conv, {d = id, ts = ts or first[2], at = now, q = left > 0}, timeout + 60000)
        if left > 0 then
          redis.call('ZADD', tag .. ':turns', now + timeout, conv)
        end
      end
      return id, superseded
    end
  end
end
-- `t`: the turn as it was (nil when its key is gone). Returns {duration ms, released id,
-- {superseded ids}}.
local function end_turn(tag, conv, t, now, order, timeout)
  redis.call('DEL', tag .. ':tn:' .. conv)
  if not t or t.q or t.ok or (t.x or '') ~= '' then
    redis.call('ZREM', tag .. ':turns', conv)
  end
  local released, superseded = '', {}
  if not t or t.q then
    released, superseded = release(tag, conv, now, order, timeout)
  end
  return {math.max(now - (t and t.at or now), 0), released, superseded}
end
-- A leased delivery (its hash's `cv`) takes its conversation's turn, or waits for it off the
-- stream: false when it waits.
local function begin_turn(tag, group, entry, id, hk, cv, now, timeout)
  local conv, ts = conv_of(cv)
  if not conv then return true end
  local tk = tag .. ':tn:' .. conv
  local t = turn_get(tk)
  if t and t.d == id then return true end
  if not t then
    turn_put(tk, {d = id, ts = ts, at = now}, timeout + 60000)
    return true
  end
  redis.call('XACK', tag .. ':outbox', group, entry)
  redis.call('XDEL', tag .. ':outbox', entry)
  redis.call('HSET', hk, 'hq', conv)
  redis.call('ZADD', tag .. ':tq:' .. conv, ts, id)
  redis.call('ZINCRBY', tag .. ':waiting', 1, conv)
  if not t.q then
    t.q = true
    turn_put(tk, t)
    redis.call('ZADD', tag .. ':turns', 'NX', t.at + timeout, conv)
  end
  return false
end
local function field(list, name)
  for j = 1, #list, 2 do
    if list[j] == name then return list[j + 1] end
  end
  return nil
end
-- A leased entry's delivery: its fields, an empty list when it is gone, or 1 when it was put
-- to wait for its conversation's turn (`timeout` nil: the app takes none).
local function load_entry(tag, group, entry, id, now, timeout)
  local hk = tag .. ':d:' .. id
  local fields = redis.call('HGETALL', hk)
  if timeout and #fields > 0 and not begin_turn(tag, group, entry, id, hk, field(fields, 'cv'), now, timeout) then
    return 1
  end
  return fields
end
-- The delivery id an entry's fields name ('' when none).
local function entry_delivery(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'd' then return fields[i + 1] end
  end
  return ''
end
"#,
            $body
        )))
    };
}

/// KEYS: receipt (or the delivery hash when there is none), outbox stream, delivery hash,
/// schedule zset, message claim (or the hash), the claim of a message being deleted (or the
/// hash), waiting index.
/// ARGV: 1 receipt ttl ms, 2 delivery id, 3 body, 4 content type, 5 path, 6 kind, 7 received-at
/// ms, 8 placement (stream | inline | discard: only the receipt and the cancellation), 9 inline
/// due ms, 10 has claim (0/1), 11 has cancel (0/1), 12 key tag, 13 group, 14 detail,
/// 15 response url, 16 has receipt (0/1), 17 replicated (0/1: a duplicate writes too, so that
/// the `WAIT` after it covers the original record, whichever connection wrote that),
/// 18 the conversation its message belongs to, encoded (empty: none; kept as `cv`).
///
/// Returns {1, id, cancelled} when recorded, {0, original id, 0} for a retry of a known
/// receipt, {2, holder id, 0} for another event of a message already claimed. An inline
/// delivery goes to the schedule zset with a due time one lease ahead: the ingress owns it
/// while its score is in the future, and if the ingress dies it is promoted like any retry.
pub const RECORD: &str = with_claim_helpers!(with_turn_codec!(
    r#"
-- The delivery's hash in one HSET, with any extra fields (its entry id, its message claim).
local function store(hk, ...)
  redis.call('HSET', hk, 'b', ARGV[3], 'ct', ARGV[4], 'p', ARGV[5], 'k', ARGV[6], 'rcv', ARGV[7], 'n', 0,
    'x', ARGV[14], 'ru', ARGV[15], 'cv', ARGV[18], ...)
end
-- A write that changes nothing (the same expiry again), for a duplicate under WAIT.
local function touch(k)
  if ARGV[17] == '1' then
    local ttl = redis.call('PTTL', k)
    if ttl > 0 then redis.call('PEXPIRE', k, ttl) end
  end
end
if ARGV[16] == '1' and not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[1]) then
  touch(KEYS[1])
  return {0, redis.call('GET', KEYS[1]) or '', 0}
end
if ARGV[10] == '1' and not redis.call('SET', KEYS[5], ARGV[2], 'NX', 'PX', ARGV[1]) then
  local holder = redis.call('GET', KEYS[5]) or ''
  local hhk = ARGV[12] .. ':d:' .. holder
  if redis.call('HGET', hhk, 'fin') == '1' then
    -- The bot refused the copy holding the claim with a final 4xx: this copy takes it over.
    redis.call('SET', KEYS[5], ARGV[2], 'XX', 'KEEPTTL')
  else
    if ARGV[16] == '1' then
      redis.call('SET', KEYS[1], holder, 'XX', 'KEEPTTL')
    end
    if redis.call('EXISTS', hhk) == 1 then
      -- The holder still waits: keep this copy in case the bot refuses the holder.
      local ttl = redis.call('PTTL', KEYS[5])
      store(KEYS[3], 'mc', KEYS[5])
      redis.call('PEXPIRE', KEYS[3], ttl)
      redis.call('RPUSH', KEYS[5] .. ':alt', ARGV[2])
      redis.call('PEXPIRE', KEYS[5] .. ':alt', ttl)
    end
    touch(KEYS[5])
    return {2, holder, 0}
  end
end
local cancelled = 0
if ARGV[11] == '1' then
  local d = redis.call('GET', KEYS[6])
  if d then
    local hk = ARGV[12] .. ':d:' .. d
    if redis.call('ZREM', KEYS[4], d) == 1 then
      cancelled = 1
    else
      local e = redis.call('HGET', hk, 'e')
      if e then
        local p = redis.pcall('XPENDING', KEYS[2], ARGV[13], e, e, 1)
        local taken = type(p) == 'table' and #p > 0
        if not taken and redis.call('XDEL', KEYS[2], e) == 1 then
          cancelled = 1
        end
      end
    end
    local hq = redis.call('HGET', hk, 'hq')
    if cancelled == 0 and hq and redis.call('ZREM', ARGV[12] .. ':tq:' .. hq, d) == 1 then
      -- Held for its conversation's turn: it leaves the queue.
      if tonumber(redis.call('ZINCRBY', ARGV[12] .. ':waiting', -1, hq)) <= 0 then
        redis.call('ZREM', ARGV[12] .. ':waiting', hq)
      end
      cancelled = 1
    end
    if cancelled == 1 then
      local conv = conv_of(redis.call('HGET', hk, 'cv'))
      local tk = conv and (ARGV[12] .. ':tn:' .. conv)
      local t = tk and turn_get(tk)
      if t and t.d == d then
        -- It held its conversation's turn: the housekeeping ends the turn at once.
        t.x = 'cancelled'
        turn_put(tk, t)
        redis.call('ZADD', ARGV[12] .. ':turns', 0, conv)
      end
      redis.call('DEL', hk)
      redis.call('ZREM', KEYS[7], d)
    end
    -- Its other copies were kept only in case the bot refused it: none is wanted now.
    drop_alternates(KEYS[6], ARGV[12])
  end
end
if ARGV[8] == 'discard' then
  return {1, ARGV[2], cancelled}
end
local extra = {}
if ARGV[10] == '1' then
  extra = {'mc', KEYS[5]}
end
if ARGV[8] == 'inline' then
  redis.call('ZADD', KEYS[4], ARGV[9], ARGV[2])
else
  extra[#extra + 1] = 'e'
  extra[#extra + 1] = redis.call('XADD', KEYS[2], '*', 'd', ARGV[2])
end
store(KEYS[3], unpack(extra))
redis.call('ZADD', KEYS[7], ARGV[7], ARGV[2])
return {1, ARGV[2], cancelled}
"#
));

/// KEYS: schedule zset, delivery hash, dead-letter stream, waiting index. ARGV: delivery id,
/// mode (done | retry | dead), due ms (retry) or now ms (dead), last status, last error.
/// The inline owner's fence: it may act only while the delivery is still in the zset, i.e.
/// before its lease-long due time promoted it to the workers. Returns 0 when fenced out.
pub const INLINE_FINISH: &str = r#"
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
if ARGV[2] == 'done' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('DEL', KEYS[2])
  return 1
end
local n = redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('HSET', KEYS[2], 'st', ARGV[4], 'err', ARGV[5])
if ARGV[2] == 'retry' then
  redis.call('ZADD', KEYS[1], 'XX', ARGV[3], ARGV[1])
  return 1
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local de = redis.call('XADD', KEYS[3], '*', 'd', ARGV[1], 'st', ARGV[4], 'err', ARGV[5], 'attempts', n,
  'at', ARGV[3])
redis.call('HSET', KEYS[2], 'de', de)
return 1
"#;

/// Shared head of the fenced scripts: ARGV[1] group, ARGV[2] entry id, ARGV[3] consumer,
/// ARGV[4] token. Returns 0 from the script when the caller no longer holds the lease.
macro_rules! fenced {
    ($body:expr) => {
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

/// KEYS: outbox stream, then the delivery hash of each lease of one read. ARGV: group,
/// consumer, turns (the turn timeout in ms, or '' when the app takes no turns), now ms, key
/// tag, then `(entry, token)` for each lease. For each, in order: its delivery's fields when the
/// lease is still the caller's and the delivery may be sent now (an empty list when the delivery
/// is gone), 0 when the lease was lost (the attempt must not be made), 1 when it was put to
/// wait for its conversation's turn (off the stream, in the turn's queue). One call for a whole
/// read batch.
pub const LOAD: &str = with_turn_helpers!(
    r#"
local out = {}
local now = tonumber(ARGV[4])
for i = 2, #KEYS do
  local entry, token = ARGV[2 * i + 2], ARGV[2 * i + 3]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1)
  if #p == 0 or p[1][2] ~= ARGV[2] or tonumber(p[1][4]) ~= tonumber(token) then
    out[#out + 1] = 0
  else
    local fields = redis.call('HGETALL', KEYS[i])
    local id = string.sub(KEYS[i], #ARGV[5] + 4)
    if ARGV[3] ~= '' and #fields > 0
        and not begin_turn(ARGV[5], ARGV[1], entry, id, KEYS[i], field(fields, 'cv'), now, tonumber(ARGV[3])) then
      out[#out + 1] = 1
    else
      out[#out + 1] = fields
    end
  end
end
return out
"#
);

/// KEYS: outbox stream, delivery hash, schedule zset, dead-letter stream, waiting index.
/// ARGV[5] mode (done | retry | dead), ARGV[6] delivery id, ARGV[7] due ms (retry) or now ms
/// (done, dead), ARGV[8] last status, ARGV[9] last error, ARGV[10] key tag (for the per-minute
/// delivered counter that `slackgate stats` reads), ARGV[11] final (1: the bot refused it
/// with a 4xx, so another copy of its message may be delivered instead). The app's turns:
/// ARGV[12] order (queue | latest, '' when it takes none), ARGV[13] end (reply | answer),
/// ARGV[14] quiet ms, ARGV[15] pass-after ms, ARGV[16] timeout ms, ARGV[17] now ms,
/// ARGV[18] the delivery's conversation ('' when none).
///
/// Returns 1, or {1, how, duration ms, released id, {superseded ids}} when it ended the turn
/// its delivery held (`how`: answer | refused); 0 when fenced out.
pub const FINISH: &str = fenced!(with_turn_helpers!(
    r#"
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local mode = ARGV[5]
local ended = nil
if ARGV[12] ~= '' and ARGV[18] ~= '' then
  local tk = ARGV[10] .. ':tn:' .. ARGV[18]
  local t = turn_get(tk)
  if t and t.d == ARGV[6] then
    local now, timeout = tonumber(ARGV[17]), tonumber(ARGV[16])
    if mode == 'dead' or (mode == 'done' and ARGV[13] == 'answer') then
      local how = mode == 'dead' and 'refused' or 'answer'
      local e = end_turn(ARGV[10], ARGV[18], t, now, ARGV[12], timeout)
      ended = {1, how, e[1], e[2], e[3]}
    elseif mode == 'done' then
      -- Answered: the turn goes on until the bot's replies end (or it passes).
      t.ok = true
      turn_put(tk, t)
      local due = t.lw and (t.lw + tonumber(ARGV[14])) or (now + tonumber(ARGV[15]))
      redis.call('ZADD', ARGV[10] .. ':turns', math.min(due, t.at + timeout), ARGV[18])
    end
  end
end
local function finished()
  return ended or 1
end
if mode == 'done' then
  local mc = redis.call('HGET', KEYS[2], 'mc')
  if mc then
    drop_alternates(mc, ARGV[10])
  end
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[5], ARGV[6])
  local minute = ARGV[10] .. ':delivered:' .. math.floor(tonumber(ARGV[7]) / 60000)
  if redis.call('INCR', minute) == 1 then
    redis.call('EXPIRE', minute, 180)
  end
  return finished()
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[5], ARGV[6])
  return finished()
end
local n = redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('HSET', KEYS[2], 'st', ARGV[8], 'err', ARGV[9])
if mode == 'retry' then
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[6])
  return finished()
end
redis.call('ZREM', KEYS[5], ARGV[6])
local de = redis.call('XADD', KEYS[4], '*', 'd', ARGV[6], 'st', ARGV[8], 'err', ARGV[9],
  'attempts', n, 'at', ARGV[7])
redis.call('HSET', KEYS[2], 'de', de)
if ARGV[11] == '1' then
  redis.call('HSET', KEYS[2], 'fin', 1)
  local mc = redis.call('HGET', KEYS[2], 'mc')
  if mc then
    promote_alternate(mc, ARGV[10], KEYS[1], KEYS[5])
  end
end
return finished()
"#
));

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

/// KEYS: schedule zset, outbox stream. ARGV: now ms, max entries, key tag.
/// Moves retries that are due back onto the stream, noting the new entry in the delivery;
/// returns how many.
pub const PROMOTE: &str = r#"
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
for _, d in ipairs(due) do
  local hk = ARGV[3] .. ':d:' .. d
  if redis.call('EXISTS', hk) == 1 then
    redis.call('HSET', hk, 'e', redis.call('XADD', KEYS[2], '*', 'd', d))
  end
  redis.call('ZREM', KEYS[1], d)
end
return #due
"#;

/// KEYS: outbox stream, schedule zset, dead-letter stream, waiting index, conversations with
/// deliveries held for a turn (by how many), deliveries superseded (a counter). ARGV: group.
/// Returns {ready, in flight, scheduled, dead, received-at ms of the oldest waiting delivery
/// or '', held, conversations waiting, superseded}. Completed entries are deleted from the
/// stream, so what is on it is either ready or in flight.
pub const STATS: &str = r#"
local len = redis.call('XLEN', KEYS[1])
local pending = 0
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1])
if type(p) == 'table' and type(p[1]) == 'number' then pending = p[1] end
local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
local oldest = ''
if #first > 0 then oldest = first[2] end
local held, conversations = 0, 0
local waiting = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
for i = 2, #waiting, 2 do
  held = held + tonumber(waiting[i])
  conversations = conversations + 1
end
return {len - pending, pending, redis.call('ZCARD', KEYS[2]), redis.call('XLEN', KEYS[3]), oldest,
  held, conversations, tonumber(redis.call('GET', KEYS[6]) or '0')}
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
redis.call('HSET', KEYS[3], 'rcv', ARGV[3], 'e', redis.call('XADD', KEYS[2], '*', 'd', ARGV[1]))
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

/// KEYS: none declared beyond the shard's tag (ARGV[1]); every key is built from it.
/// ARGV: 1 key tag, 2 conversation, 3 the delivery the write is attributed to, 4 its message
/// ts, 5 what the write is (post | continue | close | status), 6 now ms, 7 withhold when newer
/// (0/1), 8 quiet ms, 9 timeout ms, 10 order (queue | latest).
///
/// A write of the turn's own delivery renews the turn (ends it, for a closing call); a new post
/// when a newer message of the conversation waits — or holds the turn already — is withheld
/// (with `withhold`), which ends the turn it belongs to. Returns {verdict (post | withhold),
/// how the turn ended or '', duration ms, released id, {superseded ids}}.
pub const TURN_WRITE: &str = with_turn_helpers!(
    r#"
local tag, conv, id, ts, class = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now, quiet, timeout, order = tonumber(ARGV[6]), tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local tk = tag .. ':tn:' .. conv
local t = turn_get(tk)
local mine = t and t.d == id
if class == 'post' and ARGV[7] == '1' then
  local newer = false
  if not t or t.q then
    newer = #redis.call('ZRANGE', tag .. ':tq:' .. conv, '(' .. ts, '+inf', 'BYSCORE', 'LIMIT', 0, 1) > 0
  end
  if not newer and t and not mine then
    newer = (tonumber(t.ts) or 0) > tonumber(ts)
  end
  if newer then
    if mine then
      local e = end_turn(tag, conv, t, now, order, timeout)
      return {'withhold', 'superseded', e[1], e[2], e[3]}
    end
    return {'withhold', '', 0, '', {}}
  end
end
if mine then
  t.w = t.w + 1
  t.lw = now
  if class == 'close' then
    local e = end_turn(tag, conv, t, now, order, timeout)
    return {'post', 'reply', e[1], e[2], e[3]}
  end
  turn_put(tk, t)
  if t.ok then
    redis.call('ZADD', tag .. ':turns', math.min(now + quiet, t.at + timeout), conv)
  end
end
return {'post', '', 0, '', {}}
"#
);

/// KEYS: the shard's turn index, its conversations with deliveries held. ARGV: 1 key tag,
/// 2 now ms, 3 order (queue | latest | off), 4 timeout ms, 5 most turns ended per call.
///
/// Ends the turns that are due: timed out, passed (answered, nothing written within
/// `pass_after`), replied (written, then quiet), or whose delivery was cancelled. With order
/// `off` (an app whose `turns` were turned off) every turn ends and everything held is
/// released. Returns {{how, duration ms, released id, {superseded ids}}, …}.
pub const TURN_DUE: &str = with_turn_helpers!(
    r#"
local tag, now, order, timeout, max = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {}
if order == 'off' then
  for _, conv in ipairs(redis.call('ZRANGE', KEYS[1], 0, max - 1)) do
    local e = end_turn(tag, conv, turn_get(tag .. ':tn:' .. conv), now, 'off', timeout)
    out[#out + 1] = {'off', e[1], e[2], e[3]}
  end
  for _, conv in ipairs(redis.call('ZRANGE', KEYS[2], 0, max - 1)) do
    while release(tag, conv, now, 'off', timeout) ~= '' do end
  end
  return out
end
for _, conv in ipairs(redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, max)) do
  local t = turn_get(tag .. ':tn:' .. conv)
  local how = 'timeout'
  if t and t.x == 'cancelled' then
    how = 'cancelled'
  elseif t and now < t.at + timeout and t.ok then
    how = (t.w > 0) and 'reply' or 'passed'
  end
  local e = end_turn(tag, conv, t, now, order, timeout)
  out[#out + 1] = {how, e[1], e[2], e[3]}
end
return out
"#
);

/// KEYS: outbox stream. ARGV: 1 group, 2 consumer, 3 most entries, 4 the app's turn timeout ms
/// ('' when it takes none), 5 now ms, 6 key tag.
///
/// Reads new entries for the consumer and loads each one's delivery in the same step (see
/// `load_entry`): an entry is never leased without being loaded, nor loaded and left out of
/// its conversation's turn, whatever happens to the reader after. Returns {entry, delivery,
/// token (1), fields | 1, …}, or {the group's last delivered id} when there was nothing new
/// (what a blocking wait for new entries waits after).
pub const READ_LOADED: &str = with_turn_helpers!(
    r#"
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], '>')
if not r then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == ARGV[1] then return {f['last-delivered-id']} end
  end
  return {'0-0'}
end
local now, timeout = tonumber(ARGV[5]), tonumber(ARGV[4])
local out = {}
for _, e in ipairs(r[1][2]) do
  local d = entry_delivery(e[2] or {})
  out[#out + 1] = e[1]
  out[#out + 1] = d
  out[#out + 1] = 1
  out[#out + 1] = load_entry(ARGV[6], ARGV[1], e[1], d, now, timeout)
end
return out
"#
);

/// KEYS: outbox stream. ARGV: 1 group, 2 consumer, 3 min idle ms, 4 max entries, 5 the app's
/// turn timeout ms ('' when it takes none), 6 now ms, 7 key tag.
/// Takes over entries whose lease ran out and loads each one's delivery in the same step, as
/// `READ_LOADED` does; returns {entry, delivery, token, fields | 1, …}.
pub const RECLAIM_LOADED: &str = with_turn_helpers!(
    r#"
local now, timeout = tonumber(ARGV[6]), tonumber(ARGV[5])
local out = {}
local cursor = '0-0'
for _ = 1, 10 do
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', ARGV[4])
  for _, e in ipairs(r[2]) do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    local d = entry_delivery(e[2] or {})
    out[#out + 1] = e[1]
    out[#out + 1] = d
    out[#out + 1] = p[1][4]
    out[#out + 1] = load_entry(ARGV[7], ARGV[1], e[1], d, now, timeout)
  end
  cursor = r[1]
  if cursor == '0-0' or #out >= 4 * tonumber(ARGV[4]) then break end
end
return out
"#
);
