//! A worker's hold on a leased entry, and how it finishes it: fenced, so its word counts only
//! while the lease is its own (delivered entries of an app without turns go through the shard's
//! finisher, together).

use std::time::Duration;

use super::Shard;
use crate::attempt;
use crate::outbox::{Delivered, Finish, Finished, Kept, Lease, RunTrack, StoreError, Stored, TurnRules};
use crate::queue::runs::LostRun;
use crate::slack::Kind;

/// A worker's lease on an entry: its word counts while the lease is its own.
pub(super) struct Held<'a> {
    pub s: &'a Shard,
    pub lease: &'a Lease,
    pub stored: &'a Stored,
    /// The Socket Mode bot socket that carried the attempt (its id here), when one did.
    pub socket: Option<u64>,
}

impl attempt::Fence for Held<'_> {
    async fn finish(&self, how: Finish<'static>) -> Result<bool, StoreError> {
        self.finish_as(how).await
    }
}

impl Held<'_> {
    /// Delivered with no turn to end and no run to track: finished with the others of the
    /// moment, in one call (the shard's finisher). Else alone, ending the delivery's turn when
    /// it has one, or tracking its run past the 2xx.
    pub(super) async fn finish_as(&self, how: Finish<'_>) -> Result<bool, StoreError> {
        let Held { s, lease, stored, .. } = *self;
        let conversation = match &stored.conversation {
            Kept::Some(c) => Some(c.key()),
            _ => None,
        };
        let run = self.run(&how, conversation.as_deref());
        let turn = match (&s.turns, &run) {
            (Some(rules), _) => conversation.map(|c| (rules, c)),
            (None, Some((rules, key, _))) => Some((*rules, key.clone())),
            (None, None) => None,
        };
        if let (Finish::Done, None) = (&how, &turn) {
            return s.finisher.done(Delivered::new(lease, stored)).await;
        }
        let socket = self.socket.map(|id| format!("{}/{id}", s.shared.holder));
        if socket.is_some() && run.is_some() {
            super::runs::beaten(&s.shared, &s.store, &s.prefix).await;
        }
        let track = run
            .as_ref()
            .map(|(_, _, addressed)| RunTrack { socket: socket.as_deref().unwrap_or_default(), addressed: *addressed });
        let turn = turn.as_ref().map(|(rules, key)| (*rules, key.as_str()));
        match s.store.finish_in_turn(&s.keys, &s.consumer, lease, how, turn, track).await? {
            Finished::Recorded(ended) => {
                if let Some(ended) = &ended {
                    s.turn_ended(ended);
                }
                Ok(true)
            }
            Finished::RunOpen => {
                self.carried(socket, run.as_ref().map_or(Duration::ZERO, |(rules, _, _)| rules.timeout));
                Ok(true)
            }
            Finished::Fenced => Ok(false),
        }
    }

    /// The run a delivered human post opens, when the app tracks runs: its rules, its turn's
    /// key (its conversation's; with order `watch`, its own), and whether it is addressed to
    /// the bot.
    fn run(&self, how: &Finish<'_>, conversation: Option<&str>) -> Option<(&TurnRules, String, bool)> {
        let Held { s, lease, stored, .. } = *self;
        let (Finish::Done, Some(rules), Some(conversation)) = (how, s.runs.as_ref(), conversation) else {
            return None;
        };
        if stored.kind != Kind::Event {
            return None;
        }
        let key = match s.turns {
            Some(_) => conversation.to_string(),
            None => format!("{conversation}#{}", lease.delivery),
        };
        let addressed = s.app.runs.lost == crate::config::RerunLost::Addressed && addressed(stored);
        Some((rules, key, addressed))
    }

    /// A run open on a bot socket: remembered with the socket, or lost at once when the socket
    /// closed between the ack and now.
    fn carried(&self, socket: Option<String>, within: Duration) {
        let (Some(id), Some(socket)) = (self.socket, socket) else { return };
        let s = self.s;
        if !s.shared.bots.carrying(&s.app.name, id, &self.lease.delivery, within) {
            let lost = LostRun { app: s.app.name.clone(), delivery: self.lease.delivery.clone(), socket };
            s.shared.lost_runs.push(lost);
        }
    }
}

/// Whether a stored event's message is addressed to the bot (its body read once, at its 2xx).
fn addressed(stored: &Stored) -> bool {
    match crate::slack::classify(stored.content_type.as_bytes(), &stored.body) {
        Ok(crate::slack::Request::Delivery(d)) => crate::slack::addressed(&d),
        _ => false,
    }
}
