//! The Socket Mode bots' side of the bot transport, as a handle: what the attempt, the workers
//! and the egress ask of the bots' sockets of this process, without knowing the service that
//! serves them (`socket::BotSockets`). `Shared` holds it, so that it holds no service.

use std::time::Duration;

use async_trait::async_trait;

use super::{Response, SendError};
use crate::metrics::Metrics;

/// The Socket Mode bots connected to this process (`upstream = "socket"`), and the one-time
/// tickets that let them connect.
#[async_trait]
pub trait SocketBots: Send + Sync {
    /// Greeted sockets of `app`.
    fn connected(&self, app: &str) -> usize;

    /// A one-time URL on `listen` (the socket listener) for `app`'s bot; `None` when too many
    /// tickets are outstanding.
    fn issue(&self, app: &str, listen: &str) -> Option<String>;

    /// One attempt: `body` (its content type and bytes) to one of `app`'s sockets as an
    /// envelope, the bot's ack within `timeout` as a 200 (its payload as the body).
    async fn send(
        &self,
        metrics: &Metrics,
        app: &str,
        delivery_id: &str,
        attempt: u64,
        body: (&str, &[u8]),
        timeout: Duration,
    ) -> Result<Response, SendError>;
}
