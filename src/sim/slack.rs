//! `sim slack`: a fake Slack Web API, to try the egress (and benchmark it) without Slack. It
//! answers `auth.test` for any token, posts `chat.postMessage` into memory and serves the posts
//! back from `conversations.history` / `conversations.replies`, starts streams
//! (`chat.startStream` answers a new ts, its appends and stop their stream's), says
//! `{"ok": true}` to other writes, and echoes reads. Nothing is checked: it is a stand-in, not a model of Slack.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use super::SlackOpts;

/// Posts kept for history, at most this many (the oldest go first).
const KEPT: usize = 10_000;

#[derive(Default)]
struct Fake {
    calls: AtomicU64,
    seq: AtomicU64,
    posts: Mutex<std::collections::VecDeque<Value>>,
}

fn fields(content_type: &str, body: &[u8]) -> serde_json::Map<String, Value> {
    if content_type.contains("json") {
        return serde_json::from_slice::<Value>(body).ok().and_then(|v| v.as_object().cloned()).unwrap_or_default();
    }
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), Value::String(v.into_owned()))).collect()
}

fn answer(method: &str, f: &serde_json::Map<String, Value>, body: &[u8], fake: &Fake) -> Value {
    let text = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    match method {
        "auth.test" => json!({"ok": true, "team_id": "T0SIM", "user_id": "U0SIMBOT", "bot_id": "B0SIM", "team": "sim"}),
        "chat.postMessage" => {
            let n = fake.seq.fetch_add(1, Ordering::Relaxed) + 1;
            let ts = format!("{}.{:06}", 1_800_000_000 + n / 1_000_000, n % 1_000_000);
            let message = json!({"type": "message", "user": "U0SIMBOT", "bot_id": "B0SIM", "text": text("text"),
                "ts": ts, "thread_ts": f.get("thread_ts").cloned().unwrap_or(Value::Null), "channel": text("channel")});
            let mut posts = fake.posts.lock().unwrap_or_else(|e| e.into_inner());
            if posts.len() == KEPT {
                posts.pop_front();
            }
            posts.push_back(message.clone());
            json!({"ok": true, "channel": text("channel"), "ts": ts, "message": message})
        }
        // A stream starts a message (not kept for history); its calls answer with its ts.
        "chat.startStream" => {
            let n = fake.seq.fetch_add(1, Ordering::Relaxed) + 1;
            let ts = format!("{}.{:06}", 1_800_000_000 + n / 1_000_000, n % 1_000_000);
            json!({"ok": true, "channel": text("channel"), "ts": ts})
        }
        "chat.appendStream" | "chat.stopStream" => json!({"ok": true, "channel": text("channel"), "ts": text("ts")}),
        "conversations.history" | "conversations.replies" => {
            let thread = (method == "conversations.replies").then(|| text("ts"));
            let posts = fake.posts.lock().unwrap_or_else(|e| e.into_inner());
            let messages: Vec<&Value> = posts
                .iter()
                .filter(|p| p["channel"] == text("channel"))
                .filter(|p| thread.as_ref().is_none_or(|t| p["thread_ts"].as_str() == Some(t)))
                .collect();
            json!({"ok": true, "messages": messages})
        }
        m if m.starts_with("chat.") || m.starts_with("reactions.") || m.starts_with("views.") => json!({"ok": true}),
        m => json!({"ok": true, "method": m, "echo": String::from_utf8_lossy(body)}),
    }
}

async fn handle(fake: Arc<Fake>, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    fake.calls.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let method = parts.uri.path().rsplit('/').next().unwrap_or_default();
    let ct = parts.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let reply = answer(method, &fields(ct, &body), &body, &fake);
    let resp = Response::builder()
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(reply.to_string())))
        .unwrap_or_default();
    Ok(resp)
}

pub async fn run(o: SlackOpts) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&o.listen).await?;
    eprintln!("sim slack: a fake Web API on http://{}/api/", listener.local_addr()?);
    let fake = Arc::new(Fake::default());
    let f = fake.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            let f = f.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(f.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    let started = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        if o.duration.is_some_and(|d| started.elapsed() >= Duration::from_secs(d)) {
            break;
        }
    }
    server.abort();
    eprintln!("sim slack: {} calls answered", fake.calls.load(Ordering::Relaxed));
    Ok(())
}
