//! What the gateway saw of Slack's conversations, kept for the egress: the evidence that settles
//! an uncertain post without a history call, and the record of threads that answers a
//! `conversations.replies` Slack refused.
//!
//! - **Own posts.** An app's own messages reach the ingress as events when the app is
//!   subscribed to the channel's `message` events (Slack sends the bot's post back within a
//!   second or two). The gateway ignores them for delivery (`ignore.own_messages`) but keeps
//!   each as evidence: its team, channel, thread, `ts`, bot user and bot id, and a digest of
//!   its text — never the text. It also notes that it *sees* that app's messages in that
//!   channel (for `egress.evidence_recent`): only there does "no evidence" mean "not posted".
//! - **Threads** (`egress.replies_fallback = "record"` only). Every message event, before the
//!   app's `ignore` filters, and the bot's own posts from the egress's answers: a top-level
//!   message starts its thread's record, a reply joins a record that has its root, an edit
//!   replaces, a deletion removes (a deleted root with replies becomes Slack's tombstone). A
//!   record lives `egress.replies_keep` after its root, so no text outlives that.
//!
//! Nothing here is on the ack path: the ingress hands a [`Sight`] to [`Seen::note`] after the
//! answer is written, which only queues it (bounded; a full queue drops it and counts it), and
//! one writer per process ([`writer`]) writes what queued as one pipeline per batch.
//!
//! In Redis every key of one channel shares the hash tag `{<prefix>:seen:<team>:<channel>}`:
//! `…:own` (a sorted set of own posts by `ts`), `…:sees:<user or bot id>` (a marker that
//! expires), `…:t:<thread ts>` (a hash of a thread's messages by `ts`).

pub mod message;
pub mod record;
pub mod writer;

pub use crate::queue::seen::{Seen, Sight};
pub use message::OwnPost;
pub use record::{Record, RepliesQuery};

/// A Slack id as it goes into a key: as it is when it is short and plain, else its digest (so
/// no id can break out of the hash tag).
fn key_part(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if plain {
        id.to_string()
    } else {
        format!("#{}", &digest(id.as_bytes())[..32])
    }
}

use crate::slack::digest;

/// The keys of one channel.
#[derive(Debug, Clone)]
pub struct Keys {
    tag: String,
}

impl Keys {
    pub fn new(prefix: &str, team: &str, channel: &str) -> Self {
        Keys { tag: format!("{{{prefix}:seen:{}:{}}}", key_part(team), key_part(channel)) }
    }

    pub fn own(&self) -> String {
        format!("{}:own", self.tag)
    }

    pub fn sees(&self, id: &str) -> String {
        format!("{}:sees:{}", self.tag, key_part(id))
    }

    pub fn thread(&self, ts: &str) -> String {
        format!("{}:t:{}", self.tag, key_part(ts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_inside_the_hash_tag() {
        let k = Keys::new("sg", "T1", "C1");
        assert_eq!(k.own(), "{sg:seen:T1:C1}:own");
        assert_eq!(k.thread("1700000000.000100"), "{sg:seen:T1:C1}:t:1700000000.000100");
        let odd = Keys::new("sg", "T}1", "C{x");
        assert!(!odd.own()[1..].contains('{') && odd.own().matches('}').count() == 1, "{}", odd.own());
    }
}
