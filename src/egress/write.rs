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
//! 3. **Attribution.** The write's channel and thread name a message the gateway delivered; if
//!    that message was deleted (or edited, with `on_edited = "withhold"`), the write is withheld.
//! 4. **Re-runs** (opt-in). The k-th write of a method during run n of a delivery returns the
//!    k-th such write of an earlier run instead of posting again.
//! 5. **Pacing** of chat.postMessage per app and channel, and Slack's 429s, up to `max_wait`.
//! 6. **The uncertain write** (`uncertain`). No answer after the call may have reached Slack: a
//!    chat.postMessage is looked for in the channel before it is posted again; other methods as
//!    `uncertain` says.
//!
//! Every Redis step goes through [`Egress::step`]: once one has found Redis not answering, the
//! call's later steps skip it instead of waiting again (a frozen Redis costs one timeout).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::protocols::http::ServerSession;
use tracing::warn;

use super::call::{self, digest, token_hash, Call};
use super::notes::NoteList;
use super::slack_api::Identity;
use super::store::{Attributed, Cached, EgressStore, Place};
use super::{audit, cached, respond, Egress, Outcome, Reply};
use crate::clock::now_ms;
use crate::outbox::StoreError;

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

/// Slack's `Retry-After` is honoured no sooner than this: a `0` (or none) must not become a
/// burst of re-sends.
const MIN_RETRY_WAIT: Duration = Duration::from_secs(1);

/// Whether an answer is Slack's success: a 2xx with `"ok": true`. Anything else is not cached.
pub(super) fn succeeded(a: &Cached) -> bool {
    (200..300).contains(&a.status)
        && serde_json::from_slice::<serde_json::Value>(&a.body).is_ok_and(|v| v["ok"].as_bool() == Some(true))
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
        let Some(token) = w.call.token.clone() else {
            // Slack answers a write without a token itself.
            let reply = self.forward_write(&w).await;
            return self.finish_reply(&w.call, "none", reply, session).await;
        };
        if let Some(store) = self.store() {
            w.token_hash = self.step(&w, store.hash_key()).await.ok().map(|k| token_hash(&k, &token));
        }
        let w = Arc::new(w);
        match w.call.idempotency_key.clone() {
            Some(key) => self.keyed(w, &key, session).await,
            None => self.unkeyed(w, session).await,
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

    pub(super) async fn finish_reply(
        &self,
        call: &Call,
        key_kind: &'static str,
        reply: Reply,
        session: &mut ServerSession,
    ) -> bool {
        self.count("write", reply.outcome);
        audit(call, key_kind, reply.outcome);
        respond(session, &reply).await
    }

    /// Everything between the dedupe and Slack: attribution, re-runs, pacing, the call.
    pub(super) async fn send(&self, w: &Write) -> Reply {
        let (Some(store), Some(th), Some(token), Some(channel)) =
            (self.store(), w.token_hash.as_deref(), w.call.token.as_ref(), w.call.fields.channel.as_deref())
        else {
            return self.forward_write(w).await;
        };
        let Some(who) = self.slack.identity(th, token).await else { return self.forward_write(w).await };
        let place = Place { team: &who.team, channel };
        let source = match w.call.fields.thread() {
            Some(thread) => self.step(w, store.lookup(&place, thread)).await.ok().flatten(),
            None => None,
        };
        if let Some(withheld) = self.withhold(store, w, source.as_ref()).await {
            return withheld;
        }
        let rerun = match &source {
            Some(s) if self.cfg().rerun_replay && w.call.method != "chat.update" => {
                let window = self.cfg().attribution_window;
                match self.step(w, store.rerun_next(&place, &s.delivery, s.run, &w.call.method, window)).await {
                    Ok((_, Some((run, earlier)))) if run < s.run => return Reply::new(earlier, Outcome::ReplayedRerun),
                    Ok((k, _)) => Some(k),
                    Err(_) => None,
                }
            }
            _ => None,
        };
        let reply = self.paced(store, &place, w, &who).await;
        if succeeded(&reply.answer) {
            self.remember(store, &place, w, source.as_ref(), rerun, &reply.answer).await;
        }
        reply
    }

    /// A write whose source message is gone: withheld, counted, kept for a day.
    async fn withhold(&self, store: &EgressStore, w: &Write, source: Option<&Attributed>) -> Option<Reply> {
        let source = source?;
        let (outcome, error) = match source.state.as_str() {
            "deleted" => (Outcome::WithheldDeleted, "source_deleted"),
            "edited" if self.cfg().withhold_edited => (Outcome::WithheldEdited, "source_edited"),
            _ => return None,
        };
        let call = &w.call;
        let note = serde_json::json!({
            "at": now_ms(), "method": call.method, "channel": call.fields.channel, "source_ts": source.ts,
            "delivery": source.delivery, "reason": error,
        });
        if let Err(e) = self.step(w, store.note(NoteList::Withheld, &note, now_ms())).await {
            warn!(error = %e, "cannot keep the note of a withheld write");
        }
        Some(Reply::error(200, error, outcome))
    }

    /// After a successful post: which source an update of it belongs to, and the re-run record.
    async fn remember(
        &self,
        store: &EgressStore,
        place: &Place<'_>,
        w: &Write,
        source: Option<&Attributed>,
        rerun: Option<u64>,
        answer: &Cached,
    ) {
        let Some(source) = source else { return };
        let window = self.cfg().attribution_window;
        if w.call.method == "chat.postMessage" {
            let posted = serde_json::from_slice::<serde_json::Value>(&answer.body).ok();
            if let Some(ts) = posted.as_ref().and_then(|v| v["ts"].as_str()) {
                let _ = self.step(w, store.posted(place, ts, &source.ts, window)).await;
            }
        }
        if let Some(k) = rerun {
            let record = store.rerun_record(place, &source.delivery, &w.call.method, k, source.run, answer, window);
            let _ = self.step(w, record).await;
        }
    }

    /// chat.postMessage waits for its app's pace in the channel; then the call, holding
    /// Slack's 429s.
    async fn paced(&self, store: &EgressStore, place: &Place<'_>, w: &Write, who: &Identity) -> Reply {
        let started = Instant::now();
        if w.call.method == "chat.postMessage" {
            let c = self.cfg();
            let per = Duration::from_secs_f64(1.0 / c.pace_per_second);
            // Slack's limit is per app: a bot token's app is its bot id, a user token's its user.
            let app_id = if who.bot_id.is_empty() { &who.user_id } else { &who.bot_id };
            match self.step(w, store.pace(place, app_id, now_ms(), per, c.pace_burst, c.max_wait)).await {
                Ok(Some(wait)) => {
                    self.shared.metrics.egress.pacing_seconds.observe(wait.as_secs_f64());
                    tokio::time::sleep(wait).await;
                }
                Ok(None) => {
                    let after = per.as_secs().max(1);
                    return Reply::own(
                        429,
                        serde_json::json!({"ok": false, "error": "ratelimited"}),
                        Outcome::RateLimited,
                        Some(after),
                    );
                }
                Err(e) => warn!(error = %e, "pacing unavailable; posting unpaced"),
            }
        }
        self.with_retries(w, who, started).await
    }

    /// The call, with Slack's 429s honoured (`Retry-After`, bounded to `[1 s, max_wait]` for
    /// the egress's own wait) until `max_wait`; an answer lost after the call may have reached
    /// Slack is reconciled, never guessed. The 429 that goes back to the bot keeps Slack's value.
    async fn with_retries(&self, w: &Write, who: &Identity, started: Instant) -> Reply {
        let max_wait = self.cfg().max_wait;
        loop {
            let sent_ms = now_ms();
            let t = Instant::now();
            let result = self.slack.forward(&w.call, self.cfg().timeout).await;
            self.shared.metrics.egress.slack_seconds.with_label_values(&["write"]).observe(t.elapsed().as_secs_f64());
            match result {
                Ok(r) if r.status == 429 => {
                    let wait =
                        r.retry_after.unwrap_or(MIN_RETRY_WAIT).clamp(MIN_RETRY_WAIT, max_wait.max(MIN_RETRY_WAIT));
                    if started.elapsed().saturating_add(wait) > max_wait {
                        return Reply::new(cached(r), Outcome::RateLimited);
                    }
                    tokio::time::sleep(wait).await;
                }
                Ok(r) => return Reply::new(cached(r), Outcome::Forwarded),
                Err(e) if e.maybe_sent() => return self.uncertain(w, Some(who), sent_ms).await,
                Err(_) => return Reply::error(502, "slackgate_upstream_error", Outcome::Failed),
            }
        }
    }

    /// A write without the token or the fields to dedupe or attribute it: sent as it is; an
    /// answer lost on the way is settled by the uncertain-write rules like any other.
    pub(super) async fn forward_write(&self, w: &Write) -> Reply {
        let sent_ms = now_ms();
        match self.slack.forward(&w.call, self.cfg().timeout).await {
            Ok(r) => Reply::new(cached(r), Outcome::Forwarded),
            Err(e) if e.maybe_sent() => self.uncertain(w, None, sent_ms).await,
            Err(_) => Reply::error(502, "slackgate_upstream_error", Outcome::Failed),
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
