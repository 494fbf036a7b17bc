//! The turns' scripts (see `outbox::turns`): the helpers every script that moves a turn
//! shares, and the egress's and the housekeeping's own steps of a turn.

/// Helpers shared by the scripts that move a conversation's turn (see `turns`); they build on
/// the claim helpers and the turn codec. `tag` is the shard's key tag; `now` and `timeout` are
/// numbers (ms).
macro_rules! with_turn_helpers {
    ($body:expr) => {
        with_claim_helpers!(with_turn_codec!(with_carried_helpers!(concat!(
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
      redis.call('HSET', hk, 'se', redis.call('XADD', tag .. ':stream', '*', 'd', id))
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
-- The open run of delivery `id` (its record kept past the bot's 2xx, `ro`) is over: its
-- record and its place among its socket's runs go.
local function end_run(tag, id)
  local hk = tag .. ':d:' .. id
  local r = redis.call('HMGET', hk, 'ro', 'sk')
  if not r[1] then return end
  local holder = r[2] and string.match(r[2], '^(.*)/')
  if holder then redis.call('SREM', tag .. ':skh:' .. holder, id) end
  redis.call('DEL', hk)
end
-- `t`: the turn as it was (nil when its key is gone). Returns {duration ms, released id,
-- {superseded ids}}.
local function end_turn(tag, conv, t, now, order, timeout)
  redis.call('DEL', tag .. ':tn:' .. conv)
  if t then end_run(tag, t.d) end
  if not t or t.q or t.ok or (t.x or '') ~= '' then
    redis.call('ZREM', tag .. ':turns', conv)
  end
  local released, superseded = '', {}
  if not t or t.q then
    released, superseded = release(tag, conv, now, order, timeout)
  end
  return {math.max(now - (t and t.at or now), 0), released, superseded}
end
-- The open run of delivery `id` was lost (its socket closed, or it stayed silent): its
-- delivery goes back on the stream, its turn held through the re-run (begun again, so the lost
-- run's last write cannot end it), or, past `limit` re-runs, its turn ends as `lost`. `sk`:
-- the socket that must have carried the run ('' any). Returns {1, the re-run's number (1 the
-- first)}, {2, 'lost', duration ms, released id, {superseded ids}}, or {0} when the run is no
-- longer open as said (it ended, or runs again already).
local function rerun(tag, id, sk, now, limit, timeout, order)
  local hk = tag .. ':d:' .. id
  local r = redis.call('HMGET', hk, 'ro', 'sk', 'rr', 'rk', 'n')
  if not r[1] or (sk ~= '' and r[2] ~= sk) then return {0} end
  local conv = r[4] or ''
  local t = turn_get(tag .. ':tn:' .. conv)
  if not t or t.d ~= id then
    end_run(tag, id)
    return {0}
  end
  if (tonumber(r[3]) or 0) >= limit then
    local e = end_turn(tag, conv, t, now, order, timeout)
    return {2, 'lost', e[1], e[2], e[3]}
  end
  local holder = r[2] and string.match(r[2], '^(.*)/')
  if holder then redis.call('SREM', tag .. ':skh:' .. holder, id) end
  local rr = redis.call('HINCRBY', hk, 'rr', 1)
  redis.call('HSET', hk, 'rq', 1, 'rn', r[5] or 0)
  redis.call('HDEL', hk, 'ro', 'sk')
  redis.call('PEXPIRE', hk, 2 * timeout + 60000)
  turn_put(tag .. ':tn:' .. conv, {d = id, ts = t.ts, at = now, q = t.q}, timeout + 60000)
  redis.call('ZADD', tag .. ':turns', now + timeout, conv)
  redis.call('HSET', hk, 'se', redis.call('XADD', tag .. ':stream', '*', 'd', id))
  return {1, rr}
end
local function field(list, name)
  for j = 1, #list, 2 do
    if list[j] == name then return list[j + 1] end
  end
  return nil
end
-- A leased delivery (its fields) takes its conversation's turn, or waits for it off the
-- stream (in the waiting index, which then tells its age): false when it waits. A carried
-- delivery that waits gets its hash, from its entry's fields.
local function begin_turn(tag, group, stream, entry, id, hk, fields, carried, now, timeout)
  local conv, ts = conv_of(field(fields, 'cv'))
  if not conv then return true end
  local tk = tag .. ':tn:' .. conv
  local t = turn_get(tk)
  if t and t.d == id then return true end
  if not t then
    turn_put(tk, {d = id, ts = ts, at = now}, timeout + 60000)
    return true
  end
  if carried then
    redis.call('HSET', hk, unpack(fields))
  end
  redis.call('XACK', stream, group, entry)
  redis.call('XDEL', stream, entry)
  redis.call('HSET', hk, 'hq', conv)
  redis.call('ZADD', tag .. ':wait', 'NX', field(fields, 'rcv') or now, id)
  redis.call('ZADD', tag .. ':tq:' .. conv, ts, id)
  redis.call('ZINCRBY', tag .. ':waiting', 1, conv)
  if not t.q then
    t.q = true
    turn_put(tk, t)
    redis.call('ZADD', tag .. ':turns', 'NX', t.at + timeout, conv)
  end
  return false
end
-- A leased entry's delivery: its fields (a carried one's from its entry, `efields`), an empty
-- list when it is gone, or 1 when it was put to wait for its conversation's turn (`timeout`
-- nil: the app takes none).
local function load_entry(tag, group, stream, entry, efields, id, now, timeout)
  local hk = tag .. ':d:' .. id
  local fields = unpack_carried(efields)
  local carried = fields ~= nil
  if not carried then
    fields = redis.call('HGETALL', hk)
  end
  if timeout and #fields > 0 and not begin_turn(tag, group, stream, entry, id, hk, fields, carried, now, timeout) then
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
        ))))
    };
}

/// KEYS: none declared beyond the shard's tag (ARGV[1]); every key is built from it.
/// ARGV: 1 key tag, 2 conversation, 3 the delivery the write is attributed to, 4 its message
/// ts, 5 what the write is (post | start | append | continue | close | status), 6 now ms,
/// 7 withhold when newer (0/1), 8 quiet ms, 9 timeout ms, 10 order (queue | latest), 11 how
/// long the write holds the turn past its last call (a stream's idle limit, a status's life;
/// 0 for the rest).
///
/// A write of the turn's own delivery renews the turn (ends it, for a closing call): a stream's
/// start and appends hold it until the stream's idle limit, a status before the first answer
/// until its life ends, and a post lets `quiet` end it. An answer's first write (a post, a
/// stream's start) when a newer message of the conversation waits — or holds the turn already
/// — is withheld (with `withhold`), which ends the turn it belongs to; nothing later in an
/// answer is judged. Returns {verdict (post | withhold), how the turn ended or '', duration
/// ms, released id, {superseded ids}}.
pub const TURN_WRITE: &str = with_turn_helpers!(
    r#"
local tag, conv, id, ts, class = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now, quiet, timeout, order = tonumber(ARGV[6]), tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local hold = tonumber(ARGV[11]) or 0
local tk = tag .. ':tn:' .. conv
local t = turn_get(tk)
if not t and order == 'watch' then
  -- A watched run's bot writing before its 2xx: the run's turn begins with the write.
  t = {d = id, ts = ts, at = now, w = 0}
  turn_put(tk, t, timeout + 60000)
end
local mine = t and t.d == id
if (class == 'post' or class == 'start') and ARGV[7] == '1' then
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
  if class == 'post' then
    t.hk, t.hu = 'p', nil
  elseif class == 'start' or class == 'append' then
    t.hk, t.hu = 's', now + hold
  elseif class == 'status' and t.hk ~= 'p' and t.hk ~= 's' then
    t.hk, t.hu = 't', now + hold
  end
  turn_put(tk, t)
  if t.ok then
    redis.call('ZADD', tag .. ':turns', math.min(math.max(now + quiet, t.hu or 0), t.at + timeout), conv)
  end
end
return {'post', '', 0, '', {}}
"#
);

/// KEYS: the shard's turn index, its conversations with deliveries held. ARGV: 1 key tag,
/// 2 now ms, 3 order (queue | latest | watch | off), 4 timeout ms, 5 most turns ended per
/// call, 6 which lost runs are run again (off | socket | addressed), 7 re-runs of one delivery
/// at most.
///
/// Ends the turns that are due: timed out, passed (answered, nothing written within
/// `pass_after`), replied (written, then quiet), or whose delivery was cancelled. With order
/// `off` (an app whose `turns` were turned off) every turn ends and everything held is
/// released. With `addressed`, a run that passed on a message addressed to the bot runs again
/// instead (`silent`), or ends `lost` past the limit. Returns {{{how, duration ms, released
/// id, {superseded ids}}, …}, {{delivery, reason, re-run's number (0: lost)}, …}}.
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
  return {out, {}}
end
local lost, limit = ARGV[6] or 'off', tonumber(ARGV[7]) or 0
local reruns = {}
for _, conv in ipairs(redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, max)) do
  local t = turn_get(tag .. ':tn:' .. conv)
  local how = 'timeout'
  if t and t.x ~= 'cancelled' and t.hu and now < t.hu and now < t.at + timeout then
    -- Held (an open stream, a status): due again when the hold ends.
    redis.call('ZADD', KEYS[1], math.min(t.hu, t.at + timeout), conv)
    how = nil
  elseif t and t.x == 'cancelled' then
    how = 'cancelled'
  elseif t and now < t.at + timeout and t.ok then
    how = (t.w > 0) and 'reply' or 'passed'
  end
  if how == 'passed' and lost == 'addressed' and redis.call('HGET', tag .. ':d:' .. t.d, 'ad') == '1' then
    -- Silent on a message addressed to the bot: lost with the bot, unless it passed.
    local r = rerun(tag, t.d, '', now, limit, timeout, order)
    if r[1] == 1 then
      reruns[#reruns + 1] = {t.d, 'silent', r[2]}
      how = nil
    elseif r[1] == 2 then
      reruns[#reruns + 1] = {t.d, 'silent', 0}
      out[#out + 1] = {'lost', r[3], r[4], r[5]}
      how = nil
    end
  end
  if how then
    local e = end_turn(tag, conv, t, now, order, timeout)
    out[#out + 1] = {how, e[1], e[2], e[3]}
  end
end
return {out, reruns}
"#
);

/// KEYS: the shard's turn index. ARGV: 1 key tag, 2 delivery, 3 the socket that carried its
/// run (`holder/socket`), 4 now ms, 5 re-runs of one delivery at most, 6 timeout ms, 7 order.
///
/// The socket that carried the delivery's run closed: the run, if still open on it, runs again
/// (or ends `lost`). Returns `rerun`'s answer.
pub const RERUN_LOST: &str = with_turn_helpers!(
    r#"
return rerun(ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
"#
);

/// KEYS: the shard's turn index. ARGV: 1 key tag, 2 a gateway process that stopped beating
/// (its sockets are gone with it), 3 now ms, 4 re-runs at most, 5 timeout ms, 6 order.
///
/// Every run still open on that process's sockets runs again (or ends `lost`). Returns
/// {{delivery, re-run's number (0: lost), {how, duration ms, released, {superseded}} or {}}, …}.
pub const RERUN_ORPHANED: &str = with_turn_helpers!(
    r#"
local tag, holder, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local set = tag .. ':skh:' .. holder
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', set)) do
  local sk = redis.call('HGET', tag .. ':d:' .. id, 'sk')
  if sk and string.match(sk, '^(.*)/') == holder then
    local r = rerun(tag, id, sk, now, tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6])
    if r[1] == 1 then
      out[#out + 1] = {id, r[2], {}}
    elseif r[1] == 2 then
      out[#out + 1] = {id, 0, {r[2], r[3], r[4], r[5]}}
    end
  end
end
redis.call('DEL', set)
return out
"#
);
