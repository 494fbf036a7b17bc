//! Gateway → a Socket Mode bot (`upstream = "socket"`): the bot's `apps.connections.open`
//! (through the egress, matched by its app token) gets a URL of the gateway's own socket
//! listener with a one-time ticket; a connection without a valid, unused ticket is refused, so
//! no other local process can read deliveries or ack them. Each delivery attempt goes to one
//! greeted socket of the app as an envelope, and the bot's ack is the attempt's 2xx (an ack's
//! `payload` its answer). A bot that drops its socket holds nothing: the attempt fails and the
//! delivery is retried like any other.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::Message;
use tracing::{debug, info, warn};

use super::envelope;
use crate::metrics::Metrics;
use crate::queue::runs::LostRun;
use crate::shared::Shared;
use crate::upstream::{self, SendError, SocketBots};

/// The path of the URL a ticket is issued with: the only one that spends it.
const SOCKET_PATH: &str = "/socket";
/// A ticket not used within this long is void.
const TICKET_LIFE: Duration = Duration::from_secs(60);
/// Tickets outstanding at most (each `apps.connections.open` makes one).
const MAX_TICKETS: usize = 1024;
const PING_EVERY: Duration = Duration::from_secs(10);
/// A bot socket silent this long (not even a pong) is closed.
const SILENT_MAX: Duration = Duration::from_secs(35);

/// The bots' sockets of this process, by app, and the tickets that open them.
#[derive(Default)]
pub struct BotSockets {
    tickets: Mutex<HashMap<String, (Arc<str>, Instant)>>,
    by_app: Mutex<HashMap<Arc<str>, Vec<Arc<BotConn>>>>,
    next: AtomicUsize,
    ids: AtomicU64,
}

/// One greeted bot socket.
struct BotConn {
    id: u64,
    out: mpsc::Sender<Message>,
    /// Envelope id → who waits for its ack, and the envelope's type; `None` once the socket
    /// closed (a waiter put in after that would wait for an ack that never comes).
    waiting: Mutex<Option<HashMap<String, (AckWaiter, &'static str)>>>,
    /// The deliveries whose runs went on past their ack on this socket, each with when its run
    /// ends at the latest (its turn's `timeout`), oldest first; `None` once it closed. Whether
    /// each run is still open is Redis' to say when the socket closes.
    carried: Mutex<Option<VecDeque<(String, Instant)>>>,
}

impl BotConn {
    fn new(id: u64, out: mpsc::Sender<Message>) -> BotConn {
        BotConn { id, out, waiting: Mutex::new(Some(HashMap::new())), carried: Mutex::new(Some(VecDeque::new())) }
    }

    /// Remember `delivery`'s run, which ends `within` from now at the latest, as carried by
    /// this socket (the runs past their end forgotten); `false` when it has closed.
    fn carry(&self, delivery: &str, within: Duration) -> bool {
        let mut carried = lock(&self.carried);
        let Some(list) = carried.as_mut() else { return false };
        let now = Instant::now();
        while list.front().is_some_and(|(_, ends)| *ends <= now) {
            list.pop_front();
        }
        list.push_back((delivery.to_string(), now + within));
        true
    }

    /// Wait for the ack of envelope `id`; `None` when the socket has closed already.
    fn wait_for(&self, id: &str, kind: &'static str) -> Option<oneshot::Receiver<Option<String>>> {
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).as_mut()?.insert(id.to_string(), (tx, kind));
        Some(rx)
    }

    /// Whoever waits for an ack on this socket gets none (the attempt fails and is retried),
    /// and no one waits on it again. Returns the runs it carried.
    fn close(&self) -> VecDeque<(String, Instant)> {
        lock(&self.waiting).take();
        let mut carried = lock(&self.carried).take().unwrap_or_default();
        let now = Instant::now();
        carried.retain(|(_, ends)| *ends > now);
        carried
    }

    fn forget(&self, id: &str) -> Option<(AckWaiter, &'static str)> {
        lock(&self.waiting).as_mut()?.remove(id)
    }
}

/// Gets the ack's payload (JSON text), if it has one.
type AckWaiter = oneshot::Sender<Option<String>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl SocketBots for BotSockets {
    fn issue(&self, app: &str, listen: &str) -> Option<String> {
        let mut tickets = lock(&self.tickets);
        tickets.retain(|_, (_, at)| at.elapsed() < TICKET_LIFE);
        if tickets.len() >= MAX_TICKETS {
            return None;
        }
        let ticket = format!("{:032x}", rand::random::<u128>());
        tickets.insert(ticket.clone(), (app.into(), Instant::now()));
        Some(format!("ws://{listen}{SOCKET_PATH}?ticket={ticket}"))
    }

    fn connected(&self, app: &str) -> usize {
        lock(&self.by_app).get(app).map_or(0, Vec::len)
    }

    fn carrying(&self, app: &str, socket: u64, delivery: &str, within: Duration) -> bool {
        let conn = lock(&self.by_app).get(app).and_then(|c| c.iter().find(|c| c.id == socket).cloned());
        conn.is_some_and(|c| c.carry(delivery, within))
    }

    async fn send(
        &self,
        metrics: &Metrics,
        app: &str,
        delivery_id: &str,
        (attempt, retry): (u64, u64),
        (content_type, body): (&str, &[u8]),
        timeout: Duration,
    ) -> Result<upstream::Response, SendError> {
        let (kind, payload) = envelope::from_http(content_type, body)
            .ok_or_else(|| SendError::Request("not a body Socket Mode can carry".into()))?;
        let conn = {
            let by_app = lock(&self.by_app);
            let conns = by_app.get(app).filter(|c| !c.is_empty()).ok_or_else(no_bot)?;
            conns[self.next.fetch_add(1, Ordering::Relaxed) % conns.len()].clone()
        };
        let id = format!("{delivery_id}.{attempt}");
        // The socket may have closed since it was picked: then fail at once, not at the timeout.
        let rx = conn.wait_for(&id, kind.as_label()).ok_or_else(dropped)?;
        let retry = u32::try_from(retry).unwrap_or(u32::MAX);
        let text = envelope::envelope_text(&id, kind, &payload, envelope::accepts_response_payload(kind), retry);
        let answer = async {
            conn.out.send(Message::text(text)).await.map_err(|_| dropped())?;
            rx.await.map_err(|_| dropped())
        };
        let result = tokio::time::timeout(timeout, answer).await;
        conn.forget(&id);
        if !matches!(result, Ok(Ok(_))) {
            metrics.socket.envelopes.with_label_values(&[app, "bot", kind.as_label(), "not_acked"]).inc();
        }
        let payload = result.map_err(|_| SendError::Timeout)??;
        let (content_type, body) = match payload {
            Some(p) => (Some(envelope::JSON.to_string()), Bytes::from(p)),
            None => (None, Bytes::new()),
        };
        let headers = Default::default();
        Ok(upstream::Response { status: 200, content_type, body, retry_after: None, headers, socket: Some(conn.id) })
    }
}

impl BotSockets {
    /// The app a ticket in `query` opens on `path`, using the ticket up. A request to any other
    /// path is refused and leaves the ticket as it was: only the URL the ticket was issued
    /// with may spend it.
    fn redeem(&self, path: &str, query: Option<&str>) -> Option<Arc<str>> {
        if path != SOCKET_PATH {
            return None;
        }
        let ticket = form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == "ticket")?.1.into_owned();
        let (app, at) = lock(&self.tickets).remove(&ticket)?;
        (at.elapsed() < TICKET_LIFE).then_some(app)
    }

    /// Serve one accepted TCP connection: the upgrade (with a valid ticket) within
    /// `upgrade_deadline`, then the socket until it closes.
    pub async fn serve(self: Arc<Self>, tcp: tokio::net::TcpStream, upgrade_deadline: Duration, shared: Arc<Shared>) {
        let mut app = None;
        // The handshake's own callback type (tungstenite's), whatever its size.
        #[allow(clippy::result_large_err)]
        let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
            match self.redeem(req.uri().path(), req.uri().query()) {
                Some(a) => {
                    app = Some(a);
                    Ok(resp)
                }
                _ => {
                    let mut refused = ErrorResponse::new(Some("a valid, unused ticket is required\n".into()));
                    *refused.status_mut() = http::StatusCode::UNAUTHORIZED;
                    Err(refused)
                }
            }
        };
        let upgrade = tokio_tungstenite::accept_hdr_async_with_config(tcp, check, Some(super::ws::config()));
        let socket = match tokio::time::timeout(upgrade_deadline, upgrade).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return debug!(error = %e, "a Socket Mode bot's upgrade refused"),
            Err(_) => return debug!("a Socket Mode bot's upgrade timed out"),
        };
        let Some(app) = app else { return };
        self.session(app, socket, &shared).await;
    }

    async fn session<S>(&self, app: Arc<str>, socket: tokio_tungstenite::WebSocketStream<S>, shared: &Shared)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let metrics = &shared.metrics;
        let (sink, mut stream) = socket.split();
        let (out, writer) = super::ws::writer(sink);
        let conn = Arc::new(BotConn::new(self.ids.fetch_add(1, Ordering::Relaxed), out));
        let hello = serde_json::json!({
            "type": "hello",
            "num_connections": self.connected(&app) + 1,
            "debug_info": { "host": "slackgate", "approximate_connection_time": 18060 },
            "connection_info": { "app_id": "slackgate" },
        });
        if conn.out.send(Message::text(hello.to_string())).await.is_err() {
            return;
        }
        lock(&self.by_app).entry(app.clone()).or_default().push(conn.clone());
        let gauge = metrics.socket.connections.with_label_values(&[&app, "bot"]);
        gauge.inc();
        info!(app = %app, socket = conn.id, "a Socket Mode bot connected");
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let mut last_frame = Instant::now();
        loop {
            tokio::select! {
                frame = stream.next() => {
                    last_frame = Instant::now();
                    match frame {
                        Some(Ok(Message::Text(t))) => self.acked(&app, &conn, &t, metrics),
                        Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                        Some(Ok(_)) => {}
                    }
                }
                _ = ping.tick() => {
                    if last_frame.elapsed() > SILENT_MAX {
                        warn!(app = %app, socket = conn.id, "a Socket Mode bot stopped answering pings; closing its socket");
                        break;
                    }
                    let _ = conn.out.try_send(Message::Ping(Bytes::from_static(super::PING_PAYLOAD)));
                }
            }
        }
        if let Some(conns) = lock(&self.by_app).get_mut(&app) {
            conns.retain(|c| c.id != conn.id);
        }
        gauge.dec();
        let mut carried = conn.close();
        info!(app = %app, socket = conn.id, runs = carried.len(), "a Socket Mode bot disconnected");
        if shared.drain.draining() {
            // This process closes its sockets as it stops: the bots live on, reconnect to
            // another, and their runs go on there. Not lost.
            carried.clear();
        }
        for (delivery, _) in carried {
            let socket = format!("{}/{}", shared.holder, conn.id);
            shared.lost_runs.push(LostRun { app: app.to_string(), delivery, socket });
        }
        writer.abort();
    }

    fn acked(&self, app: &str, conn: &BotConn, text: &str, metrics: &Metrics) {
        let Some((id, payload)) = envelope::parse_ack(text) else {
            return debug!(app, "a Socket Mode bot sent a frame that is not an ack");
        };
        match conn.forget(&id) {
            Some((w, kind)) => {
                metrics.socket.envelopes.with_label_values(&[app, "bot", kind, "acked"]).inc();
                let _ = w.send(payload);
            }
            None => debug!(app, "a Socket Mode bot acked an envelope no attempt waits for (late, or unknown)"),
        }
    }
}

fn no_bot() -> SendError {
    SendError::Refused("no Socket Mode bot is connected".into())
}

fn dropped() -> SendError {
    SendError::Io("the Socket Mode bot's socket closed before its ack".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_that_closed_takes_no_more_waiters_and_its_waiters_fail_at_once() {
        let (out, _rx) = mpsc::channel(4);
        let conn = BotConn::new(1, out);
        let waiting = conn.wait_for("0-1.1", "events_api").expect("open: it waits");
        conn.close();
        assert!(waiting.await.is_err(), "the waiter of a closed socket gets no ack");
        // Picked just before it closed: the attempt fails now, not at its timeout.
        assert!(conn.wait_for("0-2.1", "events_api").is_none());
        assert!(conn.forget("0-1.1").is_none());
    }

    #[test]
    fn a_socket_remembers_the_runs_it_carries_until_they_end_and_hands_them_over_as_it_closes() {
        let (out, _rx) = mpsc::channel(4);
        let conn = BotConn::new(1, out);
        assert!(conn.carry("0-ended", Duration::ZERO));
        assert!(conn.carry("0-open", Duration::from_secs(60)));
        assert!(conn.carry("0-also", Duration::from_secs(60)));
        assert_eq!(lock(&conn.carried).as_ref().map(VecDeque::len), Some(2), "a run past its end is forgotten");
        let lost: Vec<String> = conn.close().into_iter().map(|(d, _)| d).collect();
        assert_eq!(lost, ["0-open", "0-also"]);
        assert!(!conn.carry("0-late", Duration::from_secs(60)), "a closed socket carries nothing more");
    }
}
