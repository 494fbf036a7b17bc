//! Admission: the ingress records at most as many deliveries at once as the store can record in
//! time, and answers the excess at once with 503 (Slack retries it) instead of letting it queue
//! past Slack's deadline (DESIGN "Overload").
//!
//! - The **limit** on pending records adapts to measured record latency, in the manner of
//!   Netflix's Gradient2 and TCP Vegas: every window of [`WINDOW`] compares the window's mean
//!   latency with a baseline, the lowest window latency seen lately (which creeps up by 1 % a
//!   window, so that a long overload cannot become the new normal). While the window stays
//!   within [`TOLERANCE`] × baseline (or under a floor of ack_budget ÷ 400, 5 ms by default, which no gradient undercuts) the limit grows
//!   by √limit per window, unless the ingress does not use half of it; beyond that it shrinks
//!   in proportion, and at once by half when a window's records took longer than `slow`.
//!   Bounded by `[server] max_pending` and [`MIN_LIMIT`].
//! - A request that finds no free slot **waits** for one, newest first (adaptive LIFO: under a
//!   flood the requests served are the fresh ones, and an old one gives up instead of being
//!   served late), never past its deadline. How long depends on the queue, as in CoDel and
//!   Facebook's adaptive LIFO: a queue that has had someone waiting for less than [`STANDING`]
//!   is a burst, and a request waits up to `[server] admission_wait` for it to pass; a queue
//!   that has stood for longer is overload, and a request waits at most [`STANDING_WAIT`].
//! - Only as many wait as can be served within that wait at the current record latency
//!   (Little's law: limit × wait ÷ latency, at least the limit); beyond that a request is shed
//!   before its body is even verified.
//! - Every decision is a sample for [`Pressure`], which the delivery workers read.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus::IntGauge;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::pressure::Pressure;

/// Records are grouped into windows this long before the limit moves.
pub const WINDOW: Duration = Duration::from_millis(50);
/// Short latency may exceed the long average by this factor before the limit shrinks.
const TOLERANCE: f64 = 1.5;
/// The limit never falls below this (or `max_pending`, when smaller).
pub const MIN_LIMIT: usize = 4;
/// A queue that has not been empty for this long is standing: overload, not a burst.
pub const STANDING: Duration = Duration::from_millis(100);
/// How long a request waits for a slot while the queue stands.
pub const STANDING_WAIT: Duration = Duration::from_millis(5);

/// `[server] max_pending` and `admission_wait`, plus the record latency that counts as slow.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub max_pending: usize,
    pub wait: Duration,
    /// A record slower than this presses (the pressure signal) and halves the limit.
    pub slow: Duration,
    /// Record latency below this never shrinks the limit, whatever the gradient: well inside
    /// the ack budget, more concurrency is more throughput at no cost that Slack sees.
    pub floor: Duration,
}

/// The admission gauges (process-wide).
#[derive(Clone)]
pub struct Gauges {
    pub limit: IntGauge,
    pub pending: IntGauge,
    pub waiting: IntGauge,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// Every slot taken and the queue full: answered before the body is read.
    Full,
    /// No slot came free within its share of the ack budget.
    Waited,
    /// Its shard records nothing and has its probes out (see `shard_gate`).
    Stalled,
    /// The bytes of unverified bodies across all connections are at their bound (see
    /// `budget`): the body is not too large, the gateway is busy.
    Unverified,
}

impl Shed {
    pub const ALL: [Shed; 4] = [Shed::Full, Shed::Waited, Shed::Stalled, Shed::Unverified];

    pub fn as_label(self) -> &'static str {
        match self {
            Shed::Full => "full",
            Shed::Waited => "waited",
            Shed::Stalled => "stalled_shard",
            Shed::Unverified => "unverified_budget",
        }
    }
}

pub struct Admission {
    state: Mutex<State>,
    settings: Settings,
    floor: f64,
    pressure: Arc<Pressure>,
    gauges: Gauges,
}

struct State {
    limit: f64,
    pending: usize,
    /// Newest at the back; a waiter that gave up leaves a closed sender behind.
    waiting: VecDeque<oneshot::Sender<()>>,
    window: Window,
    /// The lowest window latency seen lately, in µs (0 before the first window).
    base_us: f64,
    /// The last window's mean latency, in µs (0 before the first window).
    short_us: f64,
    /// Since when the queue has had someone waiting (`None`: empty).
    queued_since: Option<Instant>,
    /// When a record last finished: with records pending, the time since is a floor on the
    /// latency now (a stalled store shows at once, not when its first slow record ends).
    last_done: Instant,
}

struct Window {
    started: Instant,
    sum_us: f64,
    n: u32,
    /// The most records pending at once during the window.
    peak: usize,
}

impl Window {
    fn new() -> Window {
        Window { started: Instant::now(), sum_us: 0.0, n: 0, peak: 0 }
    }
}

/// One admitted record's slot, given back (with its latency) when dropped.
pub struct Slot {
    admission: Arc<Admission>,
    since: Instant,
    /// Given back without a latency sample: no record was made with it, or its time says
    /// how long one dead shard took to fail, not how fast the store records.
    unsampled: bool,
}

impl Slot {
    /// Give the slot back without teaching the limit anything.
    pub fn unsampled(mut self) {
        self.unsampled = true;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let took = (!self.unsampled).then(|| self.since.elapsed());
        self.admission.release(took);
    }
}

impl Admission {
    pub fn new(settings: Settings, pressure: Arc<Pressure>, gauges: Gauges) -> Arc<Admission> {
        let max = settings.max_pending.max(1) as f64;
        let floor = (MIN_LIMIT as f64).min(max);
        // Optimistic: the ceiling until latency says otherwise (a cold start meets a burst).
        let limit = max;
        gauges.limit.set(limit as i64);
        let state = State {
            limit,
            pending: 0,
            waiting: VecDeque::new(),
            window: Window::new(),
            base_us: 0.0,
            short_us: 0.0,
            queued_since: None,
            last_done: Instant::now(),
        };
        Arc::new(Admission { state: Mutex::new(state), settings, floor, pressure, gauges })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it would have to come from arithmetic on floats; carry on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current limit on pending records.
    #[cfg(test)]
    pub fn limit(&self) -> usize {
        self.lock().limit as usize
    }

    /// A cheap look before the body is read: is there a free slot or a place in the queue?
    pub fn has_room(&self) -> bool {
        let mut st = self.lock();
        st.purge_gone();
        let room = st.pending < st.limit as usize || st.waiting.len() < st.queue_cap(&self.settings);
        drop(st);
        if !room {
            self.pressure.sample(true);
        }
        room
    }

    /// A slot for one record, waiting for one at most `admission_wait` and never past
    /// `deadline`.
    pub async fn admit(self: &Arc<Self>, deadline: Instant) -> Result<Slot, Shed> {
        let (rx, wait) = {
            let mut st = self.lock();
            st.purge_gone();
            // A free slot means nobody live is waiting: a release hands its slot on at once.
            if st.pending < st.limit as usize {
                return Ok(self.take(&mut st));
            }
            if st.waiting.len() >= st.queue_cap(&self.settings) {
                drop(st);
                self.pressure.sample(true);
                return Err(Shed::Full);
            }
            let (tx, rx) = oneshot::channel();
            st.queued_since.get_or_insert_with(Instant::now);
            st.waiting.push_back(tx);
            self.gauges.waiting.set(st.waiting.len() as i64);
            (rx, st.wait(&self.settings))
        };
        self.pressure.sample(true);
        let until = deadline.min(Instant::now() + wait);
        let mut rx = rx;
        let granted = match tokio::time::timeout_at(until, &mut rx).await {
            Ok(r) => r.is_ok(),
            Err(_) => {
                // Closing first settles a race with a grant sent just now: it is either seen
                // here (and used) or never sent.
                rx.close();
                rx.try_recv().is_ok()
            }
        };
        // The granter counted the slot as pending already.
        if granted {
            Ok(Slot { admission: self.clone(), since: Instant::now(), unsampled: false })
        } else {
            Err(Shed::Waited)
        }
    }

    fn take(self: &Arc<Self>, st: &mut State) -> Slot {
        st.pending += 1;
        st.window.peak = st.window.peak.max(st.pending);
        self.gauges.pending.set(st.pending as i64);
        Slot { admission: self.clone(), since: Instant::now(), unsampled: false }
    }

    fn release(&self, took: Option<Duration>) {
        let slow = took.is_some_and(|t| t > self.settings.slow);
        {
            let mut st = self.lock();
            st.pending -= 1;
            st.last_done = Instant::now();
            if let Some(took) = took {
                st.observe(took, &self.settings, self.floor);
            }
            // Hand free slots to the newest waiters still there.
            while st.pending < st.limit as usize {
                let Some(tx) = st.waiting.pop_back() else { break };
                if tx.send(()).is_ok() {
                    st.pending += 1;
                    st.window.peak = st.window.peak.max(st.pending);
                }
            }
            st.purge_gone();
            self.gauges.pending.set(st.pending as i64);
            self.gauges.waiting.set(st.waiting.len() as i64);
            self.gauges.limit.set(st.limit as i64);
        }
        self.pressure.sample(slow);
    }
}

impl State {
    /// How long a request that must wait may wait: long for a burst, short for a standing queue.
    fn wait(&self, settings: &Settings) -> Duration {
        if self.queued_since.is_some_and(|t| t.elapsed() > STANDING) {
            settings.wait.min(STANDING_WAIT)
        } else {
            settings.wait
        }
    }

    /// How many may wait: those a slot can come free for within the wait they would get
    /// (Little's law), at least the limit. The rest are turned away at once, before their
    /// bodies are read.
    fn queue_cap(&self, settings: &Settings) -> usize {
        let stalled_us = if self.pending > 0 { self.last_done.elapsed().as_micros() as f64 } else { 0.0 };
        let latency_us = self.short_us.max(stalled_us).max(1_000.0);
        let servable = self.limit * self.wait(settings).as_micros() as f64 / latency_us;
        servable.clamp(self.limit, 16.0 * settings.max_pending as f64) as usize
    }

    /// Drop the waiters that gave up (oldest first: with LIFO service they sit at the front).
    fn purge_gone(&mut self) {
        while self.waiting.front().is_some_and(|tx| tx.is_closed()) {
            self.waiting.pop_front();
        }
        if self.waiting.is_empty() {
            self.queued_since = None;
        }
    }

    /// Add one record's latency to the window; at the window's end, move the limit.
    fn observe(&mut self, took: Duration, settings: &Settings, floor: f64) {
        self.window.sum_us += took.as_micros() as f64;
        self.window.n += 1;
        if self.window.started.elapsed() < WINDOW {
            return;
        }
        let short = (self.window.sum_us / f64::from(self.window.n)).max(1.0);
        let peak = self.window.peak;
        self.short_us = short;
        self.window = Window::new();
        self.window.peak = self.pending;
        // The baseline is the lowest latency seen lately: it follows any drop at once and creeps
        // up by 1 % a window, so a long overload cannot pass itself off as the new normal.
        self.base_us = if self.base_us == 0.0 { short } else { (self.base_us * 1.01).min(short) };
        let max = settings.max_pending as f64;
        self.limit = if short > settings.slow.as_micros() as f64 {
            self.limit / 2.0
        } else {
            let baseline = self.base_us.max(settings.floor.as_micros() as f64);
            let gradient = (TOLERANCE * baseline / short).clamp(0.5, 1.0);
            if gradient >= 1.0 {
                let used = peak as f64 >= self.limit / 2.0;
                if used {
                    self.limit + self.limit.sqrt() / 2.0
                } else {
                    self.limit
                }
            } else {
                self.limit * (0.8 + 0.2 * gradient)
            }
        }
        .clamp(floor, max);
    }
}

#[cfg(test)]
mod tests;
