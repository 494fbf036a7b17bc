//! Each delivery's life, kept for the operator's pages (`/ui/`) and `slackgate deliveries` /
//! `show`: what Slack sent and when, the retries it sent again that the receipts absorbed, the
//! record and the ack, each attempt at the bot, and the replies the bot wrote for it through
//! the egress.
//!
//! Nothing here is on the ack path. The services hand a [`Note`] to [`History::note`], which
//! only queues it (a bounded channel; a full queue drops the note and counts it, so a flood
//! never waits on the history); one writer task per process ([`writer`]) folds what arrived
//! meanwhile into a few pipelined commands per batch. The queue and the notes are a handle of
//! their own (`queue::history`, re-exported here), so that what holds it holds no service. What the pages read is bounded:
//! `[ui] history` (time) and `history_max` (per app), enforced by the writer's trim.
//!
//! In Redis, every key of one app's history shares the hash tag `{<prefix>:h:<app>}` (one
//! slot in a cluster, so the trim script sees all of them), and every one expires with
//! `[ui] history` from its last write (the trim removes what is older or past `history_max`
//! first):
//! - `…:t:<delivery>`: a string (its timeline), one JSON line per thing that happened to it,
//!   appended ([`fields`] folds them back into the summary and the timeline);
//! - `…:b:<delivery>`: the body as Slack sent it (when kept), read by a delivery's page alone;
//! - `…:s:<delivery>`: a hash of the arrival's fields the list's filters decide on, so that
//!   a filtered page reads these and the matches' timelines, never every timeline or a body;
//! - `…:idx`: a sorted set of the deliveries by arrival (ms);
//! - `…:m:<minute>`: what the ingress answered Slack in that minute, for the overview (kept
//!   two hours).
//!
//! And `{<prefix>:h}:apps`, the apps that have a history: an app removed from the config is
//! still trimmed, and `history = "off"` deletes every app's ([`writer`]).

pub mod describe;
pub mod fields;
pub mod query;
pub mod retention;
pub mod shadow;
pub mod turns;
pub mod writer;

pub use crate::queue::history::{
    kept, Arrival, Attempt, Budget, History, Note, StreamEnd, What, Write, KEPT, SHADOW_KEPT,
};

/// The hash tag every key of `app`'s history shares.
pub fn tag(prefix: &str, app: &str) -> String {
    format!("{{{prefix}:h:{app}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hash_tag_per_app() {
        assert_eq!(tag("sg", "bot"), "{sg:h:bot}");
    }
}
