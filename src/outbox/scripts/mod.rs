//! The Lua scripts that make each outbox transition atomic on one Redis node. Every key a script
//! touches shares one hash tag (`{prefix:app:shard}`); keys built inside a script from that tag
//! or from a declared key live in the same slot, so they run unchanged on Redis Cluster.
//!
//! The fence is the pending-list entry itself: who owns it (`consumer`) and how many times it
//! has been handed out (`times delivered`, which XREADGROUP sets to 1 and every XAUTOCLAIM bumps).
//! A worker holds `(consumer, count)` as its claim token; once anyone re-claims the entry the
//! count moves on and the old holder's completion is refused.
//!
//! The waiting index (`…:wait`, scored by received-at) holds every waiting delivery whose age its
//! stream entry does not tell: one held inline, one that has waited for a retry, one held for its
//! conversation's turn, a message's other copy promoted, a replayed dead letter; such a delivery's
//! hash says so (`w`). A delivery fresh on the stream (ready or in flight) is not in it: its
//! entry's id is its age, so the oldest waiting delivery is the older of the index's first and
//! the stream's first, and the common delivery touches the index not at all.
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
      redis.call('HSET', hk, 'e', redis.call('XADD', stream, '*', 'd', alt), 'w', 1)
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

/// What a delivered entry's completion does beyond the stream (its claim's other copies — `mc`,
/// '' for none — and its record dropped, out of the waiting index when it is `indexed` there),
/// and the minute's count of deliveries: one
/// text for the single completion (FINISH) and the batched one (FINISH_DONE_MANY). Needs the
/// claim helpers before it.
macro_rules! with_done_helpers {
    ($body:expr) => {
        concat!(
            r#"
local function forget_delivered(tag, id, wait, mc, indexed)
  if mc and mc ~= '' then
    drop_alternates(mc, tag)
  end
  redis.call('DEL', tag .. ':d:' .. id)
  if indexed then
    redis.call('ZREM', wait, id)
  end
end
local function count_delivered(tag, at, n)
  local minute = tag .. ':delivered:' .. math.floor(tonumber(at) / 60000)
  if redis.call('INCRBY', minute, n) == n then
    redis.call('EXPIRE', minute, 180)
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

/// Stream ids compared as ids (`ms-seq`, not as text), and the trim of a stream's acked
/// entries: everything before the oldest entry still pending, or, with none pending, up to the
/// group's last delivered one. Never by age: an entry still being tried, or not yet read, is
/// never below that bound, and an entry below it was read and acked (every path that acks an
/// entry is done with it).
macro_rules! with_trim_helpers {
    ($body:expr) => {
        concat!(
            r#"
local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end
local function id_less(a, b)
  local am, as = id_parts(a)
  local bm, bs = id_parts(b)
  return am < bm or (am == bm and as < bs)
end
local function trim_acked(stream, group)
  -- A stream without the group yet (its readers have not started) has nothing acked.
  local summary = redis.pcall('XPENDING', stream, group)
  if type(summary) ~= 'table' or summary.err then return 0 end
  local bound = summary[2]
  if tonumber(summary[1]) == 0 or not bound then
    bound = nil
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local f = {}
      for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
      if f['name'] == group then
        local ms, seq = id_parts(f['last-delivered-id'])
        bound = string.format('%d-%d', ms, seq + 1)
      end
    end
  end
  if not bound then return 0 end
  return redis.call('XTRIM', stream, 'MINID', bound)
end
"#,
            $body
        )
    };
}

#[macro_use]
mod turns;
mod read;
mod shards;

pub use read::{LOAD, READ_LOADED, RECLAIM, RECLAIM_LOADED};
pub use shards::{EARLIER_RECEIPT, SHARDED_BY_CONVERSATION, SHARDS_IN_USE};
pub use turns::{TURN_DUE, TURN_WRITE};

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
  -- Held by the ingress, off the stream: the waiting index tells its age.
  redis.call('ZADD', KEYS[4], ARGV[9], ARGV[2])
  redis.call('ZADD', KEYS[7], ARGV[7], ARGV[2])
  extra[#extra + 1] = 'w'
  extra[#extra + 1] = 1
else
  extra[#extra + 1] = 'e'
  extra[#extra + 1] = redis.call('XADD', KEYS[2], '*', 'd', ARGV[2])
end
store(KEYS[3], unpack(extra))
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
pub const FINISH: &str = fenced!(with_turn_helpers!(with_done_helpers!(
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
  forget_delivered(ARGV[10], ARGV[6], KEYS[5], redis.call('HGET', KEYS[2], 'mc'), true)
  count_delivered(ARGV[10], ARGV[7], 1)
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
  -- Off the stream until it is due, then on it with an entry younger than it is.
  if redis.call('HSETNX', KEYS[2], 'w', 1) == 1 then
    redis.call('ZADD', KEYS[5], redis.call('HGET', KEYS[2], 'rcv'), ARGV[6])
  end
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
)));

/// The delivered entries of an app without turns, finished together (one call per batch, not
/// one per delivery): each fenced as FINISH fences it, then done as FINISH's `done` does, with
/// one command for each step of the whole batch (the fences are one range read of the pending
/// list, the acks one XACK, the records one DEL). The acked entries are not deleted one by one:
/// the stream is trimmed up to the oldest entry still pending or unread (`trim_acked`).
/// KEYS: outbox stream, waiting index. ARGV: group, consumer, key tag, now ms, then per entry
/// its entry id, token, delivery id and message claim ('' when none, as loaded). Returns 1 (done)
/// or 0 (fenced out) per entry, in order.
pub const FINISH_DONE_MANY: &str = with_claim_helpers!(with_done_helpers!(with_trim_helpers!(
    r#"
local RANGE = 1000
local lo, hi = ARGV[5], ARGV[5]
for i = 5, #ARGV, 4 do
  if id_less(ARGV[i], lo) then lo = ARGV[i] end
  if id_less(hi, ARGV[i]) then hi = ARGV[i] end
end
-- This consumer's leases between the batch's first and last entry, with their counts.
local held = {}
local range = redis.call('XPENDING', KEYS[1], ARGV[1], lo, hi, RANGE, ARGV[2])
for _, p in ipairs(range) do held[p[1]] = tonumber(p[4]) end
local out, acked, records, ids = {}, {}, {}, {}
for i = 5, #ARGV, 4 do
  local entry, token, id = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local count = held[entry]
  if not count and #range >= RANGE then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1, ARGV[2])
    count = #p > 0 and tonumber(p[1][4]) or nil
  end
  if count ~= token then
    out[#out + 1] = 0
  else
    acked[#acked + 1] = entry
    records[#records + 1] = ARGV[3] .. ':d:' .. id
    ids[#ids + 1] = id
    if ARGV[i + 3] ~= '' then drop_alternates(ARGV[i + 3], ARGV[3]) end
    out[#out + 1] = 1
  end
end
if #acked > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(acked))
  redis.call('DEL', unpack(records))
  -- Out of the waiting index, whether it was there or not: one command a batch either way, and
  -- right too for a delivery a version that indexed every delivery recorded.
  redis.call('ZREM', KEYS[2], unpack(ids))
  count_delivered(ARGV[3], ARGV[4], #acked)
  trim_acked(KEYS[1], ARGV[1])
end
return out
"#
)));

/// KEYS: outbox stream. ARGV: group. Trims the entries that are acked, up to the oldest still
/// pending or unread (what the batched completion leaves); returns how many went.
pub const TRIM_ACKED: &str = with_trim_helpers!(
    r#"
return trim_acked(KEYS[1], ARGV[1])
"#
);

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
/// deliveries held for a turn (by how many), deliveries superseded (a counter). ARGV: group,
/// key tag. Returns {ready, in flight, scheduled, dead, received-at ms of the oldest waiting
/// delivery or '', held, conversations waiting, superseded}. Ready is the group's lag (Redis 7),
/// or, where Redis cannot tell it, what is on the stream and not pending, which counts too the
/// acked entries the trim has not reached yet (for at most a second). The stream is trimmed up
/// to its oldest entry still pending or unread, so its first entry's id is when the oldest of
/// those was recorded; the waiting index holds the others that wait. An index entry
/// whose delivery is gone (finished by a version that indexed every delivery) is dropped here.
pub const STATS: &str = r#"
local len = redis.call('XLEN', KEYS[1])
local pending = 0
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1])
if type(p) == 'table' and type(p[1]) == 'number' then pending = p[1] end
local ready = len - pending
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) == 'table' then
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == ARGV[1] and type(f['lag']) == 'number' then ready = f['lag'] end
  end
end
local oldest = nil
for _ = 1, 100 do
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if #first == 0 then break end
  if redis.call('EXISTS', ARGV[2] .. ':d:' .. first[1]) == 1 then
    oldest = tonumber(first[2])
    break
  end
  redis.call('ZREM', KEYS[4], first[1])
end
local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #head > 0 then
  local ms = tonumber(string.match(head[1][1], '^(%d+)'))
  if ms and (not oldest or ms < oldest) then oldest = ms end
end
local held, conversations = 0, 0
local waiting = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
for i = 2, #waiting, 2 do
  held = held + tonumber(waiting[i])
  conversations = conversations + 1
end
return {ready, pending, redis.call('ZCARD', KEYS[2]), redis.call('XLEN', KEYS[3]),
  oldest and tostring(oldest) or '', held, conversations, tonumber(redis.call('GET', KEYS[6]) or '0')}
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
redis.call('HSET', KEYS[3], 'rcv', ARGV[3], 'e', redis.call('XADD', KEYS[2], '*', 'd', ARGV[1]), 'w', 1)
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
