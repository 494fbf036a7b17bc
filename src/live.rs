//! The running configuration, replaceable while the gateway serves: SIGHUP (or `slackgate
//! reload`) re-reads `gateway.toml` and its included app files. A bad file is refused with its
//! error and the running config stays. Apps may be added, removed or changed; `[server]` and
//! `[redis]` need a restart. Requests in flight keep the snapshot they started with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::config::{AppConfig, BoundPorts, Config, ConfigError, Overrides, RouteKind};

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
    #[error("{0} changed: [server] and [redis] take effect on restart only; nothing was reloaded")]
    NeedsRestart(&'static str),
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
            return Err(ReloadError::NeedsRestart("[server]"));
        }
        if new.egress != old.egress {
            return Err(ReloadError::NeedsRestart("[egress]"));
        }
        let (r, o) = (&new.redis, &old.redis);
        if (&r.target, &r.key_prefix, r.shards) != (&o.target, &o.key_prefix, o.shards) {
            return Err(ReloadError::NeedsRestart("[redis]"));
        }
        let apps = new.apps.len();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Snapshot::new(Arc::new(new)));
        self.generation.send_modify(|g| *g += 1);
        Ok(apps)
    }
}
