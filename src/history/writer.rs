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
use redis::Script;
use tracing::warn;

use super::fields::{line, minute_fields};
use super::{tag, Note, What};
use crate::clock::now_ms;
use crate::config::UiConfig;
use crate::live::Live;
use crate::shared::Shared;
use crate::store::{connect_lazy, Conn, Endpoint};

/// At most this many notes per window.
const BATCH: usize = 1_024;
/// How long the writer gathers notes before it writes them.
const WINDOW: Duration = Duration::from_millis(100);
/// How often each app's history is trimmed (and the on/off switch re-read after a reload).
const TRIM_EVERY: Duration = Duration::from_secs(5);
/// The overview's minutes live this long.
const MINUTES_KEPT_SECS: u64 = 2 * 3600;
/// At most this many deliveries go per trim script call (each call holds Redis while it runs);
/// a trim calls it again until it removes fewer, up to [`TRIM_CALLS`] times.
const TRIM_MAX: usize = 2_000;
const TRIM_CALLS: usize = 20;

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
        let Some(mut rx) = self.shared.history.take_receiver() else { return };
        let mut conn = match connect_lazy(&self.redis, Duration::from_secs(2)) {
            Ok(c) => c,
            Err(e) => return warn!(error = %e, "the delivery history has no Redis connection; it stays empty"),
        };
        let mut tick = tokio::time::interval(TRIM_EVERY);
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            tokio::select! {
                n = rx.recv_many(&mut batch, BATCH) => if n == 0 { return },
                _ = tick.tick() => {
                    let ui = self.ui();
                    self.shared.history.set(ui.keeps_history(), ui.history_rate);
                    if ui.keeps_history() {
                        let apps: Vec<String> = self.live.get().config.apps.iter().map(|a| a.name.clone()).collect();
                        self.trim(&mut conn, &apps, &ui).await;
                    }
                    continue;
                }
                _ = shutdown.changed() => return,
            }
            // The window: what else comes within WINDOW of the first note, so that a delivery's
            // arrival and its attempt (milliseconds apart) make one append. The writer sleeps
            // through it rather than waiting on the queue, so the notes that come meanwhile wake
            // no one (a wake is a cross-thread syscall per note, paid on the ack path).
            // A full batch (a backlog) is written at once.
            if batch.len() < BATCH {
                tokio::time::sleep(WINDOW).await;
            }
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(note) => batch.push(note),
                    Err(_) => break,
                }
            }
            self.flush(&mut conn, &batch).await;
            batch.clear();
        }
    }
}

impl Writer {
    /// One window's notes, written per app; then each app trimmed.
    async fn flush(&self, conn: &mut Conn, batch: &[Note]) {
        let ui = self.ui();
        let prefix = self.live.get().config.redis.key_prefix.clone();
        let mut apps = Vec::new();
        for (app, notes) in by_app(batch) {
            if let Err(e) = write(conn, &tag(&prefix, app), &ui, &notes).await {
                self.shared.metrics.history_errors.inc();
                tracing::debug!(error = %e, "cannot write the delivery history; this window is dropped");
            }
            apps.push(app.to_string());
        }
        self.trim(conn, &apps, &ui).await;
    }

    async fn trim(&self, conn: &mut Conn, apps: &[String], ui: &UiConfig) {
        let prefix = self.live.get().config.redis.key_prefix.clone();
        if let Err(e) = trim_apps(conn, &prefix, apps, ui).await {
            self.shared.metrics.history_errors.inc();
            tracing::debug!(error = %e, "cannot trim the delivery history");
        }
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

/// One app's notes, as one pipeline: per delivery one `APPEND` of its new lines (and a
/// `PEXPIRE` when its arrival is not among them); one `ZADD` of the arrivals; the minutes'
/// counts.
pub async fn write(conn: &mut Conn, tag: &str, ui: &UiConfig, notes: &[&Note]) -> redis::RedisResult<()> {
    let (records, minutes) = fold(notes);
    let mut p = redis::pipe();
    let ttl = ui.history.as_millis() as u64;
    let mut index = redis::cmd("ZADD");
    index.arg(format!("{tag}:idx"));
    let mut indexed = false;
    for (delivery, r) in &records {
        let key = format!("{tag}:t:{delivery}");
        p.cmd("APPEND").arg(&key).arg(&r.lines).ignore();
        match r.arrived_ms {
            // Indexed: the trim removes it (by age and by count).
            Some(ms) => {
                index.arg(ms).arg(*delivery);
                indexed = true;
            }
            // Not indexed here (a later step, or an arrival the full queue dropped): it must
            // not outlive the history even if no index ever names it.
            None => {
                p.cmd("PEXPIRE").arg(&key).arg(ttl).ignore();
            }
        }
    }
    if indexed {
        p.add_command(index).ignore();
    }
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
struct Lines {
    lines: String,
    /// The arrival's time, for the index.
    arrived_ms: Option<u64>,
}

type Minutes<'a> = HashMap<(u64, &'a str), i64>;

/// The notes' lines per delivery (in order of first note), and the minutes' counts.
fn fold<'a>(notes: &[&'a Note]) -> (Vec<(&'a str, Lines)>, Minutes<'static>) {
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
            records.push((&n.delivery, Lines::default()));
            records.len() - 1
        });
        let r = &mut records[i].1;
        r.lines.push_str(&line(n));
        if matches!(n.what, What::Arrived(_)) {
            r.arrived_ms = Some(n.at_ms);
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
        What::Wrote(w) => vec![write_field(w.outcome)],
        What::Held | What::Superseded { .. } | What::Replayed { .. } => vec![],
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
    ("rate_limited", "w:rate_limited"),
    ("failed", "w:failed"),
    ("store_unavailable", "w:store_unavailable"),
    ("socket_opened", "w:socket_opened"),
    ("from_record", "w:from_record"),
];

/// Drop what is past `[ui] history`, then the oldest past `history_max`, with their hashes.
const TRIM: &str = r"
local idx, hashes = KEYS[1], ARGV[1]
local limit = tonumber(ARGV[4])
local n = 0
local old = redis.call('ZRANGEBYSCORE', idx, '-inf', '(' .. ARGV[2], 'LIMIT', 0, limit)
for _, id in ipairs(old) do
  redis.call('UNLINK', hashes .. id)
  redis.call('ZREM', idx, id)
  n = n + 1
end
local over = redis.call('ZCARD', idx) - tonumber(ARGV[3])
if over > 0 then
  local ids = redis.call('ZRANGE', idx, 0, math.min(over, limit) - 1)
  for _, id in ipairs(ids) do redis.call('UNLINK', hashes .. id) end
  redis.call('ZREMRANGEBYRANK', idx, 0, #ids - 1)
  n = n + #ids
end
return n
";

/// Trim every app's history; how many deliveries went.
pub async fn trim_apps(conn: &mut Conn, prefix: &str, apps: &[String], ui: &UiConfig) -> redis::RedisResult<u64> {
    let script = Script::new(TRIM);
    let oldest = now_ms().saturating_sub(ui.history.as_millis() as u64);
    let mut gone = 0;
    for app in apps {
        let tag = tag(prefix, app);
        for _ in 0..TRIM_CALLS {
            let n: u64 = script
                .key(format!("{tag}:idx"))
                .arg(format!("{tag}:t:"))
                .arg(oldest)
                .arg(ui.history_max)
                .arg(TRIM_MAX)
                .invoke_async(conn)
                .await?;
            gone += n;
            if n < TRIM_MAX as u64 {
                break;
            }
        }
    }
    Ok(gone)
}

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
            outcome: "delivered",
            status: 200,
            error: "",
            latency_ms: 2.0,
            next_retry_ms: 0,
            by: "c".into(),
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
