//! Queues off the ack path: what the services hand a background writer, as handles that import
//! no service. [`Shared`](crate::shared::Shared) holds them; the history and the record of what
//! the gateway saw own their writers and re-export these types (`history::History`,
//! `seen::Seen`), so every caller names them as before.
//!
//! - [`Queue`]: a bounded queue that never waits: a full one drops what comes and counts it,
//!   so a flood never waits on a writer. One writer takes its receiving end.
//! - [`writer`]: the one loop every such writer runs (take what queued, gather, write, tick,
//!   stop with the process).
//! - [`history`]: the delivery history's queue and the notes it carries.
//! - [`seen`]: the queue of what the gateway saw of conversations.

use std::sync::Mutex;

use tokio::sync::mpsc;

pub mod history;
pub mod runs;
pub mod seen;
pub mod shadow;
pub mod writer;

/// A bounded queue into one writer.
pub struct Queue<T> {
    tx: mpsc::Sender<T>,
    rx: Mutex<Option<mpsc::Receiver<T>>>,
    /// What a full queue refused.
    dropped: prometheus::IntCounter,
}

impl<T> Queue<T> {
    pub fn new(capacity: usize, dropped: prometheus::IntCounter) -> Self {
        let (tx, rx) = mpsc::channel(capacity);
        Queue { tx, rx: Mutex::new(Some(rx)), dropped }
    }

    /// Queue `item`; never waits. `false`: the queue was full, and `item` is dropped (counted).
    pub fn push(&self, item: T) -> bool {
        let queued = self.tx.try_send(item).is_ok();
        if !queued {
            self.dropped.inc();
        }
        queued
    }

    /// The writer's end of the queue (once per process).
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<T>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
