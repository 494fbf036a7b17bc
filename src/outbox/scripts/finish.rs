//! The completions: the fenced head every lease-holder's script starts with, keeping a lease
//! (EXTEND), one completion (FINISH) and the batched completion of delivered entries
//! (FINISH_DONE_MANY), and the trim of the acked entries the batched completion leaves.

/// What a delivered entry's completion does beyond the stream (its claim's other copies — `mc`,
/// '' for none — and its record dropped, out of the waiting index), and the minute's count of
/// deliveries: one
/// text for the single completion (FINISH) and the batched one (FINISH_DONE_MANY). Needs the
/// claim helpers before it.
macro_rules! with_done_helpers {
    ($body:expr) => {
        concat!(
            r#"
local function forget_delivered(tag, id, wait, mc)
  if mc and mc ~= '' then
    drop_alternates(mc, tag)
  end
  redis.call('DEL', tag .. ':d:' .. id)
  redis.call('ZREM', wait, id)
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

/// KEYS: the lease's stream (outbox or carrying), delivery hash, schedule zset, dead-letter
/// stream, waiting index. ARGV[5] mode (done | retry | dead | pause), ARGV[6] delivery id,
/// ARGV[7] due ms (retry) or now ms (done, dead, pause), ARGV[8] last status, ARGV[9] last
/// error (pause: the delivery's `team\tchannel`), ARGV[10] key tag (for the per-minute
/// delivered counter that `slackgate stats` reads), ARGV[11] final (1: the bot refused it
/// with a 4xx, so another copy of its message may be delivered instead). The app's turns:
/// ARGV[12] order (queue | latest, '' when it takes none), ARGV[13] end (reply | answer),
/// ARGV[14] quiet ms, ARGV[15] pass-after ms, ARGV[16] timeout ms, ARGV[17] now ms,
/// ARGV[18] the delivery's conversation ('' when none; with order `watch` the run's own
/// key). A run tracked past the 2xx (order `watch`, or the turns' own): ARGV[19] the socket
/// that carried it (`holder/socket`, '' over HTTP), ARGV[20] track it (0/1), ARGV[21]
/// addressed to the bot (0/1).
///
/// A tracked run still open after its 2xx keeps the delivery's record (`ro`, with the
/// socket `sk`, the turn's key `rk`, `ad`) for as long as its turn may last, so that a run lost
/// with its bot can be run again (`rerun`); the run's end drops it (`end_run`).
///
/// A paused delivery waits in the schedule at [`PAUSED`](super::super::pauses::PAUSED), which
/// no promotion reaches, until the release; its turn ends (`paused`), so that the next
/// delivery of its conversation is read, and paused too.
///
/// Returns 1, or {1, how, duration ms, released id, {superseded ids}} when it ended the turn
/// its delivery held (`how`: answer | refused | paused), 2 when its run goes on tracked; 0
/// when fenced out.
pub const FINISH: &str = fenced!(with_turn_helpers!(with_done_helpers!(
    r#"
local mode = ARGV[5]
local track = mode == 'done' and ARGV[20] == '1'
if (mode ~= 'done' or track) and redis.call('EXISTS', KEYS[2]) == 0 then
  -- A carried delivery that waits off the stream from now on gets its hash, from its entry.
  local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
  local fields = #e > 0 and unpack_carried(e[1][2])
  if fields then
    redis.call('HSET', KEYS[2], unpack(fields))
  end
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local ended, open = nil, false
if ARGV[12] ~= '' and ARGV[18] ~= '' then
  local tk = ARGV[10] .. ':tn:' .. ARGV[18]
  local t = turn_get(tk)
  if not t and track and ARGV[12] == 'watch' then
    -- A watched run begins at its 2xx (or at the bot's first write, before it).
    t = {d = ARGV[6], ts = '', at = tonumber(ARGV[17]), w = 0}
    turn_put(tk, t, tonumber(ARGV[16]) + 60000)
  end
  if t and t.d == ARGV[6] then
    local now, timeout = tonumber(ARGV[17]), tonumber(ARGV[16])
    if mode == 'dead' or mode == 'pause' or (mode == 'done' and ARGV[13] == 'answer') then
      local how = ({dead = 'refused', pause = 'paused'})[mode] or 'answer'
      local e = end_turn(ARGV[10], ARGV[18], t, now, ARGV[12], timeout)
      ended = {1, how, e[1], e[2], e[3]}
    elseif mode == 'done' then
      -- Answered: the turn goes on until the bot's replies end (or it passes).
      t.ok = true
      turn_put(tk, t)
      local due = t.lw and (t.lw + tonumber(ARGV[14])) or (now + tonumber(ARGV[15]))
      -- A hold (an open stream, a status) keeps the turn at least until it ends.
      due = math.max(due, t.hu or 0)
      redis.call('ZADD', ARGV[10] .. ':turns', math.min(due, t.at + timeout), ARGV[18])
      open = track
    end
  end
end
local function finished()
  return ended or 1
end
if open then
  -- The run goes on past the 2xx: its record stays until the run ends.
  local mc = redis.call('HGET', KEYS[2], 'mc')
  if mc then drop_alternates(mc, ARGV[10]) end
  redis.call('ZREM', KEYS[5], ARGV[6])
  redis.call('HSET', KEYS[2], 'ro', 1, 'rk', ARGV[18], 'ad', ARGV[21])
  redis.call('HDEL', KEYS[2], 'rq', 'mc')
  local holder = string.match(ARGV[19], '^(.*)/')
  if holder then
    local set = ARGV[10] .. ':skh:' .. holder
    redis.call('HSET', KEYS[2], 'sk', ARGV[19])
    redis.call('SADD', set, ARGV[6])
    redis.call('PEXPIRE', set, tonumber(ARGV[16]) + 60000)
  else
    redis.call('HDEL', KEYS[2], 'sk')
  end
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[16]) + 60000)
  count_delivered(ARGV[10], ARGV[7], 1)
  return 2
end
if mode == 'done' then
  forget_delivered(ARGV[10], ARGV[6], KEYS[5], redis.call('HGET', KEYS[2], 'mc'))
  count_delivered(ARGV[10], ARGV[7], 1)
  return finished()
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[5], ARGV[6])
  return finished()
end
if mode == 'pause' then
  redis.call('HSET', KEYS[2], 'pz', ARGV[7], 'pp', ARGV[9])
  redis.call('ZADD', KEYS[3], 9000000000000000, ARGV[6])
  redis.call('ZADD', KEYS[5], 'NX', redis.call('HGET', KEYS[2], 'rcv'), ARGV[6])
  return finished()
end
local n = redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('HSET', KEYS[2], 'st', ARGV[8], 'err', ARGV[9])
if mode == 'retry' then
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[6])
  -- Off the stream until it is due, then on it with an entry younger than it is.
  redis.call('ZADD', KEYS[5], 'NX', redis.call('HGET', KEYS[2], 'rcv'), ARGV[6])
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
    promote_alternate(mc, ARGV[10], KEYS[5])
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
/// KEYS: a stream (the live one or that of versions before), waiting index. ARGV: group,
/// consumer, key tag, now ms, the batch's lowest and highest entry id, then per entry its entry
/// id, token, delivery id and message claim ('' when none, as loaded). Returns 1 (done) or 0
/// (fenced out) per entry, in order. A carried delivery has no record to drop and was never
/// in the index: the batch's one DEL and one ZREM find nothing of it, which costs less than
/// telling them apart.
pub const FINISH_DONE_MANY: &str = with_claim_helpers!(with_done_helpers!(with_trim_helpers!(
    r#"
local RANGE = 1000
-- This consumer's leases between the batch's first and last entry, with their counts.
local held = {}
local range = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[5], ARGV[6], RANGE, ARGV[2])
for _, p in ipairs(range) do held[p[1]] = p[4] end
local out, acked, records, ids = {}, {}, {}, {}
for i = 7, #ARGV, 4 do
  local entry, token, id = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local count = held[entry]
  if not count and #range >= RANGE then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1, ARGV[2])
    count = #p > 0 and p[1][4] or nil
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
