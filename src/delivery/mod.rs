//! Delivery workers: take leased entries from each app shard's outbox, send them through the
//! upstream client, and complete, reschedule or dead-letter them — fenced, so only the current
//! lease holder's word counts. Safety never depends on cleanup code: an abandoned entry is simply
//! re-claimed by a live worker once its lease runs out.

pub mod policy;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::sync::atomic::Ordering;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::config::{AppConfig, Config};
use crate::live::Live;
use crate::metrics::METRICS;
use crate::outbox::{self, Finish, Lease, Loaded, ShardKeys, Store};
use crate::slack::{self, Kind};
use crate::upstream::{Outgoing, UpstreamClient};
use policy::Verdict;

/// How long one blocking read waits for new entries.
const READ_BLOCK: Duration = Duration::from_secs(1);
/// How often due retries are moved back onto the stream.
const PROMOTE_EVERY: Duration = Duration::from_millis(200);
const BATCH: usize = 64;
/// Due retries moved back onto the stream per script call.
const PROMOTE_BATCH: usize = 1000;
const GAUGES_EVERY: Duration = Duration::from_secs(5);
/// How often dead letters past their bounds are dropped, and at most how many per call.
const TRIM_EVERY: Duration = Duration::from_secs(1);
const TRIM_BATCH: usize = 1000;
/// Consumers of gone processes (nothing pending, no read for this long) are forgotten.
const CONSUMERS_EVERY: Duration = Duration::from_secs(60);
const CONSUMER_IDLE: Duration = Duration::from_secs(600);

/// Whether this process's delivery workers are running, for `/readyz`.
pub static WORKERS_RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// The background service that runs every app's workers in this process.
pub struct DeliveryService {
    live: Arc<Live>,
    redis_url: String,
    consumer: String,
}

impl DeliveryService {
    pub fn new(live: Arc<Live>, redis_url: String) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let consumer = format!("{}-{}-{:08x}", host.trim(), std::process::id(), rand::random::<u32>());
        DeliveryService { live, redis_url, consumer }
    }

    /// Readers, maintainers and gauges for every app shard of one config generation.
    fn spawn_workers(
        &self,
        config: &Config,
        store: &Store,
        client: &Arc<UpstreamClient>,
        stop: watch::Receiver<bool>,
    ) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        for app in &config.apps {
            crate::metrics::init_app(&app.name);
            let permits = Arc::new(Semaphore::new(app.delivery.max_in_flight));
            let shards: Vec<ShardKeys> =
                (0..config.redis.shards).map(|i| ShardKeys::new(&config.redis.key_prefix, &app.name, i)).collect();
            for keys in &shards {
                let s = Arc::new(Shard {
                    app: app.clone(),
                    keys: keys.clone(),
                    store: store.clone(),
                    client: client.clone(),
                    permits: permits.clone(),
                    consumer: self.consumer.clone(),
                    shards: config.redis.shards,
                    response_url_hosts: config.server.response_url_hosts.clone().into(),
                });
                tasks.spawn(read_loop(s.clone(), self.redis_url.clone(), stop.clone()));
                tasks.spawn(maintain_loop(s, stop.clone()));
            }
            tasks.spawn(gauge_loop(app.name.clone(), shards, store.clone(), stop.clone()));
        }
        tasks
    }
}

/// What every task of one app shard shares.
struct Shard {
    app: Arc<AppConfig>,
    keys: ShardKeys,
    store: Store,
    client: Arc<UpstreamClient>,
    permits: Arc<Semaphore>,
    consumer: String,
    /// How many shards the app has (its dead-letter bound is split among them).
    shards: u16,
    /// Where a late reply may go (`[server] response_url_hosts`).
    response_url_hosts: Arc<[String]>,
}

#[async_trait]
impl BackgroundService for DeliveryService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let store = match outbox::connect_lazy(&self.redis_url, Duration::from_secs(2)) {
            Ok(c) => Store::new(c),
            Err(e) => return warn!(error = %e, "delivery workers cannot start"),
        };
        let client = Arc::new(UpstreamClient::new());
        warn_if_evicting(&store).await;
        let mut generations = self.live.subscribe();
        WORKERS_RUNNING.store(true, Ordering::Relaxed);
        // One round per config generation: a reload stops the loops (attempts in flight go on
        // with the config they started with) and starts them for the new apps.
        loop {
            let config = self.live.get().config.clone();
            let (stop_tx, stop_rx) = watch::channel(false);
            let mut tasks = self.spawn_workers(&config, &store, &client, stop_rx);
            info!(consumer = %self.consumer, apps = config.apps.len(), "delivery workers started");
            let reloaded = tokio::select! {
                _ = shutdown.changed() => false,
                changed = generations.changed() => changed.is_ok(),
            };
            let _ = stop_tx.send(true);
            while tasks.join_next().await.is_some() {}
            if !reloaded {
                break;
            }
        }
        WORKERS_RUNNING.store(false, Ordering::Relaxed);
        info!("delivery workers stopped");
    }
}

/// An evicted outbox entry is a lost delivery: say so at start when Redis may evict keys.
async fn warn_if_evicting(store: &Store) {
    if let Ok(Ok(Some(policy))) = tokio::time::timeout(Duration::from_secs(2), store.eviction_policy()).await {
        if policy != "noeviction" {
            warn!(policy, "Redis maxmemory-policy may evict keys, and an evicted outbox entry is a lost delivery: set maxmemory-policy noeviction");
        }
    }
}

async fn read_loop(s: Arc<Shard>, url: String, mut stop: watch::Receiver<bool>) {
    // Its own connection: a blocking XREADGROUP would stall a shared multiplexed one.
    let mut conn = match outbox::connect_lazy(&url, READ_BLOCK + Duration::from_secs(2)) {
        Ok(c) => c,
        Err(e) => return warn!(error = %e, "reader cannot connect"),
    };
    let mut pause = Duration::from_millis(100);
    // The group is created once, and again after an error (a Redis that lost its data).
    let mut group_ready = false;
    let reclaim_every = (s.app.delivery.lease / 4).max(Duration::from_millis(250));
    let mut last_reclaim = tokio::time::Instant::now();
    // The shards of an app share its permits: each reader takes at most its share at a time.
    let share = (s.app.delivery.max_in_flight / usize::from(s.shards.max(1))).clamp(1, BATCH);
    let _running = crate::drain::READERS.enter();
    while !*stop.borrow() && !crate::drain::draining() {
        // Take no more entries than there are permits for: an entry read is leased, and its
        // lease must not run while it waits for a permit.
        let mut permits = tokio::select! {
            p = s.permits.clone().acquire_owned() => p.expect("semaphore is never closed"),
            _ = stop.changed() => break,
        };
        let more = s.permits.available_permits().min(share - 1) as u32;
        if let Ok(extra) = s.permits.clone().try_acquire_many_owned(more) {
            permits.merge(extra);
        }
        if last_reclaim.elapsed() >= reclaim_every {
            last_reclaim = tokio::time::Instant::now();
            permits = match reclaim(&s, permits).await {
                Some(left) => left,
                None => continue,
            };
        }
        let count = permits.num_permits();
        let read = async {
            if !group_ready {
                s.store.ensure_group(&s.keys).await?;
                group_ready = true;
            }
            outbox::read_new(&mut conn, &s.keys, &s.consumer, count, READ_BLOCK).await
        };
        let leases = tokio::select! {
            r = read => r,
            _ = stop.changed() => break,
        };
        match leases {
            Ok(leases) => {
                pause = Duration::from_millis(100);
                spawn_attempts(&s, leases, permits);
            }
            Err(e) => {
                group_ready = false;
                METRICS.store_errors.with_label_values(&[&s.app.name, "read"]).inc();
                warn!(app = %s.app.name, error = %e, "outbox read failed");
                drop(permits);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Refresh the outbox gauges of one app from Redis every few seconds.
async fn gauge_loop(app: String, shards: Vec<ShardKeys>, store: Store, mut stop: watch::Receiver<bool>) {
    loop {
        match outbox::app_stats(&store, &shards, now_ms()).await {
            Ok(st) => {
                let m = &*METRICS;
                m.outbox_ready.with_label_values(&[&app]).set(st.ready as i64);
                m.outbox_in_flight.with_label_values(&[&app]).set(st.in_flight as i64);
                m.outbox_scheduled.with_label_values(&[&app]).set(st.scheduled as i64);
                m.outbox_dead.with_label_values(&[&app]).set(st.dead as i64);
                m.outbox_oldest_age_seconds.with_label_values(&[&app]).set(st.oldest_age_ms as f64 / 1000.0);
            }
            Err(e) => {
                METRICS.store_errors.with_label_values(&[&app, "stats"]).inc();
                debug!(app = %app, error = %e, "cannot read outbox stats");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(GAUGES_EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Promote due retries often; bound the dead letters every second; forget consumers of gone
/// processes every minute. (Expired leases are re-claimed by the reader, which holds the
/// permits to run them.)
async fn maintain_loop(s: Arc<Shard>, mut stop: watch::Receiver<bool>) {
    let mut last_trim = tokio::time::Instant::now() - TRIM_EVERY;
    let mut last_consumers = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(PROMOTE_EVERY) => {}
            _ = stop.changed() => return,
        }
        promote_due(&s).await;
        if crate::drain::draining() {
            continue;
        }
        if last_trim.elapsed() >= TRIM_EVERY {
            last_trim = tokio::time::Instant::now();
            trim_dead(&s).await;
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

/// Move due retries back onto the stream. A full batch means more are due (a backlog after an
/// outage): keep going, so that promotion never caps the drain rate.
async fn promote_due(s: &Shard) {
    loop {
        match s.store.promote(&s.keys, now_ms(), PROMOTE_BATCH).await {
            Ok(n) if n == PROMOTE_BATCH && !crate::drain::draining() => continue,
            Ok(_) => break,
            Err(e) => {
                METRICS.store_errors.with_label_values(&[&s.app.name, "promote"]).inc();
                break debug!(app = %s.app.name, error = %e, "promote failed");
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
        let t = match s.store.trim_dead(&s.keys, oldest_kept, max_kept, TRIM_BATCH).await {
            Ok(t) => t,
            Err(e) => {
                METRICS.store_errors.with_label_values(&[&s.app.name, "trim"]).inc();
                return debug!(app = %s.app.name, error = %e, "cannot trim dead letters");
            }
        };
        for (reason, n) in [("ttl", t.by_age), ("max", t.by_count)] {
            if n > 0 {
                METRICS.dead_evicted.with_label_values(&[&s.app.name, reason]).inc_by(n);
                warn!(app = %s.app.name, dropped = n, reason, "dead letters dropped (delivery.dead_ttl / dead_max)");
            }
        }
        if t.by_age + t.by_count < TRIM_BATCH as u64 {
            return;
        }
    }
}

/// Take over entries whose lease ran out, as many as `permits` allow; returns the permits
/// left for reading new entries (`None`: all were used).
async fn reclaim(s: &Arc<Shard>, mut permits: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
    match s.store.reclaim(&s.keys, &s.consumer, s.app.delivery.lease, permits.num_permits()).await {
        Ok(leases) if !leases.is_empty() => {
            info!(app = %s.app.name, count = leases.len(), "re-claimed expired leases");
            let used = permits.split(leases.len().min(permits.num_permits()));
            if let Some(used) = used {
                spawn_attempts(s, leases, used);
            }
            (permits.num_permits() > 0).then_some(permits)
        }
        Ok(_) => Some(permits),
        Err(e) => {
            METRICS.store_errors.with_label_values(&[&s.app.name, "reclaim"]).inc();
            debug!(app = %s.app.name, error = %e, "reclaim failed");
            Some(permits)
        }
    }
}

/// One task per lease, each with one of `permits` (taken before the entries were read); the
/// permits of entries that did not come are released.
fn spawn_attempts(s: &Arc<Shard>, leases: Vec<Lease>, mut permits: OwnedSemaphorePermit) {
    for lease in leases {
        let Some(permit) = permits.split(1) else {
            // Never more entries than permits; if Redis returned more, the rest wait for a
            // reclaim after their lease.
            return warn!(app = %s.app.name, "more entries than permits");
        };
        let s = s.clone();
        let in_flight = crate::drain::ATTEMPTS.enter();
        let span = info_span!("delivery", app = %s.app.name, delivery = %lease.delivery, token = lease.token);
        tokio::spawn(
            async move {
                attempt(&s, lease).await;
                drop((permit, in_flight));
            }
            .instrument(span),
        );
    }
}

/// One attempt for one leased entry, start to fenced finish.
async fn attempt(s: &Shard, lease: Lease) {
    let app = &s.app.name;
    let stored = match s.store.load_leased(&s.keys, &s.consumer, &lease).await {
        Ok(Loaded::Stored(d)) => d,
        Ok(Loaded::Gone) => {
            // The delivery's record is gone (cancelled or already completed): drop the entry.
            let _ = s.store.finish(&s.keys, &s.consumer, &lease, Finish::Done).await;
            return;
        }
        Ok(Loaded::LeaseLost) => {
            // Taken over while this worker waited for a permit: the new holder sends it.
            METRICS.fence_rejections.with_label_values(&[app]).inc();
            return debug!("lease lost before the attempt; not sent");
        }
        Err(e) => {
            METRICS.store_errors.with_label_values(&[app, "load"]).inc();
            return warn!(error = %e, "cannot load delivery; its lease will expire and it will be retried");
        }
    };
    if stored.kind == Kind::Interactivity && stored.detail == "block_suggestion" {
        // Its inline attempt failed or its holder died: options are useless by now.
        if let Ok(true) = s.store.finish(&s.keys, &s.consumer, &lease, Finish::Done).await {
            METRICS.inline.with_label_values(&[app, stored.kind.as_str(), "expired"]).inc();
            METRICS.deliveries.with_label_values(&[app, "expired"]).inc();
        }
        return;
    }
    let attempt_no = stored.retries + lease.token;
    let out = Outgoing {
        upstream: &s.app.upstream,
        path: &stored.path,
        content_type: &stored.content_type,
        body: stored.body.clone(),
        secret: &s.app.secrets[0],
        delivery_id: &lease.delivery,
        attempt: attempt_no,
    };
    let started = std::time::Instant::now();
    let result = tokio::select! {
        r = s.client.send(out, s.app.delivery.timeout) => r,
        _ = keep_lease(s, &lease) => return,
    };
    crate::metrics::attempt_observed(app, &result, started.elapsed());
    let now = now_ms();
    let verdict = policy::judge(&result);
    let (finish, outcome) = policy::step(&s.app.delivery, &verdict, stored.retries, stored.received_ms, now);
    let next_retry_ms = match &finish {
        Finish::Retry { due_ms, .. } => due_ms.saturating_sub(now),
        _ => 0,
    };
    let (status, error) = match &result {
        Ok(r) => (r.status, String::new()),
        Err(e) => (0, e.to_string()),
    };
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    match s.store.finish(&s.keys, &s.consumer, &lease, finish).await {
        Ok(true) => {
            METRICS.deliveries.with_label_values(&[app, outcome]).inc();
            if let (Verdict::Delivered, Ok(resp)) = (&verdict, &result) {
                let lag = now.saturating_sub(stored.received_ms) as f64 / 1000.0;
                METRICS.delivered_lag_seconds.with_label_values(&[app]).observe(lag);
                // A command's or block action's answer cannot reach Slack in the request any more.
                if slack::replies_late(stored.kind, &stored.detail) && !stored.response_url.is_empty() {
                    let ct = resp.content_type.as_deref();
                    let allowed = &s.response_url_hosts;
                    crate::upstream::post_late_reply(&s.client, app, &stored.response_url, allowed, ct, &resp.body)
                        .await;
                }
            }
            info!(target: "slackgate::audit", attempt = attempt_no, outcome, status, error = %error, latency_ms, next_retry_ms, "attempt");
        }
        Ok(false) => {
            METRICS.fence_rejections.with_label_values(&[app]).inc();
            warn!(attempt = attempt_no, outcome, "lease was taken by another worker; result discarded");
        }
        Err(e) => {
            METRICS.store_errors.with_label_values(&[app, "finish"]).inc();
            warn!(attempt = attempt_no, error = %e, "cannot record the outcome; the lease will expire and the entry be retried");
        }
    }
}

/// Extend the lease every third of its length while an attempt runs. Returns only when the
/// lease is lost, which abandons the attempt: its result could not be recorded anyway.
async fn keep_lease(s: &Shard, lease: &Lease) {
    let every = s.app.delivery.lease / 3;
    loop {
        tokio::time::sleep(every).await;
        match s.store.extend(&s.keys, &s.consumer, lease).await {
            Ok(true) => {}
            Ok(false) => {
                METRICS.fence_rejections.with_label_values(&[&s.app.name]).inc();
                return warn!("lease lost during the attempt; abandoning it");
            }
            Err(e) => debug!(error = %e, "lease extension failed; will try again"),
        }
    }
}
