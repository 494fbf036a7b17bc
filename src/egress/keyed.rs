//! `Idempotency-Key`: the caller's own retries. The key is claimed for a day, scoped by the
//! token's hash and the method, and bound to the request's digest (query and body). The claim
//! in flight is a lease its call renews ([`Lease`]): a call that died leaves its record
//! unsettled, and the next call with the key settles it by the uncertain-write rules — a 409
//! lasts only as long as the first call could still be running.

use std::sync::Arc;

use pingora::protocols::http::ServerSession;
use tracing::warn;

use super::error::Error;
use super::lease::{nonce, Lease};
use super::plan::{self, KeyKind, KeyStep};
use super::store::IdemEnd;
use super::uncertain::Unsettled;
use super::write::{settles, Write};
use super::{Egress, Outcome, Reply};
use crate::slack::digest;

impl Egress {
    /// `Idempotency-Key`: replayed, refused while in flight or for another request, or sent.
    pub(super) async fn keyed(self: &Arc<Self>, w: Arc<Write>, key: &str, session: &mut ServerSession) -> bool {
        let reply = self.keyed_reply(&w, key).await;
        self.finish_reply(&w.call, KeyKind::Key, reply, session).await
    }

    async fn keyed_reply(&self, w: &Write, key: &str) -> Reply {
        let (Some(store), Some(th)) = (self.store(), w.token_hash.as_deref()) else {
            return Error::StoreUnavailable.into();
        };
        let record = store.idem_key(th, &w.call.method, &digest(key.as_bytes()));
        let owner = nonce();
        let claim = self.step(w, store.idem_claim(&record, &w.digest, &owner)).await.ok();
        let unsettled = match plan::on_key(claim) {
            KeyStep::Refuse(e) => return e.into(),
            KeyStep::Replay(c) => {
                let mut r = Reply::new(c, Outcome::ReplayedKey);
                r.headers.push(("Idempotent-Replayed", "true"));
                return r;
            }
            KeyStep::Send => None,
            KeyStep::Reconcile { sent_ms } => Some(sent_ms),
        };
        let _lease = Lease::keep(store, record.clone(), owner.clone());
        let reply = match unsettled {
            None => self.send(w).await,
            Some(sent_ms) => match self.unsettled(w, sent_ms).await {
                Unsettled::Answer(reply) => reply,
                Unsettled::SendAgain => self.send(w).await,
            },
        };
        let end = IdemEnd::settled(settles(&reply), &reply.answer);
        if let Err(e) = self.step(w, store.idem_finish(&record, &owner, end)).await {
            warn!(error = %e, "cannot record the idempotent answer; the next call with the key settles it");
        }
        reply
    }
}
