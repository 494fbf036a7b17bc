//! Socket Mode, both ways.
//!
//! - [`to_slack`]: the gateway holds an app's sockets to Slack (`socket_mode`), records each
//!   envelope with the ingress before it acks it, and the delivery workers send it on to the
//!   HTTP bot as the request Slack would have made.
//! - [`to_bot`]: a bot in Socket Mode (`upstream = "socket"`) opens its socket to the gateway
//!   (the egress answers its `apps.connections.open`), and deliveries reach it as envelopes
//!   whose ack is the attempt's 2xx.
//! - [`envelope`]: the messages, and the HTTP request each envelope stands for.
//! - [`SocketError`]: what can go wrong toward Slack, each logged once where it ends.

pub mod envelope;
mod error;
pub mod to_bot;
pub mod to_slack;
mod ws;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{info, warn};

pub use error::SocketError;
pub use to_bot::BotSockets;

use crate::ingress::Ingress;

/// What our pings carry. Never empty: Bolt for Python's frame reader waits for more bytes after
/// a two-byte frame, so an empty ping right behind an envelope held the envelope until the
/// next frame came.
const PING_PAYLOAD: &[u8] = b"slackgate";
use crate::live::Live;
use crate::shared::Shared;
use crate::upstream::UpstreamClient;

/// The sockets to Slack of every app with `socket_mode.connections` > 0, opened again for each
/// config generation.
pub struct SlackSockets {
    live: Arc<Live>,
    links: Arc<to_slack::Links>,
}

impl SlackSockets {
    pub fn new(live: Arc<Live>, shared: Arc<Shared>, ingress: Arc<Ingress>) -> Self {
        let links = to_slack::Links { live: live.clone(), ingress, shared, client: UpstreamClient::new() };
        SlackSockets { live, links: Arc::new(links) }
    }
}

/// What an app's sockets to Slack were opened with: a reload that changes none of it keeps
/// them (the envelopes they bring are recorded with the app as reloaded).
#[derive(PartialEq)]
struct Opened {
    token: Vec<u8>,
    connections: u16,
    api_url: String,
}

/// One app's running sockets.
struct AppSockets {
    opened: Opened,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl SlackSockets {
    /// Stop the sockets of apps gone or changed, open those of apps new or changed.
    async fn follow(&self, config: &crate::config::Config, running: &mut HashMap<String, AppSockets>) {
        let wanted: HashMap<&str, (&Arc<crate::config::AppConfig>, Opened)> = config
            .apps
            .iter()
            .filter_map(|a| a.socket_mode.as_ref().filter(|s| s.connections > 0).map(|s| (a, s)))
            .map(|(a, s)| {
                let opened = Opened {
                    token: s.app_token.expose().to_vec(),
                    connections: s.connections,
                    api_url: s.api_url.url.clone(),
                };
                (a.name.as_str(), (a, opened))
            })
            .collect();
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, r)| wanted.get(name.as_str()).is_none_or(|(_, o)| *o != r.opened))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some(mut r) = running.remove(&name) {
                let _ = r.stop.send(true);
                while r.tasks.join_next().await.is_some() {}
            }
        }
        for (name, (app, opened)) in wanted {
            if running.contains_key(name) {
                continue;
            }
            info!(app = %name, connections = opened.connections, "opening Socket Mode connections to Slack");
            let (stop, stop_rx) = watch::channel(false);
            let mut tasks = JoinSet::new();
            for i in 0..opened.connections {
                tasks.spawn(to_slack::slot(self.links.clone(), app.clone(), i, stop_rx.clone()));
            }
            running.insert(name.to_string(), AppSockets { opened, stop, tasks });
        }
    }
}

#[async_trait]
impl BackgroundService for SlackSockets {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut generations = self.live.subscribe();
        let mut running = HashMap::new();
        loop {
            let config = self.live.get().config.clone();
            self.follow(&config, &mut running).await;
            let reloaded = tokio::select! {
                _ = shutdown.changed() => false,
                changed = generations.changed() => changed.is_ok(),
            };
            if !reloaded {
                break;
            }
        }
        for (_, mut r) in running {
            let _ = r.stop.send(true);
            while r.tasks.join_next().await.is_some() {}
        }
    }
}

/// The listener Socket Mode bots connect to (`[server] socket_listen`), under a connection cap
/// and an upgrade deadline; once upgraded, pings keep a socket alive (no idle deadline).
pub struct BotListener {
    pub addr: String,
    pub bots: Arc<BotSockets>,
    pub shared: Arc<Shared>,
    pub max_connections: usize,
    pub upgrade_deadline: Duration,
}

#[async_trait]
impl BackgroundService for BotListener {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let listener = match tokio::net::TcpListener::bind(&self.addr).await {
            Ok(l) => l,
            Err(e) => return warn!(addr = %self.addr, error = %e, "cannot listen for Socket Mode bots"),
        };
        info!(addr = %self.addr, "listening for Socket Mode bots");
        let cap = Arc::new(Semaphore::new(self.max_connections));
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.changed() => break,
            };
            let Ok((tcp, _)) = accepted else { continue };
            let Ok(permit) = cap.clone().try_acquire_owned() else {
                drop(tcp);
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (bots, shared, deadline) = (self.bots.clone(), self.shared.clone(), self.upgrade_deadline);
            tokio::spawn(async move {
                bots.serve(tcp, deadline, shared).await;
                drop(permit);
            });
        }
    }
}
