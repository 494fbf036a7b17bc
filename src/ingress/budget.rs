//! The bytes of unverified bodies, bounded across all connections. Until its signature is
//! checked a body is anybody's: without a shared bound, every open connection could hold
//! `max_body` (4,096 × 1 MiB with the defaults). A body takes its bytes from the budget as
//! they arrive (its declared length up front, when it has one) and gives them back once it
//! is verified or refused; a request that finds the budget spent is answered 503 at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::IntGauge;

pub struct Budget {
    max: usize,
    used: AtomicUsize,
    /// `slackgate_unverified_bytes`: what `used` holds, for operators (and tests).
    gauge: IntGauge,
}

impl Budget {
    pub fn new(max: usize, gauge: IntGauge) -> Arc<Budget> {
        Arc::new(Budget { max, used: AtomicUsize::new(0), gauge })
    }

    /// A hold of nothing yet, to grow as a body arrives.
    pub fn hold(self: &Arc<Self>) -> Held {
        Held { budget: self.clone(), bytes: 0 }
    }

    /// Bytes held now, across all connections.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self, n: usize) -> bool {
        let taken = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.max)
            })
            .is_ok();
        if taken {
            self.gauge.add(n as i64);
        }
        taken
    }
}

/// Bytes one body holds; given back when dropped.
pub struct Held {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Held {
    /// Make the hold at least `total` bytes; `false` (holding what it held) when the budget
    /// has no room for them.
    pub fn grow_to(&mut self, total: usize) -> bool {
        let more = total.saturating_sub(self.bytes);
        if more == 0 {
            return true;
        }
        if !self.budget.take(more) {
            return false;
        }
        self.bytes = total;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.gauge.sub(self.bytes as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_grow_within_the_budget_and_give_back_when_dropped() {
        let gauge = IntGauge::new("unverified_bytes", "test").unwrap();
        let b = Budget::new(100, gauge.clone());
        let mut first = b.hold();
        assert!(first.grow_to(60));
        assert!(first.grow_to(40), "shrinking asks for nothing");
        let mut second = b.hold();
        assert!(!second.grow_to(41), "60 + 41 > 100");
        assert!(second.grow_to(40));
        assert_eq!((b.used(), gauge.get()), (100, 100));
        assert!(!first.grow_to(61));
        drop(first);
        assert_eq!(b.used(), 40);
        assert!(second.grow_to(100));
        drop(second);
        assert_eq!((b.used(), gauge.get()), (0, 0));
        assert!(!b.hold().grow_to(usize::MAX), "no overflow");
        assert_eq!(b.used(), 0);
    }
}
