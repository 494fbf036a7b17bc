//! `Idempotency-Key`: the caller's own retries. The key is claimed for a day, scoped by the
//! token's hash and the method, and bound to the request's digest (query and body). The claim
//! in flight is a lease its call renews ([`Lease`]): a call that died leaves its record
//! unsettled, and the next call with the key settles it by the uncertain-write rules — a 409
//! lasts only as long as the first call could still be running.

use tracing::warn;

use super::ctx::Ctx;
use super::lease::{nonce, Lease};
use super::model::error::Error;
use super::model::{IdemEnd, Outcome, Reply, Write};
use super::plan::{self, KeyStep};
use super::store::EgressStore;
use crate::slack::digest;

/// The key, this call's now: its record, the owner nonce, and the lease kept while it runs.
pub(super) struct Claim<'a> {
    store: &'a EgressStore,
    record: String,
    owner: String,
    _lease: Lease,
    /// The key's earlier call never settled (sent then): this call settles it.
    pub unsettled: Option<u64>,
}

/// Claim the write's key; `Err` with the answer when the claim decides it: the key's earlier
/// answer replayed, or refused while in flight, for another request, or without a store.
pub(super) async fn claim<'a>(ctx: &'a Ctx, w: &Write, key: &str) -> Result<Claim<'a>, Reply> {
    let (Some(store), Some(th)) = (ctx.store(), w.token_hash.as_deref()) else {
        return Err(Error::StoreUnavailable.into());
    };
    let record = store.idem_key(th, &w.call.method, &digest(key.as_bytes()));
    let owner = nonce();
    let claim = ctx.step(w, store.idem_claim(&record, &w.digest, &owner)).await.ok();
    let unsettled = match plan::on_key(claim) {
        KeyStep::Refuse(e) => return Err(e.into()),
        KeyStep::Replay(c) => {
            let mut r = Reply::new(c, Outcome::ReplayedKey);
            r.headers.push(("Idempotent-Replayed", "true"));
            return Err(r);
        }
        KeyStep::Send => None,
        KeyStep::Reconcile { sent_ms } => Some(sent_ms),
    };
    let _lease = Lease::keep(store, record.clone(), owner.clone());
    Ok(Claim { store, record, owner, _lease, unsettled })
}

/// Record how the keyed call ended (`plan::settles`); its lease ends with it.
pub(super) async fn finish(ctx: &Ctx, w: &Write, claim: Claim<'_>, reply: &Reply) {
    let end = IdemEnd::settled(plan::settles(reply.outcome, reply.answer.succeeded()), &reply.answer);
    if let Err(e) = ctx.step(w, claim.store.idem_finish(&claim.record, &claim.owner, end)).await {
        warn!(error = %e, "cannot record the idempotent answer; the next call with the key settles it");
    }
}
