//! The queue of what the gateway saw of conversations: the ingress hands a [`Sight`] to
//! [`Seen::note`] after the answer is written, which only queues it (a full queue drops it
//! and counts it); the writer (`seen::writer`) takes them, and the egress waits on
//! [`Seen::settled`] for what queued before it reads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, Notify};

use super::Queue;

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
    queue: Queue<Sight>,
    /// Sights queued and written (or dropped by a failed batch), for [`Seen::settled`].
    queued: AtomicU64,
    written: AtomicU64,
    flushed: Notify,
}

impl Seen {
    /// Off until the writer starts with the config; `dropped` counts what a full queue refused.
    pub fn new(dropped: prometheus::IntCounter) -> Self {
        Seen {
            evidence: AtomicBool::new(false),
            threads: AtomicBool::new(false),
            queue: Queue::new(QUEUE, dropped),
            queued: AtomicU64::new(0),
            written: AtomicU64::new(0),
            flushed: Notify::new(),
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
        if self.queue.push(sight) {
            self.queued.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The writer's end of the queue (once).
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<Sight>> {
        self.queue.take_receiver()
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

#[cfg(test)]
mod tests {
    use super::*;

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
