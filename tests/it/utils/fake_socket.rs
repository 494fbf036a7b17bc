//! A fake Slack Socket Mode server on loopback, speaking Slack's protocol: `POST
//! /api/apps.connections.open` with the app token (`Authorization: Bearer xapp-…`) answers a
//! `ws://` URL carrying a one-time ticket; a WebSocket on its own port takes each ticket once,
//! says `hello`, answers pings, sends envelopes (`events_api`, `interactive`, `slash_commands`)
//! and re-sends one not acked within [`redeliver_after`](FakeSocket::set_redeliver_after) with
//! `retry_attempt` + 1 and `retry_reason: "timeout"`, up to 3 times, as Slack does. It records
//! every open call, send, ack, ping and malformed frame. `disconnect` says `warning`,
//! `refresh_requested` (closed by the fake after a grace if the client has not closed it) or
//! `link_disabled` (closed at once); a connection told to disconnect gets no new envelope (they
//! go to another open connection, or wait for one to open).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

#[path = "fake_socket_wire.rs"]
mod wire;

/// The app id of `hello` and of the URL.
pub const APP_ID: &str = "A1";
/// Slack re-sends an envelope not acked up to 3 times.
const MAX_RETRIES: u32 = 3;

/// One ack the client sent: `{"envelope_id": …}` with its `payload`, if any.
#[derive(Clone, Debug)]
pub struct Ack {
    pub envelope_id: String,
    pub payload: Option<Value>,
    /// The connection it came on ([`ConnInfo::index`]).
    pub conn: usize,
    pub at: Instant,
}

/// One envelope written to a socket (a first send or a re-send).
#[derive(Clone, Debug)]
pub struct Sent {
    pub envelope_id: String,
    pub kind: String,
    pub retry_attempt: u32,
    pub conn: usize,
    pub at: Instant,
}

/// One `apps.connections.open` call.
#[derive(Clone, Debug)]
pub struct OpenCall {
    pub at: Instant,
    /// It carried the app token.
    pub token_ok: bool,
    /// The URL it was answered, if it was answered ok.
    pub url: Option<String>,
}

/// Who ended a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedBy {
    /// The client: a close frame, or its end of the TCP connection.
    Client,
    /// The fake's close frame (after a disconnect's grace, or `link_disabled`).
    Fake,
    /// [`FakeSocket::drop_connections`]: TCP closed with no close frame.
    Dropped,
}

/// One WebSocket connection that got `hello`, open or not.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Its place in the order connections opened, from 0.
    pub index: usize,
    pub opened_at: Instant,
    /// The reason of the `disconnect` it was told, if any.
    pub told: Option<String>,
    pub closed_at: Option<Instant>,
    pub closed_by: Option<ClosedBy>,
}

enum Cmd {
    /// A text frame; an envelope's id and attempt, to record once written.
    Text(String, Option<(String, u32)>),
    /// A close frame, then the connection ends when the client answers (or 2 s later).
    Close,
    /// End the TCP connection with no close frame.
    Drop,
}

struct Conn {
    info: ConnInfo,
    tx: mpsc::UnboundedSender<Cmd>,
}

impl Conn {
    fn alive(&self) -> bool {
        self.info.closed_at.is_none()
    }
    /// Open, and not told to disconnect: it may get new envelopes.
    fn usable(&self) -> bool {
        self.alive() && self.info.told.is_none()
    }
}

struct Envelope {
    kind: String,
    payload: Value,
    accepts_response_payload: bool,
    attempt: u32,
    acked: bool,
}

impl Envelope {
    fn frame(&self, id: &str) -> String {
        json!({
            "envelope_id": id, "type": self.kind, "payload": self.payload,
            "accepts_response_payload": self.accepts_response_payload,
            "retry_attempt": self.attempt, "retry_reason": if self.attempt == 0 { "" } else { "timeout" },
        })
        .to_string()
    }
}

struct Inner {
    open_calls: Vec<OpenCall>,
    fail_opens: usize,
    /// Issued and not used yet.
    tickets: HashSet<String>,
    refused: usize,
    conns: Vec<Conn>,
    next_rr: usize,
    /// Envelopes waiting for a usable connection, with the connection asked for.
    queue: VecDeque<(String, Option<usize>)>,
    envelopes: Vec<(String, Envelope)>,
    sends: Vec<Sent>,
    acks: Vec<Ack>,
    pings: usize,
    bad_frames: Vec<String>,
    redeliver_after: Duration,
    grace: Duration,
}

impl Inner {
    fn envelope(&mut self, id: &str) -> Option<&mut Envelope> {
        self.envelopes.iter_mut().find(|(i, _)| i == id).map(|(_, e)| e)
    }

    fn open_count(&self) -> usize {
        self.conns.iter().filter(|c| c.usable()).count()
    }

    /// The next usable connection in turn.
    fn pick(&mut self) -> Option<usize> {
        let n = self.conns.len();
        let i = (0..n).map(|k| (self.next_rr + k) % n).find(|&i| self.conns[i].usable())?;
        self.next_rr = i + 1;
        Some(i)
    }
}

struct Shared {
    token: String,
    ws_port: u16,
    inner: Mutex<Inner>,
    tasks: Mutex<JoinSet<()>>,
}

impl Shared {
    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks.lock().unwrap();
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Write envelope `id` (its current attempt) on connection `on` if usable, else on the next
    /// usable one, else queue it; once written, its re-send is due after `redeliver_after`.
    fn dispatch(self: &Arc<Self>, id: &str, on: Option<usize>) {
        let (attempt, after) = {
            let mut g = self.inner.lock().unwrap();
            let Some(env) = g.envelope(id) else { return };
            if env.acked {
                return;
            }
            let (frame, attempt) = (env.frame(id), env.attempt);
            loop {
                let pick = on.filter(|&i| g.conns.get(i).is_some_and(Conn::usable)).or_else(|| g.pick());
                let Some(i) = pick else {
                    g.queue.push_back((id.to_string(), on));
                    return;
                };
                if g.conns[i].tx.send(Cmd::Text(frame.clone(), Some((id.to_string(), attempt)))).is_ok() {
                    break;
                }
                // Its task is gone: it is closed.
                let c = &mut g.conns[i].info;
                c.closed_at = Some(Instant::now());
                c.closed_by.get_or_insert(ClosedBy::Client);
            }
            (attempt, g.redeliver_after)
        };
        let (sh, id) = (self.clone(), id.to_string());
        self.spawn(async move {
            tokio::time::sleep(after).await;
            let again = {
                let mut g = sh.inner.lock().unwrap();
                match g.envelope(&id) {
                    Some(env) if !env.acked && env.attempt == attempt && attempt < MAX_RETRIES => {
                        env.attempt += 1;
                        true
                    }
                    _ => false,
                }
            };
            if again {
                sh.dispatch(&id, None);
            }
        });
    }

    /// Send what waits in the queue (a connection became usable).
    fn drain(self: &Arc<Self>) {
        let queued: Vec<_> = self.inner.lock().unwrap().queue.drain(..).collect();
        for (id, on) in queued {
            self.dispatch(&id, on);
        }
    }

    /// Tell connection `i` to disconnect for `reason`, and close it at once or after the grace.
    fn tell(self: &Arc<Self>, i: usize, reason: &str) {
        let (tx, grace) = {
            let mut g = self.inner.lock().unwrap();
            let grace = g.grace;
            let Some(c) = g.conns.get_mut(i).filter(|c| c.alive()) else { return };
            c.info.told = Some(reason.to_string());
            let frame = json!({"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-1"}});
            let _ = c.tx.send(Cmd::Text(frame.to_string(), None));
            (c.tx.clone(), grace)
        };
        if reason == "link_disabled" {
            let _ = tx.send(Cmd::Close);
        } else {
            self.spawn(async move {
                tokio::time::sleep(grace).await;
                let _ = tx.send(Cmd::Close);
            });
        }
    }
}

pub struct FakeSocket {
    /// The Web API port (`apps.connections.open`).
    pub port: u16,
    /// The WebSocket port (`/link/`).
    pub ws_port: u16,
    sh: Arc<Shared>,
}

impl FakeSocket {
    /// A fake that opens connections for `app_token` (`xapp-…`).
    pub async fn start(app_token: &str) -> FakeSocket {
        let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let wsl = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (port, ws_port) = (api.local_addr().unwrap().port(), wsl.local_addr().unwrap().port());
        let sh = Arc::new(Shared {
            token: app_token.into(),
            ws_port,
            inner: Mutex::new(Inner {
                open_calls: Vec::new(),
                fail_opens: 0,
                tickets: HashSet::new(),
                refused: 0,
                conns: Vec::new(),
                next_rr: 0,
                queue: VecDeque::new(),
                envelopes: Vec::new(),
                sends: Vec::new(),
                acks: Vec::new(),
                pings: 0,
                bad_frames: Vec::new(),
                redeliver_after: Duration::from_secs(3),
                grace: Duration::from_secs(10),
            }),
            tasks: Mutex::new(JoinSet::new()),
        });
        let st = sh.clone();
        sh.spawn(async move {
            loop {
                let Ok((stream, _)) = api.accept().await else { continue };
                let st2 = st.clone();
                st.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| wire::open(st2.clone(), req));
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        let st = sh.clone();
        sh.spawn(async move {
            loop {
                let Ok((stream, _)) = wsl.accept().await else { continue };
                st.spawn(wire::serve(st.clone(), stream));
            }
        });
        FakeSocket { port, ws_port, sh }
    }

    /// The Web API base URL to configure: `http://127.0.0.1:<port>/api/`.
    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/", self.port)
    }

    /// An envelope not acked this long after it was written is sent again (default 3 s).
    pub fn set_redeliver_after(&self, d: Duration) {
        self.sh.inner.lock().unwrap().redeliver_after = d;
    }

    /// After `warning` or `refresh_requested`, the fake closes the connection itself this long
    /// after (default 10 s) if the client has not.
    pub fn set_grace(&self, d: Duration) {
        self.sh.inner.lock().unwrap().grace = d;
    }

    /// The next `n` calls with the right token answer `{"ok":false,"error":"internal_error"}`.
    pub fn fail_opens(&self, n: usize) {
        self.sh.inner.lock().unwrap().fail_opens = n;
    }

    /// How many `apps.connections.open` calls were answered with a URL.
    pub fn opened(&self) -> usize {
        self.open_calls().iter().filter(|c| c.url.is_some()).count()
    }

    /// Every `apps.connections.open` call, refused or failed ones too.
    pub fn open_calls(&self) -> Vec<OpenCall> {
        self.sh.inner.lock().unwrap().open_calls.clone()
    }

    /// WebSocket handshakes refused (no ticket, unknown or used ticket, wrong path).
    pub fn refused(&self) -> usize {
        self.sh.inner.lock().unwrap().refused
    }

    /// Send an envelope of `kind` (`events_api`, `interactive`, `slash_commands`) on the next
    /// open connection in turn (or once one opens); its `envelope_id`.
    pub fn send(&self, kind: &str, payload: Value, accepts_response_payload: bool) -> String {
        self.send_to(None, kind, payload, accepts_response_payload)
    }

    /// [`send`](Self::send) on connection `conn` (if it is open and not told to disconnect;
    /// else as `send`). Re-sends go to any open connection.
    pub fn send_on(&self, conn: usize, kind: &str, payload: Value, accepts_response_payload: bool) -> String {
        self.send_to(Some(conn), kind, payload, accepts_response_payload)
    }

    fn send_to(&self, on: Option<usize>, kind: &str, payload: Value, accepts_response_payload: bool) -> String {
        let h = format!("{:032x}", rand::random::<u128>());
        let id = format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]);
        let env = Envelope { kind: kind.into(), payload, accepts_response_payload, attempt: 0, acked: false };
        self.sh.inner.lock().unwrap().envelopes.push((id.clone(), env));
        self.sh.dispatch(&id, on);
        id
    }

    /// A text frame as it is, on the next open connection in turn: its index, or `None` if
    /// none is open (it is then not sent at all).
    pub fn send_raw(&self, text: &str) -> Option<usize> {
        let mut g = self.sh.inner.lock().unwrap();
        let i = g.pick()?;
        g.conns[i].tx.send(Cmd::Text(text.into(), None)).ok()?;
        Some(i)
    }

    /// Every envelope written to a socket, first sends and re-sends, in order (recorded when
    /// written: an envelope [`send`](Self::send) just queued is not here yet).
    pub fn sends(&self) -> Vec<Sent> {
        self.sh.inner.lock().unwrap().sends.clone()
    }

    /// Every ack received, in order (an ack of an unknown envelope too).
    pub fn acks(&self) -> Vec<Ack> {
        self.sh.inner.lock().unwrap().acks.clone()
    }

    /// The first ack of `envelope_id`.
    pub fn ack_for(&self, envelope_id: &str) -> Option<Ack> {
        self.sh.inner.lock().unwrap().acks.iter().find(|a| a.envelope_id == envelope_id).cloned()
    }

    /// Wait up to `limit` for the first ack of `envelope_id`.
    pub async fn wait_ack(&self, envelope_id: &str, limit: Duration) -> Option<Ack> {
        let mut got = None;
        super::eventually(limit, || {
            got = self.ack_for(envelope_id);
            got.is_some()
        })
        .await;
        got
    }

    /// How many envelopes sent by the fake were acked (each once, however often acked).
    pub fn acked_count(&self) -> usize {
        self.sh.inner.lock().unwrap().envelopes.iter().filter(|(_, e)| e.acked).count()
    }

    /// Send `disconnect` with `reason` (`warning`, `refresh_requested`, `link_disabled`) on every
    /// open connection not told already.
    pub fn disconnect(&self, reason: &str) {
        let open: Vec<usize> = {
            let g = self.sh.inner.lock().unwrap();
            g.conns.iter().filter(|c| c.usable()).map(|c| c.info.index).collect()
        };
        for i in open {
            self.sh.tell(i, reason);
        }
    }

    /// Send `disconnect` with `reason` on connection `conn` (if it is still open).
    pub fn disconnect_one(&self, conn: usize, reason: &str) {
        self.sh.tell(conn, reason);
    }

    /// End every open connection's TCP connection, with no close frame.
    pub fn drop_connections(&self) {
        let mut g = self.sh.inner.lock().unwrap();
        for c in g.conns.iter_mut().filter(|c| c.alive()) {
            let _ = c.tx.send(Cmd::Drop);
            c.info.closed_at = Some(Instant::now());
            c.info.closed_by = Some(ClosedBy::Dropped);
        }
    }

    /// Connections open, past `hello`, and not told to disconnect.
    pub fn open_connections(&self) -> usize {
        self.sh.inner.lock().unwrap().open_count()
    }

    /// Connections that ever got `hello`.
    pub fn total_connections(&self) -> usize {
        self.sh.inner.lock().unwrap().conns.len()
    }

    /// Every connection that got `hello`, in the order they opened.
    pub fn connections(&self) -> Vec<ConnInfo> {
        self.sh.inner.lock().unwrap().conns.iter().map(|c| c.info.clone()).collect()
    }

    /// Wait up to `limit` until at least `n` connections are [open](Self::open_connections).
    pub async fn wait_open(&self, n: usize, limit: Duration) -> bool {
        super::eventually(limit, || self.open_connections() >= n).await
    }

    /// WebSocket pings received (each answered with a pong).
    pub fn pings(&self) -> usize {
        self.sh.inner.lock().unwrap().pings
    }

    /// Frames from the client that are not an ack (text as received; binary as a note).
    pub fn bad_frames(&self) -> Vec<String> {
        self.sh.inner.lock().unwrap().bad_frames.clone()
    }
}

impl Drop for FakeSocket {
    fn drop(&mut self) {
        let mut tasks = self.sh.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.abort_all();
    }
}
