//! The egress's records in Redis, over its scripts. A token is only ever present as its keyed
//! hash; texts and bodies of writes as SHA-256 digests (cached answers are Slack's, not the bot's).
//!
//! Keys: `{P:e:<token hash>}:k:<method>:<key digest>` (idempotency) and `…:f:<method>:<request
//! digest>` (retry fingerprints), each with its `…:lease`; `{P:e:<team>:<channel>}:m:<ts>` (a
//! delivered message), `…:t:<thread>` (its thread's latest), `…:p:<posted ts>` (a post's
//! source), `…:pace:<app identity>`, `…:r:<delivery>:<run>:<method>` and
//! `…:w:<delivery>:<method>:<k>` (re-runs); `{P:egress}:hashkey`, `…:notes:withheld`,
//! `…:notes:unknown` (kept by `outbox::Notes`).

use std::time::Duration;

use crate::outbox::{channel_tag, Channel, Conversations};
use crate::store::{connect_lazy, Conn, Endpoint, Lazy};
use bytes::Bytes;
use redis::{AsyncCommands, Script, Value};
use tokio::sync::OnceCell;

use super::model::{Cached, Fingerprint, FpUpdate, IdemClaim, IdemEnd, Place, Settle, LEASE};
use super::scripts;

mod channel;
mod stream;
use crate::store::StoreError;
pub use stream::{StreamCall, StreamState};

/// How an answer is written to a record and read back from one.
impl Cached {
    fn args(&self) -> [Vec<u8>; 4] {
        [
            self.status.to_string().into_bytes(),
            self.content_type_and_headers().into_bytes(),
            self.body.to_vec(),
            self.retry_after.map(|s| s.to_string()).unwrap_or_default().into_bytes(),
        ]
    }

    /// The content type, then one `name: value` line per kept header. They share the stored
    /// content type's field, so that the scripts and the records written before the headers
    /// were kept stay as they are: a header value never holds a line break, so a record
    /// without one is a content type with no headers.
    fn content_type_and_headers(&self) -> String {
        let mut out = self.content_type.clone();
        for (name, value) in &self.headers {
            out.push('\n');
            out.push_str(name);
            out.push_str(": ");
            out.push_str(value);
        }
        out
    }

    fn split_content_type(field: &str) -> (String, Vec<(String, String)>) {
        let mut lines = field.split('\n');
        let content_type = lines.next().unwrap_or_default().to_string();
        let headers = lines.filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        (content_type, headers)
    }

    fn from_parts(parts: &[Value]) -> Option<Cached> {
        let text =
            |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok()).unwrap_or_default();
        let status = String::from_utf8(text(0)).ok()?.parse().ok()?;
        let (content_type, headers) = Cached::split_content_type(&String::from_utf8_lossy(&text(1)));
        Some(Cached {
            status,
            content_type,
            headers,
            body: Bytes::from(text(2)),
            retry_after: String::from_utf8(text(3)).ok().and_then(|s| s.parse().ok()),
        })
    }
}

#[derive(Clone)]
pub struct EgressStore {
    pub(super) conn: Conn,
    prefix: String,
    hash_key: std::sync::Arc<OnceCell<Vec<u8>>>,
    s: std::sync::Arc<Scripts>,
}

struct Scripts {
    idem_claim: Script,
    idem_finish: Script,
    lease_renew: Script,
    fp_begin: Script,
    fp_set: Script,
    pace: Script,
    run_next: Script,
    run_record: Script,
}

const DAY_MS: u64 = 24 * 3600 * 1000;

impl Lazy<EgressStore> {
    /// The egress's records under `prefix`, connected on first use (see [`Lazy`]).
    pub fn egress(endpoint: &Endpoint, prefix: &str) -> Self {
        let prefix = prefix.to_string();
        Lazy::new(endpoint, Duration::from_secs(2), move |endpoint, timeout| {
            Ok(EgressStore::new(connect_lazy(endpoint, timeout)?, &prefix))
        })
    }
}

impl EgressStore {
    fn new(conn: Conn, prefix: &str) -> Self {
        let s = Scripts {
            idem_claim: Script::new(scripts::IDEM_CLAIM),
            idem_finish: Script::new(scripts::IDEM_FINISH),
            lease_renew: Script::new(scripts::LEASE_RENEW),
            fp_begin: Script::new(scripts::FP_BEGIN),
            fp_set: Script::new(scripts::FP_SET),
            pace: Script::new(scripts::PACE),
            run_next: Script::new(scripts::RUN_NEXT),
            run_record: Script::new(scripts::RUN_RECORD),
        };
        EgressStore { conn, prefix: prefix.into(), hash_key: Default::default(), s: std::sync::Arc::new(s) }
    }

    fn token_tag(&self, token_hash: &str) -> String {
        format!("{{{}:e:{token_hash}}}", self.prefix)
    }

    /// The conversation records (what the inbound side delivered, deleted and edited), kept
    /// for `window`, on this store's connection.
    pub fn conversations(&self, window: Duration) -> Conversations {
        Conversations::new(self.conn.clone(), &self.prefix, window)
    }

    /// What the ingress saw of conversations (own posts, threads), on the same connection.
    pub fn seen(&self) -> crate::seen::Record {
        crate::seen::Record::new(self.conn.clone(), &self.prefix)
    }

    /// The notes for operators (withheld and unknown writes), on the same connection.
    pub fn notes(&self) -> crate::outbox::Notes {
        crate::outbox::Notes::new(self.conn.clone(), &self.prefix)
    }

    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The apps' turns, on the same connection (a write's delivery names its shard).
    pub fn turns(&self) -> crate::outbox::Turns {
        crate::outbox::Turns::new(self.conn.clone(), &self.prefix)
    }

    fn channel_tag(&self, p: &Place<'_>) -> String {
        channel_tag(&self.prefix, Channel { team: p.team, channel: p.channel })
    }

    fn global(&self, what: &str) -> String {
        format!("{{{}:egress}}:{what}", self.prefix)
    }

    /// The deployment's key for token hashes: made once by whichever replica comes first.
    pub async fn hash_key(&self) -> Result<Vec<u8>, StoreError> {
        let key = self
            .hash_key
            .get_or_try_init(|| async {
                let k = self.global("hashkey");
                let fresh: [u8; 32] = rand::random();
                let _: bool = self.conn.clone().set_nx(&k, fresh.to_vec()).await?;
                let stored: Vec<u8> = self.conn.clone().get(&k).await?;
                Ok::<_, StoreError>(stored)
            })
            .await?;
        Ok(key.clone())
    }

    /// The idempotency record of `key_digest` for a token and method.
    pub fn idem_key(&self, th: &str, method: &str, key_digest: &str) -> String {
        format!("{}:k:{method}:{key_digest}", self.token_tag(th))
    }

    /// The retry fingerprint of a request (its digest) for a token and method.
    pub fn fp_key(&self, th: &str, method: &str, request_digest: &str) -> String {
        format!("{}:f:{method}:{request_digest}", self.token_tag(th))
    }

    /// Claim a key for the request `request_digest` (see `IDEM_CLAIM`).
    pub async fn idem_claim(&self, record: &str, request_digest: &str, nonce: &str) -> Result<IdemClaim, StoreError> {
        let reply: Vec<Value> = self
            .s
            .idem_claim
            .key(record)
            .key(lease_of(record))
            .arg(DAY_MS)
            .arg(nonce)
            .arg(request_digest)
            .arg(crate::clock::now_ms())
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let code: i64 = reply.first().and_then(|v| redis::from_redis_value_ref(v).ok()).unwrap_or(1);
        Ok(match code {
            0 => IdemClaim::Claimed,
            2 => Cached::from_parts(&reply[1..]).map_or(IdemClaim::InFlight, IdemClaim::Done),
            3 => IdemClaim::Unsettled { sent_ms: text_at(&reply, 1).parse().unwrap_or(0) },
            4 => IdemClaim::Reused,
            _ => IdemClaim::InFlight,
        })
    }

    /// The winner's answer, kept for a day; an unknown outcome kept for the next call to
    /// settle; or, for a failure, the claim dropped.
    pub async fn idem_finish(&self, record: &str, nonce: &str, end: IdemEnd<'_>) -> Result<(), StoreError> {
        let mut inv = self.s.idem_finish.key(record);
        inv.key(lease_of(record)).arg(nonce);
        match end {
            IdemEnd::Done(c) => inv.arg(Settle::Keep.as_label()).arg(&c.args()[..]).arg(DAY_MS),
            IdemEnd::Unknown => inv.arg(Settle::Unknown.as_label()),
            IdemEnd::Drop => inv.arg(Settle::Drop.as_label()),
        };
        let _: i64 = inv.invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The call holding `record` still runs: renew its lease. `false` when it is not ours.
    pub async fn renew(&self, record: &str, nonce: &str) -> Result<bool, StoreError> {
        let renewed: i64 = self
            .s
            .lease_renew
            .key(record)
            .key(lease_of(record))
            .arg(nonce)
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(renewed == 1)
    }

    pub async fn fp_begin(&self, record: &str, window: Duration, nonce: &str) -> Result<Fingerprint, StoreError> {
        let reply: Vec<Value> = self
            .s
            .fp_begin
            .key(record)
            .key(lease_of(record))
            .arg(window.as_millis() as u64)
            .arg(nonce)
            .arg(crate::clock::now_ms())
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match text_at(&reply, 0).as_str() {
            "busy" => Fingerprint::Busy { beats: text_at(&reply, 1).parse().unwrap_or(0) },
            "wait" => Fingerprint::Wait,
            "replay" => Cached::from_parts(&reply[1..]).map_or(Fingerprint::Wait, Fingerprint::Replay),
            "unsettled" => Fingerprint::Unsettled { sent_ms: text_at(&reply, 1).parse().unwrap_or(0) },
            _ => Fingerprint::New,
        })
    }

    pub async fn fp_set(&self, record: &str, nonce: &str, update: FpUpdate<'_>) -> Result<(), StoreError> {
        let mut inv = self.s.fp_set.key(record);
        inv.key(lease_of(record)).arg(nonce);
        match update {
            FpUpdate::Done(c) => inv.arg(update.as_label()).arg(&c.args()[..]),
            _ => inv.arg(update.as_label()),
        };
        let _: i64 = inv.invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }
}

/// The lease of an in-flight record: in the record's hash tag, so one script sees both.
fn lease_of(record: &str) -> String {
    format!("{record}:lease")
}

/// The `i`-th part of a script's reply as text ("" when absent).
fn text_at(reply: &[Value], i: usize) -> String {
    reply.get(i).and_then(|v| redis::from_redis_value_ref(v).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_headers_ride_in_the_content_type_field_and_old_records_read_as_none() {
        let c = Cached {
            status: 200,
            content_type: "application/json; charset=utf-8".into(),
            body: Bytes::from_static(b"{}"),
            retry_after: None,
            headers: vec![("x-oauth-scopes".into(), "chat:write, channels:read".into())],
        };
        let parts: Vec<Value> = c.args().into_iter().map(Value::BulkString).collect();
        assert_eq!(Cached::from_parts(&parts), Some(c.clone()));
        let old = [b"200".to_vec(), b"application/json".to_vec(), b"{}".to_vec(), Vec::new()];
        let old = Cached::from_parts(&old.map(Value::BulkString)).unwrap();
        assert_eq!((old.content_type.as_str(), old.headers.len()), ("application/json", 0));
    }
}
