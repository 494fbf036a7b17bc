//! The write path. In order:
//!
//! 1. **Keys.** With `Idempotency-Key`, the call claims `(token, method, key)` for a day: the
//!    winner sends, a concurrent duplicate gets 409, a later one gets the winner's answer; a
//!    failure drops the claim. Fails closed (503) without Redis.
//! 2. **Retries.** Without a key, an identical earlier call (same token, method, body) within
//!    `retry_window` whose answer never reached its client makes this call its retry: it waits
//!    for that call's result, or gets it replayed. Anything else is a new write and is posted.
//! 3. **Attribution.** The write's channel and thread name a message the gateway delivered; if
//!    that message was deleted (or edited, with `on_edited = "withhold"`), the write is withheld.
//! 4. **Re-runs** (opt-in). The k-th write of a method during run n of a delivery returns the
//!    k-th such write of an earlier run instead of posting again.
//! 5. **Pacing** of chat.postMessage per channel, and Slack's 429s, up to `max_wait`.
//! 6. **The uncertain post.** No answer after the call may have reached Slack: a
//!    chat.postMessage is looked for in the channel before it is posted again; other methods as
//!    `uncertain` says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::protocols::http::ServerSession;
use tracing::warn;

use super::call::{digest, token_hash, Call};
use super::slack_api::Identity;
use super::store::{Attributed, Cached, EgressStore, Fingerprint, FpUpdate, IdemClaim, Place};
use super::{audit, cached, respond, Egress, Outcome, Reply};
use crate::clock::now_ms;
use crate::secret::Secret;

/// What a write knows once the token is known.
pub(super) struct Write {
    pub call: Call,
    pub token: Secret,
    /// The keyed hash of the token, when Redis could give the key.
    pub token_hash: Option<String>,
}

/// How long an identical call in flight is watched for its client's going before this call is
/// taken for a new write of its own.
const BUSY_GRACE: Duration = Duration::from_millis(250);

/// Whether an answer is Slack's success: a 2xx with `"ok": true`. Anything else is not cached.
fn succeeded(a: &Cached) -> bool {
    (200..300).contains(&a.status)
        && serde_json::from_slice::<serde_json::Value>(&a.body).is_ok_and(|v| v["ok"].as_bool() == Some(true))
}

/// Wait `pause`; `false` if the client went meanwhile.
async fn still_there(session: &mut ServerSession, pause: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(pause) => true,
        _ = client_gone(session) => false,
    }
}

/// Resolves when the client has gone (closed its connection while waiting for the answer).
async fn client_gone(session: &mut ServerSession) {
    if session.read_body_or_idle(true).await.is_ok() {
        // Bytes of a next request, not a close: the client is still there.
        std::future::pending::<()>().await;
    }
}

impl Egress {
    /// A write; `true` when its answer reached the client.
    pub(super) async fn write(self: &Arc<Self>, call: Call, session: &mut ServerSession) -> bool {
        let Some(token) = call.token.clone() else {
            // Slack answers a write without a token itself.
            let reply = self.forward_write(&call).await;
            return self.finish_reply(&call, "none", reply, session).await;
        };
        let store = self.store();
        let token_hash = match store {
            Some(s) => s.hash_key().await.ok().map(|k| token_hash(&k, &token)),
            None => None,
        };
        let w = Arc::new(Write { call, token, token_hash });
        match w.call.idempotency_key.clone() {
            Some(key) => self.keyed(w, &key, session).await,
            None => self.unkeyed(w, session).await,
        }
    }

    async fn finish_reply(
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

    /// `Idempotency-Key`: claimed for a day; replayed, refused while in flight, or sent.
    async fn keyed(self: &Arc<Self>, w: Arc<Write>, key: &str, session: &mut ServerSession) -> bool {
        let (Some(store), Some(th)) = (self.store(), w.token_hash.clone()) else {
            let reply = Reply::error(503, "slackgate_store_unavailable", Outcome::StoreUnavailable);
            return self.finish_reply(&w.call, "key", reply, session).await;
        };
        let kd = digest(key.as_bytes());
        let reply = match store.idem_claim(&th, &w.call.method, &kd).await {
            Err(_) => Reply::error(503, "slackgate_store_unavailable", Outcome::StoreUnavailable),
            Ok(IdemClaim::InFlight) => Reply::error(409, "slackgate_idempotency_key_in_flight", Outcome::Conflict),
            Ok(IdemClaim::Done(c)) => {
                let mut r = Reply::new(c, Outcome::ReplayedKey);
                r.headers.push(("Idempotent-Replayed", "true"));
                r
            }
            Ok(IdemClaim::Claimed) => {
                let reply = self.send(&w).await;
                let keep = succeeded(&reply.answer).then_some(&reply.answer);
                if let Err(e) = store.idem_finish(&th, &w.call.method, &kd, keep).await {
                    warn!(error = %e, "cannot record the idempotent answer; a retry will send again");
                }
                reply
            }
        };
        self.finish_reply(&w.call, "key", reply, session).await
    }

    /// No key: an identical earlier call whose answer was lost makes this one its retry.
    async fn unkeyed(self: &Arc<Self>, w: Arc<Write>, session: &mut ServerSession) -> bool {
        let (Some(store), Some(th)) = (self.store(), w.token_hash.clone()) else {
            let reply = self.send(&w).await;
            return self.finish_reply(&w.call, "none", reply, session).await;
        };
        let fp = Tracked {
            store: store.clone(),
            th,
            body: digest(&w.call.body),
            nonce: format!("{:016x}", rand::random::<u64>()),
        };
        let deadline = Instant::now() + self.cfg().timeout * 2 + self.cfg().evidence_window + self.cfg().max_wait;
        // A client that timed out closes its connection and retries at once: its first call may
        // not be marked lost yet when the retry asks. Busy is believed only after a moment.
        let busy_until = Instant::now() + BUSY_GRACE;
        loop {
            let begun =
                fp.store.fp_begin(&fp.th, &w.call.method, &fp.body, self.cfg().retry_window, &fp.nonce, now_ms()).await;
            let reply = match begun {
                Ok(Fingerprint::Busy) if Instant::now() < busy_until => {
                    if !still_there(session, Duration::from_millis(25)).await {
                        return false;
                    }
                    continue;
                }
                Err(_) | Ok(Fingerprint::Busy) => self.send(&w).await,
                Ok(Fingerprint::New) => return self.send_tracked(w, fp, session).await,
                Ok(Fingerprint::Replay(c)) => {
                    let delivered =
                        self.finish_reply(&w.call, "retry", Reply::new(c, Outcome::ReplayedRetry), session).await;
                    if delivered {
                        let _ = fp.set(&w.call.method, FpUpdate::Delivered).await;
                    }
                    return delivered;
                }
                Ok(Fingerprint::Unknown { sent_ms }) => match self.reconcile_again(&w, sent_ms).await {
                    Some(found) => {
                        let _ = fp.set(&w.call.method, FpUpdate::Done(&found.answer)).await;
                        found
                    }
                    None => return self.send_tracked(w, fp, session).await,
                },
                Ok(Fingerprint::Wait) if Instant::now() < deadline => {
                    // A waiter whose own client left posts nothing: the earlier call's result
                    // is kept for whichever retry comes next.
                    if !still_there(session, Duration::from_millis(50)).await {
                        return false;
                    }
                    continue;
                }
                Ok(Fingerprint::Wait) => Reply::error(503, "slackgate_retry_pending", Outcome::Unknown),
            };
            return self.finish_reply(&w.call, "retry", reply, session).await;
        }
    }

    /// Send a write whose fingerprint is ours, watching the client: one that goes before the
    /// answer (or whose answer cannot be written) leaves the answer for its retry.
    async fn send_tracked(self: &Arc<Self>, w: Arc<Write>, fp: Tracked, session: &mut ServerSession) -> bool {
        let (me, w2) = (self.clone(), w.clone());
        let mut task = tokio::spawn(async move { me.send(&w2).await });
        let method = w.call.method.clone();
        let reply = tokio::select! {
            r = &mut task => r.ok(),
            _ = client_gone(session) => {
                let _ = fp.set(&method, FpUpdate::Lost).await;
                let reply = task.await.ok();
                if let Some(r) = &reply {
                    fp.settle(&method, r).await;
                    self.count("write", r.outcome);
                    audit(&w.call, "none", r.outcome);
                }
                return false;
            }
        };
        let reply = reply.unwrap_or_else(|| Reply::error(500, "slackgate_internal", Outcome::Failed));
        fp.settle(&method, &reply).await;
        let delivered = self.finish_reply(&w.call, "none", reply, session).await;
        if !delivered {
            let _ = fp.set(&method, FpUpdate::Lost).await;
        }
        delivered
    }

    /// Everything between the dedupe and Slack: attribution, re-runs, pacing, the call.
    pub(super) async fn send(&self, w: &Write) -> Reply {
        let store = self.store();
        let (Some(store), Some(th), Some(channel)) = (store, w.token_hash.as_deref(), w.call.fields.channel.as_deref())
        else {
            return self.forward_write(&w.call).await;
        };
        let who = self.slack.identity(th, &w.token).await;
        let Some(who) = who else { return self.forward_write(&w.call).await };
        let place = Place { team: &who.team, channel };
        let source = match w.call.fields.thread() {
            Some(thread) => store.lookup(&place, thread).await.ok().flatten(),
            None => None,
        };
        if let Some(withheld) = self.withhold(store, &w.call, source.as_ref()).await {
            return withheld;
        }
        let rerun = match &source {
            Some(s) if self.cfg().rerun_replay && w.call.method != "chat.update" => {
                match store.rerun_next(&place, &s.delivery, s.run, &w.call.method, self.cfg().attribution_window).await
                {
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
    async fn withhold(&self, store: &EgressStore, call: &Call, source: Option<&Attributed>) -> Option<Reply> {
        let source = source?;
        let (outcome, error) = match source.state.as_str() {
            "deleted" => (Outcome::WithheldDeleted, "source_deleted"),
            "edited" if self.cfg().withhold_edited => (Outcome::WithheldEdited, "source_edited"),
            _ => return None,
        };
        let note = serde_json::json!({
            "at": now_ms(), "method": call.method, "channel": call.fields.channel, "source_ts": source.ts,
            "delivery": source.delivery, "reason": error,
        });
        if let Err(e) = store.note("withheld", &note, now_ms()).await {
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
                let _ = store.posted(place, ts, &source.ts, window).await;
            }
        }
        if let Some(k) = rerun {
            let _ = store.rerun_record(place, &source.delivery, &w.call.method, k, source.run, answer, window).await;
        }
    }

    /// chat.postMessage waits for its channel's pace; then the call, holding Slack's 429s.
    async fn paced(&self, store: &EgressStore, place: &Place<'_>, w: &Write, who: &Identity) -> Reply {
        let started = Instant::now();
        if w.call.method == "chat.postMessage" {
            let c = self.cfg();
            let per = Duration::from_secs_f64(1.0 / c.pace_per_second);
            match store.pace(place, now_ms(), per, c.pace_burst, c.max_wait).await {
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

    /// The call, with Slack's 429s honoured (`Retry-After`) until `max_wait`; an answer lost
    /// after the call may have reached Slack is reconciled, never guessed.
    async fn with_retries(&self, w: &Write, who: &Identity, started: Instant) -> Reply {
        loop {
            let sent_ms = now_ms();
            let t = Instant::now();
            let result = self.slack.forward(&w.call, self.cfg().timeout).await;
            self.shared.metrics.egress.slack_seconds.with_label_values(&["write"]).observe(t.elapsed().as_secs_f64());
            match result {
                Ok(r) if r.status == 429 => {
                    let after = r.retry_after.unwrap_or(Duration::from_secs(1));
                    if started.elapsed() + after > self.cfg().max_wait {
                        return Reply::new(cached(r), Outcome::RateLimited);
                    }
                    tokio::time::sleep(after).await;
                }
                Ok(r) => return Reply::new(cached(r), Outcome::Forwarded),
                Err(e) if e.maybe_sent() => return self.uncertain(w, who, sent_ms).await,
                Err(_) => return Reply::error(502, "slackgate_upstream_error", Outcome::Failed),
            }
        }
    }

    /// A write without the token or the fields to dedupe or attribute it: sent as it is.
    pub(super) async fn forward_write(&self, call: &Call) -> Reply {
        match self.slack.forward(call, self.cfg().timeout).await {
            Ok(r) => Reply::new(cached(r), Outcome::Forwarded),
            Err(e) if e.maybe_sent() => Reply::error(503, "slackgate_uncertain", Outcome::Unknown),
            Err(_) => Reply::error(502, "slackgate_upstream_error", Outcome::Failed),
        }
    }
}

/// A retry fingerprint this call owns.
pub(super) struct Tracked {
    store: EgressStore,
    th: String,
    body: String,
    nonce: String,
}

impl Tracked {
    async fn set(&self, method: &str, update: FpUpdate<'_>) -> Result<(), crate::outbox::StoreError> {
        self.store.fp_set(&self.th, method, &self.body, &self.nonce, update).await
    }

    /// Record how the call ended: its answer kept for a retry when it succeeded, the intent
    /// kept as unknown when Slack may have taken it, else forgotten (a retry sends again).
    async fn settle(&self, method: &str, reply: &Reply) {
        let update = match reply.outcome {
            Outcome::Unknown => FpUpdate::Unknown,
            _ if succeeded(&reply.answer) => FpUpdate::Done(&reply.answer),
            _ => FpUpdate::Drop,
        };
        if let Err(e) = self.set(method, update).await {
            warn!(error = %e, "cannot record the write's outcome for its retries");
        }
    }
}
