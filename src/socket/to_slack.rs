//! Slack → gateway over Socket Mode: per app, `socket_mode.connections` sockets to Slack, each
//! acking an envelope only once the ingress recorded it (the same atomic record, admission and
//! ack budget as an HTTP delivery). Not recorded (Redis down, shed): no ack, and Slack sends
//! it again.
//!
//! A socket Slack asks to go (`refresh_requested`, `warning`) is replaced before it is closed:
//! the new one is opened and greeted first, then the old one finishes the envelopes it has and
//! closes, so there is no moment without a socket. `link_disabled` is logged as an error and
//! makes `/readyz` not ready until a socket is greeted again. A socket that stops answering
//! pings, drops, or cannot be opened is opened again after a backoff with jitter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::Full;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tracing::{debug, error, info, warn};

use super::envelope::{self, Disconnect, Envelope, EnvelopeType, Incoming};
use super::error::SocketError;
use super::ws;
use crate::config::AppConfig;
use crate::ingress::{EnvelopeRequest, Ingress};
use crate::shared::Shared;
use crate::upstream::UpstreamClient;

/// A greeting later than this after the socket opened: try another.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// Our pings, and how long a socket may be silent (no frame at all) before it is given up.
const PING_EVERY: Duration = Duration::from_secs(10);
const SILENT_MAX: Duration = Duration::from_secs(35);
/// After `link_disabled`, ask again this often (an operator may turn it back on).
const DISABLED_RETRY: Duration = Duration::from_secs(60);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What every socket of a process shares.
pub struct Links {
    pub live: Arc<crate::live::Live>,
    pub ingress: Arc<Ingress>,
    pub shared: Arc<Shared>,
    pub client: UpstreamClient,
}

/// Why a socket ended.
#[derive(Debug)]
enum Ended {
    /// We closed it (replaced, or stopping).
    Closed,
    Disabled,
    Dropped(String),
}

/// One of an app's sockets to Slack, kept open until `stop`.
pub async fn slot(links: Arc<Links>, app: Arc<AppConfig>, index: u16, mut stop: watch::Receiver<bool>) {
    let mut failures = 0u32;
    // The socket being replaced, closed once its successor is greeted.
    let mut old: Option<watch::Sender<bool>> = None;
    while !*stop.borrow() {
        let next = tokio::select! {
            g = greeted(&links, &app, index) => g,
            _ = stop.changed() => break,
        };
        let Greeted { running, close, replace } = match next {
            Ok(g) => g,
            Err(e) => {
                failures += 1;
                links.metric_reconnect(&app, e.reconnect_reason());
                warn!(app = %app.name, socket = index, error = %e, "cannot open a Socket Mode connection; trying again");
                if pause(backoff(failures), &mut stop).await {
                    break;
                }
                continue;
            }
        };
        failures = 0;
        if let Some(old) = old.take() {
            let _ = old.send(true);
        }
        match served(running, replace, &close, &mut stop).await {
            Served::Replace => old = Some(close),
            Served::Stopped => break,
            Served::Ended(Ended::Disabled) => {
                if pause(DISABLED_RETRY, &mut stop).await {
                    break;
                }
            }
            Served::Ended(Ended::Dropped(why)) => {
                failures += 1;
                warn!(app = %app.name, socket = index, reason = %why, "Socket Mode connection lost; opening another");
                if pause(backoff(failures), &mut stop).await {
                    break;
                }
            }
            Served::Ended(Ended::Closed) => {}
        }
    }
    if let Some(old) = old {
        let _ = old.send(true);
    }
}

/// A socket Slack greeted, running.
struct Greeted {
    running: tokio::task::JoinHandle<Ended>,
    close: watch::Sender<bool>,
    /// Fires when Slack asks this socket to go.
    replace: oneshot::Receiver<()>,
}

/// Open a socket and wait for its `hello`; else why not (a metric label) and the error.
async fn greeted(links: &Arc<Links>, app: &Arc<AppConfig>, index: u16) -> Result<Greeted, SocketError> {
    let socket = open(links, app).await?;
    let (close, close_rx) = watch::channel(false);
    let (hello_tx, hello_rx) = oneshot::channel();
    let (replace_tx, replace) = oneshot::channel();
    let session =
        Session { links: links.clone(), app: app.clone(), index, hello: Some(hello_tx), replace: Some(replace_tx) };
    let running = tokio::spawn(session.run(socket, close_rx));
    if !tokio::time::timeout(HELLO_WAIT, hello_rx).await.is_ok_and(|r| r.is_ok()) {
        let _ = close.send(true);
        return Err(SocketError::NoHello);
    }
    Ok(Greeted { running, close, replace })
}

/// How a greeted socket's service ended.
enum Served {
    /// Slack asked it to go: its successor is opened now, then it is closed.
    Replace,
    Stopped,
    Ended(Ended),
}

/// Wait for a greeted socket to end, to be asked to go, or for the stop.
async fn served(
    mut running: tokio::task::JoinHandle<Ended>,
    replace: oneshot::Receiver<()>,
    close: &watch::Sender<bool>,
    stop: &mut watch::Receiver<bool>,
) -> Served {
    tokio::select! {
        Ok(()) = replace => Served::Replace,
        ended = &mut running => {
            Served::Ended(ended.unwrap_or_else(|e| Ended::Dropped(format!("the socket's task failed: {e}"))))
        }
        _ = stop.changed() => {
            let _ = close.send(true);
            let _ = tokio::time::timeout(Duration::from_secs(5), running).await;
            Served::Stopped
        }
    }
}

/// Sleep `d` unless stopped first (then `true`).
async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

/// 1 s, 2 s, 4 s … up to 30 s, each with up to half again of jitter.
fn backoff(failures: u32) -> Duration {
    let base = Duration::from_secs(1u64 << failures.saturating_sub(1).min(5)).min(BACKOFF_MAX);
    base + base.mul_f64(rand::random::<f64>() / 2.0)
}

/// `apps.connections.open` with the app token, then the socket it names.
async fn open(links: &Links, app: &AppConfig) -> Result<ws::Socket, SocketError> {
    let s = app.socket_mode.as_ref().ok_or(SocketError::NoSocketMode)?;
    let uri = s.api_url.join("apps.connections.open");
    let mut bearer = b"Bearer ".to_vec();
    bearer.extend_from_slice(s.app_token.expose());
    let request = http::Request::post(uri)
        .header(http::header::AUTHORIZATION, bearer)
        .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::new()))
        .map_err(|_| SocketError::OpenRequest)?;
    let resp = links.client.call(request, Duration::from_secs(10), 64 << 10).await?;
    let answer: serde_json::Value =
        serde_json::from_slice(&resp.body).map_err(|_| SocketError::OpenNotJson(resp.status))?;
    if answer["ok"] != true {
        let error = answer["error"].as_str().unwrap_or("no error given");
        return Err(SocketError::OpenRefused(error.chars().take(60).collect()));
    }
    let url = answer["url"].as_str().ok_or(SocketError::OpenNoUrl)?;
    ws::connect(url).await
}

impl Links {
    /// The app as the last reload left it (its filters, paths and secrets), else as the socket
    /// was opened with it.
    fn current(&self, app: Arc<AppConfig>) -> Arc<AppConfig> {
        let config = self.live.get().config.clone();
        config.apps.iter().find(|a| a.name == app.name).cloned().unwrap_or(app)
    }

    fn metric_reconnect(&self, app: &AppConfig, reason: &str) {
        self.shared.metrics.socket.reconnects.with_label_values(&[&app.name, reason]).inc();
    }
}

/// One greeted socket: reads envelopes, records each, acks what was recorded.
struct Session {
    links: Arc<Links>,
    app: Arc<AppConfig>,
    index: u16,
    hello: Option<oneshot::Sender<()>>,
    replace: Option<oneshot::Sender<()>>,
}

impl Session {
    async fn run(mut self, socket: ws::Socket, mut close: watch::Receiver<bool>) -> Ended {
        let (sink, mut stream) = socket.split();
        let (out, writer) = ws::writer(sink);
        let mut in_flight = JoinSet::new();
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let mut last_frame = Instant::now();
        let ended = loop {
            tokio::select! {
                frame = stream.next() => {
                    last_frame = Instant::now();
                    let ended = match frame {
                        Some(Ok(Message::Text(t))) => self.on_text(&t, &mut in_flight, &out),
                        Some(Ok(Message::Close(_))) | None => Some(Ended::Dropped("closed by Slack".into())),
                        Some(Ok(_)) => None,
                        Some(Err(e)) => Some(Ended::Dropped(e.to_string())),
                    };
                    if let Some(ended) = ended {
                        break ended;
                    }
                }
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                _ = ping.tick() => {
                    if last_frame.elapsed() > SILENT_MAX {
                        self.links.metric_reconnect(&self.app, "ping_timeout");
                        break Ended::Dropped("no frame from Slack, not even a pong".into());
                    }
                    let _ = out.try_send(Message::Ping(Bytes::from_static(super::PING_PAYLOAD)));
                }
                _ = close.changed() => {
                    // The envelopes read on this socket are acked on it before it closes.
                    let drain = async { while in_flight.join_next().await.is_some() {} };
                    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
                    let _ = out.send(Message::Close(None)).await;
                    break Ended::Closed;
                }
            }
        };
        if self.hello.is_none() {
            self.links.shared.metrics.socket.connections.with_label_values(&[&self.app.name, "slack"]).dec();
        }
        drop(out);
        let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
        ended
    }

    /// One text frame; `Some` when the socket ends with it.
    fn on_text(&mut self, text: &str, in_flight: &mut JoinSet<()>, out: &mpsc::Sender<Message>) -> Option<Ended> {
        match envelope::parse(text) {
            Ok(Incoming::Hello) => self.greeted(),
            Ok(Incoming::Envelope(e)) => {
                in_flight.spawn(ack(self.links.clone(), self.app.clone(), e, out.clone()));
            }
            Ok(Incoming::Disconnect(reason)) => return self.disconnect(reason),
            Ok(Incoming::Unknown(kind)) => {
                debug!(app = %self.app.name, kind, "a Socket Mode message of a type not handled")
            }
            Err(e) => warn!(app = %self.app.name, error = %e, "a Socket Mode frame that is not an envelope; ignored"),
        }
        None
    }

    /// The first `hello` (the socket counts as open from now on); later ones change nothing.
    fn greeted(&mut self) {
        let Some(hello) = self.hello.take() else { return };
        let _ = hello.send(());
        let m = &self.links.shared.metrics.socket;
        m.connections.with_label_values(&[&self.app.name, "slack"]).inc();
        if m.link_disabled.with_label_values(&[&self.app.name]).get() != 0 {
            info!(app = %self.app.name, "Socket Mode enabled again");
        }
        m.link_disabled.with_label_values(&[&self.app.name]).set(0);
        info!(app = %self.app.name, socket = self.index, "Socket Mode connection open");
    }

    /// Slack's `disconnect`: `Some` when the socket ends now.
    fn disconnect(&mut self, reason: Disconnect) -> Option<Ended> {
        self.links.metric_reconnect(&self.app, reason.as_label());
        match reason {
            Disconnect::LinkDisabled => {
                self.links.shared.metrics.socket.link_disabled.with_label_values(&[&self.app.name]).set(1);
                error!(app = %self.app.name, "Slack disabled Socket Mode for this app (link_disabled): no events arrive until it is enabled again");
                Some(Ended::Disabled)
            }
            _ => {
                info!(app = %self.app.name, socket = self.index, reason = reason.as_label(), "Slack asks for a new Socket Mode connection; opening it before closing this one");
                if let Some(r) = self.replace.take() {
                    let _ = r.send(());
                }
                None
            }
        }
    }
}

/// Record one envelope and ack it if it was recorded.
async fn ack(links: Arc<Links>, app: Arc<AppConfig>, e: Envelope, out: mpsc::Sender<Message>) {
    let arrived = Instant::now();
    let app = links.current(app);
    let m = &links.shared.metrics.socket;
    let kind = e.kind.as_label();
    let http = match envelope::to_http(&e) {
        Ok(h) => h,
        Err(why) => {
            // Unreadable: acked (a redelivery cannot be read either), never recorded.
            // A string field (quoted in the human format), as this line has always logged it.
            let why = why.to_string();
            warn!(app = %app.name, envelope = %e.id, error = why.as_str(), "an envelope whose payload cannot be read; acked, not delivered");
            let _ = out.send(Message::text(envelope::ack_text(&e.id, None))).await;
            m.envelopes.with_label_values(&[&app.name, "slack", kind, "bad_request"]).inc();
            return;
        }
    };
    let path = match e.kind {
        EnvelopeType::Events => &app.events_path,
        EnvelopeType::Interactive => &app.interactivity_path,
        EnvelopeType::SlashCommands => &app.commands_path,
    };
    let retry = (e.retry_attempt > 0).then(|| (e.retry_attempt, e.retry_reason()));
    let request = EnvelopeRequest { content_type: http.content_type, body: http.body, path, envelope_id: &e.id, retry };
    let answer = links.ingress.envelope(&app, request).await;
    if !answer.ack {
        m.envelopes.with_label_values(&[&app.name, "slack", kind, "not_acked"]).inc();
        return;
    }
    let payload = e.accepts_response_payload.then_some((answer.content_type.as_str(), &answer.body[..]));
    if out.send(Message::text(envelope::ack_text(&e.id, payload))).await.is_ok() {
        m.ack_seconds.with_label_values(&[&app.name]).observe(arrived.elapsed().as_secs_f64());
        m.envelopes.with_label_values(&[&app.name, "slack", kind, answer.outcome]).inc();
    }
}
