//! `[server]`: the listeners, their limits and the admin API's protection.

use std::net::SocketAddr;
use std::time::Duration;

use super::file::{FileConfig, SizeValue};
use super::values::{check_addr, check_host_entry};
use super::{interpolate, parse_size, ConfigError, Overrides, Secret, ServerConfig};
use super::{AdmissionConfig, ListenerLimits, Validator};

/// Slack's own webhook host: a late reply is only ever posted there (plus configured hosts).
pub const SLACK_HOOKS_HOST: &str = "hooks.slack.com";

impl Validator<'_> {
    pub(super) fn server(&self, raw: &FileConfig, ov: &Overrides) -> Result<ServerConfig, ConfigError> {
        let s = &raw.server;
        let listen = ov.listen.clone().or_else(|| s.listen.clone()).unwrap_or_else(|| "0.0.0.0:3000".into());
        check_addr(&listen).map_err(|m| self.err("server.listen", m))?;
        let admin_listen = self.admin_listen(raw, ov, &listen)?;
        let socket_listen = s.socket_listen.clone().unwrap_or_else(|| "127.0.0.1:3002".into());
        check_addr(&socket_listen).map_err(|m| self.err("server.socket_listen", m))?;
        let max_body = self.size("server.max_body", &s.max_body, 1 << 20)?;
        if !(1024..=(64 << 20)).contains(&max_body) {
            return Err(self.err("server.max_body", "must be between 1KiB and 64MiB"));
        }
        let unverified_budget = self.size("server.unverified_budget", &s.unverified_budget, 64 << 20)?;
        if unverified_budget < max_body || unverified_budget > (4 << 30) {
            return Err(self.err("server.unverified_budget", "must be at least server.max_body and at most 4096MiB"));
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
        let admin_token = self.token("server.admin_token", &s.admin_token)?;
        let admin_read_token = self.read_token(&s.admin_read_token, admin_token.as_ref())?;
        if let Some(addr) = &admin_listen {
            let loopback = addr.parse::<SocketAddr>().is_ok_and(|a| a.ip().is_loopback());
            if !loopback && admin_token.is_none() && !self.secrets_optional {
                return Err(self.err(
                    "server.admin_listen",
                    format!(
                        "`{addr}` is not a loopback address: set server.admin_token = \"${{ENV_VAR}}\" (the admin \
                         API can replay and purge dead letters), or listen on 127.0.0.1"
                    ),
                ));
            }
        }
        let admin_hosts = self.hosts("server.admin_hosts", &s.admin_hosts)?;
        let mut response_url_hosts = vec![SLACK_HOOKS_HOST.to_string()];
        response_url_hosts.extend(self.hosts("server.response_url_hosts", &s.response_url_hosts)?);
        Ok(ServerConfig {
            listen,
            admin_listen,
            socket_listen,
            max_body,
            unverified_budget,
            ack_budget,
            threads,
            shutdown_grace,
            admin_token,
            admin_read_token,
            admin_hosts,
            response_url_hosts,
            limits: self.limits(raw)?,
            admission: self.admission(raw, ack_budget)?,
        })
    }

    /// A size: bytes as a number, or text such as `"1MiB"`.
    fn size(&self, key: &str, value: &Option<SizeValue>, default: usize) -> Result<usize, ConfigError> {
        match value {
            None => Ok(default),
            Some(SizeValue::Bytes(n)) => usize::try_from(*n).map_err(|_| self.err(key, "too large")),
            Some(SizeValue::Text(t)) => parse_size(t).map_err(|m| self.err(key, m)),
        }
    }

    fn admin_listen(&self, raw: &FileConfig, ov: &Overrides, listen: &str) -> Result<Option<String>, ConfigError> {
        let admin = ov
            .admin_listen
            .clone()
            .or_else(|| raw.server.admin_listen.clone())
            .unwrap_or_else(|| "127.0.0.1:9090".into());
        if admin == "off" {
            return Ok(None);
        }
        check_addr(&admin).map_err(|m| self.err("server.admin_listen", m))?;
        // Port 0 is any free port: two of them are two ports.
        let admin_addr = admin.parse::<SocketAddr>().ok().filter(|a| a.port() != 0);
        if admin_addr.is_some() && admin_addr == listen.parse().ok() {
            return Err(self.err(
                "server.admin_listen",
                "must differ from server.listen: the admin API is never on the Slack-facing port",
            ));
        }
        Ok(Some(admin))
    }

    /// A token for the admin API: `"${ENV_VAR}"`, at least 16 characters.
    fn token(&self, key: &str, value: &Option<String>) -> Result<Option<Secret>, ConfigError> {
        let Some(t) = value else { return Ok(None) };
        if !t.contains("${") {
            return Err(self.err(key, "write \"${ENV_VAR}\": secrets never live in gateway.toml itself"));
        }
        let value = match interpolate(t) {
            Err(_) if self.secrets_optional => String::new(),
            r => r.map_err(|m| self.err(key, m))?,
        };
        if value.len() < 16 && !self.secrets_optional {
            return Err(self.err(key, "must be at least 16 characters"));
        }
        Ok(Some(Secret::new(&value)))
    }

    /// `admin_read_token`: as `admin_token`, only beside it, and a token of its own.
    fn read_token(&self, value: &Option<String>, admin: Option<&Secret>) -> Result<Option<Secret>, ConfigError> {
        const KEY: &str = "server.admin_read_token";
        let Some(read) = self.token(KEY, value)? else { return Ok(None) };
        let Some(admin) = admin else {
            return Err(self.err(
                KEY,
                "needs server.admin_token: without it anyone may write, so a read-only token limits nothing",
            ));
        };
        // Without the secrets (operator commands) both may be empty: nothing to compare.
        if read == *admin && !self.secrets_optional {
            return Err(self.err(KEY, "must differ from server.admin_token (it would grant writes too)"));
        }
        Ok(Some(read))
    }

    /// Host names (optionally `:port`), lower-cased.
    fn hosts(&self, key: &str, values: &[String]) -> Result<Vec<String>, ConfigError> {
        values
            .iter()
            .enumerate()
            .map(|(i, h)| check_host_entry(h).map_err(|m| self.err(&format!("{key}[{i}]"), m)))
            .collect()
    }

    /// Timeouts and the connection cap of the Slack-facing listener.
    fn limits(&self, raw: &FileConfig) -> Result<ListenerLimits, ConfigError> {
        let s = &raw.server;
        let bounded = |key: &str, value: &Option<String>, default: u64| -> Result<Duration, ConfigError> {
            let d = self.duration(key, value, Duration::from_secs(default))?;
            if d < Duration::from_millis(100) || d > Duration::from_secs(3600) {
                return Err(self.err(key, "must be between 100ms and 1h"));
            }
            Ok(d)
        };
        let max_connections = s.max_connections.unwrap_or(4096);
        if !(1..=1_000_000).contains(&max_connections) {
            return Err(self.err("server.max_connections", "must be between 1 and 1000000"));
        }
        Ok(ListenerLimits {
            header_timeout: bounded("server.header_timeout", &s.header_timeout, 10)?,
            body_timeout: bounded("server.body_timeout", &s.body_timeout, 10)?,
            idle_timeout: bounded("server.idle_timeout", &s.idle_timeout, 60)?,
            max_connections,
        })
    }

    /// `max_pending` and `admission_wait` (default: a quarter of the ack budget).
    fn admission(&self, raw: &FileConfig, ack_budget: Duration) -> Result<AdmissionConfig, ConfigError> {
        let s = &raw.server;
        let max_pending = s.max_pending.unwrap_or(256);
        if !(1..=100_000).contains(&max_pending) {
            return Err(self.err("server.max_pending", "must be between 1 and 100000"));
        }
        let wait = self.duration("server.admission_wait", &s.admission_wait, ack_budget / 4)?;
        if wait > ack_budget / 2 {
            return Err(self.err(
                "server.admission_wait",
                "must be at most half of server.ack_budget (the record needs the rest)",
            ));
        }
        Ok(AdmissionConfig { max_pending, wait })
    }
}
