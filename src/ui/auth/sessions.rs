//! The sessions in Redis, all under the hash tag `{<prefix>:ui}` (one slot of a Cluster):
//!
//! - `…:s:<SHA-256 of the id>`: `<role>:<proof>`, for the session's lifetime. The proof is an
//!   HMAC of the session id keyed by the token that made it: the gateway, holding the
//!   configured token and the cookie, recomputes it on every request, so a session ends with
//!   its token; Redis alone (a copy of it) can test no guess of the token, as it holds neither
//!   the id nor the token.
//! - `…:sessions`: the index, a sorted set of the sessions' hashes by when they end (ms), so
//!   that ending every session reads one key and no `SCAN`. It expires with its last session.

use redis::Script;

use super::Role;
use crate::store::{Conn, StoreError};

/// Store a session and index it; the ended ones leave the index. Redis' clock decides when a
/// session ends, so replicas with skewed clocks agree.
const STORE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], last[2])
return 1
";

/// End every indexed session: how many there were.
const END_ALL: &str = r"
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local n = 0
for _, id in ipairs(ids) do n = n + redis.call('DEL', ARGV[1] .. id) end
redis.call('DEL', KEYS[1])
return n
";

/// The live sessions' roles, as `{admin, read}`.
const COUNT: &str = r"
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local admin, read = 0, 0
for _, id in ipairs(ids) do
  local v = redis.call('GET', ARGV[1] .. id)
  if v then
    local role = string.match(v, '^[a-z]+')
    if role == 'admin' then admin = admin + 1 elseif role == 'read' then read = read + 1 end
  end
end
return {admin, read}
";

/// Where one pages' deployment keeps its sessions.
#[derive(Debug, Clone)]
pub struct Keys {
    /// `{<prefix>:ui}:s:`, followed by a session id's hash.
    pub sessions: String,
    /// `{<prefix>:ui}:sessions`.
    pub index: String,
}

impl Keys {
    pub fn new(key_prefix: &str) -> Keys {
        Keys { sessions: format!("{{{key_prefix}:ui}}:s:"), index: format!("{{{key_prefix}:ui}}:sessions") }
    }
}

/// How many sessions each role has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Count {
    pub admin: u64,
    pub read: u64,
}

/// Store `value` under the session whose id hashes to `hash`, for `ttl_ms`.
pub(super) async fn store(
    conn: &mut Conn,
    keys: &Keys,
    hash: &str,
    value: &str,
    ttl_ms: u64,
) -> Result<(), StoreError> {
    let _: i64 = Script::new(STORE)
        .key(format!("{}{hash}", keys.sessions))
        .key(&keys.index)
        .arg(value)
        .arg(ttl_ms)
        .arg(hash)
        .invoke_async(conn)
        .await?;
    Ok(())
}

/// End one session.
pub(super) async fn end(conn: &mut Conn, keys: &Keys, hash: &str) -> Result<(), StoreError> {
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg(format!("{}{hash}", keys.sessions))
        .ignore()
        .cmd("ZREM")
        .arg(&keys.index)
        .arg(hash)
        .ignore()
        .query_async(conn)
        .await?;
    Ok(())
}

/// End every session of the deployment: how many were live.
pub async fn end_all(conn: &mut Conn, keys: &Keys) -> Result<u64, StoreError> {
    Ok(Script::new(END_ALL).key(&keys.index).arg(&keys.sessions).invoke_async(conn).await?)
}

/// How many live sessions each role has.
pub async fn count(conn: &mut Conn, keys: &Keys) -> Result<Count, StoreError> {
    let (admin, read): (u64, u64) = Script::new(COUNT).key(&keys.index).arg(&keys.sessions).invoke_async(conn).await?;
    Ok(Count { admin, read })
}

/// A stored session's value: its role and proof.
pub(super) fn value(role: Role, proof: &str) -> String {
    format!("{}:{proof}", role.as_label())
}

/// The role and proof of a stored value; `None` for anything else (a session stored before
/// sessions had proofs is no session).
pub(super) fn parse(value: &str) -> Option<(Role, &str)> {
    let (role, proof) = value.split_once(':')?;
    Some((Role::from_label(role)?, proof)).filter(|(_, p)| !p.is_empty())
}
