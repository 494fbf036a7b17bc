//! A person's write happens once (invariant 14). Every form that acts carries a nonce made
//! with the page; the first POST of it claims `{<prefix>:ui}:done:<nonce>` in Redis
//! (`SET NX`, shared by every replica) and records there what it did; a second POST of the
//! same form finds the claim and acts no more. A bulk replay's confirmation also keeps the
//! ids it counted under `{<prefix>:ui}:confirm:<nonce>`: the POST replays exactly those, and
//! takes them and claims the nonce in one step. Both keys expire.

use std::time::Duration;

use redis::Script;
use serde::{Deserialize, Serialize};

use crate::store::Conn;
use crate::ui::Failure;

/// How long a bulk replay's confirmation can be confirmed.
pub const CONFIRM_TTL: Duration = Duration::from_secs(3600);
/// How long a used nonce (and the result page it names) is kept: longer than any page with
/// its form is worth keeping open.
pub const DONE_TTL: Duration = Duration::from_secs(24 * 3600);

/// A fresh nonce for one form (128 random bits, hex).
pub fn nonce() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Whether `n` looks like a nonce this module made (so no other key is ever named).
pub fn valid(n: &str) -> bool {
    n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a used nonce did, for the result page and for a second POST of the same form.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Done {
    /// When the form was first sent (ms).
    pub at_ms: u64,
    /// `false` while it acts (or when its process stopped before it recorded the result).
    pub finished: bool,
    pub heading: String,
    pub text: String,
    /// Pages to look at after it: (href, words).
    pub links: Vec<(String, String)>,
}

/// A bulk replay's confirmation, as taken by its POST.
pub enum Taken {
    /// Claimed now: the deliveries (app, id) that the confirmation counted.
    Ids(Vec<(String, String)>),
    /// Used before.
    Done(Done),
    /// Never made, or older than [`CONFIRM_TTL`].
    Gone,
}

const TAKE: &str = r"
local done = redis.call('GET', KEYS[2])
if done then return {'done', done} end
local ids = redis.call('GET', KEYS[1])
if not ids then return {'gone', ''} end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return {'ids', ids}
";

/// The nonces of one key prefix.
pub struct Once {
    conn: Conn,
    keys: String,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Once {
    pub fn new(conn: Conn, prefix: &str) -> Once {
        Once { conn, keys: format!("{{{prefix}:ui}}:") }
    }

    fn done_key(&self, nonce: &str) -> String {
        format!("{}done:{nonce}", self.keys)
    }

    fn confirm_key(&self, nonce: &str) -> String {
        format!("{}confirm:{nonce}", self.keys)
    }

    /// Keep what a bulk replay's confirmation counted until it is confirmed.
    pub async fn stash(&mut self, nonce: &str, ids: &[(String, String)]) -> Result<(), Failure> {
        let value = serde_json::to_string(ids).map_err(|_| Failure::internal())?;
        redis::cmd("SET")
            .arg(self.confirm_key(nonce))
            .arg(value)
            .arg("PX")
            .arg(ms(CONFIRM_TTL))
            .query_async::<()>(&mut self.conn)
            .await
            .map_err(Failure::redis)
    }

    /// Take a confirmation's ids and claim its nonce, in one step.
    pub async fn take(&mut self, nonce: &str) -> Result<Taken, Failure> {
        let claim = started();
        let (what, value): (String, String) = Script::new(TAKE)
            .key(self.confirm_key(nonce))
            .key(self.done_key(nonce))
            .arg(claim)
            .arg(ms(DONE_TTL))
            .invoke_async(&mut self.conn)
            .await
            .map_err(Failure::redis)?;
        Ok(match what.as_str() {
            "ids" => Taken::Ids(serde_json::from_str(&value).unwrap_or_default()),
            "done" => Taken::Done(serde_json::from_str(&value).unwrap_or_default()),
            _ => Taken::Gone,
        })
    }

    /// Claim `nonce` for a form that acts: `None` when claimed now, or what it did before.
    pub async fn claim(&mut self, nonce: &str) -> Result<Option<Done>, Failure> {
        let key = self.done_key(nonce);
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(started())
            .arg("NX")
            .arg("PX")
            .arg(ms(DONE_TTL))
            .query_async(&mut self.conn)
            .await
            .map_err(Failure::redis)?;
        if set.is_some() {
            return Ok(None);
        }
        Ok(Some(self.read(nonce).await?.unwrap_or_default()))
    }

    /// Give a claim back when the form did nothing (Redis failed before it acted), so the
    /// same form can be sent again.
    pub async fn release(&mut self, nonce: &str) {
        let _: Result<(), _> = redis::cmd("DEL").arg(self.done_key(nonce)).query_async(&mut self.conn).await;
    }

    /// Record what the form did (kept as long as the claim).
    pub async fn finish(&mut self, nonce: &str, done: &Done) -> Result<(), Failure> {
        let value = serde_json::to_string(&Done { finished: true, ..done.clone() }).map_err(|_| Failure::internal())?;
        redis::cmd("SET")
            .arg(self.done_key(nonce))
            .arg(value)
            .arg("XX")
            .arg("KEEPTTL")
            .query_async::<()>(&mut self.conn)
            .await
            .map_err(Failure::redis)
    }

    /// What the form with `nonce` did, if it was sent.
    pub async fn read(&mut self, nonce: &str) -> Result<Option<Done>, Failure> {
        let value: Option<String> =
            redis::cmd("GET").arg(self.done_key(nonce)).query_async(&mut self.conn).await.map_err(Failure::redis)?;
        Ok(value.map(|v| serde_json::from_str(&v).unwrap_or_default()))
    }
}

/// A claim's value until the result is recorded.
fn started() -> String {
    let d = Done { at_ms: crate::clock::now_ms(), ..Done::default() };
    serde_json::to_string(&d).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_fresh_and_only_they_name_keys() {
        let (a, b) = (nonce(), nonce());
        assert!(valid(&a) && valid(&b) && a != b);
        assert!(!valid("") && !valid("../s:x") && !valid(&format!("{a}0")));
    }
}
