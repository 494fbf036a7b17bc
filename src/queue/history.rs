//! The delivery history's queue: the services hand a [`Note`] to [`History::note`], which only
//! queues it (a full queue drops the note and counts it); the history's writer
//! (`history::writer`) takes them. Which deliveries are kept in full is decided here too, once,
//! when the ingress makes a delivery's id ([`KEPT`]).

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::Queue;

/// Notes waiting for the writer; past this they are dropped (and counted).
const QUEUE: usize = 16_384;

/// The queue into the history, shared by one process's services.
pub struct History {
    on: AtomicBool,
    /// Deliveries a second kept in full (`[ui] history_rate`).
    rate: std::sync::atomic::AtomicU32,
    budget: Budget,
    queue: Queue<Note>,
}

impl History {
    /// Off until the config says otherwise; `dropped` counts what a full queue refused.
    pub fn new(dropped: prometheus::IntCounter) -> Self {
        History {
            on: AtomicBool::new(false),
            rate: std::sync::atomic::AtomicU32::new(0),
            budget: Budget::default(),
            queue: Queue::new(QUEUE, dropped),
        }
    }

    /// Whether notes are kept (`[ui] history` above zero, and a writer running).
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// On or off, and how many deliveries a second are kept in full.
    pub fn set(&self, on: bool, rate: u32) {
        self.on.store(on, Ordering::Relaxed);
        self.rate.store(rate, Ordering::Relaxed);
    }

    /// Whether the delivery the ingress is about to record is kept in full (its nonce then
    /// carries [`KEPT`]).
    pub fn keep_next(&self, now_ms: u64) -> bool {
        self.is_on() && self.budget.take(self.rate.load(Ordering::Relaxed), now_ms)
    }

    /// Queue `note` for the writer; never waits.
    pub fn note(&self, note: Note) {
        if self.is_on() {
            self.queue.push(note);
        }
    }

    /// Queue what just happened to `delivery` (stamped now), when its history is kept in
    /// full ([`kept`]); `what` is made only then.
    pub fn step(&self, app: &str, delivery: &str, what: impl FnOnce() -> What) {
        self.step_at(app, delivery, crate::clock::now_ms(), what);
    }

    /// [`History::step`] for something that began at `at_ms` (an attempt: when it was sent, so
    /// the bot's writes in answer to it follow it in the timeline however long recording its
    /// end took).
    pub fn step_at(&self, app: &str, delivery: &str, at_ms: u64, what: impl FnOnce() -> What) {
        if self.is_on() && kept(delivery) {
            self.note(Note { app: app.to_string(), delivery: delivery.to_string(), at_ms, what: what() });
        }
    }

    /// The writer's end of the queue (once per process).
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<Note>> {
        self.queue.take_receiver()
    }
}

/// Something that happened to one delivery.
#[derive(Debug, Clone)]
pub struct Note {
    pub app: String,
    pub delivery: String,
    /// When it happened (ms since the epoch).
    pub at_ms: u64,
    pub what: What,
}

/// The outcome of a shadow's write in the history: kept with the live delivery it answers,
/// never posted.
pub const SHADOW_KEPT: &str = "kept_shadow";

#[derive(Debug, Clone)]
pub enum What {
    /// The ingress recorded a new delivery, or answered one it keeps nothing of (ignored).
    Arrived(Box<Arrival>),
    /// Slack sent a delivery the receipts had already seen: absorbed, not delivered again.
    Absorbed { retry_num: String, retry_reason: &'static str, outcome: &'static str, ack_ms: f64, via: &'static str },
    /// One attempt at the bot, and what followed.
    Attempt(Attempt),
    /// Held back: an earlier turn of its thread is still running.
    Held,
    /// Its turn never came: a newer message of the thread took it.
    Superseded { by: String },
    /// Its run was lost with the bot (`reason`, `outbox::RerunReason`'s label): run again as
    /// run `run` (2 the first re-run), or not (`run` 0: `rerun_limit` reached, its turn ended
    /// `lost`).
    Rerun { reason: &'static str, run: u64 },
    /// Held by a pause (`pause`: its scope, as `slackgate pauses` says it).
    Paused { pause: String },
    /// Its pause ended: it waits for the bot again, as if it had just arrived.
    Resumed,
    /// Its copy for the app's shadow bot: `copied`, or `dropped` (the shadow's lane was full).
    Shadow { outcome: &'static str },
    /// A write the bot made through the egress, attributed to this delivery.
    Wrote(Write),
    /// A stream of the bot's answer ended: how, after how many appends and bytes.
    Stream(StreamEnd),
    /// An operator replayed it: a dead letter back on the outbox (`as_id` empty), or a
    /// delivered one sent again as the new delivery `as_id`.
    Replayed { as_id: String },
    /// A Slack request answered without a delivery to keep (refused, a handshake): only the
    /// overview's counts (the note names no delivery).
    Answered { status: u16, ack_ms: f64, kind: &'static str },
}

/// How a stream of a delivery's answer ended (`metrics::STREAM_ENDINGS`).
#[derive(Debug, Clone, Default)]
pub struct StreamEnd {
    pub channel: String,
    /// The stream's message.
    pub ts: String,
    pub appends: u64,
    pub bytes: u64,
    pub ending: &'static str,
}

/// What the ingress saw of a delivery when it arrived.
#[derive(Debug, Clone, Default)]
pub struct Arrival {
    pub kind: &'static str,
    pub detail: String,
    pub team: String,
    pub channel: String,
    pub user: String,
    pub ts: String,
    pub thread_ts: String,
    /// `e:<event_id>` or `t:<trigger_id>` (or a body hash).
    pub receipt: String,
    pub via: &'static str,
    pub retry_num: String,
    pub retry_reason: &'static str,
    /// Slack's `event_time` (s).
    pub event_time: Option<u64>,
    pub ack_ms: f64,
    /// The status Slack got, and the ingress's outcome label.
    pub status: u16,
    pub outcome: &'static str,
    /// Why it was ignored, or what else the ingress did (e.g. cancelled a deleted message's).
    pub reason: String,
    /// A DM or group DM, or a message that mentions the bot: what "never answered" watches.
    pub asks: bool,
    pub conversation: String,
    /// What an operator's replay sends again: the route it came on and its content type.
    pub path: String,
    pub content_type: String,
    /// The body as Slack sent it (shown with the `show_text` rule; never its token).
    pub body: Option<Bytes>,
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub number: u64,
    /// The run it belongs to: 1 the first, more after a run lost with the bot.
    pub run: u64,
    /// `policy::Outcome`'s label: delivered, retried, dead, expired, cancelled.
    pub outcome: &'static str,
    /// The bot's status; 0 when it did not answer.
    pub status: u16,
    pub error: &'static str,
    pub latency_ms: f64,
    pub next_retry_ms: u64,
    /// Which gateway process made it (its consumer name), or "inline".
    pub by: String,
    /// How it reached the bot: "http", or "socket" (a Socket Mode bot's ack is its answer).
    pub via: &'static str,
}

#[derive(Debug, Clone)]
pub struct Write {
    pub method: String,
    pub channel: String,
    pub outcome: &'static str,
    /// Which key made it once: the bot's `Idempotency-Key`, a retry's digest, a re-run's.
    pub key: &'static str,
    /// The posted message's `ts`, when Slack answered with one.
    pub ts: String,
    /// How long it took at the egress: the channel's pace, Slack's `Retry-After`, the call.
    pub took_ms: u64,
    /// The size of the bot's call (its body).
    pub bytes: u64,
    /// The message text it wrote, kept only while `[ui] show_text` is on (at most
    /// [`TEXT_KEPT`] characters).
    pub text: Option<String>,
}

/// At most this many characters of a reply's text are kept.
pub const TEXT_KEPT: usize = 4_000;

/// A write's text as the history keeps it: only with `show_text` on, cut to [`TEXT_KEPT`].
pub fn kept_text(show_text: bool, text: Option<&str>) -> Option<String> {
    text.filter(|_| show_text).map(|t| t.chars().take(TEXT_KEPT).collect())
}

/// The bit of a delivery id's nonce that says its history is kept in full (the first hex
/// digit of its `<shard>-<16 hex>` is 8 or more). The ingress decides once, when it makes the
/// id; every process that later touches the delivery (a worker on any replica, the egress, the
/// pages) reads it from the id and needs to ask no one.
pub const KEPT: u64 = 1 << 63;

/// Whether `delivery`'s history is kept in full (see [`KEPT`]).
pub fn kept(delivery: &str) -> bool {
    delivery.split_once('-').and_then(|(_, hex)| hex.chars().next()).is_some_and(|c| matches!(c, '8'..='9' | 'a'..='f'))
}

/// At most `rate` deliveries a second kept in full by one process: past it, a flood's
/// deliveries are counted (the overview stays exact) but not recorded, so the history costs
/// the ack path nothing that matters however hard Slack sends. The window is per second and
/// racy at its edge by a few deliveries, which this can afford.
#[derive(Debug, Default)]
pub struct Budget {
    second: std::sync::atomic::AtomicU64,
    used: std::sync::atomic::AtomicU32,
}

impl Budget {
    pub fn take(&self, rate: u32, now_ms: u64) -> bool {
        let second = now_ms / 1000;
        if self.second.swap(second, Ordering::Relaxed) != second {
            self.used.store(0, Ordering::Relaxed);
        }
        self.used.fetch_add(1, Ordering::Relaxed) < rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_and_an_off_history_takes_nothing() {
        let h = History::new(prometheus::IntCounter::new("d", "d").unwrap());
        let note = || Note { app: "bot".into(), delivery: "0-a".into(), at_ms: 1, what: What::Held };
        h.note(note());
        assert_eq!(h.queue.dropped.get(), 0);
        let mut rx = h.take_receiver().unwrap();
        assert!(rx.try_recv().is_err(), "off: nothing queued");
        h.set(true, 100);
        for _ in 0..QUEUE + 3 {
            h.note(note());
        }
        assert_eq!(h.queue.dropped.get(), 3);
        assert!(h.take_receiver().is_none(), "one writer");
    }

    #[test]
    fn the_id_says_whether_a_delivery_is_kept_and_a_budget_bounds_them() {
        assert!(kept(&format!("3-{:016x}", KEPT | 5)) && !kept(&format!("3-{:016x}", 5u64)) && !kept("junk"));
        let b = Budget::default();
        assert!((0..3).all(|_| b.take(3, 1_000)) && !b.take(3, 1_999), "three a second");
        assert!(b.take(3, 2_000), "and three the next");
    }
}
