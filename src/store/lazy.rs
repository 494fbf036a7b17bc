//! A store connected on first use, on the runtime of the service that uses it: redis-rs drives
//! a connection on the runtime that created it, and Pingora gives each service a runtime of its
//! own. What the store is made of (one connection, or a pool for `replicated` records) is the
//! maker's to say; every service gets its store this one way.

use std::sync::OnceLock;
use std::time::Duration;

use super::{Endpoint, StoreError};

type Make<T> = Box<dyn Fn(&Endpoint, Duration) -> Result<T, StoreError> + Send + Sync>;

pub struct Lazy<T> {
    endpoint: Endpoint,
    response_timeout: Duration,
    make: Make<T>,
    store: OnceLock<T>,
}

impl<T> Lazy<T> {
    /// `make` builds the store from the endpoint (it connects lazily itself).
    pub fn new(
        endpoint: &Endpoint,
        response_timeout: Duration,
        make: impl Fn(&Endpoint, Duration) -> Result<T, StoreError> + Send + Sync + 'static,
    ) -> Self {
        Lazy { endpoint: endpoint.clone(), response_timeout, make: Box::new(make), store: OnceLock::new() }
    }

    /// The store, made on the first call (from the runtime that will use it).
    pub fn get(&self) -> Result<&T, StoreError> {
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let made = (self.make)(&self.endpoint, self.response_timeout)?;
        Ok(self.store.get_or_init(|| made))
    }
}
