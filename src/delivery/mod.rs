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
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::config::{AppConfig, Config};
use crate::live::Live;
use crate::metrics::METRICS;
use crate::outbox::{self, Finish, Lease, ShardKeys, Store};
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

async fn read_loop(s: Arc<Shard>, url: String, mut stop: watch::Receiver<bool>) {
    // Its own connection: a blocking XREADGROUP would stall a shared multiplexed one.
    let mut conn = match outbox::connect_lazy(&url, READ_BLOCK + Duration::from_secs(2)) {
        Ok(c) => c,
        Err(e) => return warn!(error = %e, "reader cannot connect"),
    };
    let mut pause = Duration::from_millis(100);
    // The group is created once, and again after an error (a Redis that lost its data).
    let mut group_ready = false;
    let _running = crate::drain::READERS.enter();
    while !*stop.borrow() && !crate::drain::draining() {
        let first = tokio::select! {
            p = s.permits.clone().acquire_owned() => p.expect("semaphore is never closed"),
            _ = stop.changed() => break,
        };
        let count = (1 + s.permits.available_permits()).min(BATCH);
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
                spawn_attempts(&s, leases, Some(first)).await;
            }
            Err(e) => {
                group_ready = false;
                METRICS.store_errors.with_label_values(&[&s.app.name, "read"]).inc();
                warn!(app = %s.app.name, error = %e, "outbox read failed");
                drop(first);
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

/// Promote due retries often; re-claim expired leases every quarter lease.
async fn maintain_loop(s: Arc<Shard>, mut stop: watch::Receiver<bool>) {
    let reclaim_every = (s.app.delivery.lease / 4).max(Duration::from_millis(250));
    let mut last_reclaim = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(PROMOTE_EVERY) => {}
            _ = stop.changed() => return,
        }
        // A full batch means more are due (a backlog after an outage): keep going, so that
        // promotion never caps the drain rate.
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
        if last_reclaim.elapsed() < reclaim_every || crate::drain::draining() {
            continue;
        }
        last_reclaim = tokio::time::Instant::now();
        let room = s.permits.available_permits().min(BATCH);
        if room == 0 {
            continue;
        }
        match s.store.reclaim(&s.keys, &s.consumer, s.app.delivery.lease, room).await {
            Ok(leases) if !leases.is_empty() => {
                info!(app = %s.app.name, count = leases.len(), "re-claimed expired leases");
                spawn_attempts(&s, leases, None).await;
            }
            Ok(_) => {}
            Err(e) => {
                METRICS.store_errors.with_label_values(&[&s.app.name, "reclaim"]).inc();
                debug!(app = %s.app.name, error = %e, "reclaim failed");
            }
        }
    }
}

async fn spawn_attempts(s: &Arc<Shard>, leases: Vec<Lease>, mut first: Option<tokio::sync::OwnedSemaphorePermit>) {
    for lease in leases {
        let permit = match first.take() {
            Some(p) => p,
            None => s.permits.clone().acquire_owned().await.expect("semaphore is never closed"),
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
    let stored = match s.store.load(&s.keys, &lease.delivery).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            // The delivery's record is gone (cancelled or already completed): drop the entry.
            let _ = s.store.finish(&s.keys, &s.consumer, &lease, Finish::Done).await;
            return;
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
