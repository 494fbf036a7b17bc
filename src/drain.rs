//! Graceful stop on SIGTERM. Pingora drops every task when it shuts its runtimes down, so the
//! draining happens before it is told to: workers stop taking entries, and the signal is passed
//! on once nothing is in flight (Slack requests, attempts, readers) or the grace period is over.
//! Whatever is cut then is safe anyway: an unacked request is retried by Slack, an unfinished
//! attempt is re-claimed after its lease.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Set on SIGTERM: take no new work.
pub static DRAINING: AtomicBool = AtomicBool::new(false);
/// Slack requests being answered.
pub static REQUESTS: InFlight = InFlight::new();
/// Delivery attempts running.
pub static ATTEMPTS: InFlight = InFlight::new();
/// Outbox reader loops still running (one may be holding entries it just read).
pub static READERS: InFlight = InFlight::new();

pub fn draining() -> bool {
    DRAINING.load(Ordering::Relaxed)
}

pub struct InFlight(AtomicUsize);

impl InFlight {
    const fn new() -> Self {
        InFlight(AtomicUsize::new(0))
    }

    /// Count one in until the guard is dropped.
    pub fn enter(&'static self) -> Guard {
        self.0.fetch_add(1, Ordering::AcqRel);
        Guard(self)
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

pub struct Guard(&'static InFlight);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Start draining and wait until nothing is in flight or `grace` is over; `true` if drained.
pub async fn drain(grace: Duration) -> bool {
    DRAINING.store(true, Ordering::Relaxed);
    let deadline = tokio::time::Instant::now() + grace;
    while REQUESTS.count() + ATTEMPTS.count() + READERS.count() > 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}
