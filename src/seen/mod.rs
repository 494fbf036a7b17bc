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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, Notify};

pub mod message;
pub mod record;
pub mod writer;

pub use message::OwnPost;
pub use record::{Record, RepliesQuery};

/// Sights waiting for the writer; past this they are dropped (and counted).
const QUEUE: usize = 8_192;

/// One thing the gateway saw of a conversation.
#[derive(Debug)]
pub enum Sight {
    /// A `message` event as the ingress received it (the body is parsed by the writer, off the
    /// ack path). `own`: by one of the app's bot users, or a bot.
    Event { team: String, channel: String, own: bool, body: Bytes },
    /// A message the egress posted, as Slack's answer showed it.
    Posted { team: String, channel: String, message: Value },
}

/// The queue into the writer, shared by one process's services.
pub struct Seen {
    /// Own posts are kept (an egress runs).
    evidence: AtomicBool,
    /// Threads are recorded (`replies_fallback = "record"`).
    threads: AtomicBool,
    tx: mpsc::Sender<Sight>,
    rx: Mutex<Option<mpsc::Receiver<Sight>>>,
    /// Sights queued and written (or dropped by a failed batch), for [`Seen::settled`].
    queued: AtomicU64,
    written: AtomicU64,
    flushed: Notify,
    dropped: prometheus::IntCounter,
}

impl Seen {
    /// Off until the writer starts with the config; `dropped` counts what a full queue refused.
    pub fn new(dropped: prometheus::IntCounter) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        Seen {
            evidence: AtomicBool::new(false),
            threads: AtomicBool::new(false),
            tx,
            rx: Mutex::new(Some(rx)),
            queued: AtomicU64::new(0),
            written: AtomicU64::new(0),
            flushed: Notify::new(),
            dropped,
        }
    }

    pub fn set(&self, evidence: bool, threads: bool) {
        self.evidence.store(evidence, Ordering::Relaxed);
        self.threads.store(threads, Ordering::Relaxed);
    }

    pub fn records_threads(&self) -> bool {
        self.threads.load(Ordering::Relaxed)
    }

    /// Whether a message event (an own one or not) is worth queueing.
    pub fn wants(&self, own: bool) -> bool {
        (own && self.evidence.load(Ordering::Relaxed)) || self.records_threads()
    }

    /// Queue `sight` for the writer; never waits.
    pub fn note(&self, sight: Sight) {
        match self.tx.try_send(sight) {
            Ok(()) => {
                self.queued.fetch_add(1, Ordering::AcqRel);
            }
            Err(_) => self.dropped.inc(),
        }
    }

    /// The writer's end of the queue (once).
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<Sight>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The writer is done with `n` more sights.
    pub fn wrote(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::AcqRel);
        self.flushed.notify_waiters();
    }

    /// Wait (at most `within`) until what this process queued before now is written: the
    /// egress asks before it reads a thread a delivery of a moment ago started.
    pub async fn settled(&self, within: Duration) {
        let target = self.queued.load(Ordering::Acquire);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let flushed = self.flushed.notified();
            tokio::pin!(flushed);
            flushed.as_mut().enable();
            if self.written.load(Ordering::Acquire) >= target {
                return;
            }
            if tokio::time::timeout_at(deadline, flushed).await.is_err() {
                return;
            }
        }
    }
}

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

    #[tokio::test]
    async fn settled_waits_for_what_was_queued_before() {
        let seen = Seen::new(prometheus::IntCounter::new("d", "d").unwrap());
        seen.note(Sight::Posted { team: "T".into(), channel: "C".into(), message: Value::Null });
        let waited = tokio::time::timeout(Duration::from_millis(50), seen.settled(Duration::from_secs(5))).await;
        assert!(waited.is_err(), "nothing was written yet");
        seen.wrote(1);
        seen.settled(Duration::from_secs(5)).await;
    }
}
