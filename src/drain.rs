//! Graceful stop on SIGTERM. Pingora drops every task when it shuts its runtimes down, so the
//! draining happens before it is told to: workers stop taking entries, and the signal is passed
//! on once nothing is in flight (Slack requests, attempts, readers) or the grace period is over.
//! Whatever is cut then is safe anyway: an unacked request is retried by Slack, an unfinished
//! attempt is re-claimed after its lease.
//!
//! Work is counted by guards ([`Drain::enter`]) that live as long as the work; the last one to
//! go wakes the drain, which waits for that or the deadline (no polling).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// What a guard counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// A Slack-facing request, from its context's creation to its log line.
    Request,
    /// One delivery attempt (inline or by a worker).
    Attempt,
    /// An outbox reader loop (it may hold entries it just read).
    Reader,
}

#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    counts: [AtomicUsize; 3],
    idle: Notify,
}

impl Drain {
    /// Count one piece of work in until the guard is dropped.
    pub fn enter(self: &Arc<Self>, work: Work) -> InFlight {
        self.counts[work as usize].fetch_add(1, Ordering::AcqRel);
        InFlight { drain: self.clone(), work }
    }

    /// How many of `work` are in flight.
    pub fn count(&self, work: Work) -> usize {
        self.counts[work as usize].load(Ordering::Acquire)
    }

    fn total(&self) -> usize {
        self.counts.iter().map(|c| c.load(Ordering::Acquire)).sum()
    }

    /// Set on SIGTERM: take no new work.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Start draining and wait until nothing is in flight or `grace` is over; `true` if drained.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.draining.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            // Registered before the count is read, so a guard dropped in between still wakes it.
            let idle = self.idle.notified();
            if self.total() == 0 {
                return true;
            }
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep_until(deadline) => return self.total() == 0,
            }
        }
    }
}

/// One piece of work in flight.
#[derive(Debug)]
pub struct InFlight {
    drain: Arc<Drain>,
    work: Work,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.drain.counts[self.work as usize].fetch_sub(1, Ordering::AcqRel) == 1 && self.drain.total() == 0 {
            self.drain.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drain_waits_for_the_last_guard_or_the_deadline() {
        let d = Arc::new(Drain::default());
        let request = d.enter(Work::Request);
        let attempt = d.enter(Work::Attempt);
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.drain(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(d.draining());
        drop(request);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished(), "an attempt is still in flight");
        drop(attempt);
        assert!(waiter.await.unwrap(), "drained as soon as the last guard went");

        let d = Arc::new(Drain::default());
        let _stuck = d.enter(Work::Reader);
        assert!(!d.drain(Duration::from_secs(5)).await, "the grace period ends the wait");
        assert_eq!(d.count(Work::Reader), 1);
    }
}
