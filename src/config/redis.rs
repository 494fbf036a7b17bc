//! `[redis]`: where Redis is (one node, a cluster, or a Sentinel-managed primary), the
//! credentials for it (from the environment or a file, never in the TOML), the key layout, and
//! how durable an ack is.

use std::time::Duration;

use super::file::{FileConfig, RedisSection};
use super::values::literal_url_password;
use super::{
    interpolate, ConfigError, Durability, Overrides, RedisAuth, RedisConfig, RedisTarget, RedisTls, Secret, Validator,
};

const SCHEMES: [&str; 4] = ["redis://", "rediss://", "redis+unix://", "unix://"];

/// Passwords never live in the TOML, in a URL no more than in `password`.
const LITERAL_PASSWORD: &str = "carries a literal password: write it as \"${VAR}\" (e.g. \
     redis://user:${REDIS_PASSWORD}@host/), or use redis.password / password_file";

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
        let auth = self.redis_auth(r, &target)?;
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
            Some(u) => self.file_url_target(u),
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

    /// A URL as the TOML writes it: its password, if any, must come from the environment.
    fn file_url_target(&self, raw: &str) -> Result<RedisTarget, ConfigError> {
        if literal_url_password(raw) {
            return Err(self.err("redis.url", LITERAL_PASSWORD));
        }
        self.url_target(raw)
    }

    fn node_urls(&self, key: &str, nodes: &[String]) -> Result<Vec<String>, ConfigError> {
        if nodes.is_empty() {
            return Err(self.err(key, "must list at least one node"));
        }
        let urls = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if literal_url_password(n) {
                    return Err(self.err(&format!("{key}[{i}]"), LITERAL_PASSWORD));
                }
                let u = interpolate(n).map_err(|m| self.err(key, m))?;
                if u.starts_with("redis://") || u.starts_with("rediss://") {
                    Ok(u)
                } else {
                    Err(self.err(key, format!("`{u}` must be a redis:// or rediss:// URL")))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        // TLS is all or nothing: with rediss:// sentinels the data nodes are reached over TLS too.
        if urls.iter().any(|u| u.starts_with("rediss://")) && !urls.iter().all(|u| u.starts_with("rediss://")) {
            return Err(self.err(key, "mixes redis:// and rediss://; use one for every node"));
        }
        Ok(urls)
    }

    /// The logins and the TLS material. A password comes from `"${VAR}"` or a file; a literal
    /// one is refused, so that the TOML can be shared and checked in.
    fn redis_auth(&self, r: &RedisSection, target: &RedisTarget) -> Result<RedisAuth, ConfigError> {
        let sentinel = matches!(target, RedisTarget::Sentinel { .. });
        let given = [&r.sentinel_username, &r.sentinel_password, &r.sentinel_password_file];
        if !sentinel && given.iter().any(|v| v.is_some()) {
            return Err(self.err("redis.sentinel_password", "sentinel_* logins are for sentinel only"));
        }
        Ok(RedisAuth {
            username: self.username("redis.username", &r.username)?,
            password: self.password("redis.password", &r.password, &r.password_file)?,
            sentinel_username: self.username("redis.sentinel_username", &r.sentinel_username)?,
            sentinel_password: self.password(
                "redis.sentinel_password",
                &r.sentinel_password,
                &r.sentinel_password_file,
            )?,
            tls: self.redis_tls(r, target)?,
        })
    }

    fn username(&self, key: &str, value: &Option<String>) -> Result<Option<String>, ConfigError> {
        let name = value.as_deref().map(interpolate).transpose().map_err(|m| self.err(key, m))?;
        Ok(name.filter(|u| !u.is_empty()))
    }

    /// `key = "${VAR}"` or `key_file = "path"` (relative to the config file).
    fn password(
        &self,
        key: &str,
        value: &Option<String>,
        file: &Option<String>,
    ) -> Result<Option<Secret>, ConfigError> {
        match (value, file) {
            (Some(_), Some(_)) => Err(self.err(key, format!("set {key} or {key}_file, not both"))),
            (Some(p), None) => {
                if !(p.starts_with("${") && p.ends_with('}')) {
                    return Err(self.err(key, "must come from the environment: \"${VAR}\" (or use a _file)"));
                }
                match interpolate(p) {
                    Ok(v) => Ok(Some(Secret::new(&v))),
                    Err(_) if self.secrets_optional => Ok(None),
                    Err(m) => Err(self.err(key, m)),
                }
            }
            (None, Some(f)) => match self.read_file(&format!("{key}_file"), f) {
                Ok(v) => Ok(Some(Secret::new(String::from_utf8_lossy(&v).trim_end_matches(['\n', '\r'])))),
                Err(_) if self.secrets_optional => Ok(None),
                Err(e) => Err(e),
            },
            (None, None) => Ok(None),
        }
    }

    fn read_file(&self, key: &str, f: &str) -> Result<Vec<u8>, ConfigError> {
        std::fs::read(self.base.map(|b| b.join(f)).unwrap_or_else(|| f.into()))
            .map_err(|e| self.err(key, format!("cannot read {f}: {e}")))
    }

    /// `tls_ca_file`, and `tls_cert_file` with `tls_key_file`: only with rediss:// URLs.
    fn redis_tls(&self, r: &RedisSection, target: &RedisTarget) -> Result<RedisTls, ConfigError> {
        let files = [
            ("redis.tls_ca_file", &r.tls_ca_file),
            ("redis.tls_cert_file", &r.tls_cert_file),
            ("redis.tls_key_file", &r.tls_key_file),
        ];
        let Some((first, _)) = files.iter().find(|(_, v)| v.is_some()) else {
            return Ok(RedisTls::default());
        };
        let urls = match target {
            RedisTarget::Url(u) => std::slice::from_ref(u),
            RedisTarget::Cluster(nodes) => nodes.as_slice(),
            RedisTarget::Sentinel { sentinels, .. } => sentinels.as_slice(),
            RedisTarget::Embedded => &[],
        };
        if urls.is_empty() || !urls.iter().all(|u| u.starts_with("rediss://")) {
            return Err(self.err(first, "tls_* files need rediss:// URLs (TLS) for every node"));
        }
        let ca = r.tls_ca_file.as_deref().map(|f| self.certificates("redis.tls_ca_file", f)).transpose()?;
        let client = match (&r.tls_cert_file, &r.tls_key_file) {
            (Some(c), Some(k)) => Some((self.certificates("redis.tls_cert_file", c)?, self.private_key(k)?)),
            (None, None) => None,
            (None, Some(_)) => return Err(self.err("redis.tls_key_file", "set tls_cert_file with it")),
            (Some(_), None) => return Err(self.err("redis.tls_cert_file", "set tls_key_file with it")),
        };
        Ok(RedisTls { ca, client })
    }

    /// A PEM file of one or more certificates, parsed now so that `check` and `run` refuse a
    /// bad one instead of every connection failing later.
    fn certificates(&self, key: &str, f: &str) -> Result<Vec<u8>, ConfigError> {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let bytes = self.read_file(key, f)?;
        let count = CertificateDer::pem_slice_iter(&bytes)
            .try_fold(0usize, |n, c| c.map(|_| n + 1))
            .map_err(|e| self.err(key, format!("{f}: not PEM certificates ({e})")))?;
        if count == 0 {
            return Err(self.err(key, format!("{f} holds no certificate")));
        }
        Ok(bytes)
    }

    /// The client certificate's key, PEM, unencrypted (PKCS#8, PKCS#1 or SEC1).
    fn private_key(&self, f: &str) -> Result<Secret, ConfigError> {
        use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
        let key = "redis.tls_key_file";
        let bytes = self.read_file(key, f)?;
        PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
            self.err(key, format!("{f} holds no usable private key ({e}); encrypted keys are not read"))
        })?;
        Ok(Secret::new(&String::from_utf8_lossy(&bytes)))
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
