//! `[redis]`: where Redis is (one node, a cluster, or a Sentinel-managed primary), the
//! credentials for it (from the environment or a file, never in the TOML), the key layout, and
//! how durable an ack is.

use std::time::Duration;

use super::file::{FileConfig, RedisSection};
use super::{interpolate, ConfigError, Durability, Overrides, RedisAuth, RedisConfig, RedisTarget, Secret, Validator};

const SCHEMES: [&str; 4] = ["redis://", "rediss://", "redis+unix://", "unix://"];

impl Validator<'_> {
    pub(super) fn redis(
        &self,
        raw: &FileConfig,
        ov: &Overrides,
        ack_budget: Duration,
    ) -> Result<RedisConfig, ConfigError> {
        let r = &raw.redis;
        let target = self.redis_target(r, ov)?;
        let key_prefix = r.key_prefix.clone().unwrap_or_else(|| "slackgate".into());
        if key_prefix.is_empty() || key_prefix.contains(['{', '}', ' ']) {
            return Err(self.err("redis.key_prefix", "must be non-empty, without braces or spaces"));
        }
        let shards = r.shards.unwrap_or(1);
        if !(1..=1024).contains(&shards) {
            return Err(self.err("redis.shards", "must be between 1 and 1024"));
        }
        let auth = self.redis_auth(r)?;
        let durability = self.durability(r, ack_budget)?;
        Ok(RedisConfig { target, auth, key_prefix, shards, durability })
    }

    /// Exactly one of `url`, `cluster` and `sentinel` (none: the embedded server). A
    /// `--redis-url` flag or `SLACKGATE_REDIS_URL` replaces whichever the file names.
    fn redis_target(&self, r: &RedisSection, ov: &Overrides) -> Result<RedisTarget, ConfigError> {
        if let Some(u) = &ov.redis_url {
            return self.url_target(u);
        }
        let named = [r.url.is_some(), r.cluster.is_some(), r.sentinel.is_some()];
        if named.iter().filter(|n| **n).count() > 1 {
            return Err(self.err("redis", "set one of url, cluster and sentinel"));
        }
        if r.master_name.is_some() && r.sentinel.is_none() {
            return Err(self.err("redis.master_name", "is for sentinel only"));
        }
        if let Some(nodes) = &r.cluster {
            return Ok(RedisTarget::Cluster(self.node_urls("redis.cluster", nodes)?));
        }
        if let Some(nodes) = &r.sentinel {
            let sentinels = self.node_urls("redis.sentinel", nodes)?;
            let master_name = match r.master_name.as_deref() {
                Some(m) if !m.is_empty() => m.to_string(),
                _ => return Err(self.err("redis.master_name", "is required with sentinel (the primary's name there)")),
            };
            return Ok(RedisTarget::Sentinel { sentinels, master_name });
        }
        match &r.url {
            Some(u) => self.url_target(u),
            None => Ok(RedisTarget::Embedded),
        }
    }

    fn url_target(&self, raw: &str) -> Result<RedisTarget, ConfigError> {
        let u = interpolate(raw).map_err(|m| self.err("redis.url", m))?;
        match u.as_str() {
            "" | "embedded" => Ok(RedisTarget::Embedded),
            u if SCHEMES.iter().any(|s| u.starts_with(s)) => Ok(RedisTarget::Url(u.to_string())),
            _ => Err(self.err("redis.url", "must be \"embedded\" or a redis://, rediss:// or unix:// URL")),
        }
    }

    fn node_urls(&self, key: &str, nodes: &[String]) -> Result<Vec<String>, ConfigError> {
        if nodes.is_empty() {
            return Err(self.err(key, "must list at least one node"));
        }
        nodes
            .iter()
            .map(|n| {
                let u = interpolate(n).map_err(|m| self.err(key, m))?;
                if u.starts_with("redis://") || u.starts_with("rediss://") {
                    Ok(u)
                } else {
                    Err(self.err(key, format!("`{u}` must be a redis:// or rediss:// URL")))
                }
            })
            .collect()
    }

    /// The password from `"${VAR}"` or `password_file`; a literal password is refused, so that
    /// the TOML can be shared and checked in.
    fn redis_auth(&self, r: &RedisSection) -> Result<RedisAuth, ConfigError> {
        let password = match (&r.password, &r.password_file) {
            (Some(_), Some(_)) => return Err(self.err("redis.password", "set password or password_file, not both")),
            (Some(p), None) => {
                if !(p.starts_with("${") && p.ends_with('}')) {
                    return Err(
                        self.err("redis.password", "must come from the environment: \"${VAR}\" (or use password_file)")
                    );
                }
                match interpolate(p) {
                    Ok(v) => Some(Secret::new(&v)),
                    Err(_) if self.secrets_optional => None,
                    Err(m) => return Err(self.err("redis.password", m)),
                }
            }
            (None, Some(f)) => {
                match std::fs::read_to_string(self.base.map(|b| b.join(f)).unwrap_or_else(|| f.into())) {
                    Ok(v) => Some(Secret::new(v.trim_end_matches(['\n', '\r']))),
                    Err(_) if self.secrets_optional => None,
                    Err(e) => return Err(self.err("redis.password_file", format!("cannot read {f}: {e}"))),
                }
            }
            (None, None) => None,
        };
        let username = r.username.as_deref().map(interpolate).transpose().map_err(|m| self.err("redis.username", m))?;
        Ok(RedisAuth { username: username.filter(|u| !u.is_empty()), password })
    }

    fn durability(&self, r: &RedisSection, ack_budget: Duration) -> Result<Durability, ConfigError> {
        let timeout = self.duration("redis.wait_timeout", &r.wait_timeout, ack_budget / 4)?;
        let replicas = r.wait_replicas.unwrap_or(1);
        match r.durability.as_deref().unwrap_or("local") {
            "local" => Ok(Durability::Local),
            "replicated" => {
                if replicas == 0 {
                    return Err(self.err("redis.wait_replicas", "must be at least 1 with durability = \"replicated\""));
                }
                if timeout.is_zero() || timeout >= ack_budget {
                    return Err(self.err("redis.wait_timeout", "must be above 0 and below server.ack_budget"));
                }
                Ok(Durability::Replicated { replicas, timeout })
            }
            _ => Err(self.err("redis.durability", "must be \"local\" or \"replicated\"")),
        }
    }
}
