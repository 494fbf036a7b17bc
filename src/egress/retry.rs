//! A client's own retry, without a key: an identical write (same token, method, query and body)
//! whose earlier call's answer never reached its client is that call's retry. The earlier
//! call's fingerprint is a lease it renews while it runs ([`Lease`]); a call that died leaves
//! it unsettled, and its retry settles it by the uncertain-write rules instead of waiting for
//! a result that will never come or posting a second time.

use std::sync::Arc;
use std::time::Duration;

use pingora::protocols::http::ServerSession;
use tokio::time::Instant;
use tracing::warn;

use super::lease::{nonce, Lease};
use super::store::{EgressStore, Fingerprint, FpUpdate, LEASE, LEASE_RENEW_EVERY};
use super::uncertain::Unsettled;
use super::write::{succeeded, Write};
use super::{audit, Egress, Outcome, Reply};

/// How long an identical call in flight is watched for its client's going before this call is
/// taken for a new write of its own (a client that timed out retries at once: its first call
/// may not be marked lost yet).
const BUSY_GRACE: Duration = Duration::from_millis(250);

/// A retry fingerprint this call owns.
pub(super) struct Tracked {
    store: EgressStore,
    record: String,
    nonce: String,
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

/// What an identical call in flight turned out to be.
#[derive(Debug, PartialEq, Eq)]
enum Twin {
    /// Still deciding: poll again.
    Unsure,
    /// Alive (its lease is renewed) and its client waits: this call is a write of its own.
    Alive,
}

/// Watching an identical call in flight: a live one renews its lease (its beats move) within
/// one renewal; a dead one's lease lapses and `fp_begin` says unsettled. Bounded either way.
struct BusyWatch {
    first_beats: Option<u64>,
    grace_until: Instant,
    give_up: Instant,
}

impl BusyWatch {
    fn new() -> Self {
        let now = Instant::now();
        BusyWatch { first_beats: None, grace_until: now + BUSY_GRACE, give_up: now + LEASE + LEASE_RENEW_EVERY }
    }

    fn saw(&mut self, beats: u64) -> Twin {
        let first = *self.first_beats.get_or_insert(beats);
        let now = Instant::now();
        if (beats != first && now >= self.grace_until) || now >= self.give_up {
            return Twin::Alive;
        }
        Twin::Unsure
    }
}

impl Egress {
    /// No key: an identical earlier call whose answer was lost makes this one its retry.
    pub(super) async fn unkeyed(self: &Arc<Self>, w: Arc<Write>, session: &mut ServerSession) -> bool {
        let (Some(store), Some(th)) = (self.store(), w.token_hash.as_deref()) else {
            let reply = self.send(&w).await;
            return self.finish_reply(&w.call, "none", reply, session).await;
        };
        let fp = Tracked { store: store.clone(), record: store.fp_key(th, &w.call.method, &w.digest), nonce: nonce() };
        let c = self.cfg();
        // The longest the earlier call can run: held (max_wait), sent, looked for (at most
        // twice the evidence window) and sent once more.
        let deadline = Instant::now() + c.timeout * 2 + c.evidence_window * 2 + c.max_wait;
        let mut busy = BusyWatch::new();
        loop {
            let begun = self.step(&w, fp.store.fp_begin(&fp.record, c.retry_window, &fp.nonce)).await;
            let reply = match begun {
                Ok(Fingerprint::Busy { beats }) => match busy.saw(beats) {
                    Twin::Alive => self.send(&w).await,
                    Twin::Unsure if still_there(session, Duration::from_millis(25)).await => continue,
                    Twin::Unsure => return false,
                },
                Err(_) => self.send(&w).await,
                Ok(Fingerprint::New) => {
                    let lease = Lease::keep(&fp.store, fp.record.clone(), fp.nonce.clone());
                    return self.send_tracked(w, fp, lease, session).await;
                }
                Ok(Fingerprint::Replay(c)) => {
                    let delivered =
                        self.finish_reply(&w.call, "retry", Reply::new(c, Outcome::ReplayedRetry), session).await;
                    if delivered {
                        let _ = self.step(&w, fp.set(FpUpdate::Delivered)).await;
                    }
                    return delivered;
                }
                Ok(Fingerprint::Unsettled { sent_ms }) => return self.retry_unsettled(w, fp, sent_ms, session).await,
                Ok(Fingerprint::Wait) if Instant::now() < deadline => {
                    // A waiter whose own client left posts nothing: the earlier call's result
                    // is kept for whichever retry comes next.
                    if !still_there(session, Duration::from_millis(50)).await {
                        return false;
                    }
                    continue;
                }
                Ok(Fingerprint::Wait) => self.unknown(&w, "slackgate_retry_pending").await,
            };
            return self.finish_reply(&w.call, "retry", reply, session).await;
        }
    }

    /// The earlier identical call never settled and the fingerprint is ours now: found, sent
    /// again, or unknown again, by the uncertain-write rules.
    async fn retry_unsettled(
        self: &Arc<Self>,
        w: Arc<Write>,
        fp: Tracked,
        sent_ms: u64,
        session: &mut ServerSession,
    ) -> bool {
        let lease = Lease::keep(&fp.store, fp.record.clone(), fp.nonce.clone());
        let reply = match self.unsettled(&w, sent_ms).await {
            Unsettled::SendAgain => return self.send_tracked(w, fp, lease, session).await,
            Unsettled::Answer(reply) => reply,
        };
        self.settle(&w, &fp, &reply).await;
        drop(lease);
        let delivered = self.finish_reply(&w.call, "retry", reply, session).await;
        if !delivered {
            let _ = self.step(&w, fp.set(FpUpdate::Lost)).await;
        }
        delivered
    }

    /// Send a write whose fingerprint is ours, watching the client: one that goes before the
    /// answer (or whose answer cannot be written) leaves the answer for its retry.
    async fn send_tracked(
        self: &Arc<Self>,
        w: Arc<Write>,
        fp: Tracked,
        _lease: Lease,
        session: &mut ServerSession,
    ) -> bool {
        let (me, w2) = (self.clone(), w.clone());
        let mut task = tokio::spawn(async move { me.send(&w2).await });
        let reply = tokio::select! {
            r = &mut task => r.ok(),
            _ = client_gone(session) => {
                let _ = self.step(&w, fp.set(FpUpdate::Lost)).await;
                let reply = task.await.ok();
                if let Some(r) = &reply {
                    self.settle(&w, &fp, r).await;
                    self.count("write", r.outcome);
                    audit(&w.call, "none", r.outcome);
                }
                return false;
            }
        };
        let reply = reply.unwrap_or_else(|| Reply::error(500, "slackgate_internal", Outcome::Failed));
        self.settle(&w, &fp, &reply).await;
        let delivered = self.finish_reply(&w.call, "none", reply, session).await;
        if !delivered {
            let _ = self.step(&w, fp.set(FpUpdate::Lost)).await;
        }
        delivered
    }

    /// Record how the call ended: its answer kept for a retry when it succeeded, the intent
    /// kept as unknown when Slack may have taken it, else forgotten (a retry sends again).
    async fn settle(&self, w: &Write, fp: &Tracked, reply: &Reply) {
        let update = match reply.outcome {
            Outcome::Unknown => FpUpdate::Unknown,
            _ if succeeded(&reply.answer) => FpUpdate::Done(&reply.answer),
            _ => FpUpdate::Drop,
        };
        if let Err(e) = self.step(w, fp.set(update)).await {
            warn!(error = %e, "cannot record the write's outcome for its retries");
        }
    }
}

impl Tracked {
    async fn set(&self, update: FpUpdate<'_>) -> Result<(), crate::outbox::StoreError> {
        self.store.fp_set(&self.record, &self.nonce, update).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    #[tokio::test(start_paused = true)]
    async fn a_twin_is_alive_once_its_lease_is_seen_renewed_and_never_waited_for_long() {
        let mut live = BusyWatch::new();
        assert_eq!(live.saw(3), Twin::Unsure);
        advance(Duration::from_millis(100)).await;
        assert_eq!(live.saw(4), Twin::Unsure, "within the grace its client may still be going");
        advance(BUSY_GRACE).await;
        assert_eq!(live.saw(4), Twin::Alive, "renewed, past the grace");
        // A dead call's beats never move; its lease lapses first (fp_begin says unsettled), and
        // in any case the watch ends one renewal after a lease.
        let mut dead = BusyWatch::new();
        assert_eq!(dead.saw(7), Twin::Unsure);
        advance(LEASE).await;
        assert_eq!(dead.saw(7), Twin::Unsure);
        advance(LEASE_RENEW_EVERY).await;
        assert_eq!(dead.saw(7), Twin::Alive);
    }
}
