//! A worker's hold on a leased entry, and how it finishes it: fenced, so its word counts only
//! while the lease is its own (delivered entries of an app without turns go through the shard's
//! finisher, together).

use super::Shard;
use crate::attempt;
use crate::outbox::{Delivered, Finish, Finished, Kept, Lease, StoreError, Stored};

/// A worker's lease on an entry: its word counts while the lease is its own.
pub(super) struct Held<'a> {
    pub s: &'a Shard,
    pub lease: &'a Lease,
    pub stored: &'a Stored,
}

impl attempt::Fence for Held<'_> {
    async fn finish(&self, how: Finish<'static>) -> Result<bool, StoreError> {
        self.finish_as(how).await
    }
}

impl Held<'_> {
    /// Delivered with no turn to end: finished with the others of the moment, in one call (the
    /// shard's finisher). Else alone, ending the delivery's turn when it has one.
    pub(super) async fn finish_as(&self, how: Finish<'_>) -> Result<bool, StoreError> {
        let Held { s, lease, stored } = *self;
        let conversation = match &stored.conversation {
            Kept::Some(c) => Some(c.key()),
            _ => None,
        };
        let turn = s.turns.as_ref().zip(conversation.as_deref());
        if let (Finish::Done, None) = (&how, turn) {
            return s.finisher.done(Delivered::new(lease, stored)).await;
        }
        match s.store.finish_in_turn(&s.keys, &s.consumer, lease, how, turn).await? {
            Finished::Recorded(ended) => {
                if let Some(ended) = &ended {
                    s.turn_ended(ended);
                }
                Ok(true)
            }
            Finished::Fenced => Ok(false),
        }
    }
}
