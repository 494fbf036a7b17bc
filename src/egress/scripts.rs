//! The egress's Lua scripts: each step on its keys is atomic, so replicas sharing one Redis
//! agree on who posts. Keys of one kind share a hash tag: a token's (idempotency, retries) or a
//! channel's (attribution, pacing, re-runs).

/// KEYS: the idempotency record, its lease. ARGV: ttl ms, owner nonce, request digest, now ms,
/// lease ms. The record lives a day; the in-flight claim only as long as its lease, which the
/// call renews while it runs (`LEASE_RENEW`), so a crashed call leaves an unsettled record, not
/// a day of 409s.
/// {0} claimed (send it); {1} another call with this key is in flight; {2, status, content
/// type, body, retry-after} done: replay; {3, sent at} unsettled (its call died or its outcome
/// was unknown): this call settles it by the uncertain-write rules; {4} the key was used for
/// another request (another body or query).
pub const IDEM_CLAIM: &str = r#"
local r = redis.call('HMGET', KEYS[1], 's', 'd', 'st', 'ct', 'b', 'ra', 'at')
if not r[1] then
  redis.call('HSET', KEYS[1], 's', 'inflight', 'o', ARGV[2], 'd', ARGV[3], 'at', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[5])
  return {0}
end
if r[2] and r[2] ~= ARGV[3] then return {4} end
if r[1] == 'done' then
  return {2, r[3], r[4] or '', r[5] or '', r[6] or ''}
end
if r[1] == 'inflight' and redis.call('EXISTS', KEYS[2]) == 1 then return {1} end
redis.call('HSET', KEYS[1], 's', 'inflight', 'o', ARGV[2])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[5])
return {3, r[7] or ''}
"#;

/// How a record (a key's, a fingerprint's) is settled, written once for both: ARGV[2] says
/// what (done | unknown | drop), then for done: status, content type, body, retry-after in
/// ARGV[3..6]. Done keeps the answer (for `ttl` ms when given), unknown keeps the intent for
/// the next identical call to settle, anything else forgets the record. Settling ends the
/// lease (KEYS[2]).
macro_rules! settle_lua {
    () => {
        r#"
local function settle(ttl)
  if ARGV[2] == 'done' then
    redis.call('HSET', KEYS[1], 's', 'done', 'st', ARGV[3], 'ct', ARGV[4], 'b', ARGV[5], 'ra', ARGV[6])
    if ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  elseif ARGV[2] == 'unknown' then
    redis.call('HSET', KEYS[1], 's', 'unknown')
  else
    redis.call('DEL', KEYS[1])
  end
  redis.call('DEL', KEYS[2])
  return 1
end
"#
    };
}

/// KEYS: the idempotency record, its lease. ARGV: owner nonce, what (done | unknown | drop),
/// then for done: status, content type, body, retry-after, ttl ms.
/// A success is kept whoever reports it (it is Slack's true answer); unknown and drop only by
/// the call that holds the claim, so a call whose lease was taken over cannot undo the new one.
pub const IDEM_FINISH: &str = concat!(
    settle_lua!(),
    r#"
if ARGV[2] == 'done' then return settle(ARGV[7]) end
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
return settle(nil)
"#
);

/// KEYS: a record (idempotency or retry fingerprint), its lease. ARGV: owner nonce, lease ms.
/// The owner's call is still running: its lease goes on, and `hb` counts the beats, which lets
/// an identical call tell a live twin (beats move) from a dead one (its lease lapses).
/// 1 renewed; 0 the lease is not ours any more.
pub const LEASE_RENEW: &str = r#"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'hb', 1)
return 1
"#;

/// KEYS: a retry fingerprint (same token, method, query and body), its lease. ARGV: window ms,
/// owner nonce, now ms, lease ms.
/// {"new"}: record it as ours and send; {"busy", beats}: an identical call is in flight and its
/// client still waits (a new write of its own once its lease is seen alive); {"wait"}: the
/// earlier call's client is gone, wait for its result; {"replay", status, content type, body,
/// retry-after}: it succeeded and its answer never reached its client; {"unsettled", sent at}:
/// its call died (the lease lapsed) or its outcome was unknown — now ours to settle by the
/// uncertain-write rules.
pub const FP_BEGIN: &str = r#"
local r = redis.call('HMGET', KEYS[1], 's', 'lost', 'st', 'ct', 'b', 'ra', 'at', 'hb')
local state, lost = r[1], r[2]
local function take()
  redis.call('HSET', KEYS[1], 's', 'inflight', 'lost', '0', 'o', ARGV[2])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
  return {'unsettled', r[7] or ''}
end
if state == 'inflight' then
  if redis.call('EXISTS', KEYS[2]) == 0 then return take() end
  if lost == '0' then return {'busy', r[8] or '0'} end
  return {'wait'}
end
if state == 'done' and lost == '1' then return {'replay', r[3], r[4] or '', r[5] or '', r[6] or ''} end
if state == 'unknown' then return take() end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'inflight', 'lost', '0', 'o', ARGV[2], 'at', ARGV[3], 'hb', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
return {'new'}
"#;

/// KEYS: a retry fingerprint, its lease. ARGV: owner nonce, what (lost | delivered | done |
/// unknown | drop), then for done: status, content type, body, retry-after. Only the owner
/// changes it, except `delivered`, which any replay that reached its client may say. Settling
/// (done, unknown, drop) ends the lease.
pub const FP_SET: &str = concat!(
    settle_lua!(),
    r#"
if ARGV[2] == 'delivered' then
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'lost', '0') end
  return 1
end
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
if ARGV[2] == 'lost' then
  redis.call('HSET', KEYS[1], 'lost', '1')
  return 1
end
return settle(nil)
"#
);

/// KEYS: an app's pacing bucket in a channel. ARGV: now ms, ms per post, burst, most ms to wait.
/// GCRA: the bucket holds the theoretical arrival time of the next post; `burst` posts may come
/// at once, then one every `per`. A reservation: returns the ms to wait before posting (0: now),
/// or -1 when that would be longer than the most, and nothing is reserved.
pub const PACE: &str = r#"
local now, per, burst, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local wait = math.max(0, tat - per * (burst - 1) - now)
if wait > most then return -1 end
redis.call('SET', KEYS[1], string.format('%d', tat + per), 'PX', math.ceil(tat + per - now + 1000))
return math.ceil(wait)
"#;

/// KEYS: the run's write counter for a method. ARGV: window ms, the prefix of the k-th write's
/// record (`<channel tag>:w:<delivery>:<method>:`).
/// Returns {k} or, when a run already made a k-th such write, {k, its run, status, content
/// type, body, retry-after}.
pub const RUN_NEXT: &str = r#"
local k = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
local r = redis.call('HMGET', ARGV[2] .. k, 'run', 'st', 'ct', 'b', 'ra')
if not r[1] then return {k} end
return {k, r[1], r[2], r[3] or '', r[4] or '', r[5] or ''}
"#;

/// KEYS: the k-th write's record. ARGV: run, status, content type, body, retry-after, window
/// ms. The first run to post the k-th write keeps it.
pub const RUN_RECORD: &str = r#"
if redis.call('HSETNX', KEYS[1], 'run', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'ct', ARGV[3], 'b', ARGV[4], 'ra', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
"#;
