//! The copies of deliveries for apps' shadow bots, queued for one copier per process (the
//! delivery service's): whoever decides a copy (a worker after the live bot's attempt, the
//! ingress after an inline one) only queues it. A full queue drops the copy — the caller
//! counts it as dropped — so a flood never waits on the shadow, and the copier yields to the
//! ack path while it is pressed.

use bytes::Bytes;

use super::Queue;
use crate::slack::Kind;

/// Copies waiting for the copier; past this they are dropped.
pub const QUEUE: usize = 10_000;

/// One delivery to copy to its app's shadow, as recorded for the live bot.
#[derive(Debug)]
pub struct Copy {
    pub app: String,
    pub id: String,
    pub body: Bytes,
    pub content_type: String,
    pub path: String,
    pub kind: Kind,
    pub detail: String,
    pub received_ms: u64,
    /// Its conversation, encoded ('' when none).
    pub conversation: String,
}

/// The queue into the copier.
pub type Copies = Queue<Copy>;

pub fn copies() -> Copies {
    // Drops are counted by the caller, with the app's label.
    let uncounted = prometheus::IntCounter::new("shadow_queue_dropped", "counted by the caller").expect("valid name");
    Queue::new(QUEUE, uncounted)
}
