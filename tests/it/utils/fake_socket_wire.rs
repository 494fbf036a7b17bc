//! The fake Socket Mode server's two listeners: `apps.connections.open` over HTTP, which issues
//! tickets, and each WebSocket connection: the handshake takes a ticket once, then `hello`, then
//! the frames the fake is told to write and the client's acks, pings and anything else
//! (recorded as a bad frame), until either side closes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::Message;

use super::{Ack, ClosedBy, Cmd, Conn, ConnInfo, OpenCall, Sent, Shared, APP_ID};

/// How long a close frame the fake sent waits for the client's.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// One WebSocket connection, from its handshake to its end.
pub(super) async fn serve(sh: Arc<Shared>, stream: TcpStream) {
    // The callback's type is tungstenite's.
    #[allow(clippy::result_large_err)]
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let ticket = req
            .uri()
            .query()
            .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "ticket"))
            .map(|(_, v)| v.into_owned());
        let path_ok = matches!(req.uri().path(), "/link/" | "/link");
        let mut g = sh.inner.lock().unwrap();
        if path_ok && ticket.is_some_and(|t| g.tickets.remove(&t)) {
            return Ok(resp);
        }
        g.refused += 1;
        let mut refusal = ErrorResponse::new(Some("invalid ticket".into()));
        *refusal.status_mut() = StatusCode::UNAUTHORIZED;
        Err(refusal)
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, check).await else { return };
    let n = sh.inner.lock().unwrap().open_count() + 1;
    let hello = json!({
        "type": "hello", "num_connections": n,
        "debug_info": {"host": "fake-1", "build_number": 1, "approximate_connection_time": 3600},
        "connection_info": {"app_id": APP_ID},
    });
    if ws.send(Message::text(hello.to_string())).await.is_err() {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let index = {
        let mut g = sh.inner.lock().unwrap();
        let index = g.conns.len();
        let info = ConnInfo { index, opened_at: Instant::now(), told: None, closed_at: None, closed_by: None };
        g.conns.push(Conn { info, tx });
        index
    };
    sh.drain();

    let mut closing: Option<tokio::time::Instant> = None;
    let ended = loop {
        let close_deadline = closing.unwrap_or_else(|| tokio::time::Instant::now() + CLOSE_WAIT);
        tokio::select! {
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(t))) => on_text(&sh, index, t.as_str()),
                Some(Ok(Message::Binary(b))) => {
                    sh.inner.lock().unwrap().bad_frames.push(format!("binary frame of {} bytes", b.len()));
                }
                // tungstenite queues the pong and writes it on the next read.
                Some(Ok(Message::Ping(_))) => sh.inner.lock().unwrap().pings += 1,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break if closing.is_some() { ClosedBy::Fake } else { ClosedBy::Client },
            },
            cmd = rx.recv() => match cmd {
                Some(Cmd::Text(text, envelope)) => {
                    if ws.send(Message::text(text)).await.is_err() {
                        continue;
                    }
                    if let Some((envelope_id, retry_attempt)) = envelope {
                        let mut g = sh.inner.lock().unwrap();
                        let kind = g.envelope(&envelope_id).map(|e| e.kind.clone()).unwrap_or_default();
                        let at = Instant::now();
                        g.sends.push(Sent { envelope_id, kind, retry_attempt, conn: index, at });
                    }
                }
                Some(Cmd::Close) => {
                    if closing.is_none() {
                        closing = Some(tokio::time::Instant::now() + CLOSE_WAIT);
                        let _ = ws.close(None).await;
                    }
                }
                Some(Cmd::Drop) | None => break ClosedBy::Dropped,
            },
            _ = tokio::time::sleep_until(close_deadline), if closing.is_some() => break ClosedBy::Fake,
        }
    };
    drop(ws);
    let mut g = sh.inner.lock().unwrap();
    let info = &mut g.conns[index].info;
    info.closed_at.get_or_insert_with(Instant::now);
    info.closed_by.get_or_insert(ended);
}

/// An ack (`{"envelope_id": …}`, maybe with a `payload`), else a bad frame.
fn on_text(sh: &Shared, conn: usize, text: &str) {
    let mut g = sh.inner.lock().unwrap();
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let id = parsed.as_ref().and_then(|v| v.get("envelope_id")?.as_str().map(String::from));
    let Some(envelope_id) = id else {
        g.bad_frames.push(text.chars().take(2000).collect());
        return;
    };
    if let Some(env) = g.envelope(&envelope_id) {
        env.acked = true;
    }
    let payload = parsed.and_then(|mut v| v.get_mut("payload").map(Value::take));
    g.acks.push(Ack { envelope_id, payload, conn, at: Instant::now() });
}

/// `apps.connections.open` (the body, form or JSON, is ignored); anything else is unknown.
pub(super) async fn open(
    sh: Arc<Shared>,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let _ = body.collect().await;
    if parts.uri.path() != "/api/apps.connections.open" {
        return Ok(answer(404, json!({"ok": false, "error": "unknown_method"})));
    }
    let bearer = parts.headers.get("authorization").and_then(|v| v.to_str().ok());
    let token_ok = bearer.and_then(|v| v.strip_prefix("Bearer ")) == Some(sh.token.as_str());
    let mut g = sh.inner.lock().unwrap();
    let (url, reply) = if !token_ok {
        (None, json!({"ok": false, "error": "invalid_auth"}))
    } else if g.fail_opens > 0 {
        g.fail_opens -= 1;
        (None, json!({"ok": false, "error": "internal_error"}))
    } else {
        let ticket = format!("{:032x}{:04x}", rand::random::<u128>(), g.open_calls.len());
        g.tickets.insert(ticket.clone());
        let url = format!("ws://127.0.0.1:{}/link/?ticket={ticket}&app_id={APP_ID}", sh.ws_port);
        (Some(url.clone()), json!({"ok": true, "url": url}))
    };
    g.open_calls.push(OpenCall { at: Instant::now(), token_ok, url });
    Ok(answer(200, reply))
}

fn answer(status: u16, body: Value) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}
