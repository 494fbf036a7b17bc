//! The scripts a worker takes its entries with: a read's load (fenced), the one-step read and
//! re-claim that load as they lease, and the plain re-claim.

/// KEYS: outbox stream, then the delivery hash of each lease of one read. ARGV: group,
/// consumer, then `(entry, token)` for each lease. For each, in order: its delivery's fields
/// when the lease is still the caller's (an empty list when the delivery is gone), 0 when it
/// was lost (the attempt must not be made). One call for a whole read batch. (An app that takes
/// turns reads and loads in one step instead: `READ_LOADED`.)
pub const LOAD: &str = r#"
local out = {}
for i = 2, #KEYS do
  local entry, token = ARGV[2 * i - 1], ARGV[2 * i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1)
  if #p == 0 or p[1][2] ~= ARGV[2] or tonumber(p[1][4]) ~= tonumber(token) then
    out[#out + 1] = 0
  else
    out[#out + 1] = redis.call('HGETALL', KEYS[i])
  end
end
return out
"#;

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

/// KEYS: a stream (outbox or carrying). ARGV: 1 group, 2 consumer, 3 most entries, 4 the app's turn timeout ms
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
  out[#out + 1] = load_entry(ARGV[6], ARGV[1], KEYS[1], e[1], e[2] or {}, d, now, timeout)
end
return out
"#
);

/// KEYS: a stream (outbox or carrying). ARGV: 1 group, 2 consumer, 3 min idle ms, 4 max entries, 5 the app's
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
    out[#out + 1] = load_entry(ARGV[7], ARGV[1], KEYS[1], e[1], e[2] or {}, d, now, timeout)
  end
  cursor = r[1]
  if cursor == '0-0' or #out >= 4 * tonumber(ARGV[4]) then break end
end
return out
"#
);
