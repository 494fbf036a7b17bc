//! `gateway.toml` → one validated [`Config`].
//!
//! Precedence is defaults < `gateway.toml` < environment < command-line flags; the last two
//! arrive together as [`Overrides`] because clap reads both. Every error names the file and the
//! key path, and secrets are only ever taken from the environment or from a file.

mod duration;
mod file;
mod include;
mod values;

pub use duration::{parse_duration, parse_size};
use values::{check_addr, check_path, parse_upstream};
pub use values::{interpolate, Secret, Upstream};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use file::{AppSection, FileConfig, OneOrMany, SizeValue};

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
    /// For operator commands that never verify or sign (`stats`, `dlq`): a secret whose
    /// environment variable is unset is left empty instead of refusing the file.
    pub secrets_optional: bool,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub source: PathBuf,
    pub server: ServerConfig,
    pub redis: RedisConfig,
    pub apps: Vec<Arc<AppConfig>>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Slack-facing listener.
    pub listen: String,
    /// `/metrics`, `/healthz`, `/readyz`; `None` when set to `"off"`.
    pub admin_listen: Option<String>,
    /// Larger bodies get 413 (Slack's own payloads stay far below 1 MiB).
    pub max_body: usize,
    /// How long the ingress may wait for Redis before it answers 503 instead of 200.
    pub ack_budget: Duration,
    /// Worker threads of the Slack-facing service.
    pub threads: usize,
    /// On SIGTERM, how long in-flight requests and attempts get before the process exits.
    pub shutdown_grace: Duration,
    /// When set, the admin API (all but /healthz and /readyz) wants `Authorization: Bearer`.
    pub admin_token: Option<Secret>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// Start a private `redis-server` child (laptops, demos; never production).
    Embedded,
    Url(String),
}

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: RedisTarget,
    pub key_prefix: String,
    /// Hash-tag shards per app; fixed for the life of the data (see README).
    pub shards: u16,
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
        let redis = v.redis(&raw, ov)?;
        let mut apps = Vec::new();
        for (i, a) in raw.apps.iter().enumerate() {
            apps.push(Arc::new(v.app(&format!("app[{i}]."), a)?));
        }
        for (i, pattern) in raw.include.iter().enumerate() {
            let files = include::glob(v.base, pattern).map_err(|m| v.err(&format!("include[{i}]"), m))?;
            for file in files {
                apps.push(Arc::new(include::app_file(&file, ov.secrets_optional)?));
            }
        }
        if apps.is_empty() {
            return Err(v.err("app", "at least one [[app]] section (or an included app file) is required"));
        }
        let config = Config { source: path.to_path_buf(), server, redis, apps };
        config.check_routes()?;
        Ok(config)
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

    fn server(&self, raw: &FileConfig, ov: &Overrides) -> Result<ServerConfig, ConfigError> {
        let s = &raw.server;
        let listen = ov.listen.clone().or_else(|| s.listen.clone()).unwrap_or_else(|| "0.0.0.0:3000".into());
        check_addr(&listen).map_err(|m| self.err("server.listen", m))?;
        let admin =
            ov.admin_listen.clone().or_else(|| s.admin_listen.clone()).unwrap_or_else(|| "127.0.0.1:9090".into());
        let admin_listen = if admin == "off" {
            None
        } else {
            check_addr(&admin).map_err(|m| self.err("server.admin_listen", m))?;
            if admin.parse::<std::net::SocketAddr>().ok() == listen.parse().ok() {
                return Err(self.err(
                    "server.admin_listen",
                    "must differ from server.listen: the admin API is never on the Slack-facing port",
                ));
            }
            Some(admin)
        };
        let max_body = match &s.max_body {
            None => 1 << 20,
            Some(SizeValue::Bytes(n)) => usize::try_from(*n).map_err(|_| self.err("server.max_body", "too large"))?,
            Some(SizeValue::Text(t)) => parse_size(t).map_err(|m| self.err("server.max_body", m))?,
        };
        if !(1024..=(64 << 20)).contains(&max_body) {
            return Err(self.err("server.max_body", "must be between 1KiB and 64MiB"));
        }
        let ack_budget = self.duration("server.ack_budget", &s.ack_budget, Duration::from_secs(2))?;
        if ack_budget.is_zero() || ack_budget > Duration::from_millis(2_900) {
            return Err(self.err("server.ack_budget", "must be above 0 and at most 2900ms (Slack waits 3 s)"));
        }
        let threads = s.threads.unwrap_or(2);
        if threads == 0 || threads > 256 {
            return Err(self.err("server.threads", "must be between 1 and 256"));
        }
        let shutdown_grace = self.duration("server.shutdown_grace", &s.shutdown_grace, Duration::from_secs(10))?;
        let admin_token = match &s.admin_token {
            None => None,
            Some(t) if !t.contains("${") => {
                return Err(
                    self.err("server.admin_token", "write \"${ENV_VAR}\": secrets never live in gateway.toml itself")
                )
            }
            Some(t) => {
                let value = match interpolate(t) {
                    Err(_) if self.secrets_optional => String::new(),
                    r => r.map_err(|m| self.err("server.admin_token", m))?,
                };
                if value.len() < 16 && !self.secrets_optional {
                    return Err(self.err("server.admin_token", "must be at least 16 characters"));
                }
                Some(Secret::new(&value))
            }
        };
        Ok(ServerConfig { listen, admin_listen, max_body, ack_budget, threads, shutdown_grace, admin_token })
    }

    fn redis(&self, raw: &FileConfig, ov: &Overrides) -> Result<RedisConfig, ConfigError> {
        let r = &raw.redis;
        let url = match ov.redis_url.clone().or_else(|| r.url.clone()) {
            None => None,
            Some(u) => Some(interpolate(&u).map_err(|m| self.err("redis.url", m))?),
        };
        let target = match url.as_deref() {
            None | Some("") | Some("embedded") => RedisTarget::Embedded,
            Some(u)
                if u.starts_with("redis://")
                    || u.starts_with("rediss://")
                    || u.starts_with("redis+unix://")
                    || u.starts_with("unix://") =>
            {
                RedisTarget::Url(u.to_string())
            }
            Some(_) => {
                return Err(self.err("redis.url", "must be \"embedded\" or a redis://, rediss:// or unix:// URL"))
            }
        };
        let key_prefix = r.key_prefix.clone().unwrap_or_else(|| "slackgate".into());
        if key_prefix.is_empty() || key_prefix.contains(['{', '}', ' ']) {
            return Err(self.err("redis.key_prefix", "must be non-empty, without braces or spaces"));
        }
        let shards = r.shards.unwrap_or(1);
        if !(1..=1024).contains(&shards) {
            return Err(self.err("redis.shards", "must be between 1 and 1024"));
        }
        Ok(RedisConfig { target, key_prefix, shards })
    }

    /// One app; `prefix` is `app[i].` in the main file and empty in an included file.
    pub(crate) fn app(&self, prefix: &str, a: &AppSection) -> Result<AppConfig, ConfigError> {
        let key = |k: &str| format!("{prefix}{k}");
        let name = a.name.clone().ok_or_else(|| self.err(&key("name"), "is required"))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(self.err(&key("name"), "use letters, digits, '-' and '_' only"));
        }
        let secrets = match self.secrets(prefix, a) {
            Err(_) if self.secrets_optional => Vec::new(),
            r => r?,
        };
        let upstream_text = a.upstream.as_deref().ok_or_else(|| self.err(&key("upstream"), "is required"))?;
        let upstream = parse_upstream(upstream_text).map_err(|m| self.err(&key("upstream"), m))?;
        let path = |k: &str, v: &Option<String>| -> Result<String, ConfigError> {
            let p = v.clone().unwrap_or_else(|| "/slack/events".into());
            check_path(&p).map_err(|m| self.err(&key(k), m))?;
            Ok(p)
        };
        let events_path = path("events_path", &a.events_path)?;
        let commands_path = path("commands_path", &a.commands_path)?;
        let interactivity_path = path("interactivity_path", &a.interactivity_path)?;
        for (j, p) in a.passthrough.iter().enumerate() {
            check_path(p).map_err(|m| self.err(&key(&format!("passthrough[{j}]")), m))?;
        }
        let receipt_ttl = self.duration(&key("dedupe.ttl"), &a.dedupe.ttl, Duration::from_secs(25 * 3600))?;
        if receipt_ttl < Duration::from_secs(60) {
            return Err(
                self.err(&key("dedupe.ttl"), "must be at least 1m (Slack retries for up to 24h with Delayed Events)")
            );
        }
        let delivery = self.delivery(prefix, a)?;
        let edits_mention_added = match a.dedupe.edits.as_deref() {
            None | Some("all") => false,
            Some("mention-added") => true,
            Some(other) => {
                return Err(self.err(&key("dedupe.edits"), format!("`{other}`: use \"all\" or \"mention-added\"")))
            }
        };
        let ig = &a.ignore;
        let rules = crate::slack::Rules {
            own_messages: ig.own_messages.unwrap_or(true),
            bot_messages: ig.bot_messages.unwrap_or(false),
            allow_bots: ig.allow_bots.clone(),
            subtypes: ig.subtypes.clone(),
            channels_allow: ig.channels_allow.clone(),
            channels_deny: ig.channels_deny.clone(),
            edits_mention_added,
        };
        let inline_command = self.inline(&key("inline.command"), &a.inline.command, &delivery)?;
        let inline_interactivity = self.inline(&key("inline.interactivity"), &a.inline.interactivity, &delivery)?;
        Ok(AppConfig {
            name,
            source: self.file.clone(),
            label: prefix.trim_end_matches('.').to_string(),
            secrets,
            upstream,
            events_path,
            commands_path,
            interactivity_path,
            passthrough: a.passthrough.clone(),
            receipt_ttl,
            message_dedupe: a.dedupe.message.unwrap_or(false),
            cancel_on_delete: a.dedupe.cancel_on_delete.unwrap_or(false),
            rules,
            inline_command,
            inline_interactivity,
            delivery,
        })
    }

    /// An inline budget: a duration below Slack's 3 s, or "off".
    fn inline(&self, key: &str, value: &Option<String>, d: &DeliveryConfig) -> Result<Option<Duration>, ConfigError> {
        let budget = match value.as_deref() {
            Some("off") => return Ok(None),
            // The attempt behind the inline answer never outlives one delivery timeout.
            None => Duration::from_millis(2500).min(d.timeout),
            Some(text) => parse_duration(text).map_err(|m| self.err(key, m))?,
        };
        if budget.is_zero() || budget > Duration::from_millis(2900) {
            return Err(self.err(key, "must be above 0 and at most 2900ms (Slack waits 3 s), or \"off\""));
        }
        if budget > d.timeout {
            return Err(self.err(key, "must not exceed delivery.timeout"));
        }
        Ok(Some(budget))
    }

    fn secrets(&self, prefix: &str, a: &AppSection) -> Result<Vec<Secret>, ConfigError> {
        let key = |k: &str| format!("{prefix}{k}");
        let values: Vec<String> = match (&a.signing_secret, &a.signing_secret_file) {
            (Some(_), Some(_)) => {
                return Err(self.err(&key("signing_secret"), "set signing_secret or signing_secret_file, not both"));
            }
            (None, None) => return Err(self.err(&key("signing_secret"), "is required (or signing_secret_file)")),
            (Some(OneOrMany::One(s)), None) => vec![s.clone()],
            (Some(OneOrMany::Many(v)), None) => v.clone(),
            (None, Some(f)) => {
                let p = self.base.map(|b| b.join(f)).unwrap_or_else(|| PathBuf::from(f));
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| self.err(&key("signing_secret_file"), format!("cannot read {}: {e}", p.display())))?;
                text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
            }
        };
        let mut secrets = Vec::new();
        for (j, v) in values.iter().enumerate() {
            let k = if values.len() > 1 { key(&format!("signing_secret[{j}]")) } else { key("signing_secret") };
            if a.signing_secret.is_some() && !v.contains("${") {
                return Err(self.err(
                    &k,
                    "write \"${ENV_VAR}\" (or use signing_secret_file): secrets never live in gateway.toml itself",
                ));
            }
            let value = interpolate(v).map_err(|m| self.err(&k, m))?;
            if value.is_empty() {
                return Err(self.err(&k, "is empty"));
            }
            secrets.push(Secret::new(&value));
        }
        if secrets.is_empty() {
            return Err(self.err(&key("signing_secret"), "no secret given"));
        }
        Ok(secrets)
    }

    fn delivery(&self, prefix: &str, a: &AppSection) -> Result<DeliveryConfig, ConfigError> {
        let d = &a.delivery;
        let key = |k: &str| format!("{prefix}delivery.{k}");
        let timeout = self.duration(&key("timeout"), &d.timeout, Duration::from_secs(10))?;
        let retry_initial = self.duration(&key("retry_initial"), &d.retry_initial, Duration::from_secs(1))?;
        let retry_max = self.duration(&key("retry_max"), &d.retry_max, Duration::from_secs(300))?;
        let give_up_after = self.duration(&key("give_up_after"), &d.give_up_after, Duration::from_secs(24 * 3600))?;
        let lease = self.duration(&key("lease"), &d.lease, Duration::from_secs(60).max(timeout * 2))?;
        let max_in_flight = d.max_in_flight.unwrap_or(32);
        if timeout.is_zero() {
            return Err(self.err(&key("timeout"), "must be above 0"));
        }
        if lease <= timeout {
            return Err(self.err(&key("lease"), "must be longer than delivery.timeout"));
        }
        if retry_initial.is_zero() || retry_initial > retry_max {
            return Err(self.err(&key("retry_initial"), "must be above 0 and at most retry_max"));
        }
        if !(1..=10_000).contains(&max_in_flight) {
            return Err(self.err(&key("max_in_flight"), "must be between 1 and 10000"));
        }
        Ok(DeliveryConfig { timeout, max_in_flight, retry_initial, retry_max, give_up_after, lease })
    }
}

#[cfg(test)]
mod tests;
