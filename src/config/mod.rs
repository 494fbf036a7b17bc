//! `gateway.toml` → one validated [`Config`].
//!
//! Precedence is defaults < `gateway.toml` < environment < command-line flags; the last two
//! arrive together as [`Overrides`] because clap reads both. Every error names the file and the
//! key path, and secrets are only ever taken from the environment or from a file.

mod app;
mod duration;
mod egress;
mod file;
mod include;
mod redis;
mod routes;
mod runs;
mod server;
mod socket;
mod telemetry;
mod turns;
mod ui;
mod values;

pub use crate::secret::Secret;
pub use duration::{parse_duration, parse_size};
pub use egress::{EgressConfig, HistoryTier, DEFAULT_WRITE_METHODS};
pub use routes::{
    live_of_lane, shadow_lane_name, shadow_prefix, share_point, Chosen, Facts, Match, PauseAnswer, Route, ShadowConfig,
    DEFAULT_ROUTE,
};
pub use runs::{run_rules, RerunLost, RunsConfig};
pub use server::SLACK_HOOKS_HOST;
pub use socket::warnings as socket_warnings;
pub use socket::{SocketModeConfig, SLACK_MAX_CONNECTIONS};
pub use telemetry::TelemetryConfig;
pub use turns::{End, Order, TurnsConfig};
pub use ui::UiConfig;
pub use values::{interpolate, redact_url, Upstream};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use file::FileConfig;

/// A configuration error: which file, which key, what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub message: String,
}

/// Values from the environment and the command line, which beat the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub redis_url: Option<String>,
    pub egress_listen: Option<String>,
    /// For operator commands that never verify or sign (`stats`, `dlq`): a secret whose
    /// environment variable is unset is left empty instead of refusing the file.
    pub secrets_optional: bool,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub source: PathBuf,
    pub server: ServerConfig,
    pub redis: RedisConfig,
    pub egress: EgressConfig,
    pub ui: UiConfig,
    pub telemetry: TelemetryConfig,
    pub apps: Vec<Arc<AppConfig>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Slack-facing listener.
    pub listen: String,
    /// `/metrics`, `/healthz`, `/readyz`; `None` when set to `"off"`.
    pub admin_listen: Option<String>,
    /// Where Socket Mode bots (`upstream = "socket"`) connect, with the one-time ticket the
    /// egress gave them; listened on only when an app has such an upstream.
    pub socket_listen: String,
    /// Larger bodies get 413 (Slack's own payloads stay far below 1 MiB).
    pub max_body: usize,
    /// The bytes of bodies whose signature is not yet checked, buffered across all
    /// connections at once; a request beyond it gets 503 at once (the gateway is busy).
    pub unverified_budget: usize,
    /// How long the ingress may wait for Redis before it answers 503 instead of 200.
    pub ack_budget: Duration,
    /// Worker threads of the Slack-facing service.
    pub threads: usize,
    /// On SIGTERM, how long in-flight requests and attempts get before the process exits.
    pub shutdown_grace: Duration,
    /// When set, the admin API (all but /healthz, /readyz and /metrics) wants
    /// `Authorization: Bearer`. Required when `admin_listen` is not a loopback address.
    pub admin_token: Option<Secret>,
    /// A second token that may read what `admin_token` may (the admin API's GET routes, the
    /// operator pages) but change nothing. Only with `admin_token`, and never equal to it.
    pub admin_read_token: Option<Secret>,
    /// Names the admin listener answers to besides IP literals and `localhost` (a request
    /// with any other `Host` is refused: DNS rebinding).
    pub admin_hosts: Vec<String>,
    /// Where a late reply may be posted: `hooks.slack.com` plus configured hosts, each
    /// `host` (port 443) or `host:port`, over https only.
    pub response_url_hosts: Vec<String>,
    pub limits: ListenerLimits,
    pub admission: AdmissionConfig,
}

/// Overload: how many records this process keeps pending at most (the adaptive limit's
/// ceiling), and how long a request may wait for a slot before it is answered 503.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    pub max_pending: usize,
    pub wait: Duration,
}

/// Listening addresses written with port 0 (any free port), each with the address actually
/// bound for it: `(as written, as bound)`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BoundPorts {
    pub listen: Option<(String, String)>,
    pub admin_listen: Option<(String, String)>,
    pub egress_listen: Option<(String, String)>,
    pub socket_listen: Option<(String, String)>,
}

impl Config {
    /// Replace each listening address written with port 0 by the one actually bound for it.
    pub fn resolve_ports(&mut self, bound: &BoundPorts) {
        fn resolve(addr: &mut String, bound: &Option<(String, String)>) {
            if let Some((from, to)) = bound {
                if addr == from {
                    addr.clone_from(to);
                }
            }
        }
        resolve(&mut self.server.listen, &bound.listen);
        if let Some(a) = self.server.admin_listen.as_mut() {
            resolve(a, &bound.admin_listen);
        }
        if let Some(a) = self.egress.listen.as_mut() {
            resolve(a, &bound.egress_listen);
        }
        resolve(&mut self.server.socket_listen, &bound.socket_listen);
    }
}

/// What a Slack-facing connection may cost: time to send its headers and its body, time
/// idle between requests, and how many may be open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// Start a private `redis-server` child (laptops, demos; never production).
    Embedded,
    /// One node (`redis://`, `rediss://`, `unix://`).
    Url(String),
    /// A Redis Cluster: some of its nodes; the rest are found from the slot map.
    Cluster(Vec<String>),
    /// A primary watched by Sentinels: the sentinels' URLs and the primary's name there.
    Sentinel { sentinels: Vec<String>, master_name: String },
}

impl RedisTarget {
    /// What it is, for a log line or `check`: passwords in URLs redacted.
    pub fn describe(&self) -> String {
        let list = |nodes: &[String]| nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>().join(", ");
        match self {
            RedisTarget::Embedded => "embedded (private redis-server under --data-dir)".into(),
            RedisTarget::Url(u) => redact_url(u),
            RedisTarget::Cluster(nodes) => format!("cluster, seed nodes {}", list(nodes)),
            RedisTarget::Sentinel { sentinels, master_name } => {
                format!("primary {master_name:?} from sentinels {}", list(sentinels))
            }
        }
    }
}

/// How the gateway proves itself to Redis and checks Redis in turn: the login for the data
/// nodes, the sentinels' own login (Sentinel only), and the TLS material for `rediss://`.
/// Never in the TOML: passwords come from the environment (`"${VAR}"`) or a file.
#[derive(Debug, Clone, Default)]
pub struct RedisAuth {
    pub username: Option<String>,
    pub password: Option<Secret>,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<Secret>,
    pub tls: RedisTls,
}

/// TLS material for `rediss://` (data nodes and sentinels alike), PEM, read when the config is.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The authority that signed Redis' certificates; none: the system's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate and its key, for a Redis that wants one (`tls-auth-clients yes`,
    /// its default).
    pub client: Option<(Vec<u8>, Secret)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |b: bool| if b { "set" } else { "none" };
        f.debug_struct("RedisTls")
            .field("ca", &set(self.ca.is_some()))
            .field("client", &set(self.client.is_some()))
            .finish()
    }
}

/// How durable an ack is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Recorded by the primary (and its AOF): a failover can lose what it had not replicated.
    Local,
    /// Recorded and confirmed by `replicas` replicas (`WAIT`) within `timeout`, else 503.
    Replicated { replicas: u32, timeout: Duration },
}

impl RedisConfig {
    /// How the gateway logs in and how durable an ack is, for `check` (never the secrets).
    pub fn describe_access(&self) -> String {
        let a = &self.auth;
        let mut parts = vec![match (&a.username, &a.password) {
            (Some(u), Some(_)) => format!("login {u} with a password"),
            (None, Some(_)) => "login default with a password".into(),
            (Some(u), None) => format!("login {u}, no password"),
            (None, None) => "no login".into(),
        }];
        if a.sentinel_username.is_some() || a.sentinel_password.is_some() {
            parts.push("sentinels with a login of their own".into());
        }
        match (&a.tls.ca, &a.tls.client) {
            (None, None) => {}
            (ca, client) => parts.push(format!(
                "TLS trusting {}{}",
                if ca.is_some() { "tls_ca_file" } else { "the system's roots" },
                if client.is_some() { ", with a client certificate" } else { "" }
            )),
        }
        parts.push(match self.durability {
            Durability::Local => "durability local".into(),
            Durability::Replicated { replicas, timeout } => {
                format!("durability replicated (WAIT {replicas} replicas, {}ms)", timeout.as_millis())
            }
        });
        format!("{}; shards {}, key prefix {}", parts.join(", "), self.shards, self.key_prefix)
    }
}

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: RedisTarget,
    pub auth: RedisAuth,
    pub key_prefix: String,
    /// Hash-tag shards per app; fixed for the life of the data (see README).
    pub shards: u16,
    pub durability: Durability,
}

#[derive(Debug, Clone)]
pub struct AppConfig {
    pub name: String,
    /// The file that defines it, and how errors name it there (`app[0]`, or the file itself).
    pub source: String,
    pub label: String,
    pub secrets: Vec<Secret>,
    pub upstream: Upstream,
    pub events_path: String,
    pub commands_path: String,
    pub interactivity_path: String,
    pub passthrough: Vec<String>,
    pub receipt_ttl: Duration,
    /// Collapse the events of one human message (`app_mention` + `message`) into one forward.
    pub message_dedupe: bool,
    /// A `message_deleted` cancels the deleted message's delivery while it is still waiting.
    pub cancel_on_delete: bool,
    pub rules: crate::slack::Rules,
    /// Answer slash commands inline within this budget (`None`: in the background only).
    pub inline_command: Option<Duration>,
    /// Answer interactive payloads inline within this budget (`None`: in the background only).
    pub inline_interactivity: Option<Duration>,
    pub delivery: DeliveryConfig,
    /// One turn of a conversation at a time (`turns`).
    pub turns: TurnsConfig,
    /// Socket Mode toward Slack (`socket_mode`); also what matches the bot's own
    /// `apps.connections.open` with `upstream = "socket"`.
    pub socket_mode: Option<SocketModeConfig>,
    /// `upstreams`: the entries that send matching deliveries to other bots, in order.
    pub upstreams: Vec<Route>,
    /// `shadow`: a second bot that gets a copy of matching deliveries, its writes kept.
    pub shadow: Option<ShadowConfig>,
    /// What a paused app's inline payloads are answered.
    pub pause_answer: PauseAnswer,
    /// `rerun_lost`, `rerun_limit`: which runs lost with the bot are run again.
    pub runs: RunsConfig,
}

impl AppConfig {
    /// The rules its runs are tracked by, when it re-runs lost ones.
    pub fn run_rules(&self) -> Option<TurnsConfig> {
        run_rules(&self.turns, &self.runs)
    }
}

#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    pub timeout: Duration,
    pub max_in_flight: usize,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub give_up_after: Duration,
    /// An entry idle this long in the pending list may be taken by another worker.
    pub lease: Duration,
    /// Dead letters older than this are dropped (counted and logged).
    pub dead_ttl: Duration,
    /// At most this many dead letters per app; the oldest beyond it are dropped.
    pub dead_max: usize,
}

/// Which Slack traffic a path carries for an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// Events, commands or interactivity: verified, recorded, acked, delivered.
    Slack,
    /// Plain reverse proxy to the app's upstream.
    Passthrough,
}

impl Config {
    /// Whether an app's bot connects in over Socket Mode (the socket listener is needed).
    pub fn socket_bots(&self) -> bool {
        self.apps.iter().any(|a| a.any_socket())
    }

    /// The socket listener is a port of its own: never one of the HTTP listeners'.
    fn check_socket_listen(&self, v: &Validator) -> Result<(), ConfigError> {
        if !self.socket_bots() {
            return Ok(());
        }
        let addr = self.server.socket_listen.parse::<std::net::SocketAddr>().ok().filter(|a| a.port() != 0);
        let others = [Some(&self.server.listen), self.server.admin_listen.as_ref(), self.egress.listen.as_ref()];
        if addr.is_some() && others.into_iter().flatten().any(|o| o.parse().ok() == addr) {
            return Err(v.err("server.socket_listen", "must differ from the other listeners"));
        }
        Ok(())
    }

    /// Read, parse, interpolate and validate one file.
    pub fn from_file(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: "(file)".into(),
            message: format!("cannot read: {e}"),
        })?;
        Self::from_toml(&text, path, overrides)
    }

    pub fn from_toml(text: &str, path: &Path, ov: &Overrides) -> Result<Config, ConfigError> {
        let v =
            Validator { file: path.display().to_string(), base: path.parent(), secrets_optional: ov.secrets_optional };
        let raw: FileConfig = toml::from_str(text).map_err(|e| v.err("(toml)", e.to_string()))?;
        let server = v.server(&raw, ov)?;
        let redis = v.redis(&raw, ov, server.ack_budget)?;
        let egress = v.egress(&raw, ov.egress_listen.as_deref())?;
        let ui = v.ui(&raw)?;
        let telemetry = v.telemetry(&raw)?;
        let mut apps = Vec::new();
        for (i, a) in raw.apps.iter().enumerate() {
            apps.push(Arc::new(v.app(&format!("app[{i}]."), a, &egress)?));
        }
        for (i, pattern) in raw.include.iter().enumerate() {
            let files = include::glob(v.base, pattern).map_err(|m| v.err(&format!("include[{i}]"), m))?;
            for file in files {
                apps.push(Arc::new(include::app_file(&file, ov.secrets_optional, &egress)?));
            }
        }
        if apps.is_empty() {
            return Err(v.err("app", "at least one [[app]] section (or an included app file) is required"));
        }
        let config = Config { source: path.to_path_buf(), server, redis, egress, ui, telemetry, apps };
        config.check_socket_listen(&v)?;
        config.check_routes()?;
        Ok(config)
    }

    /// Pingora's server settings for this config (`upgrade_sock`: where `run --upgrade` takes the
    /// listening sockets over).
    pub fn pingora_conf(&self, upgrade_sock: &Path) -> pingora::server::configuration::ServerConf {
        pingora::server::configuration::ServerConf {
            threads: self.server.threads,
            upgrade_sock: upgrade_sock.display().to_string(),
            // Between the moment the listeners stop accepting and the moment the runtimes are
            // shut down (which drops every task): the requests already accepted get their
            // answer. SIGTERM's draining happens before Pingora hears of the signal (see
            // `drain`); a hand-over (SIGQUIT) has only this.
            grace_period_seconds: Some(1),
            graceful_shutdown_timeout_seconds: Some(1),
            ..Default::default()
        }
    }

    /// Every path the Slack-facing listener answers, with its app and role.
    pub fn routes(&self) -> HashMap<String, (usize, RouteKind)> {
        let mut routes = HashMap::new();
        for (i, app) in self.apps.iter().enumerate() {
            for p in [&app.events_path, &app.commands_path, &app.interactivity_path] {
                routes.insert(p.clone(), (i, RouteKind::Slack));
            }
            for p in &app.passthrough {
                routes.insert(p.clone(), (i, RouteKind::Passthrough));
            }
        }
        routes
    }

    /// Two apps may not share a name or a path; the error names both files when they differ.
    fn check_routes(&self) -> Result<(), ConfigError> {
        let clash = |a: &AppConfig, b: &AppConfig, key: &str, message: String| {
            let file = if a.source == b.source { a.source.clone() } else { format!("{} and {}", b.source, a.source) };
            let key = match (a.label.is_empty(), key.is_empty()) {
                (true, true) => "paths".to_string(),
                (true, false) => key.to_string(),
                (false, true) => a.label.clone(),
                (false, false) => format!("{}.{key}", a.label),
            };
            ConfigError { file, key, message }
        };
        let name_of = |b: &AppConfig| if b.label.is_empty() { b.source.clone() } else { b.label.clone() };
        let mut owner: HashMap<&str, (&AppConfig, &str)> = HashMap::new();
        let mut names: HashMap<&str, &AppConfig> = HashMap::new();
        for app in &self.apps {
            if let Some(other) = names.insert(&app.name, app) {
                let msg = format!("`{}` is also the name of {}", app.name, name_of(other));
                return Err(clash(app, other, "name", msg));
            }
            let slack = [&app.events_path, &app.commands_path, &app.interactivity_path];
            let paths = slack
                .iter()
                .map(|p| (p.as_str(), "slack"))
                .chain(app.passthrough.iter().map(|p| (p.as_str(), "passthrough")));
            for (p, role) in paths {
                match owner.get(p) {
                    Some(&(other, r)) if !std::ptr::eq(other, &**app) || r != role => {
                        let msg = format!("path `{p}` is already used by {} ({r})", name_of(other));
                        return Err(clash(app, other, "", msg));
                    }
                    _ => {
                        owner.insert(p, (app, role));
                    }
                }
            }
        }
        Ok(())
    }
}

pub(crate) struct Validator<'a> {
    file: String,
    base: Option<&'a Path>,
    secrets_optional: bool,
}

impl Validator<'_> {
    pub(crate) fn err(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError { file: self.file.clone(), key: key.into(), message: message.into() }
    }

    fn duration(&self, key: &str, value: &Option<String>, default: Duration) -> Result<Duration, ConfigError> {
        match value {
            None => Ok(default),
            Some(text) => parse_duration(text).map_err(|m| self.err(key, m)),
        }
    }
}

#[cfg(test)]
mod tests;
