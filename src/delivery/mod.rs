//! Delivery workers: take leased entries from each app shard's outbox, send them through the
//! upstream client, and complete, reschedule or dead-letter them — fenced, so only the current
//! lease holder's word counts. Safety never depends on cleanup code: an abandoned entry is simply
//! re-claimed by a live worker once its lease runs out.
//!
//! - `reader`: read and re-claim entries, one attempt per entry, the fenced finish.
//! - `housekeeping`: promote due retries, bound the dead letters, forget gone consumers, gauges.

mod finisher;
mod held;
mod housekeeping;
mod leased;
mod reach;
mod reader;
mod routing;
mod runs;
mod shadow;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::config::{AppConfig, Config};
use crate::live::Live;
use crate::outbox::Endpoint;
use crate::outbox::{self, Conversations, ShardKeys, Store, StoreOp, TurnEnded, TurnRules};
use crate::shared::Shared;
use crate::upstream::UpstreamClient;

/// The background service that runs every app's workers in this process.
pub struct DeliveryService {
    live: Arc<Live>,
    shared: Arc<Shared>,
    redis: Endpoint,
    consumer: String,
}

/// What every task of one app shard shares.
struct Shard {
    app: Arc<AppConfig>,
    keys: ShardKeys,
    store: Store,
    client: Arc<UpstreamClient>,
    shared: Arc<Shared>,
    /// The app's attempt slots (`delivery.max_in_flight`), shared by its shards.
    permits: Arc<Semaphore>,
    /// The app's slots for attempts that are over and wait for their outcome to be recorded
    /// (as many), shared by its shards: an attempt gives its slot back as soon as the bot has
    /// answered, so the next entries are sent while Redis records the last ones.
    recording: Arc<Semaphore>,
    consumer: String,
    /// How many shards the app has (its permits and dead-letter bound are split among them).
    shards: u16,
    /// Where a late reply may go (`[server] response_url_hosts`).
    response_url_hosts: Arc<[String]>,
    /// With the egress on: the conversation records, where each attempt says which message
    /// it carries (the egress reads them to attribute replies).
    conversations: Option<Conversations>,
    /// The app's turns (`None`: it takes none).
    turns: Option<TurnRules>,
    /// The rules its runs are tracked by (`rerun_lost`; `None`: not tracked).
    runs: Option<TurnRules>,
    /// `[redis] key_prefix` (for the pauses' register and the shadow's lane).
    prefix: Arc<str>,
    /// `[egress] listen`, with an app that has a shadow (its copies' `response_url` goes there).
    egress: Option<Arc<str>>,
    /// Per entry of `upstreams`: its own attempt slots, when it sets `max_in_flight` (within
    /// the app's), shared by the app's shards.
    route_slots: Arc<[Option<Arc<Semaphore>>]>,
    /// Where its delivered entries are finished together (apps without turns).
    finisher: finisher::Finisher,
    /// A shadow's lane: whether its bot can be reached (shared by the lane's shards).
    reach: Option<Arc<reach::Reach>>,
}

impl Shard {
    /// Count a Redis error of `op`.
    fn store_error(&self, op: StoreOp) {
        self.shared.metrics.store_errors.with_label_values(&[&self.app.name, op.as_label()]).inc();
    }

    /// Count and audit a turn that ended (and the deliveries it superseded).
    fn turn_ended(&self, ended: &TurnEnded) {
        crate::history::turns::ended(&self.shared, &self.app.name, ended);
    }
}

/// What every worker of one config generation is started with.
struct Generation<'a> {
    config: &'a Config,
    store: &'a Store,
    client: &'a Arc<UpstreamClient>,
    stop: &'a watch::Receiver<bool>,
}

impl DeliveryService {
    pub fn new(live: Arc<Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let consumer = format!("{}-{}-{:08x}", host.trim(), std::process::id(), rand::random::<u32>());
        DeliveryService { live, shared, redis, consumer }
    }

    /// Readers, housekeepers and gauges for every app shard of one config generation, and for
    /// each app's shadow, which runs as an app of its own (its lane), on as many shards, its
    /// attempts noted where the egress's shadow base looks for them.
    fn spawn_workers(
        &self,
        config: &Config,
        in_use: &[u16],
        store: &Store,
        client: &Arc<UpstreamClient>,
        stop: watch::Receiver<bool>,
    ) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        let apps = config.apps.iter().map(|a| a.name.clone()).collect();
        let prefix = config.redis.key_prefix.clone();
        tasks.spawn(housekeeping::refresh_pauses(self.shared.clone(), store.clone(), prefix, apps, stop.clone()));
        let window = config.egress.attribution_window;
        let records = |prefix: &str| config.egress.listen.as_ref().map(|_| store.conversations(prefix, window));
        let (conversations, shadows) =
            (records(&config.redis.key_prefix), records(&crate::config::shadow_prefix(&config.redis.key_prefix)));
        let on = Generation { config, store, client, stop: &stop };
        for (app, n) in config.apps.iter().zip(in_use) {
            self.spawn_app(&mut tasks, &on, app.clone(), *n, conversations.clone());
            if let Some(lane) = app.shadow_lane() {
                self.spawn_app(&mut tasks, &on, Arc::new(lane), *n, shadows.clone());
            }
        }
        tasks
    }

    /// One app's shards (`in_use` of them): a reader and a housekeeper each, and its gauges.
    fn spawn_app(
        &self,
        tasks: &mut JoinSet<()>,
        on: &Generation<'_>,
        app: Arc<AppConfig>,
        in_use: u16,
        conversations: Option<Conversations>,
    ) {
        let config = on.config;
        let permits = Arc::new(Semaphore::new(app.delivery.max_in_flight));
        let recording = Arc::new(Semaphore::new(app.delivery.max_in_flight));
        let route_slots: Arc<[Option<Arc<Semaphore>>]> = app
            .upstreams
            .iter()
            .map(|r| r.own_slots.then(|| Arc::new(Semaphore::new(r.delivery.max_in_flight))))
            .collect();
        let response_url_hosts: Arc<[String]> = config.server.response_url_hosts.clone().into();
        let reach = crate::config::live_of_lane(&app.name).map(|live| {
            let gauge = self.shared.metrics.routes.shadow_unreachable.with_label_values(&[live]);
            Arc::new(reach::Reach::new(&app.name, gauge))
        });
        let shards: Vec<ShardKeys> =
            (0..in_use).map(|i| ShardKeys::new(&config.redis.key_prefix, &app.name, i)).collect();
        for keys in &shards {
            let s = Arc::new(Shard {
                app: app.clone(),
                keys: keys.clone(),
                store: on.store.clone(),
                client: on.client.clone(),
                shared: self.shared.clone(),
                permits: permits.clone(),
                recording: recording.clone(),
                consumer: self.consumer.clone(),
                shards: in_use,
                response_url_hosts: response_url_hosts.clone(),
                conversations: conversations.clone(),
                turns: app.turns.when_on(),
                runs: app.run_rules(),
                route_slots: route_slots.clone(),
                prefix: config.redis.key_prefix.as_str().into(),
                egress: config.egress.listen.as_deref().map(Arc::from),
                finisher: finisher::Finisher::spawn(on.store.clone(), keys.clone(), self.consumer.clone()),
                reach: reach.clone(),
            });
            tasks.spawn(reader::read_loop(s.clone(), self.redis.clone(), on.stop.clone()));
            tasks.spawn(housekeeping::maintain_loop(s, on.stop.clone()));
        }
        let gauges = housekeeping::Gauges { app: app.name.clone(), shards, store: on.store.clone() };
        tasks.spawn(gauges.run(self.shared.clone(), on.stop.clone()));
    }
}

#[async_trait]
impl BackgroundService for DeliveryService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let lazy = outbox::LazyStore::outbox(&self.redis, Duration::from_secs(2));
        let store = match lazy.get() {
            Ok(store) => store.clone(),
            Err(e) => return warn!(error = %e, "delivery workers cannot start"),
        };
        let client = Arc::new(UpstreamClient::new());
        warn_if_evicting(&store).await;
        let mut generations = self.live.subscribe();
        tokio::spawn(shadow::copier(self.live.clone(), self.shared.clone(), store.clone(), shutdown.clone()));
        tokio::spawn(runs::watcher(self.live.clone(), self.shared.clone(), store.clone(), shutdown.clone()));
        self.shared.set_workers_running(true);
        // One round per config generation: a reload stops the loops (attempts in flight go on
        // with the config they started with) and starts them for the new apps.
        loop {
            let config = self.live.get().config.clone();
            let (stop_tx, stop_rx) = watch::channel(false);
            let in_use = shards_in_use(&config, &store, &self.shared).await;
            let mut tasks = self.spawn_workers(&config, &in_use, &store, &client, stop_rx);
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
        self.shared.set_workers_running(false);
        info!("delivery workers stopped");
    }
}

/// Per app, the shards to read: after `shards` was lowered, the old ones too, until a restart
/// finds them registered (they are drained, never written). Redis down at start: the
/// configured count (the register is read again at the next reload).
async fn shards_in_use(config: &Config, store: &Store, shared: &Shared) -> Vec<u16> {
    // Before the apps' shards are registered: a register with none is a deployment that no
    // version before turns ever wrote to (its receipts are all where this version looks).
    let since = store.sharded_by_conversation(&config.redis.key_prefix, crate::clock::now_ms());
    match tokio::time::timeout(Duration::from_secs(2), since).await {
        Ok(Ok(since)) => {
            let _ = shared.sharded_since.set(since);
        }
        Ok(Err(e)) => debug!(error = %e, "cannot register when conversations began to pick the shards"),
        Err(_) => debug!("cannot register when conversations began to pick the shards: no answer in 2 s"),
    }
    let mut out = Vec::new();
    for app in &config.apps {
        let n = config.redis.shards;
        let found = store.shards_in_use(&config.redis.key_prefix, &app.name, n, true);
        out.push(match tokio::time::timeout(Duration::from_secs(2), found).await {
            Ok(Ok(in_use)) => {
                if in_use > n {
                    info!(app = %app.name, configured = n, in_use, "reading the shards a larger `shards` left behind");
                }
                in_use
            }
            _ => n,
        });
    }
    out
}

/// An evicted outbox entry is a lost delivery: say so at start when Redis may evict keys.
async fn warn_if_evicting(store: &Store) {
    if let Ok(Ok(Some(policy))) = tokio::time::timeout(Duration::from_secs(2), store.eviction_policy()).await {
        if policy != "noeviction" {
            warn!(
                policy,
                "Redis maxmemory-policy may evict keys, and an evicted outbox entry is a lost delivery: set \
                 maxmemory-policy noeviction"
            );
        }
    }
}
