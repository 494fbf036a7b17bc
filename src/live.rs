//! The running configuration, replaceable while the gateway serves: SIGHUP (or `slackgate
//! reload`) re-reads `gateway.toml` and its included app files. A bad file is refused with its
//! error and the running config stays. Apps may be added, removed or changed; `[server]` and
//! `[redis]` need a restart. Requests in flight keep the snapshot they started with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::config::{
    AppConfig, BoundPorts, Config, ConfigError, Durability, Overrides, RedisConfig, RedisTarget, RouteKind,
};

/// One generation of the config with its routing table.
pub struct Snapshot {
    pub config: Arc<Config>,
    routes: HashMap<String, (usize, RouteKind)>,
}

impl Snapshot {
    fn new(config: Arc<Config>) -> Self {
        Snapshot { routes: config.routes(), config }
    }

    /// The app and role of a request path.
    pub fn route(&self, path: &str) -> Option<(&Arc<AppConfig>, RouteKind)> {
        self.routes.get(path).map(|&(i, kind)| (&self.config.apps[i], kind))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0} changed: [server], [egress] and [redis] take effect on restart only; nothing was reloaded")]
    NeedsRestart(String),
}

pub struct Live {
    path: PathBuf,
    overrides: Overrides,
    /// Listening addresses written with port 0, and the ones actually bound.
    bound: BoundPorts,
    current: RwLock<Arc<Snapshot>>,
    generation: watch::Sender<u64>,
}

impl Live {
    pub fn new(config: Arc<Config>, path: PathBuf, overrides: Overrides) -> Self {
        let (generation, _) = watch::channel(0);
        Live {
            path,
            overrides,
            bound: BoundPorts::default(),
            current: RwLock::new(Arc::new(Snapshot::new(config))),
            generation,
        }
    }

    /// The addresses bound for port 0 at start, so a reloaded file still matches them.
    pub fn with_bound(mut self, bound: BoundPorts) -> Self {
        self.bound = bound;
        self
    }

    pub fn get(&self) -> Arc<Snapshot> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes whenever a reload takes effect.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Re-read the files; swap in the new apps if they are valid and nothing else changed.
    pub fn reload(&self) -> Result<usize, ReloadError> {
        let mut new = Config::from_file(&self.path, &self.overrides)?;
        new.resolve_ports(&self.bound);
        let old = self.get().config.clone();
        if new.server != old.server {
            return Err(ReloadError::NeedsRestart("[server]".into()));
        }
        if new.egress != old.egress {
            return Err(ReloadError::NeedsRestart("[egress]".into()));
        }
        let changed = redis_changes(&old.redis, &new.redis);
        if !changed.is_empty() {
            return Err(ReloadError::NeedsRestart(format!("[redis] ({})", changed.join(", "))));
        }
        let apps = new.apps.len();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Snapshot::new(Arc::new(new)));
        self.generation.send_modify(|g| *g += 1);
        Ok(apps)
    }
}

/// The `[redis]` keys whose values differ: all of the section is read once, at start (its
/// connections, logins and durability are made then), so any of them needs a restart.
fn redis_changes(old: &RedisConfig, new: &RedisConfig) -> Vec<&'static str> {
    let (o, n) = (&old.auth, &new.auth);
    let replicated = |d: &Durability| match *d {
        Durability::Local => (false, None, None),
        Durability::Replicated { replicas, timeout } => (true, Some(replicas), Some(timeout)),
    };
    let (od, nd) = (replicated(&old.durability), replicated(&new.durability));
    let client = |t: &crate::config::RedisTls| t.client.clone().unzip();
    let ((ocert, okey), (ncert, nkey)) = (client(&o.tls), client(&n.tls));
    let target = match &new.target {
        RedisTarget::Cluster(_) => "redis.cluster",
        RedisTarget::Sentinel { .. } => "redis.sentinel",
        RedisTarget::Url(_) | RedisTarget::Embedded => "redis.url",
    };
    [
        (old.target != new.target, target),
        (old.key_prefix != new.key_prefix, "redis.key_prefix"),
        (old.shards != new.shards, "redis.shards"),
        (od.0 != nd.0, "redis.durability"),
        (od.1 != nd.1, "redis.wait_replicas"),
        (od.2 != nd.2, "redis.wait_timeout"),
        (o.username != n.username, "redis.username"),
        (o.password != n.password, "redis.password"),
        (o.sentinel_username != n.sentinel_username, "redis.sentinel_username"),
        (o.sentinel_password != n.sentinel_password, "redis.sentinel_password"),
        (o.tls.ca != n.tls.ca, "redis.tls_ca_file"),
        (ocert != ncert, "redis.tls_cert_file"),
        (okey != nkey, "redis.tls_key_file"),
    ]
    .into_iter()
    .filter_map(|(changed, key)| changed.then_some(key))
    .collect()
}
