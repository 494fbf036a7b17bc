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

use super::error::Error;
use super::lease::{nonce, Lease};
use super::plan::{self, BusyWatch, FpSeen, FpStep, KeyKind};
use super::store::{Cached, EgressStore, Fingerprint, FpUpdate};
use super::uncertain::Unsettled;
use super::write::{settles, Write};
use super::{Egress, Reply};
use crate::outbox::StoreError;

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

/// What `fp_begin` said, for the plan; an identical call in flight is read by the watch.
fn seen(begun: Result<Fingerprint, StoreError>, busy: &mut BusyWatch) -> FpSeen<Cached> {
    match begun {
        Err(_) => FpSeen::StoreFailed,
        Ok(Fingerprint::New) => FpSeen::New,
        Ok(Fingerprint::Busy { beats }) => FpSeen::Busy(busy.saw(beats, Instant::now())),
        Ok(Fingerprint::Wait) => FpSeen::Wait,
        Ok(Fingerprint::Replay(c)) => FpSeen::Replay(c),
        Ok(Fingerprint::Unsettled { sent_ms }) => FpSeen::Unsettled { sent_ms },
    }
}

impl Egress {
    /// No key: an identical earlier call whose answer was lost makes this one its retry.
    pub(super) async fn unkeyed(self: &Arc<Self>, w: Arc<Write>, session: &mut ServerSession) -> bool {
        let (Some(store), Some(th)) = (self.store(), w.token_hash.as_deref()) else {
            let reply = self.send(&w).await;
            return self.finish_reply(&w.call, KeyKind::None, reply, session).await;
        };
        let fp = Tracked { store: store.clone(), record: store.fp_key(th, &w.call.method, &w.digest), nonce: nonce() };
        let c = self.cfg();
        // The longest the earlier call can run: held (max_wait), sent, looked for (at most
        // twice the evidence window) and sent once more.
        let deadline = Instant::now() + c.timeout * 2 + c.evidence_window * 2 + c.max_wait;
        let mut busy = BusyWatch::new(Instant::now());
        loop {
            let begun = self.step(&w, fp.store.fp_begin(&fp.record, c.retry_window, &fp.nonce)).await;
            let reply = match plan::on_fingerprint(seen(begun, &mut busy), Instant::now() < deadline) {
                // A waiter whose own client left posts nothing: the earlier call's result is
                // kept for whichever retry comes next.
                FpStep::Poll(pause) if still_there(session, pause).await => continue,
                FpStep::Poll(_) => return false,
                FpStep::Send => self.send(&w).await,
                FpStep::SendTracked => {
                    let lease = Lease::keep(&fp.store, fp.record.clone(), fp.nonce.clone());
                    return self.send_tracked(w, fp, lease, session).await;
                }
                FpStep::Replay(c) => return self.replay(&w, &fp, c, session).await,
                FpStep::Reconcile { sent_ms } => return self.retry_unsettled(w, fp, sent_ms, session).await,
                FpStep::GiveUp => self.unknown(&w, Error::RetryPending).await,
            };
            return self.finish_reply(&w.call, KeyKind::Retry, reply, session).await;
        }
    }

    /// The earlier call's answer, which never reached its client: marked delivered once it
    /// reaches this one.
    async fn replay(&self, w: &Write, fp: &Tracked, answer: Cached, session: &mut ServerSession) -> bool {
        let reply = Reply::new(answer, super::Outcome::ReplayedRetry);
        let delivered = self.finish_reply(&w.call, KeyKind::Retry, reply, session).await;
        if delivered {
            let _ = self.step(w, fp.set(FpUpdate::Delivered)).await;
        }
        delivered
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
        let delivered = self.finish_reply(&w.call, KeyKind::Retry, reply, session).await;
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
                    self.account(&w.call, KeyKind::None, r.outcome);
                }
                return false;
            }
        };
        let reply = reply.unwrap_or_else(|| Error::Internal.into());
        self.settle(&w, &fp, &reply).await;
        let delivered = self.finish_reply(&w.call, KeyKind::None, reply, session).await;
        if !delivered {
            let _ = self.step(&w, fp.set(FpUpdate::Lost)).await;
        }
        delivered
    }

    /// Record how the call ended (`plan::settles`): its answer kept for a retry when it
    /// succeeded, the intent kept as unknown when Slack may have taken it, else forgotten (a
    /// retry sends again).
    async fn settle(&self, w: &Write, fp: &Tracked, reply: &Reply) {
        let update = FpUpdate::settled(settles(reply), &reply.answer);
        if let Err(e) = self.step(w, fp.set(update)).await {
            warn!(error = %e, "cannot record the write's outcome for its retries");
        }
    }
}

impl Tracked {
    async fn set(&self, update: FpUpdate<'_>) -> Result<(), StoreError> {
        self.store.fp_set(&self.record, &self.nonce, update).await
    }
}
