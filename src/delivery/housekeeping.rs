//! What keeps a shard's outbox healthy besides the attempts: due retries promoted back onto the
//! stream, dead letters held to their bounds, acked entries trimmed off the stream, consumers of gone processes forgotten, and the
//! outbox gauges refreshed from Redis.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::Shard;
use crate::clock::now_ms;
use crate::outbox::{self, ShardKeys, Store, StoreOp};
use crate::shared::Shared;

/// How often due retries are moved back onto the stream, and at most how many per call.
const PROMOTE_EVERY: Duration = Duration::from_millis(200);
const PROMOTE_BATCH: usize = 1000;
/// How often dead letters past their bounds are dropped, and at most how many per call.
const TRIM_EVERY: Duration = Duration::from_secs(1);
const TRIM_BATCH: usize = 1000;
/// Consumers of gone processes (nothing pending, no read for this long) are forgotten.
const CONSUMERS_EVERY: Duration = Duration::from_secs(60);
const CONSUMER_IDLE: Duration = Duration::from_secs(600);
const GAUGES_EVERY: Duration = Duration::from_secs(5);
/// At most this many due turns are ended per call.
const TURNS_BATCH: usize = 200;

/// Promote due retries often; bound the dead letters every second; forget consumers of gone
/// processes every minute. (Expired leases are re-claimed by the reader, which holds the
/// permits to run them.)
pub(super) async fn maintain_loop(s: Arc<Shard>, mut stop: watch::Receiver<bool>) {
    let mut last_trim = tokio::time::Instant::now() - TRIM_EVERY;
    let mut last_consumers = tokio::time::Instant::now();
    let mut releases = Releases::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(PROMOTE_EVERY) => {}
            _ = stop.changed() => return,
        }
        promote_due(&s).await;
        if s.shared.drain.draining() {
            continue;
        }
        releases.run(&s).await;
        if s.turns.is_some() || s.runs.is_some() || last_trim.elapsed() >= TRIM_EVERY {
            // Turns that are due end; an app without turns releases what an earlier `order`
            // held (checked less often: usually there is nothing).
            end_due_turns(&s).await;
        }
        if last_trim.elapsed() >= TRIM_EVERY {
            last_trim = tokio::time::Instant::now();
            trim_dead(&s).await;
            if let Err(e) = s.store.trim_acked(&s.keys).await {
                s.store_error(StoreOp::Trim);
                debug!(app = %s.app.name, error = %e, "cannot trim the acked entries");
            }
        }
        if last_consumers.elapsed() >= CONSUMERS_EVERY {
            last_consumers = tokio::time::Instant::now();
            match s.store.remove_idle_consumers(&s.keys, CONSUMER_IDLE, &s.consumer).await {
                Ok(0) => {}
                Ok(n) => info!(app = %s.app.name, removed = n, "removed idle consumers of gone gateway processes"),
                Err(e) => debug!(app = %s.app.name, error = %e, "cannot list consumers"),
            }
        }
    }
}

/// When a shard releases what pauses held: as soon as this process sees the pauses change,
/// and every [`RELEASE_EVERY`] besides (a pause ended while a delivery was being put to wait
/// for it, a process that saw the change and died).
#[derive(Default)]
struct Releases {
    generation: u64,
    last: Option<tokio::time::Instant>,
}

/// See [`Releases`].
const RELEASE_EVERY: Duration = Duration::from_secs(5);

impl Releases {
    async fn run(&mut self, s: &Shard) {
        let generation = s.shared.pauses.snapshot().generation;
        if generation == self.generation && self.last.is_some_and(|t| t.elapsed() < RELEASE_EVERY) {
            return;
        }
        self.last = Some(tokio::time::Instant::now());
        // What Redis holds now, not this process's copy: a pause set a moment ago by another
        // process still holds its deliveries.
        let remain = match s.store.pauses(&s.prefix).await {
            Ok(all) => all.into_iter().filter(|p| p.app == s.app.name).collect::<Vec<_>>(),
            Err(e) => return debug!(app = %s.app.name, error = %e, "cannot read the pauses"),
        };
        self.generation = generation;
        let mut skip = 0;
        loop {
            match s.store.release_paused(&s.keys, &remain, now_ms(), skip).await {
                Ok((released, looked)) => {
                    for id in &released {
                        info!(target: "slackgate::audit", app = %s.app.name, delivery = %id, "resumed");
                        s.shared.history.step(&s.app.name, id, || crate::history::What::Resumed);
                    }
                    if looked < outbox::pauses::RELEASE_BATCH {
                        break;
                    }
                    skip += looked - released.len();
                }
                Err(e) => break debug!(app = %s.app.name, error = %e, "cannot release paused deliveries"),
            }
        }
    }
}

/// Read the pauses into this process's copy every [`crate::pauses::REFRESH`], and show them.
pub(super) async fn refresh_pauses(
    shared: Arc<Shared>,
    store: Store,
    prefix: String,
    apps: Vec<String>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        match store.pauses(&prefix).await {
            Ok(all) => {
                let before = shared.pauses.snapshot();
                if shared.pauses.set(all) {
                    audit_changes(&before, &shared.pauses.snapshot());
                }
                let now = shared.pauses.snapshot();
                let m = &shared.metrics.routes;
                for app in &apps {
                    let pauses = now.of(app);
                    m.pauses.with_label_values(&[app]).set(pauses.len() as i64);
                    let oldest = pauses.iter().map(|p| p.at_ms).min().map_or(0, |at| now_ms().saturating_sub(at));
                    m.oldest_pause_seconds.with_label_values(&[app]).set(oldest as f64 / 1000.0);
                }
            }
            Err(e) => debug!(error = %e, "cannot read the pauses"),
        }
        tokio::select! {
            _ = tokio::time::sleep(crate::pauses::REFRESH) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Each pause this process sees begin or end, as an audit line (whoever set it: the CLI, the
/// admin API, the pages, another replica).
fn audit_changes(before: &crate::pauses::Snapshot, now: &crate::pauses::Snapshot) {
    let all = |s: &crate::pauses::Snapshot| s.by_app.values().flatten().cloned().collect::<Vec<_>>();
    let (was, is) = (all(before), all(now));
    for p in is.iter().filter(|p| !was.contains(p)) {
        info!(target: "slackgate::audit", app = %p.app, team = %p.team, channel = %p.channel, by = %p.by, "pause");
    }
    for p in was.iter().filter(|p| !is.contains(p)) {
        info!(target: "slackgate::audit", app = %p.app, team = %p.team, channel = %p.channel, paused_by = %p.by, "resume");
    }
}

/// Move due retries back onto the stream. A full batch means more are due (a backlog after an
/// outage): keep going, so that promotion never caps the drain rate.
async fn promote_due(s: &Shard) {
    loop {
        match s.store.promote(&s.keys, now_ms(), PROMOTE_BATCH).await {
            Ok(n) if n == PROMOTE_BATCH && !s.shared.drain.draining() => continue,
            Ok(_) => break,
            Err(e) => {
                s.store_error(StoreOp::Promote);
                break debug!(app = %s.app.name, error = %e, "promote failed");
            }
        }
    }
}

/// End the shard's turns that are due, handing each to its conversation's next delivery; a
/// full batch means more are due.
async fn end_due_turns(s: &Shard) {
    loop {
        let rules = s.turns.as_ref().or(s.runs.as_ref());
        match s.store.turns_due(&s.keys, rules, &s.app.runs, now_ms(), TURNS_BATCH).await {
            Ok(due) => {
                for e in &due.ended {
                    s.turn_ended(e);
                }
                for r in &due.reruns {
                    super::runs::noted(&s.shared, &s.app.name, r);
                }
                if due.ended.len() + due.reruns.len() < TURNS_BATCH || s.shared.drain.draining() {
                    return;
                }
            }
            Err(e) => {
                s.store_error(StoreOp::Turns);
                return debug!(app = %s.app.name, error = %e, "cannot end due turns");
            }
        }
    }
}

/// Drop the dead letters past `dead_ttl` or beyond `dead_max` (this shard's share of it).
async fn trim_dead(s: &Shard) {
    let d = &s.app.delivery;
    let oldest_kept = now_ms().saturating_sub(d.dead_ttl.as_millis() as u64);
    let max_kept = d.dead_max.div_ceil(usize::from(s.shards.max(1)));
    loop {
        let trimmed = match s.store.trim_dead(&s.keys, oldest_kept, max_kept, TRIM_BATCH).await {
            Ok(t) => t,
            Err(e) => {
                s.store_error(StoreOp::Trim);
                return debug!(app = %s.app.name, error = %e, "cannot trim dead letters");
            }
        };
        for (reason, n) in trimmed.by_reason() {
            if n > 0 {
                s.shared.metrics.dead_evicted.with_label_values(&[&s.app.name, reason.as_label()]).inc_by(n);
                let reason = reason.as_label();
                warn!(app = %s.app.name, dropped = n, reason, "dead letters dropped (delivery.dead_ttl / dead_max)");
            }
        }
        if trimmed.by_age + trimmed.by_count < TRIM_BATCH as u64 {
            return;
        }
    }
}

/// The outbox gauges of one app, refreshed from Redis every few seconds.
pub(super) struct Gauges {
    pub app: String,
    pub shards: Vec<ShardKeys>,
    pub store: Store,
}

impl Gauges {
    pub async fn run(self, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
        let app = self.app.as_str();
        loop {
            match outbox::app_stats(&self.store, &self.shards, now_ms()).await {
                Ok(st) => {
                    let m = &shared.metrics;
                    m.outbox_ready.with_label_values(&[app]).set(st.ready as i64);
                    m.outbox_in_flight.with_label_values(&[app]).set(st.in_flight as i64);
                    m.outbox_scheduled.with_label_values(&[app]).set(st.scheduled as i64);
                    m.outbox_dead.with_label_values(&[app]).set(st.dead as i64);
                    m.outbox_oldest_age_seconds.with_label_values(&[app]).set(st.oldest_age_ms as f64 / 1000.0);
                    m.turns.held.with_label_values(&[app]).set(st.held as i64);
                    m.turns.conversations_waiting.with_label_values(&[app]).set(st.conversations_waiting as i64);
                    m.routes.waiting.with_label_values(&[app]).set(st.paused as i64);
                }
                Err(e) => {
                    shared.metrics.store_errors.with_label_values(&[app, StoreOp::Stats.as_label()]).inc();
                    debug!(app, error = %e, "cannot read outbox stats");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(GAUGES_EVERY) => {}
                _ = stop.changed() => return,
            }
        }
    }
}
