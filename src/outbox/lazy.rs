//! The one way a service gets its store: connected on first use, on the runtime of the service
//! that uses it (redis-rs drives a connection on the runtime that created it, and Pingora gives
//! each service a runtime of its own), with the connections its durability needs chosen here.

use std::sync::OnceLock;
use std::time::Duration;

use super::{connect_lazy, Endpoint, Store, StoreError};
use crate::config::Durability;

/// Connections for records under `durability = "replicated"`: a `WAIT` holds its connection
/// until the replicas answer, so records waiting for replicas take turns over a few
/// connections instead of queueing behind one.
const RECORD_CONNECTIONS: usize = 8;

pub struct LazyStore {
    endpoint: Endpoint,
    response_timeout: Duration,
    durability: Durability,
    store: OnceLock<Store>,
}

impl LazyStore {
    /// A store whose records are `local`: every service but the ingress.
    pub fn new(endpoint: &Endpoint, response_timeout: Duration) -> Self {
        Self::durable(endpoint, response_timeout, Durability::Local)
    }

    /// A store whose records are as durable as `durability` says (the ingress's).
    pub fn durable(endpoint: &Endpoint, response_timeout: Duration, durability: Durability) -> Self {
        LazyStore { endpoint: endpoint.clone(), response_timeout, durability, store: OnceLock::new() }
    }

    /// The store, connecting on the first call (from the runtime that will use it).
    pub fn get(&self) -> Result<&Store, StoreError> {
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let conn = connect_lazy(&self.endpoint, self.response_timeout)?;
        let waiters = match self.durability {
            Durability::Replicated { .. } => (0..RECORD_CONNECTIONS)
                .map(|_| connect_lazy(&self.endpoint, self.response_timeout))
                .collect::<Result<Vec<_>, _>>()?,
            Durability::Local => Vec::new(),
        };
        Ok(self.store.get_or_init(|| Store::new(conn).durable(self.durability, waiters)))
    }
}
