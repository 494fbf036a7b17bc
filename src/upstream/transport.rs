//! The way an attempt reaches one app's bot, chosen per app: its HTTP endpoint through the
//! pooled client, or (`upstream = "socket"`) one of its Socket Mode sockets on this process.
//! The sockets are a handle ([`SocketBots`]) the Socket Mode service implements, so neither an
//! attempt nor what holds the handle (`Shared`) imports that service.

use std::time::Duration;

use async_trait::async_trait;

use super::{Response, SendError, UpstreamClient};
use crate::config::Upstream;
use crate::metrics::Metrics;

/// The Socket Mode bots connected to this process (`upstream = "socket"`), and the one-time
/// tickets that let them connect, as the attempt, the workers and the egress see them.
#[async_trait]
pub trait SocketBots: Send + Sync {
    /// Greeted sockets of `app` on this process.
    fn connected(&self, app: &str) -> usize;

    /// The run of `delivery` goes on past its ack on `app`'s socket `socket`, for `within` at
    /// most: remembered with the socket, so that its closing says the run was lost. `false`
    /// when that socket has closed already.
    fn carrying(&self, app: &str, socket: u64, delivery: &str, within: Duration) -> bool;

    /// A one-time URL on `listen` (the socket listener) for `app`'s bot; `None` when too many
    /// tickets are outstanding.
    fn issue(&self, app: &str, listen: &str) -> Option<String>;

    /// One attempt (its number, and Slack's retry number for it): `body` (its content type and
    /// bytes) to one of `app`'s sockets as an envelope, the bot's ack within `timeout` as a 200
    /// (its payload as the body, the socket it came on as `socket`).
    async fn send(
        &self,
        metrics: &Metrics,
        app: &str,
        delivery_id: &str,
        attempt: (u64, u64),
        body: (&str, &[u8]),
        timeout: Duration,
    ) -> Result<Response, SendError>;
}

/// How an attempt reaches one app's bot.
#[derive(Clone, Copy)]
pub enum Transport<'a> {
    /// Re-signed and sent over HTTP to the bot's URL.
    Http(&'a UpstreamClient),
    /// Sent as an envelope to a socket the bot opened to this process.
    Socket(&'a dyn SocketBots),
}

impl<'a> Transport<'a> {
    /// The transport of an app whose bot is `upstream`.
    pub fn of(upstream: &Upstream, client: &'a UpstreamClient, bots: &'a dyn SocketBots) -> Self {
        match upstream.socket {
            true => Transport::Socket(bots),
            false => Transport::Http(client),
        }
    }

    /// Whether an attempt toward `app`'s bot can go out from this process now: over HTTP
    /// always, over Socket Mode while one of its sockets is here.
    pub fn reaches(&self, app: &str) -> bool {
        match self {
            Transport::Http(_) => true,
            Transport::Socket(bots) => bots.connected(app) > 0,
        }
    }
}
