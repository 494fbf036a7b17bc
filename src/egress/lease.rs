//! An in-flight claim (an `Idempotency-Key`, a retry fingerprint) is a short lease its call
//! keeps alive: renewed while the call runs, and simply no longer renewed when the call ends or
//! its process dies. Nothing is released here — a call settles its record itself, and a call
//! that never does leaves an unsettled record that the next identical call resolves by the
//! uncertain-write rules once the lease has lapsed.

use tokio::task::JoinHandle;
use tracing::debug;

use super::model::LEASE_RENEW_EVERY;
use super::store::EgressStore;

/// Renews one record's lease until dropped.
pub(super) struct Lease {
    task: JoinHandle<()>,
}

impl Lease {
    pub fn keep(store: &EgressStore, record: String, nonce: String) -> Lease {
        let store = store.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(LEASE_RENEW_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                match store.renew(&record, &nonce).await {
                    Ok(true) => {}
                    // Settled, or taken over after a lapse: nothing left to keep.
                    Ok(false) => return,
                    Err(e) => debug!(error = %e, "cannot renew a write's lease"),
                }
            }
        });
        Lease { task }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Stops the renewals only; the record is settled (or left to lapse) by its call.
        self.task.abort();
    }
}

/// A fresh owner nonce for a claim.
pub(super) fn nonce() -> String {
    format!("{:016x}", rand::random::<u64>())
}
