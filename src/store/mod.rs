//! The connection to Redis, which the outbox and the egress both build on: where Redis is
//! ([`Endpoint`]: one node, a cluster or a Sentinel-watched primary, with its login and TLS),
//! a cheap-to-clone connection to it ([`Conn`]), and [`Lazy`], the one way a service gets a
//! store of its own, connected on first use on the runtime that uses it. Knows no outbox and
//! no egress.

mod conn;
mod lazy;

pub use conn::{connect_lazy, Conn, Endpoint};
pub use lazy::Lazy;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
    #[error("recorded, but only {confirmed} of {wanted} replicas confirmed it in time (WAIT)")]
    NotReplicated { confirmed: u32, wanted: u32 },
}
