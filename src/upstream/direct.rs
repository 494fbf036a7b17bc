//! The pooled client's connections, each refused when it is a socket connected to itself.
//!
//! A connect to a loopback port where nothing listens, when that port is in the ephemeral
//! range, can be given the very same port as its own source port: TCP's simultaneous open then
//! connects the socket to itself, and the connect succeeds. The gateway would send a delivery
//! to itself, read its own request back as the bot's answer, and hold the bot's port for as long
//! as the connection lives, so that the bot, restarting, cannot bind it (`Address already in
//! use`; seen here with a bot on an ephemeral port that the gateway had been retrying). Such a
//! connection is dropped at once and taken for what it is: nothing listens there.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

use super::BoxError;

/// A connector that hands on `C`'s connections, except one connected to itself.
#[derive(Clone)]
pub(super) struct Direct<C = HttpConnector>(pub C);

type Connected = TokioIo<TcpStream>;

impl<C> Service<Uri> for Direct<C>
where
    C: Service<Uri, Response = Connected>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = Connected;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Connected, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let io = connecting.await.map_err(Into::into)?;
            if connected_to_itself(io.inner()) {
                // Reset, not closed, when dropped here: a close would leave the port in
                // TIME_WAIT, still out of the bot's reach.
                let _ = io.inner().set_zero_linger();
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "the connection reached itself: nothing listens on that port",
                )
                .into());
            }
            Ok(io)
        })
    }
}

fn connected_to_itself(stream: &TcpStream) -> bool {
    matches!((stream.local_addr(), stream.peer_addr()), (Ok(local), Ok(peer)) if local == peer)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use tokio::net::{TcpListener, TcpSocket};

    use super::*;
    use crate::upstream::SendError;

    /// A socket connected to itself, the way a connect to an ephemeral port can end: bound to a
    /// port, then connected to that same port.
    async fn self_connected() -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        socket.connect(addr).await.expect("Linux connects a socket to its own address")
    }

    /// A connector that hands out one given connection.
    #[derive(Clone)]
    struct Given(Arc<Mutex<Option<TcpStream>>>);

    impl Service<Uri> for Given {
        type Response = Connected;
        type Error = io::Error;
        type Future = std::future::Ready<io::Result<Connected>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Uri) -> Self::Future {
            let stream = self.0.lock().unwrap().take().ok_or_else(|| io::Error::other("used"));
            std::future::ready(stream.map(TokioIo::new))
        }
    }

    #[tokio::test]
    async fn a_connection_to_itself_is_told_from_a_real_one() {
        let own = self_connected().await;
        assert_eq!(own.local_addr().unwrap(), own.peer_addr().unwrap());
        assert!(connected_to_itself(&own));

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let real = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        assert!(!connected_to_itself(&real));
    }

    #[tokio::test]
    async fn a_request_that_reached_itself_is_refused_and_frees_the_port() {
        let own = self_connected().await;
        let addr = own.local_addr().unwrap();
        let client: Client<_, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build(Direct(Given(Arc::new(Mutex::new(Some(own))))));
        let request = http::Request::post(format!("http://{addr}/slack/events")).body(Full::new(Bytes::new())).unwrap();

        let error = SendError::from_client(client.request(request).await.expect_err("no bot listens there"));
        assert!(matches!(error, SendError::Refused(_)), "{error:?}");
        assert!(!error.maybe_sent());
        // The bot, coming up now, gets its port.
        TcpListener::bind(addr).await.expect("the port was let go");
    }
}
