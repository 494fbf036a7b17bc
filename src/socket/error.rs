//! What can go wrong in Socket Mode toward Slack: opening a socket, reading its frames, turning
//! an envelope into the request Slack would have made. Each is logged once where it ends
//! (`to_slack`), and a socket that could not be opened is counted by [`SocketError::reconnect_reason`].

use crate::upstream::SendError;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// `apps.connections.open` and the socket it names.
    #[error("no socket_mode")]
    NoSocketMode,
    #[error("cannot build the apps.connections.open request")]
    OpenRequest,
    #[error(transparent)]
    Call(#[from] SendError),
    #[error("apps.connections.open answered {0} without JSON")]
    OpenNotJson(u16),
    /// Slack's `error`, cut to 60 characters.
    #[error("apps.connections.open: {0}")]
    OpenRefused(String),
    #[error("apps.connections.open gave no url")]
    OpenNoUrl,
    #[error("the socket was not greeted within 10 s")]
    NoHello,

    /// The socket's URL, and connecting to it.
    #[error("apps.connections.open gave no URL")]
    Url,
    #[error("the socket URL has no host")]
    NoHost,
    #[error("a ws:// socket URL is only followed to a loopback address")]
    NotLoopback,
    #[error("socket URL scheme `{0}` (wss or ws)")]
    Scheme(String),
    #[error("the socket URL has no port")]
    NoPort,
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    #[error("bad TLS server name")]
    TlsName,
    #[error("TLS: {0}")]
    Tls(#[source] std::io::Error),
    #[error("WebSocket handshake: {0}")]
    Handshake(#[source] tokio_tungstenite::tungstenite::Error),

    /// A frame, or an envelope's payload (it cannot be acked, or is acked and not delivered).
    #[error("not a Socket Mode message: {0}")]
    NotAMessage(#[source] serde_json::Error),
    #[error("an envelope without envelope_id")]
    NoEnvelopeId,
    #[error("an envelope without payload")]
    NoPayload,
    #[error("a slash command whose payload is not an object")]
    CommandNotObject,
}

impl SocketError {
    /// Why a socket to Slack could not be had, as `socket_reconnects_total` counts it.
    pub fn reconnect_reason(&self) -> &'static str {
        match self {
            SocketError::NoHello => "no_hello",
            _ => "open_failed",
        }
    }
}
