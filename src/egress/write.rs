//! The write path. In order:
//!
//! 1. **Keys** (`keyed`). With `Idempotency-Key`, the call claims `(token, method, key)` for a
//!    day, bound to its request (query and body): the winner sends, a concurrent duplicate gets
//!    409 while the winner's lease is alive, a later one gets the winner's answer, one with
//!    another request 422; a failure drops the claim. A claim whose call died is settled by
//!    the next call with the key, by the uncertain-write rules. Fails closed (503) without Redis.
//! 2. **Retries** (`retry`). Without a key, an identical earlier call (same token, method,
//!    query and body) within `retry_window` whose answer never reached its client makes this
//!    call its retry: it waits for that call's result, or gets it replayed, or — when that call
//!    died — settles it by the uncertain-write rules. Anything else is a new write and is posted.
//! 3. **Attribution** (`attribution`). The write's channel and thread name a message the
//!    gateway delivered; if that message was deleted (or edited, with `on_edited =
//!    "withhold"`), the write is withheld.
//! 4. **Re-runs** (`rerun`, opt-in). The k-th write of a method during run n of a delivery
//!    returns the k-th such write of an earlier run instead of posting again.
//! 5. **Pacing** (`pacing`) of chat.postMessage per app and channel, and Slack's 429s, up to
//!    `max_wait`.
//! 6. **The uncertain write** (`uncertain`). No answer after the call may have reached Slack: a
//!    chat.postMessage is looked for in the channel before it is posted again; other methods as
//!    `uncertain` says.
//!
//! What each layer decides is in `plan`; the layers' files only do the I/O it asks for. Every
//! Redis step goes through [`Egress::step`]: once one has found Redis not answering, the call's
//! later steps skip it instead of waiting again (a frozen Redis costs one timeout).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pingora::protocols::http::ServerSession;

use super::call::{self, token_hash, Call};
use super::error::Error;
use super::plan::{self, KeyKind, Layer};
use super::store::Cached;
use super::{cached, respond, Egress, Outcome, Reply};
use crate::clock::now_ms;
use crate::outbox::StoreError;
use crate::slack::digest;
use crate::upstream::{Response, SendError};

/// What a write knows once it is read.
pub(super) struct Write {
    pub call: Call,
    /// The keyed hash of the token, when Redis could give the key.
    pub token_hash: Option<String>,
    /// What identifies the request: its query and body — every argument, wherever it was sent.
    pub digest: String,
    /// A Redis step of this call found the store not answering: the later ones skip it.
    store_down: AtomicBool,
}

/// Whether an answer is Slack's success: a 2xx with `"ok": true`. Anything else is not cached.
pub(super) fn succeeded(a: &Cached) -> bool {
    (200..300).contains(&a.status)
        && serde_json::from_slice::<serde_json::Value>(&a.body).is_ok_and(|v| v["ok"].as_bool() == Some(true))
}

/// What a reply settles in its record.
pub(super) fn settles(reply: &Reply) -> plan::Settle {
    plan::settles(reply.outcome, succeeded(&reply.answer))
}

/// Slack's answer to one forward, as the bot gets it; `Err` when the call may have reached
/// Slack without an answer (the uncertain-write rules settle it).
pub(super) fn forwarded(result: Result<Response, SendError>) -> Result<Reply, SendError> {
    match result {
        Ok(r) => Ok(Reply::new(cached(r), Outcome::Forwarded)),
        Err(e) if e.maybe_sent() => Err(e),
        Err(_) => Ok(Error::Upstream.into()),
    }
}

/// The query of a call's path ("" without one).
fn query(call: &Call) -> &str {
    call.path_and_query.split_once('?').map_or("", |(_, q)| q)
}

/// Arguments sent in the query (an empty body, as curl examples do) are the write's too: its
/// fields and token come from there when the body does not say them.
fn with_query_args(call: &mut Call) {
    let q = query(call);
    if q.is_empty() {
        return;
    }
    let (from_query, query_token) = call::fields(Some("application/x-www-form-urlencoded"), q.as_bytes());
    let f = &mut call.fields;
    f.channel = f.channel.take().or(from_query.channel);
    f.thread_ts = f.thread_ts.take().or(from_query.thread_ts);
    f.ts = f.ts.take().or(from_query.ts);
    f.text = f.text.take().or(from_query.text);
    if call.token.is_none() {
        call.token = call::token(None, query_token);
    }
}

/// The digest of a request's query and body, length-prefixed so that no argument can move
/// between them unseen.
pub(super) fn request_digest(call: &Call) -> String {
    let q = query(call);
    let mut bytes = Vec::with_capacity(8 + q.len() + call.body.len());
    bytes.extend_from_slice(&(q.len() as u64).to_be_bytes());
    bytes.extend_from_slice(q.as_bytes());
    bytes.extend_from_slice(&call.body);
    digest(&bytes)
}

/// Whether a store error means Redis is not answering (rather than refusing one command).
fn not_answering(e: &StoreError) -> bool {
    match e {
        StoreError::Redis(r) => {
            r.is_timeout() || r.is_io_error() || r.is_connection_dropped() || r.is_connection_refusal()
        }
        _ => false,
    }
}

impl Egress {
    /// A write; `true` when its answer reached the client.
    pub(super) async fn write(self: &Arc<Self>, mut call: Call, session: &mut ServerSession) -> bool {
        with_query_args(&mut call);
        let digest = request_digest(&call);
        let mut w = Write { call, token_hash: None, digest, store_down: AtomicBool::new(false) };
        let layer = plan::layer(w.call.token.is_some(), w.call.idempotency_key.is_some());
        // A write without a token touches no store.
        if let Some(token) = w.call.token.as_ref() {
            if let Some(store) = self.store() {
                w.token_hash = self.step(&w, store.hash_key()).await.ok().map(|k| token_hash(&k, token));
            }
        }
        let w = Arc::new(w);
        match (layer, w.call.idempotency_key.as_deref()) {
            (Layer::Keyed, Some(key)) => self.keyed(w.clone(), key, session).await,
            (Layer::Fingerprint, _) => self.unkeyed(w, session).await,
            // Slack answers a write without a token itself.
            _ => {
                let reply = self.forward_write(&w).await;
                self.finish_reply(&w.call, KeyKind::None, reply, session).await
            }
        }
    }

    /// One Redis step of a write. Skipped once an earlier step of the same call found Redis not
    /// answering: each step would wait the store's whole timeout again.
    pub(super) async fn step<T>(
        &self,
        w: &Write,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if w.store_down.load(Ordering::Relaxed) {
            self.shared.metrics.egress.store_skipped.inc();
            return Err(StoreError::Protocol("skipped: Redis did not answer earlier in this call".into()));
        }
        let result = op.await;
        if result.as_ref().is_err_and(not_answering) {
            w.store_down.store(true, Ordering::Relaxed);
        }
        result
    }

    /// Account for a write and answer its client; `true` when the answer reached it.
    pub(super) async fn finish_reply(
        &self,
        call: &Call,
        key: KeyKind,
        reply: Reply,
        session: &mut ServerSession,
    ) -> bool {
        self.account(call, key, reply.outcome);
        respond(session, &reply).await
    }

    /// Everything between the dedupe and Slack: attribution, re-runs, pacing, the call.
    pub(super) async fn send(&self, w: &Write) -> Reply {
        let Some(to) = self.attribute(w).await else { return self.forward_write(w).await };
        let started = std::time::Instant::now();
        let reply = self.send_attributed(&to, w).await;
        if let Some(source) = &to.source {
            self.remember_write(source, w, &reply, started.elapsed());
        }
        reply
    }

    /// A write whose target is known: withheld, superseded, replayed, or paced and sent.
    async fn send_attributed(&self, to: &super::attribution::Target<'_>, w: &Write) -> Reply {
        if let Some(withheld) = self.withhold(to, w).await {
            return withheld;
        }
        if let Some(superseded) = self.turn(to, w).await {
            return superseded;
        }
        let rerun = match self.rerun(to, w).await {
            Ok(k) => k,
            Err(replayed) => return replayed,
        };
        let reply = self.paced(to, w).await;
        if succeeded(&reply.answer) {
            self.remember(to, w, &reply.answer).await;
            self.record_rerun(to, w, rerun, &reply.answer).await;
            self.saw_post(&to.who, w, &reply.answer);
        }
        reply
    }

    /// A post, into its thread's record (when threads are recorded): Slack's answer carries the
    /// message as history will show it.
    fn saw_post(&self, who: &super::slack_api::Identity, w: &Write, answer: &Cached) {
        if w.call.method != "chat.postMessage" || !self.shared.seen.records_threads() {
            return;
        }
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&answer.body) else { return };
        let (Some(channel), Some(message)) = (v["channel"].as_str().map(String::from), v.get_mut("message")) else {
            return;
        };
        let message = message.take();
        self.shared.seen.note(crate::seen::Sight::Posted { team: who.team.clone(), channel, message });
    }

    /// The write, for its delivery's history (with the posted message's `ts`).
    fn remember_write(&self, source: &super::store::Attributed, w: &Write, reply: &Reply, took: std::time::Duration) {
        self.shared.history.step(&source.app, &source.delivery, || {
            let answer = serde_json::from_slice::<serde_json::Value>(&reply.answer.body).ok();
            let ts = answer.as_ref().and_then(|v| v["ts"].as_str()).unwrap_or_default().to_string();
            crate::history::What::Wrote(crate::history::Write {
                method: w.call.method.clone(),
                channel: w.call.fields.channel.clone().unwrap_or_default(),
                outcome: reply.outcome.as_label(),
                key: if w.call.idempotency_key.is_some() { "idempotency_key" } else { "digest" },
                ts,
                took_ms: took.as_millis() as u64,
            })
        });
    }

    /// A write without the token or the fields to dedupe or attribute it: sent as it is; an
    /// answer lost on the way is settled by the uncertain-write rules like any other.
    pub(super) async fn forward_write(&self, w: &Write) -> Reply {
        let sent_ms = now_ms();
        match forwarded(self.slack.forward(&w.call, self.cfg().timeout).await) {
            Ok(reply) => reply,
            Err(_) => self.uncertain(w, None, sent_ms).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(path_and_query: &str, body: &str) -> Call {
        let (fields, body_token) = call::fields(None, body.as_bytes());
        Call {
            method: "chat.postMessage".into(),
            verb: call::Verb::Post,
            path_and_query: path_and_query.into(),
            headers: http::HeaderMap::new(),
            idempotency_key: None,
            body: body.to_string().into(),
            token: call::token(None, body_token),
            fields,
        }
    }

    #[test]
    fn query_arguments_are_the_writes_too_and_the_body_wins() {
        let mut c = call("/api/chat.postMessage?channel=CQ&text=from+query&token=xoxb-q", "");
        with_query_args(&mut c);
        assert_eq!((c.fields.channel.as_deref(), c.fields.text.as_deref()), (Some("CQ"), Some("from query")));
        assert_eq!(c.token.unwrap().expose(), b"xoxb-q");
        let mut c = call("/api/chat.postMessage?channel=CQ&thread_ts=1.5", "channel=CB&text=t&token=xoxb-b");
        with_query_args(&mut c);
        assert_eq!((c.fields.channel.as_deref(), c.fields.thread_ts.as_deref()), (Some("CB"), Some("1.5")));
        assert_eq!(c.token.unwrap().expose(), b"xoxb-b");
    }

    #[test]
    fn every_argument_counts_in_the_digest_wherever_it_was_sent() {
        let d = |pq: &str, body: &str| request_digest(&call(pq, body));
        let (a, b) = (d("/api/m?text=one", ""), d("/api/m?text=two", ""));
        assert_ne!(a, b, "the query counts");
        assert_ne!(d("/api/m?a", "b"), d("/api/m?ab", ""), "nothing moves between query and body unseen");
        assert_eq!(d("/api/m", "x=1"), d("/api/m?", "x=1"), "an empty query is no query");
        assert_ne!(d("/api/m", "x=1"), d("/api/m", "x=2"));
    }
}
