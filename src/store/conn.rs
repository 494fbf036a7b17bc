//! One connection handle for the three ways to reach Redis: one node, a Redis Cluster, or a
//! primary that Sentinels watch. Everything above it (the scripts, the reads, the admin and the
//! egress) sends commands through [`Conn`] and never knows which; every key of one command or
//! script shares one hash tag, so a cluster routes it to one slot and never answers CROSSSLOT.
//!
//! - one node: redis-rs' `ConnectionManager` (reconnects by itself);
//! - cluster: redis-rs' cluster-async connection (slot map, MOVED/ASK, reconnects);
//! - sentinel: the primary the sentinels name, through a `ConnectionManager`; after an error
//!   that says the node is gone or no longer primary (a failover), the next command asks the
//!   sentinels again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    ClientTlsConfig, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, TlsCertificates,
    TlsMode, Value,
};

use crate::config::{RedisAuth, RedisTarget};

use super::StoreError;

/// Where Redis is and how to log in: what every service connects with.
#[derive(Debug, Clone)]
pub struct Endpoint {
    target: RedisTarget,
    auth: RedisAuth,
}

impl Endpoint {
    /// `target` is never `Embedded` here: the embedded server is reached by its socket URL.
    pub fn new(target: RedisTarget, auth: RedisAuth) -> Endpoint {
        Endpoint { target, auth }
    }

    /// One node, no credentials (tests, tools).
    pub fn url(url: &str) -> Endpoint {
        Endpoint { target: RedisTarget::Url(url.to_string()), auth: RedisAuth::default() }
    }

    /// "node", "cluster" or "sentinel", for `/readyz` and logs.
    pub fn topology(&self) -> &'static str {
        match self.target {
            RedisTarget::Cluster(_) => "cluster",
            RedisTarget::Sentinel { .. } => "sentinel",
            _ => "node",
        }
    }

    fn info(&self, url: &str) -> RedisResult<redis::ConnectionInfo> {
        let info = url.into_connection_info()?;
        let mut settings = info.redis_settings().clone();
        if let Some(u) = &self.auth.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &self.auth.password {
            settings = settings.set_password(String::from_utf8_lossy(p.expose()));
        }
        Ok(info.set_redis_settings(settings))
    }
}

/// A cheap-to-clone connection to whichever Redis the endpoint names.
#[derive(Clone)]
pub enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelConn>),
}

/// A connection that connects on first use; call from the runtime that will use it (redis-rs
/// drives its connections on the runtime that created them).
pub fn connect_lazy(endpoint: &Endpoint, response_timeout: Duration) -> Result<Conn, StoreError> {
    Ok(match &endpoint.target {
        RedisTarget::Cluster(nodes) => {
            let infos = nodes.iter().map(|n| endpoint.info(n)).collect::<RedisResult<Vec<_>>>()?;
            let mut builder = ClusterClientBuilder::new(infos).retries(2);
            if let Some(certs) = endpoint.certificates() {
                builder = builder.certs(certs);
            }
            let config = ClusterConfig::new()
                .set_connection_timeout(Duration::from_secs(1))
                .set_response_timeout(response_timeout);
            Conn::Cluster(builder.build()?.get_pending_async_connection_with_config(config))
        }
        RedisTarget::Sentinel { sentinels, master_name } => Conn::Sentinel(Arc::new(SentinelConn {
            client: tokio::sync::Mutex::new(endpoint.sentinel_client(sentinels, master_name)?),
            primary: Mutex::new(None),
            config: manager_config(response_timeout),
        })),
        RedisTarget::Url(url) => {
            let info = endpoint.info(url)?;
            let client = match endpoint.certificates() {
                Some(certs) => redis::Client::build_with_tls(info, certs)?,
                None => redis::Client::open(info)?,
            };
            Conn::Node(ConnectionManager::new_lazy_with_config(client, manager_config(response_timeout))?)
        }
        RedisTarget::Embedded => {
            return Err(StoreError::Protocol("the embedded server has no endpoint of its own".into()))
        }
    })
}

impl Endpoint {
    /// The configured authority and client certificate, if any (else the system's roots).
    fn certificates(&self) -> Option<TlsCertificates> {
        let tls = &self.auth.tls;
        if tls.ca.is_none() && tls.client.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: tls
                .client
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig { client_cert: cert.clone(), client_key: key.expose().to_vec() }),
            root_cert: tls.ca.clone(),
        })
    }

    /// The sentinels with their own login (`sentinel_username`/`sentinel_password`, else the
    /// one in their URL), and the data nodes they name with the nodes' login, over TLS when
    /// the sentinels are (`rediss://`: a TLS Sentinel set has TLS data nodes).
    fn sentinel_client(&self, sentinels: &[String], master_name: &str) -> RedisResult<SentinelClient> {
        let infos = sentinels.iter().map(|n| n.as_str().into_connection_info()).collect::<RedisResult<Vec<_>>>()?;
        let tls_mode = infos.iter().find_map(|i| match i.addr() {
            ConnectionAddr::TcpTls { insecure: true, .. } => Some(TlsMode::Insecure),
            ConnectionAddr::TcpTls { .. } => Some(TlsMode::Secure),
            _ => None,
        });
        let from_url = infos.first().map(|i| i.redis_settings().clone()).unwrap_or_default();
        let addrs = infos.iter().map(|i| i.addr().clone());
        let mut b = SentinelClientBuilder::new(addrs, master_name, SentinelServerType::Master)?;
        if let Some(u) = self.auth.sentinel_username.as_deref().or(from_url.username()) {
            b = b.set_client_to_sentinel_username(u);
        }
        match &self.auth.sentinel_password {
            Some(p) => b = b.set_client_to_sentinel_password(String::from_utf8_lossy(p.expose())),
            None => {
                if let Some(p) = from_url.password() {
                    b = b.set_client_to_sentinel_password(p);
                }
            }
        }
        if let Some(u) = &self.auth.username {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = &self.auth.password {
            b = b.set_client_to_redis_password(String::from_utf8_lossy(p.expose()));
        }
        if let Some(mode) = tls_mode {
            b = b.set_client_to_redis_tls_mode(mode);
        }
        if let Some(certs) = self.certificates() {
            b = b.set_client_to_sentinel_certificates(certs.clone()).set_client_to_redis_certificates(certs);
        }
        b.build()
    }
}

fn manager_config(response_timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500))
}

/// The primary the sentinels named last, asked again after an error that may mean a failover.
pub struct SentinelConn {
    client: tokio::sync::Mutex<SentinelClient>,
    primary: Mutex<Option<ConnectionManager>>,
    config: ConnectionManagerConfig,
}

impl SentinelConn {
    async fn primary(&self) -> RedisResult<ConnectionManager> {
        if let Some(c) = self.primary.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let client = self.client.lock().await.async_get_client().await?;
        let manager = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        *self.primary.lock().unwrap_or_else(|e| e.into_inner()) = Some(manager.clone());
        Ok(manager)
    }

    /// After a failover the old primary refuses writes (READONLY) or is gone: forget it.
    fn settle<T>(&self, r: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &r {
            let moved_on = e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
                || e.code().is_some_and(|c| c == "READONLY" || c == "MASTERDOWN" || c == "LOADING");
            if moved_on {
                *self.primary.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
        r
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(s) => Box::pin(async move {
                let mut c = s.primary().await.map_err(|e| s.settle::<()>(Err(e)).unwrap_err())?;
                s.settle(c.req_packed_command(cmd).await)
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Sentinel(s) => Box::pin(async move {
                let mut c = s.primary().await.map_err(|e| s.settle::<()>(Err(e)).unwrap_err())?;
                s.settle(c.req_packed_commands(cmd, offset, count).await)
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(_) => 0,
        }
    }
}

impl Conn {
    /// The text of `INFO section` from every node that answers it (one node, or each node of
    /// a cluster).
    pub async fn info(&mut self, section: &str) -> RedisResult<Vec<String>> {
        let reply: Value = redis::cmd("INFO").arg(section).query_async(self).await?;
        Ok(match reply {
            Value::Map(nodes) => {
                nodes.into_iter().filter_map(|(_, v)| redis::from_redis_value::<String>(v).ok()).collect()
            }
            other => vec![redis::from_redis_value::<String>(other)?],
        })
    }
}
