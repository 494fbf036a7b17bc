//! `sim send`: Slack's side.

use crate::out::out;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::{histogram, latency_json, latency_line, now_ms, SendOpts};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Slack gives each attempt 3 s, then retries nearly at once, after 1 minute and after 5.
const SLACK_TIMEOUT: Duration = Duration::from_secs(3);
const RETRY_DELAYS: [Duration; 3] = [Duration::from_secs(1), Duration::from_secs(60), Duration::from_secs(300)];

#[derive(Default)]
struct Tally {
    events: AtomicU64,
    requests: AtomicU64,
    acked: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    timeouts: AtomicU64,
    connection_errors: AtomicU64,
    statuses: Mutex<BTreeMap<u16, u64>>,
    /// First attempts only, from their scheduled time, in microseconds: all of them, those
    /// answered 2xx, and those answered otherwise (a 503 when shed).
    latency: Mutex<Option<hdrhistogram::Histogram<u64>>>,
    ok_latency: Mutex<Option<hdrhistogram::Histogram<u64>>>,
    refused_latency: Mutex<Option<hdrhistogram::Histogram<u64>>>,
    /// Every attempt answered otherwise than 2xx, from the moment it was sent: how fast the
    /// gateway turns a request away, without the time it waited for a free connection here.
    refused_service: Mutex<Option<hdrhistogram::Histogram<u64>>>,
    /// Attempts whose answer took longer than 2 s (the gateway's default ack budget) and 3 s
    /// (Slack's deadline: these are the timeouts), from the moment each was sent.
    over_2s: AtomicU64,
    over_3s: AtomicU64,
    /// One line per expected delivery (a pair is one line: either member may be delivered).
    manifest: Mutex<Vec<String>>,
}

struct Sim {
    o: SendOpts,
    client: HttpClient,
    /// One per request in flight (`--connections`).
    slots: tokio::sync::Semaphore,
    tally: Tally,
    run: String,
}

enum Attempt {
    Acked,
    Failed(&'static str),
}

impl Sim {
    async fn attempt(&self, body: &Bytes, retry: usize, reason: &str) -> Attempt {
        let ts = (now_ms() / 1000).to_string();
        let mut req = hyper::Request::post(&self.o.url)
            .header("Content-Type", "application/json")
            .header("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
            .header("X-Slack-Request-Timestamp", &ts)
            .header("X-Slack-Signature", crate::slack::sign(self.o.secret.as_bytes(), &ts, body));
        if retry > 0 {
            req = req.header("X-Slack-Retry-Num", retry.to_string()).header("X-Slack-Retry-Reason", reason);
        }
        let Ok(req) = req.body(Full::new(body.clone())) else { return Attempt::Failed("http_error") };
        let Ok(_slot) = self.slots.acquire().await else { return Attempt::Failed("http_error") };
        self.tally.requests.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let answer = tokio::time::timeout(SLACK_TIMEOUT, async {
            let resp = self.client.request(req).await?;
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            Ok::<u16, hyper_util::client::legacy::Error>(status)
        })
        .await;
        let took = sent.elapsed();
        if took > Duration::from_secs(2) {
            self.tally.over_2s.fetch_add(1, Ordering::Relaxed);
        }
        if took >= SLACK_TIMEOUT {
            self.tally.over_3s.fetch_add(1, Ordering::Relaxed);
        }
        match answer {
            Ok(Ok(status)) => {
                *self.tally.statuses.lock().unwrap_or_else(|e| e.into_inner()).entry(status).or_default() += 1;
                if !(200..300).contains(&status) {
                    if let Some(h) = self.tally.refused_service.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                        let _ = h.record(took.as_micros().max(1) as u64);
                    }
                }
                if (200..300).contains(&status) {
                    Attempt::Acked
                } else {
                    Attempt::Failed("http_error")
                }
            }
            Ok(Err(_)) => {
                self.tally.connection_errors.fetch_add(1, Ordering::Relaxed);
                Attempt::Failed("connection_failed")
            }
            Err(_) => {
                self.tally.timeouts.fetch_add(1, Ordering::Relaxed);
                Attempt::Failed("http_timeout")
            }
        }
    }

    /// One copy through Slack's retry schedule; `true` once acked.
    async fn deliver(&self, body: Bytes, scheduled: Instant) -> bool {
        let mut reason = "";
        for retry in 0..=RETRY_DELAYS.len() {
            if retry > 0 {
                tokio::time::sleep(RETRY_DELAYS[retry - 1].div_f64(self.o.time_scale.max(1e-6))).await;
                self.tally.retries.fetch_add(1, Ordering::Relaxed);
            }
            let outcome = self.attempt(&body, retry, reason).await;
            if retry == 0 {
                let micros = scheduled.elapsed().as_micros().max(1) as u64;
                let t = &self.tally;
                let class = match outcome {
                    Attempt::Acked => Some(&t.ok_latency),
                    Attempt::Failed("http_error") => Some(&t.refused_latency),
                    Attempt::Failed(_) => None,
                };
                for h in std::iter::once(&t.latency).chain(class) {
                    if let Some(h) = h.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                        let _ = h.record(micros);
                    }
                }
            }
            match outcome {
                Attempt::Acked => return true,
                Attempt::Failed(why) => reason = why,
            }
        }
        false
    }

    fn body(&self, id: &str, event: serde_json::Value) -> Bytes {
        let mut event = event;
        event["sim_sent_ms"] = now_ms().into();
        let envelope = serde_json::json!({
            "token": "sim", "team_id": "T0SIM", "api_app_id": "A0SIM", "type": "event_callback",
            "event_id": id, "event_time": now_ms() / 1000,
            "authorizations": [{"team_id": "T0SIM", "user_id": "U0SIMBOT", "is_bot": true}],
            "event": event,
        });
        Bytes::from(envelope.to_string())
    }

    /// One event with its extras: a duplicate copy, a pair partner, an edit.
    async fn event(&self, n: u64, scheduled: Instant) {
        self.tally.events.fetch_add(1, Ordering::Relaxed);
        let id = format!("Ev{}{n:09}", self.run);
        let ts = format!("{}.{:06}", 1_700_000_000 + n / 1_000_000, n % 1_000_000);
        let mention = serde_json::json!({"type": "app_mention", "user": "U0HUMAN", "channel": "C0SIM",
            "text": "<@U0SIMBOT> hello from sim", "ts": ts, "event_ts": ts});
        let body = self.body(&id, mention);
        let roll = |ratio: f64| ratio > 0.0 && rand::random::<f64>() < ratio;
        let (dup, pair, edit) = (roll(self.o.dup_ratio), roll(self.o.pair_ratio), roll(self.o.edit_ratio));
        let mut copies = vec![self.deliver(body.clone(), scheduled)];
        if dup {
            copies.push(self.deliver(body, scheduled));
        }
        let partner = format!("{id}M");
        if pair {
            let message = serde_json::json!({"type": "message", "channel_type": "channel", "user": "U0HUMAN",
                "channel": "C0SIM", "text": "<@U0SIMBOT> hello from sim", "ts": ts, "event_ts": ts});
            copies.push(self.deliver(self.body(&partner, message), scheduled));
        }
        let acked = futures_util::future::join_all(copies).await.into_iter().any(|a| a);
        if !acked {
            self.tally.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.tally.acked.fetch_add(1, Ordering::Relaxed);
        let line = if pair { format!("{id} {partner}") } else { id.clone() };
        self.tally.manifest.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        if edit {
            let edit_id = format!("{id}E");
            let edit_ts = format!("{ts}1");
            let changed = serde_json::json!({"type": "message", "subtype": "message_changed", "channel": "C0SIM",
                "ts": edit_ts, "event_ts": edit_ts,
                "message": {"type": "message", "user": "U0HUMAN", "text": "<@U0SIMBOT> hello again", "ts": ts},
                "previous_message": {"type": "message", "user": "U0HUMAN", "text": "<@U0SIMBOT> hello from sim", "ts": ts}});
            if self.deliver(self.body(&edit_id, changed), Instant::now()).await {
                self.tally.manifest.lock().unwrap_or_else(|e| e.into_inner()).push(edit_id);
            }
        }
    }
}

pub async fn run(o: SendOpts) -> anyhow::Result<()> {
    anyhow::ensure!(!o.secret.is_empty(), "give the app's signing secret (--secret or SLACK_SIGNING_SECRET)");
    anyhow::ensure!(
        o.rate.is_some() || o.concurrency.is_some(),
        "give --rate (open loop) or --concurrency (closed loop)"
    );
    let pool = o.concurrency.unwrap_or(o.connections).max(1);
    let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(pool).build_http();
    let run = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let tally = Tally {
        latency: Mutex::new(Some(histogram())),
        ok_latency: Mutex::new(Some(histogram())),
        refused_latency: Mutex::new(Some(histogram())),
        refused_service: Mutex::new(Some(histogram())),
        ..Tally::default()
    };
    let slots = tokio::sync::Semaphore::new(pool);
    let sim = Arc::new(Sim { o: o.clone(), client, slots, tally, run });
    let started = Instant::now();
    let deadline = started + Duration::from_secs(o.duration);
    let limit = o.events.unwrap_or(u64::MAX);
    let progress = (!o.json).then(|| tokio::spawn(progress(sim.clone(), started)));
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(rate) = o.rate {
        let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
        let mut n = 0;
        loop {
            let due = started + interval.mul_f64(n as f64);
            if due >= deadline || n >= limit {
                break;
            }
            tokio::time::sleep_until(due.into()).await;
            let sim = sim.clone();
            tasks.spawn(async move { sim.event(n, due).await });
            while tasks.try_join_next().is_some() {}
            n += 1;
        }
    } else {
        let counter = Arc::new(AtomicU64::new(0));
        for _ in 0..o.concurrency.unwrap_or(1) {
            let (sim, counter) = (sim.clone(), counter.clone());
            tasks.spawn(async move {
                while Instant::now() < deadline {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    if n >= limit {
                        break;
                    }
                    sim.event(n, Instant::now()).await;
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    if let Some(p) = progress {
        p.abort();
        eprintln!();
    }
    report(&sim, started.elapsed())
}

async fn progress(sim: Arc<Sim>, started: Instant) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t = &sim.tally;
        eprint!(
            "\r{:>5.0}s  events {}  acked {}  retries {}  timeouts {}   ",
            started.elapsed().as_secs_f64(),
            t.events.load(Ordering::Relaxed),
            t.acked.load(Ordering::Relaxed),
            t.retries.load(Ordering::Relaxed),
            t.timeouts.load(Ordering::Relaxed)
        );
        let _ = std::io::stderr().flush();
    }
}

fn report(sim: &Sim, elapsed: Duration) -> anyhow::Result<()> {
    let t = &sim.tally;
    let take = |h: &Mutex<Option<hdrhistogram::Histogram<u64>>>| {
        h.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_else(histogram)
    };
    let (h, ok, refused) = (take(&t.latency), take(&t.ok_latency), take(&t.refused_latency));
    let refused_service = take(&t.refused_service);
    let statuses = t.statuses.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let manifest = t.manifest.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(path) = &sim.o.manifest {
        std::fs::write(path, manifest.join("\n") + "\n")?;
    }
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mode = match (sim.o.rate, sim.o.concurrency) {
        (Some(r), _) => format!("open loop at {r}/s"),
        (None, c) => format!("closed loop, {} in flight", c.unwrap_or(1)),
    };
    if sim.o.json {
        let json = serde_json::json!({
            "mode": mode, "seconds": elapsed.as_secs_f64(), "events": load(&t.events), "requests": load(&t.requests),
            "acked": load(&t.acked), "failed": load(&t.failed), "retries": load(&t.retries),
            "timeouts": load(&t.timeouts), "connection_errors": load(&t.connection_errors),
            "statuses": statuses.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>(),
            "acked_per_s": load(&t.acked) as f64 / elapsed.as_secs_f64(), "ack_latency": latency_json(&h),
            "ok_latency": latency_json(&ok), "refused_latency": latency_json(&refused),
            "refused_service": latency_json(&refused_service),
            "ok_first_attempts": ok.len(), "refused_first_attempts": refused.len(),
            "answers_over_2s": load(&t.over_2s), "answers_over_3s": load(&t.over_3s),
        });
        out!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    out!("sim send: {mode}, {:.1} s", elapsed.as_secs_f64());
    out!("  events {}  acked {}  failed after Slack's retries {}", load(&t.events), load(&t.acked), load(&t.failed));
    out!(
        "  requests {}  retries {}  timeouts (3 s) {}  connection errors {}",
        load(&t.requests),
        load(&t.retries),
        load(&t.timeouts),
        load(&t.connection_errors)
    );
    let statuses: Vec<String> = statuses.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    out!("  statuses {}", statuses.join(", "));
    out!("  acked/s {:.0}", load(&t.acked) as f64 / elapsed.as_secs_f64());
    out!("  ack latency (first attempts) {}", latency_line(&h));
    out!("    answered 2xx ({}) {}", ok.len(), latency_line(&ok));
    out!("    answered otherwise ({}) {}", refused.len(), latency_line(&refused));
    out!("  turned away, from each send ({}) {}", refused_service.len(), latency_line(&refused_service));
    out!("  answers slower than 2 s {}, than 3 s {}", load(&t.over_2s), load(&t.over_3s));
    Ok(())
}
