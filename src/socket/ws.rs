//! A WebSocket to the URL `apps.connections.open` gave: `wss://` over TLS with the system's
//! roots (as the pooled client's), `ws://` only to a loopback address (tests, a local fake).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::{Sink, SinkExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::error::SocketError;

/// Any byte stream a socket runs over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub type Socket = WebSocketStream<Box<dyn Io>>;

/// Slack's envelopes are far smaller; a frame past this ends the connection.
pub const MAX_MESSAGE: usize = 4 << 20;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub fn config() -> WebSocketConfig {
    WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE)).max_frame_size(Some(MAX_MESSAGE))
}

static TLS: LazyLock<Arc<rustls::ClientConfig>> = LazyLock::new(|| {
    pingora::tls::install_default_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        tracing::warn!("no system root certificates: wss:// to Slack will fail");
    }
    Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth())
});

/// Open the socket at `url` (the handshake included) within 10 s.
pub async fn connect(url: &str) -> Result<Socket, SocketError> {
    tokio::time::timeout(CONNECT_TIMEOUT, connect_now(url)).await.map_err(|_| SocketError::ConnectTimeout)?
}

async fn connect_now(text: &str) -> Result<Socket, SocketError> {
    let url = url::Url::parse(text).map_err(|_| SocketError::Url)?;
    let host = url.host_str().ok_or(SocketError::NoHost)?.to_string();
    let tls = match url.scheme() {
        "wss" => true,
        "ws" => {
            let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
            if !ip.is_ok_and(|ip| ip.is_loopback()) {
                return Err(SocketError::NotLoopback);
            }
            false
        }
        other => return Err(SocketError::Scheme(other.to_string())),
    };
    let port = url.port_or_known_default().ok_or(SocketError::NoPort)?;
    let tcp = TcpStream::connect((host.as_str(), port)).await.map_err(SocketError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if tls {
        let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|_| SocketError::TlsName)?;
        let tls = tokio_rustls::TlsConnector::from(TLS.clone());
        Box::new(tls.connect(name, tcp).await.map_err(SocketError::Tls)?)
    } else {
        Box::new(tcp)
    };
    let (socket, _) = tokio_tungstenite::client_async_with_config(text, stream, Some(config()))
        .await
        .map_err(SocketError::Handshake)?;
    Ok(socket)
}

/// A socket's writer: the frames every task of the socket sends, in order, until a close (or
/// the socket fails); then the sink is closed.
pub fn writer<S>(mut sink: S) -> (mpsc::Sender<Message>, tokio::task::JoinHandle<()>)
where
    S: Sink<Message> + Unpin + Send + 'static,
{
    let (out, mut frames) = mpsc::channel::<Message>(256);
    let task = tokio::spawn(async move {
        while let Some(m) = frames.recv().await {
            let closing = matches!(m, Message::Close(_));
            if sink.send(m).await.is_err() || closing {
                break;
            }
        }
        let _ = sink.close().await;
    });
    (out, task)
}
