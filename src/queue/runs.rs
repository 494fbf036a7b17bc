//! The runs lost with a Socket Mode bot's socket, queued for the delivery service's watcher of
//! runs: the socket's session (as it closes) and a worker (whose run opened on a socket that
//! had closed meanwhile) only queue them, off the ack path.

use super::Queue;

/// Runs waiting for the watcher; past this they are dropped (counted): a process holding so
/// many open runs on one socket leaves the rest to the run's `timeout`.
pub const QUEUE: usize = 100_000;

/// A run of `app`'s delivery `delivery`, open when the socket `socket` (`holder/id`) that
/// carried it closed.
#[derive(Debug, Clone)]
pub struct LostRun {
    pub app: String,
    pub delivery: String,
    pub socket: String,
}

/// The queue into the watcher.
pub type LostRuns = Queue<LostRun>;

pub fn lost_runs() -> LostRuns {
    let uncounted = prometheus::IntCounter::new("lost_runs_dropped", "runs lost past the queue").expect("valid name");
    Queue::new(QUEUE, uncounted)
}
