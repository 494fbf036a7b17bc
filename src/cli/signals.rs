//! Signals: Pingora's (SIGTERM graceful, SIGINT at once, SIGQUIT hand the sockets to a
//! successor started with `--upgrade`) plus SIGHUP, which reloads the apps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::{ShutdownSignal, ShutdownSignalWatch, ShutdownWatch, UnixShutdownSignalWatch};
use pingora::services::background::BackgroundService;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};

use crate::config::Config;
use crate::drain::Drain;
use crate::live::Live;

/// Pingora's Unix signals (SIGTERM graceful, SIGINT at once, SIGQUIT hand the sockets to a
/// successor started with `--upgrade`), remembering a hand-over.
pub(super) struct Signals {
    pub handed_over: Arc<AtomicBool>,
    pub grace: Duration,
    pub drain: Arc<Drain>,
}

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let signal = UnixShutdownSignalWatch.recv().await;
        match signal {
            ShutdownSignal::GracefulUpgrade => self.handed_over.store(true, Ordering::Relaxed),
            ShutdownSignal::GracefulTerminate => {
                info!(grace = ?self.grace, "SIGTERM: draining");
                if !self.drain.drain(self.grace).await {
                    warn!("grace period over with work in flight; leases and Slack's retries cover it");
                }
            }
            ShutdownSignal::FastShutdown => {}
        }
        signal
    }
}

/// What to do with a config that was just reloaded (export the new apps' series).
pub(super) type OnReload = Box<dyn Fn(&Config) + Send + Sync>;

/// Reloads the apps on SIGHUP; a bad file is refused and the running config stays.
pub(super) struct Reloader {
    live: Arc<Live>,
    on_reload: OnReload,
}

impl Reloader {
    pub fn new(live: Arc<Live>, on_reload: OnReload) -> Self {
        Reloader { live, on_reload }
    }
}

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => return warn!(error = %e, "cannot watch SIGHUP; reload needs a restart"),
        };
        loop {
            tokio::select! {
                _ = hup.recv() => match self.live.reload() {
                    Ok(apps) => {
                        (self.on_reload)(&self.live.get().config);
                        info!(apps, "config reloaded");
                    }
                    Err(e) => error!(error = %e, "reload refused; the running config stays"),
                },
                _ = shutdown.changed() => return,
            }
        }
    }
}
