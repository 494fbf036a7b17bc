//! The history's one writer per process: it takes what the services queued, folds each batch
//! into one pipeline per app (one `HSET` and one `PEXPIRE` per delivery, one `ZADD` and the
//! minute's counts per app), and trims each app's history to `[ui] history` and
//! `history_max` every few seconds. A failed write drops its batch (counted): the history is
//! a view, never the record; the outbox is.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tracing::warn;

use super::fields::{line, minute_fields};
use super::query::SIFTED;
use super::retention::{expire_old, purge, registry, trim_apps, Keep, MINUTES_KEPT_SECS};
use super::{tag, Arrival, Note, What};
use crate::config::UiConfig;
use crate::live::Live;
use crate::queue::writer::{self, Pace};
use crate::shared::Shared;
use crate::store::{connect_lazy, Conn, Endpoint};

/// At most this many notes per window.
const BATCH: usize = 1_024;
/// How long the writer gathers notes before it writes them.
const WINDOW: Duration = Duration::from_millis(100);
/// How often each app's history is trimmed (and the on/off switch re-read after a reload).
const TRIM_EVERY: Duration = Duration::from_secs(5);

pub struct Writer {
    live: Arc<Live>,
    shared: Arc<Shared>,
    redis: Endpoint,
}

impl Writer {
    pub fn new(live: Arc<Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        Writer { live, shared, redis }
    }

    fn ui(&self) -> UiConfig {
        self.live.get().config.ui.clone()
    }
}

#[async_trait]
impl BackgroundService for Writer {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(rx) = self.shared.history.take_receiver() else { return };
        let conn = match connect_lazy(&self.redis, Duration::from_secs(2)) {
            Ok(c) => c,
            Err(e) => return warn!(error = %e, "the delivery history has no Redis connection; it stays empty"),
        };
        let pace = Pace { batch: BATCH, window: WINDOW, tend: TRIM_EVERY };
        writer::run(&mut Batches { writer: self, conn, started: false }, rx, pace, &mut shutdown).await;
    }
}

/// The writer's batches: a window's notes written (see [`Writer::flush`]), and every app's
/// history trimmed between them.
struct Batches<'a> {
    writer: &'a Writer,
    conn: Conn,
    /// Whether the first trim ran (it gives old keys an expiry, or purges an "off" history).
    started: bool,
}

#[async_trait]
impl writer::Batches for Batches<'_> {
    type Item = Note;

    async fn write(&mut self, batch: &[Note]) {
        self.writer.flush(&mut self.conn, batch).await;
    }

    async fn tend(&mut self) {
        if let Err(e) = self.writer.tend(&mut self.conn, &mut self.started).await {
            self.writer.shared.metrics.history_errors.inc();
            tracing::debug!(error = %e, "cannot trim the delivery history");
        }
    }
}

impl Writer {
    /// One window's notes, written per app; then each app trimmed. Nothing is written once
    /// the history is off (the notes queued before are dropped).
    async fn flush(&self, conn: &mut Conn, batch: &[Note]) {
        let ui = self.ui();
        if !ui.keeps_history() {
            return;
        }
        let prefix = self.live.get().config.redis.key_prefix.clone();
        let mut apps = Vec::new();
        for (app, notes) in by_app(batch) {
            if let Err(e) = write(conn, &prefix, app, &ui, &notes).await {
                self.shared.metrics.history_errors.inc();
                tracing::debug!(error = %e, "cannot write the delivery history; this window is dropped");
            }
            apps.push(app.to_string());
        }
        if let Err(e) = trim_apps(conn, &prefix, &apps, Keep::of(&ui)).await {
            self.shared.metrics.history_errors.inc();
            tracing::debug!(error = %e, "cannot trim the delivery history");
        }
    }

    /// Every few seconds: the on/off switch re-read (a reload may change it); with the history
    /// on, every app that has one trimmed — the configured ones and those removed from the
    /// config, which so empty within `[ui] history`; with it off, everything kept deleted. The
    /// first time, keys written by versions before without an expiry get theirs.
    async fn tend(&self, conn: &mut Conn, started: &mut bool) -> redis::RedisResult<()> {
        let config = self.live.get().config.clone();
        let ui = &config.ui;
        let prefix = &config.redis.key_prefix;
        self.shared.history.set(ui.keeps_history(), ui.history_rate);
        // The apps, and their shadows' lanes (whose attempts have a history of their own).
        let lanes = config.apps.iter().filter(|a| a.shadow.is_some()).map(|a| crate::config::shadow_lane_name(&a.name));
        let mut apps: Vec<String> = config.apps.iter().map(|a| a.name.clone()).chain(lanes).collect();
        let known: Vec<String> = redis::cmd("SMEMBERS").arg(registry(prefix)).query_async(conn).await?;
        let removed: Vec<String> = known.into_iter().filter(|a| !apps.contains(a)).collect();
        if !ui.keeps_history() {
            // Purged on the first tick whatever the registry says (versions before kept none),
            // then whenever something was written since.
            let exists: bool = redis::cmd("EXISTS").arg(registry(prefix)).query_async(conn).await?;
            if !*started || exists {
                apps.extend(removed);
                purge(conn, prefix, &apps).await?;
            }
            *started = true;
            return Ok(());
        }
        if !*started {
            expire_old(conn, prefix, &apps, ui).await?;
            *started = true;
        }
        apps.extend(removed.iter().cloned());
        trim_apps(conn, prefix, &apps, Keep::of(ui)).await?;
        for app in &removed {
            let left: bool = redis::cmd("EXISTS").arg(format!("{}:idx", tag(prefix, app))).query_async(conn).await?;
            if !left {
                let _: () = redis::cmd("SREM").arg(registry(prefix)).arg(app).query_async(conn).await?;
            }
        }
        Ok(())
    }
}

/// The batch's notes per app, in the order they came.
fn by_app(batch: &[Note]) -> Vec<(&str, Vec<&Note>)> {
    let mut apps: Vec<(&str, Vec<&Note>)> = Vec::new();
    for n in batch {
        match apps.iter_mut().find(|(a, _)| *a == n.app) {
            Some((_, notes)) => notes.push(n),
            None => apps.push((&n.app, vec![n])),
        }
    }
    apps
}

/// One app's notes, as one pipeline: per delivery one `APPEND` of its new lines and a
/// `PEXPIRE` (every key of the history expires with `[ui] history`, whatever else removes it),
/// its body (when the batch has its arrival) as a key of its own, so that the list reads
/// timelines and never bodies; one `ZADD` of the arrivals, and one `ZADD NX` of the deliveries
/// whose arrival is not in this batch (every record is indexed, so the trim and `history =
/// "off"` find it); the minutes' counts; and the app in the registry of apps with a history.
pub async fn write(conn: &mut Conn, prefix: &str, app: &str, ui: &UiConfig, notes: &[&Note]) -> redis::RedisResult<()> {
    let (records, minutes) = fold(notes);
    let tag = tag(prefix, app);
    let idx = format!("{tag}:idx");
    let ttl = ui.history.as_millis() as u64;
    let mut p = redis::pipe();
    let (mut arrivals, mut others) = (redis::cmd("ZADD"), redis::cmd("ZADD"));
    arrivals.arg(&idx);
    others.arg(&idx).arg("NX");
    let (mut any_arrival, mut any_other) = (false, false);
    for (delivery, r) in &records {
        let key = format!("{tag}:t:{delivery}");
        p.cmd("APPEND").arg(&key).arg(&r.lines).ignore();
        p.cmd("PEXPIRE").arg(&key).arg(ttl).ignore();
        if let Some(body) = r.body {
            p.cmd("SET").arg(format!("{tag}:b:{delivery}")).arg(body.as_ref()).arg("PX").arg(ttl).ignore();
        }
        if let Some(a) = r.arrival {
            let sifted = format!("{tag}:s:{delivery}");
            let values = [&a.team, &a.channel, &a.kind.to_string(), &a.detail, &a.receipt, &a.ts, &a.thread_ts];
            p.cmd("HSET").arg(&sifted).arg(SIFTED.iter().zip(values).collect::<Vec<_>>()).ignore();
            p.cmd("PEXPIRE").arg(&sifted).arg(ttl).ignore();
        }
        match r.arrived_ms {
            Some(ms) => {
                arrivals.arg(ms).arg(*delivery);
                any_arrival = true;
            }
            // A later step, or an arrival the full queue dropped: indexed at its first note's
            // time until an arrival says when it came.
            None => {
                others.arg(r.first_ms).arg(*delivery);
                any_other = true;
            }
        }
    }
    if any_arrival {
        p.add_command(arrivals).ignore();
    }
    if any_other {
        p.add_command(others).ignore();
    }
    if !records.is_empty() {
        p.cmd("PEXPIRE").arg(&idx).arg(ttl).ignore();
    }
    let registry = registry(prefix);
    p.cmd("SADD").arg(&registry).arg(app).ignore();
    p.cmd("PEXPIRE").arg(&registry).arg(ttl.max(MINUTES_KEPT_SECS * 1000)).ignore();
    let mut touched: Vec<u64> = Vec::new();
    for ((minute, field), n) in &minutes {
        p.cmd("HINCRBY").arg(format!("{tag}:m:{minute}")).arg(*field).arg(*n).ignore();
        if !touched.contains(minute) {
            touched.push(*minute);
        }
    }
    for minute in touched {
        p.cmd("EXPIRE").arg(format!("{tag}:m:{minute}")).arg(MINUTES_KEPT_SECS).ignore();
    }
    p.query_async::<()>(conn).await
}

/// What one batch appends to one delivery's record.
#[derive(Debug, Default)]
struct Lines<'a> {
    lines: String,
    /// The arrival's time, for the index.
    arrived_ms: Option<u64>,
    /// The first note's time: the index's until an arrival is seen.
    first_ms: u64,
    /// The body the arrival kept, written apart from the lines.
    body: Option<&'a bytes::Bytes>,
    /// What the arrival says of it, for the list's filters.
    arrival: Option<&'a Arrival>,
}

type Minutes<'a> = HashMap<(u64, &'a str), i64>;

/// The notes' lines per delivery (in order of first note), and the minutes' counts.
fn fold<'a>(notes: &[&'a Note]) -> (Vec<(&'a str, Lines<'a>)>, Minutes<'static>) {
    let mut records: Vec<(&str, Lines)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut minutes: Minutes = HashMap::new();
    for n in notes {
        let minute = n.at_ms / 60_000;
        for field in counted(&n.what) {
            *minutes.entry((minute, field)).or_default() += 1;
        }
        if n.delivery.is_empty() {
            continue;
        }
        let i = *at.entry(&n.delivery).or_insert_with(|| {
            records.push((&n.delivery, Lines { first_ms: n.at_ms, ..Lines::default() }));
            records.len() - 1
        });
        let r = &mut records[i].1;
        r.lines.push_str(&line(n));
        r.first_ms = r.first_ms.min(n.at_ms);
        if let What::Arrived(a) = &n.what {
            r.arrived_ms = Some(n.at_ms);
            r.body = a.body.as_ref().or(r.body);
            r.arrival = Some(a);
        }
    }
    (records, minutes)
}

/// What a note adds to its minute of the overview.
fn counted(what: &What) -> Vec<&'static str> {
    match what {
        // An operator's replay is not Slack's request.
        What::Arrived(a) if a.via == "replay" => vec![],
        What::Arrived(a) => minute_fields(a.status, a.ack_ms).to_vec(),
        What::Absorbed { ack_ms, .. } => {
            let mut f = minute_fields(200, *ack_ms).to_vec();
            f.push("absorbed");
            f
        }
        What::Answered { status, ack_ms, .. } => minute_fields(*status, *ack_ms).to_vec(),
        What::Attempt(a) => vec![match a.outcome {
            "delivered" => "delivered",
            "retried" => "retried",
            "dead" => "dead",
            _ => "other",
        }],
        // A shadow's write is not the bot's: the overview's counts are the live bot's.
        What::Wrote(w) if w.outcome == super::SHADOW_KEPT => vec![],
        What::Wrote(w) => vec![write_field(w.outcome)],
        What::Held
        | What::Superseded { .. }
        | What::Rerun { .. }
        | What::Paused { .. }
        | What::Resumed
        | What::Shadow { .. }
        | What::Replayed { .. }
        | What::Stream(_) => vec![],
    }
}

/// The minute's field for an egress write's outcome.
pub fn write_field(outcome: &str) -> &'static str {
    WRITE_FIELDS.iter().find(|(o, _)| *o == outcome).map_or("w:other", |(_, f)| f)
}

/// `w:<outcome>` for every egress outcome, as static strings.
const WRITE_FIELDS: &[(&str, &str)] = &[
    ("forwarded", "w:forwarded"),
    ("replayed_key", "w:replayed_key"),
    ("replayed_retry", "w:replayed_retry"),
    ("replayed_rerun", "w:replayed_rerun"),
    ("conflict", "w:conflict"),
    ("key_reused", "w:key_reused"),
    ("withheld_deleted", "w:withheld_deleted"),
    ("withheld_edited", "w:withheld_edited"),
    ("withheld_superseded", "w:withheld_superseded"),
    ("reconciled", "w:reconciled"),
    ("unknown", "w:unknown"),
    ("kept", "w:kept"),
    ("rate_limited", "w:rate_limited"),
    ("failed", "w:failed"),
    ("store_unavailable", "w:store_unavailable"),
    ("socket_opened", "w:socket_opened"),
    ("from_record", "w:from_record"),
    ("continued", "w:continued"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Arrival, Attempt};

    fn note(delivery: &str, at_ms: u64, what: What) -> Note {
        Note { app: "bot".into(), delivery: delivery.into(), at_ms, what }
    }

    #[test]
    fn a_batch_folds_per_delivery_and_counts_per_minute() {
        let arrived =
            || What::Arrived(Box::new(Arrival { outcome: "accepted", status: 200, ack_ms: 4.0, ..Arrival::default() }));
        let attempt = What::Attempt(Attempt {
            number: 1,
            run: 1,
            outcome: "delivered",
            status: 200,
            error: "",
            latency_ms: 2.0,
            next_retry_ms: 0,
            by: "c".into(),
            via: "http",
        });
        let notes = [
            note("0-a", 60_000, attempt),
            note("0-a", 60_001, arrived()),
            note("0-b", 120_000, arrived()),
            note("", 120_001, What::Answered { status: 503, ack_ms: 2_100.0, kind: "event" }),
        ];
        let refs: Vec<&Note> = notes.iter().collect();
        let (records, minutes) = fold(&refs);
        assert_eq!(records.len(), 2, "one record per delivery; the refusal only counts");
        assert_eq!(records[0].1.lines.lines().count(), 2);
        assert_eq!(records[0].1.arrived_ms, Some(60_001));
        assert_eq!(minutes[&(1, "ok")], 1);
        assert_eq!(minutes[&(1, "delivered")], 1);
        assert_eq!(minutes[&(2, "failed")], 1);
        assert_eq!(minutes[&(2, "l3000")], 1);
        assert_eq!(write_field("withheld_deleted"), "w:withheld_deleted");
        assert_eq!(write_field("nonsense"), "w:other");
        assert_eq!(WRITE_FIELDS.len(), crate::egress::Outcome::ALL.len());
    }
}
