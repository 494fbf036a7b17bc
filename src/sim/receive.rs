//! `sim receive`: a fast bot that checks what the gateway forwards.

use crate::out::out;
use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use super::{histogram, latency_json, latency_line, now_ms, ReceiveOpts};
use crate::config::Secret;

struct Bot {
    secret: Secret,
    received: AtomicU64,
    bad_signatures: AtomicU64,
    per_event: Mutex<HashMap<String, u32>>,
    /// From the sender's `sim_sent_ms` to arrival here, in microseconds.
    latency: Mutex<hdrhistogram::Histogram<u64>>,
    last: Mutex<Option<Instant>>,
}

async fn handle(bot: Arc<Bot>, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let header = |n: &str| parts.headers.get(n).map(|v| v.as_bytes());
    let now = (now_ms() / 1000) as i64;
    let verified = crate::slack::verify(
        std::slice::from_ref(&bot.secret),
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &body,
        now,
    );
    if verified.is_err() {
        bot.bad_signatures.fetch_add(1, Ordering::Relaxed);
        return Ok(Response::builder().status(401).body(Full::new(Bytes::new())).unwrap_or_default());
    }
    bot.received.fetch_add(1, Ordering::Relaxed);
    *bot.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if let Some(id) = json["event_id"].as_str() {
        *bot.per_event.lock().unwrap_or_else(|e| e.into_inner()).entry(id.to_string()).or_default() += 1;
    }
    if let Some(sent) = json["event"]["sim_sent_ms"].as_u64() {
        let micros = now_ms().saturating_sub(sent).max(1) * 1000;
        let _ = bot.latency.lock().unwrap_or_else(|e| e.into_inner()).record(micros);
    }
    Ok(Response::new(Full::new(Bytes::new())))
}

pub async fn run(o: ReceiveOpts) -> anyhow::Result<()> {
    anyhow::ensure!(!o.secret.is_empty(), "give the app's signing secret (--secret or SLACK_SIGNING_SECRET)");
    let listener = tokio::net::TcpListener::bind(&o.listen).await?;
    let bot = Arc::new(Bot {
        secret: Secret::new(&o.secret),
        received: AtomicU64::new(0),
        bad_signatures: AtomicU64::new(0),
        per_event: Mutex::new(HashMap::new()),
        latency: Mutex::new(histogram()),
        last: Mutex::new(None),
    });
    // Always said (on stderr, so --json output stays clean): with port 0 it is how a caller
    // learns the port.
    eprintln!("sim receive: listening on {}", listener.local_addr()?);
    let b = bot.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            let b = b.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(b.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    let started = Instant::now();
    let deadline = o.duration.map(|d| started + Duration::from_secs(d));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        let last = *bot.last.lock().unwrap_or_else(|e| e.into_inner());
        if deadline.is_some_and(|d| Instant::now() >= d)
            || last.is_some_and(|l| l.elapsed() >= Duration::from_secs(o.idle))
        {
            break;
        }
        if !o.json {
            eprint!(
                "\r{:>5.0}s  received {}   ",
                started.elapsed().as_secs_f64(),
                bot.received.load(Ordering::Relaxed)
            );
            let _ = std::io::stderr().flush();
        }
    }
    server.abort();
    report(&o, &bot, started)
}

fn report(o: &ReceiveOpts, bot: &Bot, started: Instant) -> anyhow::Result<()> {
    let per_event = bot.per_event.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let duplicated: u64 = per_event.values().map(|&c| u64::from(c.saturating_sub(1))).sum();
    let lost = match &o.manifest {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)?;
            let expected: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let missing: Vec<String> = expected
                .iter()
                .filter(|line| !line.split_whitespace().any(|id| per_event.contains_key(id)))
                .map(|line| line.to_string())
                .collect();
            Some((expected.len(), missing))
        }
    };
    let h = bot.latency.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let last = *bot.last.lock().unwrap_or_else(|e| e.into_inner());
    if o.json {
        let json = serde_json::json!({
            "received": bot.received.load(Ordering::Relaxed), "events": per_event.len(), "duplicated": duplicated,
            "bad_signatures": bot.bad_signatures.load(Ordering::Relaxed),
            "expected": lost.as_ref().map(|(n, _)| *n), "lost": lost.as_ref().map(|(_, m)| m.len()),
            "send_to_delivery": latency_json(&h),
            // From the start to the last delivery: how long a backlog took to reach the bot.
            "last_delivery_s": last.map(|l| l.duration_since(started).as_secs_f64()),
        });
        out!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        eprintln!();
        out!("sim receive: {} deliveries of {} events", bot.received.load(Ordering::Relaxed), per_event.len());
        out!("  duplicated deliveries {duplicated}  bad signatures {}", bot.bad_signatures.load(Ordering::Relaxed));
        if let Some((n, missing)) = &lost {
            let sample: Vec<&str> = missing.iter().take(5).map(String::as_str).collect();
            out!(
                "  expected {n}  lost {} {}",
                missing.len(),
                if missing.is_empty() { String::new() } else { format!("(e.g. {})", sample.join(", ")) }
            );
        }
        out!("  send to delivery {}", latency_line(&h));
    }
    if lost.is_some_and(|(_, m)| !m.is_empty()) || bot.bad_signatures.load(Ordering::Relaxed) > 0 {
        anyhow::bail!("events were lost or signatures failed");
    }
    Ok(())
}
