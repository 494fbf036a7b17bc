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
//! conversation's turn, a message's other copy promoted, a replayed dead letter. A delivery fresh
//! on the stream (ready or in flight) is not in it: its
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
local function promote_alternate(claim, tag, wait)
  local alt = redis.call('LPOP', claim .. ':alt')
  while alt do
    local hk = tag .. ':d:' .. alt
    if redis.call('EXISTS', hk) == 1 then
      redis.call('PERSIST', hk)
      redis.call('HSET', hk, 'se', redis.call('XADD', tag .. ':stream', '*', 'd', alt))
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
/// cancelled|hold`), and a delivery's conversation from its `cv`. The hold is what keeps the
/// turn past `quiet`: `s<until ms>` an open stream, `t<until ms>` a status before the first
/// answer, `p` posted (held by nothing); a turn with no hold has no ninth field, as earlier
/// versions wrote and read it (an earlier version reads a held turn as none: in a rolling
/// upgrade, a stream's turn is held by the new replicas). A turn key lives for its
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
  local d, ts, at, ok, w, lw, q, x, h =
    string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if not d then
    -- A turn an earlier version wrote holds nothing.
    d, ts, at, ok, w, lw, q, x = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    h = ''
  end
  if not d then return nil end
  local hk, hu = string.match(h, '^(%a?)(%d*)$')
  return {d = d, ts = ts, at = tonumber(at) or 0, ok = ok == '1', w = tonumber(w) or 0, lw = tonumber(lw),
    q = q == '1', x = x, hk = hk or '', hu = tonumber(hu)}
end
local function turn_put(tk, t, ttl)
  local fields = {t.d, t.ts, t.at, t.ok and '1' or '', t.w or 0, t.lw or '', t.q and '1' or '', t.x or ''}
  -- The hold only when there is one: a turn without stays as earlier versions read it.
  if (t.hk or '') ~= '' then fields[9] = t.hk .. (t.hu or '') end
  local v = table.concat(fields, '|')
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

/// A carried entry's fields (`{'d', id, 'c', packed}`) as its hash's would be, or `nil` for an
/// entry that carries nothing. The packing is `outbox::carried`'s: each field as its length in
/// decimal, `:`, and its bytes, in the order below.
macro_rules! with_carried_helpers {
    ($body:expr) => {
        concat!(
            r#"
local CARRIED = {'ct', 'p', 'k', 'rcv', 'cv', 'x', 'ru', 'b'}
local function unpack_carried(efields)
  local id, c
  for i = 1, #efields, 2 do
    if efields[i] == 'd' then id = efields[i + 1] elseif efields[i] == 'c' then c = efields[i + 1] end
  end
  if not c then return nil end
  local out, at = {'d', id or ''}, 1
  for _, name in ipairs(CARRIED) do
    local colon = string.find(c, ':', at, true)
    if not colon then break end
    local n = tonumber(string.sub(c, at, colon - 1)) or 0
    out[#out + 1] = name
    out[#out + 1] = string.sub(c, colon + 1, colon + n)
    at = colon + n + 1
  end
  return out
end
"#,
            $body
        )
    };
}

#[macro_use]
mod turns;
mod finish;
mod maintain;
mod read;
mod shards;

pub use finish::{EXTEND, FINISH, FINISH_DONE_MANY, TRIM_ACKED};
pub use maintain::{DEAD, PROMOTE, REMOVE_IDLE_CONSUMERS, STATS, TRIM_DEAD};
pub use read::{LOAD, READ_LOADED, RECLAIM, RECLAIM_LOADED};
pub use shards::{EARLIER_RECEIPT, SHARDED_BY_CONVERSATION, SHARDS_IN_USE};
pub use turns::{RERUN_LOST, RERUN_ORPHANED, TURN_DUE, TURN_WRITE};

/// KEYS: receipt (or the delivery hash when there is none), outbox stream, delivery hash,
/// schedule zset, message claim (or the hash), the claim of a message being deleted (or the
/// hash), waiting index, the stream of versions before carried deliveries.
/// ARGV: 1 receipt ttl ms, 2 delivery id, 3 body, 4 content type, 5 path, 6 kind, 7 received-at
/// ms, 8 placement (stream | inline | discard: only the receipt and the cancellation), 9 inline
/// due ms, 10 has claim (0/1), 11 has cancel (0/1), 12 key tag, 13 group, 14 detail,
/// 15 response url, 16 has receipt (0/1), 17 replicated (0/1: a duplicate writes too, so that
/// the `WAIT` after it covers the original record, whichever connection wrote that),
/// 18 the conversation its message belongs to, encoded (empty: none; kept as `cv`).
///
/// The common delivery is recorded by `RECORD_CARRIED` instead, carried in its entry.
///
/// The stream is `…:stream`; versions before carried deliveries wrote `…:outbox` (and a
/// delivery's entry id as `e`, where this version writes `se`). Those versions never read
/// `…:stream`, so during a rolling upgrade their workers cannot take a carried entry for a gone
/// delivery; this version reads `…:outbox` too until it is empty.
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
      -- Its entry: on the stream (`se`), or on the stream of versions before (`e`).
      local stream, e = KEYS[2], redis.call('HGET', hk, 'se')
      if not e then
        stream, e = KEYS[8], redis.call('HGET', hk, 'e')
      end
      if e then
        local p = redis.pcall('XPENDING', stream, ARGV[13], e, e, 1)
        local taken = type(p) == 'table' and #p > 0
        if not taken and redis.call('XDEL', stream, e) == 1 then
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
else
  extra[#extra + 1] = 'se'
  extra[#extra + 1] = redis.call('XADD', KEYS[2], '*', 'd', ARGV[2])
end
store(KEYS[3], unpack(extra))
return {1, ARGV[2], cancelled}
"#
));

/// RECORD's common case, alone: a delivery with a receipt, for the stream, claiming and
/// cancelling no message, of an app without turns. It is carried: its entry holds all of it
/// (`c`, its fields packed: see `outbox::carried`) and it has no hash, so that it costs one
/// XADD rather than an XADD and a hash written, read back and deleted (a hash whose body is over
/// 64 bytes is a dict in Redis, not a listpack), with as few strings as can be for Lua, the AOF
/// and the reader to handle. Whatever waits off the stream later (a retry, a dead letter, a
/// turn) gets its hash then, from the entry (`unpack_carried`).
/// KEYS: receipt, stream. ARGV: 1 receipt ttl ms, 2 replicated (0/1, as RECORD's 17),
/// 3 delivery id, 4 its fields, packed.
/// Returns 1 when recorded, the original delivery's id for a retry of a known receipt.
pub const RECORD_CARRIED: &str = r#"
if not redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', ARGV[1]) then
  if ARGV[2] == '1' then
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
  end
  return redis.call('GET', KEYS[1]) or ''
end
redis.call('XADD', KEYS[2], '*', 'd', ARGV[3], 'c', ARGV[4])
return 1
"#;

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
