//! What the services of one gateway process share — its metrics, its drain and in-flight
//! counts, the ack path's pressure, whether its delivery workers run — as one value built in
//! `cli` and handed to the ingress, the delivery service and the admin listener. No
//! process-wide statics: two gateways can run in one process (a test does).
//!
//! It holds handles, never a service: the Socket Mode bots as [`SocketBots`] (the service
//! behind it is `socket`'s), and the history's and seen's queues from [`crate::queue`] (their
//! writers are theirs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::drain::Drain;
use crate::metrics::Metrics;
use crate::pauses::Pauses;
use crate::pressure::Pressure;
use crate::queue::history::History;
use crate::queue::seen::Seen;
use crate::upstream::SocketBots;

/// How long after a full read the live workers count as busy.
const LIVE_BUSY_MS: u64 = 200;

pub struct Shared {
    pub metrics: Metrics,
    pub drain: Arc<Drain>,
    /// Published by the ingress's admission, read by the delivery workers.
    pub pressure: Arc<Pressure>,
    /// When this deployment's conversations began to pick the deliveries' shards (ms; 0:
    /// always), once known: the delivery workers learn it at start, else the ingress's first
    /// delivery. Known, it spares every delivery a look that may hang on another primary.
    pub sharded_since: tokio::sync::OnceCell<u64>,
    /// The Socket Mode bots connected to this process (`upstream = "socket"`), and the
    /// tickets the egress gave them.
    pub bots: Arc<dyn SocketBots>,
    /// Notes for the delivery history, queued for its writer (off the ack path).
    pub history: History,
    /// What the ingress saw of conversations (own posts, threads), queued for its writer.
    pub seen: Seen,
    /// The pauses as this process last read them (refreshed by the delivery workers).
    pub pauses: Pauses,
    /// Copies for apps' shadow bots, queued for the delivery service's copier.
    pub shadow: crate::queue::shadow::Copies,
    /// Runs lost with a bot's socket, queued for the delivery service's watcher of runs.
    pub lost_runs: crate::queue::runs::LostRuns,
    /// This process, as the holder of the bots' sockets it serves (`host-pid-random`): a
    /// run's socket is named `holder/socket`, and a holder that stops beating has lost them.
    pub holder: String,
    /// When this process last said in Redis that it holds bot sockets (ms; 0: never).
    pub last_beat_ms: AtomicU64,
    /// Traces (`[telemetry]`), when on: started once by `cli`.
    pub telemetry: crate::telemetry::Telemetry,
    /// Until when (ms) the live bots' workers are busy: a read found as many deliveries as it
    /// had slots for. The shadow's work waits meanwhile (its copies queue, its lanes idle).
    live_busy_until: AtomicU64,
    workers_running: AtomicBool,
}

impl Shared {
    /// `bots`: the Socket Mode bots' sockets (the service that serves them is built in `cli`).
    pub fn new(bots: Arc<dyn SocketBots>) -> Arc<Shared> {
        let metrics = Metrics::default();
        let history = History::new(metrics.history_dropped.clone());
        let seen = Seen::new(metrics.egress.seen_dropped.clone());
        Arc::new(Shared {
            metrics,
            drain: Arc::default(),
            pressure: Arc::default(),
            sharded_since: tokio::sync::OnceCell::new(),
            bots,
            history,
            seen,
            pauses: Pauses::default(),
            shadow: crate::queue::shadow::copies(),
            lost_runs: crate::queue::runs::lost_runs(),
            holder: holder_name(),
            last_beat_ms: AtomicU64::new(0),
            telemetry: Default::default(),
            live_busy_until: AtomicU64::new(0),
            workers_running: AtomicBool::new(false),
        })
    }

    /// Whether this process's delivery workers are running, for `/readyz`.
    pub fn workers_running(&self) -> bool {
        self.workers_running.load(Ordering::Relaxed)
    }

    /// A live bot's reader found work for every slot it had: busy for a moment.
    pub fn live_busy(&self) {
        self.live_busy_until.store(crate::clock::now_ms() + LIVE_BUSY_MS, Ordering::Relaxed);
    }

    /// Whether the live bots' workers were busy a moment ago.
    pub fn live_is_busy(&self) -> bool {
        self.live_busy_until.load(Ordering::Relaxed) > crate::clock::now_ms()
    }

    pub fn set_workers_running(&self, running: bool) {
        self.workers_running.store(running, Ordering::Relaxed);
    }
}

/// This process's name among the gateway's processes: host, pid and a random part (a restart
/// in a container may reuse the pid).
fn holder_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}-{:08x}", host.trim(), std::process::id(), rand::random::<u32>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::Work;

    /// No Socket Mode bot at all.
    struct NoBots;

    #[async_trait::async_trait]
    impl SocketBots for NoBots {
        fn connected(&self, _: &str) -> usize {
            0
        }

        fn issue(&self, _: &str, _: &str) -> Option<String> {
            None
        }

        fn carrying(&self, _: &str, _: u64, _: &str, _: std::time::Duration) -> bool {
            false
        }

        async fn send(
            &self,
            _: &Metrics,
            _: &str,
            _: &str,
            _: (u64, u64),
            _: (&str, &[u8]),
            _: std::time::Duration,
        ) -> Result<crate::upstream::Response, crate::upstream::SendError> {
            Err(crate::upstream::SendError::Timeout)
        }
    }

    #[test]
    fn two_gateways_in_one_process_share_nothing() {
        let (a, b) = (Shared::new(Arc::new(NoBots)), Shared::new(Arc::new(NoBots)));
        a.metrics.requests.with_label_values(&["bot", "event", "accepted"]).inc();
        let _busy = a.drain.enter(Work::Request);
        a.set_workers_running(true);
        let rendered = String::from_utf8(b.metrics.render()).unwrap();
        assert!(!rendered.contains("outcome=\"accepted\""), "{rendered}");
        assert_eq!(b.drain.count(Work::Request), 0);
        assert!(a.workers_running() && !b.workers_running());
    }
}
