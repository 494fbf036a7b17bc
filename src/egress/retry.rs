//! A client's own retry, without a key: an identical write (same token, method, query and body)
//! whose earlier call's answer never reached its client is that call's retry. The earlier
//! call's fingerprint is a lease it renews while it runs ([`Lease`]); a call that died leaves
//! it unsettled, and its retry settles it by the uncertain-write rules instead of waiting for
//! a result that will never come or posting a second time.

use std::time::Duration;

use pingora::protocols::http::ServerSession;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

use super::ctx::Ctx;
use super::lease::{nonce, Lease};
use super::model::error::Error;
use super::model::{Cached, Fingerprint, FpUpdate, Outcome, Reply, Write};
use super::plan::{self, BusyWatch, FpSeen, FpStep, KeyKind};
use super::store::EgressStore;
use crate::outbox::StoreError;

/// A retry fingerprint this call owns.
pub(super) struct Tracked {
    store: EgressStore,
    record: String,
    nonce: String,
}

impl Tracked {
    /// The write's fingerprint; `None` without a store or the token's hash (it is sent as it is).
    pub fn new(ctx: &Ctx, w: &Write) -> Option<Tracked> {
        let (Some(store), Some(th)) = (ctx.store(), w.token_hash.as_deref()) else { return None };
        Some(Tracked { store: store.clone(), record: store.fp_key(th, &w.call.method, &w.digest), nonce: nonce() })
    }

    /// Keep the fingerprint's lease while this call runs.
    pub fn lease(&self) -> Lease {
        Lease::keep(&self.store, self.record.clone(), self.nonce.clone())
    }

    async fn set(&self, update: FpUpdate<'_>) -> Result<(), StoreError> {
        self.store.fp_set(&self.record, &self.nonce, update).await
    }
}

/// The client went while its call waited for an identical one.
pub(super) struct ClientGone;

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

/// What this call does about its fingerprint (never `Poll`: an identical call in flight is
/// waited for here, as long as it can run); `Err` when the client went meanwhile. A waiter
/// whose own client left posts nothing: the earlier call's result is kept for whichever retry
/// comes next.
pub(super) async fn wait_turn(
    ctx: &Ctx,
    w: &Write,
    fp: &Tracked,
    session: &mut ServerSession,
) -> Result<FpStep<Cached>, ClientGone> {
    let c = ctx.cfg();
    // The longest the earlier call can run: held (max_wait), sent, looked for (at most
    // twice the evidence window) and sent once more.
    let deadline = Instant::now() + c.timeout * 2 + c.evidence_window * 2 + c.max_wait;
    let mut busy = BusyWatch::new(Instant::now());
    loop {
        let begun = ctx.step(w, fp.store.fp_begin(&fp.record, c.retry_window, &fp.nonce)).await;
        match plan::on_fingerprint(seen(begun, &mut busy), Instant::now() < deadline) {
            FpStep::Poll(pause) if still_there(session, pause).await => continue,
            FpStep::Poll(_) => return Err(ClientGone),
            step => return Ok(step),
        }
    }
}

/// The earlier call's answer, which never reached its client: marked delivered once it
/// reaches this one.
pub(super) async fn replay(ctx: &Ctx, w: &Write, fp: &Tracked, answer: Cached, session: &mut ServerSession) -> bool {
    let reply = Reply::new(answer, Outcome::ReplayedRetry);
    let delivered = ctx.answer(&w.call, KeyKind::Retry, reply, session).await;
    if delivered {
        let _ = ctx.step(w, fp.set(FpUpdate::Delivered)).await;
    }
    delivered
}

/// The answer to an earlier identical call that never settled, found or unknown again (the
/// uncertain-write rules): recorded, then answered; a client that does not get it leaves it
/// for its retry.
pub(super) async fn answer_settled(
    ctx: &Ctx,
    w: &Write,
    fp: &Tracked,
    lease: Lease,
    reply: Reply,
    session: &mut ServerSession,
) -> bool {
    settle(ctx, w, fp, &reply).await;
    drop(lease);
    let delivered = ctx.answer(&w.call, KeyKind::Retry, reply, session).await;
    if !delivered {
        let _ = ctx.step(w, fp.set(FpUpdate::Lost)).await;
    }
    delivered
}

/// The answer of a write whose fingerprint is ours (`sending`), watching the client: one that
/// goes before the answer (or whose answer cannot be written) leaves the answer for its retry.
pub(super) async fn answer_tracked(
    ctx: &Ctx,
    w: &Write,
    fp: &Tracked,
    _lease: Lease,
    mut sending: JoinHandle<Reply>,
    session: &mut ServerSession,
) -> bool {
    let reply = tokio::select! {
        r = &mut sending => r.ok(),
        _ = client_gone(session) => {
            let _ = ctx.step(w, fp.set(FpUpdate::Lost)).await;
            let reply = sending.await.ok();
            if let Some(r) = &reply {
                settle(ctx, w, fp, r).await;
                ctx.account(&w.call, KeyKind::None, r.outcome);
            }
            return false;
        }
    };
    let reply = reply.unwrap_or_else(|| Error::Internal.into());
    settle(ctx, w, fp, &reply).await;
    let delivered = ctx.answer(&w.call, KeyKind::None, reply, session).await;
    if !delivered {
        let _ = ctx.step(w, fp.set(FpUpdate::Lost)).await;
    }
    delivered
}

/// Record how the call ended (`plan::settles`): its answer kept for a retry when it
/// succeeded, the intent kept as unknown when Slack may have taken it, else forgotten (a
/// retry sends again).
async fn settle(ctx: &Ctx, w: &Write, fp: &Tracked, reply: &Reply) {
    let update = FpUpdate::settled(plan::settles(reply.outcome, reply.answer.succeeded()), &reply.answer);
    if let Err(e) = ctx.step(w, fp.set(update)).await {
        warn!(error = %e, "cannot record the write's outcome for its retries");
    }
}
