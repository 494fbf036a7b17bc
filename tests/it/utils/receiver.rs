//! The bot's stand-in: a real HTTP/1.1 server on a loopback port that records every request,
//! checks its Slack signature and timestamp the way Bolt does, and answers what the test says.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub delay: Duration,
    pub retry_after: Option<u64>,
    pub body: &'static str,
    pub content_type: Option<&'static str>,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply { status, delay: Duration::ZERO, retry_after: None, body: "", content_type: None }
    }
    pub fn body(mut self, content_type: &'static str, body: &'static str) -> Reply {
        self.content_type = Some(content_type);
        self.body = body;
        self
    }
    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
    pub fn retry_after(mut self, secs: u64) -> Reply {
        self.retry_after = Some(secs);
        self
    }
}

#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
    /// Seconds since the epoch, when the request arrived.
    pub at: f64,
    /// The signature verifies with the app's secret over these exact bytes.
    pub signature_ok: bool,
    /// `X-Slack-Request-Timestamp` within 5 s of arrival.
    pub timestamp_fresh: bool,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.to_str().unwrap().to_string())
    }
}

struct State {
    secret: String,
    received: Mutex<Vec<Received>>,
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Reply>,
    /// Requests being answered now, and the most there ever were at once.
    active: AtomicUsize,
    most_active: AtomicUsize,
}

pub struct Receiver {
    pub port: u16,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start(secret: &str) -> Receiver {
        Self::start_with(Reserved::new().socket, secret, None).await
    }

    /// An https receiver on `localhost`, with a certificate from `ca`.
    pub async fn start_tls(ca: &super::TestCa) -> Receiver {
        Self::start_with(Reserved::new().socket, "unused", Some(ca.acceptor.clone())).await
    }

    async fn start_with(socket: TcpSocket, secret: &str, tls: Option<tokio_rustls::TlsAcceptor>) -> Receiver {
        let listener = socket.listen(1024).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            secret: secret.into(),
            received: Mutex::default(),
            script: Mutex::default(),
            default: Mutex::new(Reply::status(200)),
            active: AtomicUsize::new(0),
            most_active: AtomicUsize::new(0),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let st = st.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                        }
                        Some(acceptor) => {
                            let Ok(stream) = acceptor.accept(stream).await else { return };
                            let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                });
            }
        });
        Receiver { port, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The URL of an https receiver (its certificate names `localhost`).
    pub fn https_url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    /// The next request gets this reply (queued in order); then the default.
    pub fn push(&self, reply: Reply) {
        self.state.script.lock().unwrap().push_back(reply);
    }

    pub fn set_default(&self, reply: Reply) {
        *self.state.default.lock().unwrap() = reply;
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.state.received.lock().unwrap().len()
    }

    /// How many requests carried `needle` in their body.
    pub fn count_body(&self, needle: &str) -> usize {
        self.received().iter().filter(|r| String::from_utf8_lossy(&r.body).contains(needle)).count()
    }

    /// The most requests that were being answered at one moment (from each one's arrival to
    /// its answer).
    pub fn most_concurrent(&self) -> usize {
        self.state.most_active.load(Ordering::SeqCst)
    }

    /// Stop listening and drop every open connection.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// A loopback port held for a bot that is down: bound, not listening, so connections to it are
/// refused until [`Reserved::start`] makes the bot come up on it. No other test can take it.
pub struct Reserved {
    socket: TcpSocket,
    pub port: u16,
}

impl Reserved {
    pub fn new() -> Reserved {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = socket.local_addr().unwrap().port();
        Reserved { socket, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bot comes up on the reserved port.
    pub async fn start(self, secret: &str) -> Receiver {
        Receiver::start_with(self.socket, secret, None).await
    }
}

async fn handle(st: Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let ts = parts
        .headers
        .get("x-slack-request-timestamp")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok());
    let sig = parts.headers.get("x-slack-signature").and_then(|v| v.to_str().ok()).unwrap_or("");
    let signature_ok = ts.is_some_and(|ts| super::sign(&st.secret, ts, &body) == sig);
    let timestamp_fresh = ts.is_some_and(|ts| (now - ts as f64).abs() <= 5.0);
    st.received.lock().unwrap().push(Received {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
        headers: parts.headers,
        body,
        at: now,
        signature_ok,
        timestamp_fresh,
    });
    let reply = st.script.lock().unwrap().pop_front().unwrap_or_else(|| st.default.lock().unwrap().clone());
    let active = st.active.fetch_add(1, Ordering::SeqCst) + 1;
    st.most_active.fetch_max(active, Ordering::SeqCst);
    tokio::time::sleep(reply.delay).await;
    st.active.fetch_sub(1, Ordering::SeqCst);
    let mut resp = Response::builder().status(reply.status);
    if let Some(ct) = reply.content_type {
        resp = resp.header("Content-Type", ct);
    }
    if let Some(s) = reply.retry_after {
        resp = resp.header("Retry-After", s.to_string());
    }
    Ok(resp.body(Full::new(Bytes::from_static(reply.body.as_bytes()))).unwrap())
}
