//! Open-loop load generator for the benchmarks (see `bench/run.sh` and BENCHMARKS.md).
//!
//! Sends signed Slack event envelopes, each with its own `event_id`, to one URL at a fixed rate
//! and measures latency from each request's *scheduled* send time (so a stalled server is not
//! hidden by a client that slows down with it). `--rate 0` runs closed-loop instead: the given
//! number of connections send back to back, to find the accepted-requests ceiling.
//!
//! ```text
//! cargo run --release --example loadgen -- --url http://127.0.0.1:3000/slack/events \
//!     --secret s --rate 5000 --seconds 10
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

struct Opts {
    url: String,
    secret: String,
    rate: u64,
    seconds: u64,
    connections: usize,
    label: String,
    /// Every `dup_every`-th request repeats the previous event id (0: never).
    dup_every: u64,
}

fn parse() -> Opts {
    let mut o = Opts {
        url: "http://127.0.0.1:3000/slack/events".into(),
        secret: String::new(),
        rate: 1000,
        seconds: 10,
        connections: 64,
        label: "load".into(),
        dup_every: 0,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let v = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--url" => o.url = v,
            "--secret" => o.secret = v,
            "--rate" => o.rate = v.parse().expect("--rate N"),
            "--seconds" => o.seconds = v.parse().expect("--seconds N"),
            "--connections" => o.connections = v.parse().expect("--connections N"),
            "--label" => o.label = v,
            "--dup-every" => o.dup_every = v.parse().expect("--dup-every N"),
            other => panic!("unknown flag {other}"),
        }
    }
    o
}

#[derive(Default)]
struct Stats {
    ok: AtomicU64,
    non_2xx: AtomicU64,
    errors: AtomicU64,
    latencies_us: Mutex<Vec<u64>>,
}

fn body_for(run: u64, n: u64) -> Vec<u8> {
    format!(
        r#"{{"token":"x","team_id":"T0BENCH","api_app_id":"A0BENCH","type":"event_callback","event_id":"Ev{run:x}{n:010}","event_time":1700000000,"event":{{"type":"app_mention","user":"U0BENCH","text":"<@B0BENCH> benchmark message number {n}","channel":"C0BENCH","ts":"1700000000.{n:06}","event_ts":"1700000000.{n:06}"}}}}"#
    )
    .into_bytes()
}

fn sign(secret: &str, ts: u64, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

async fn one(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    o: &Opts,
    run: u64,
    n: u64,
    stats: &Stats,
    start: Instant,
) {
    let id = if o.dup_every > 0 && n % o.dup_every == 0 && n > 0 { n - 1 } else { n };
    let body = body_for(run, id);
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let req = hyper::Request::post(&o.url)
        .header("Content-Type", "application/json")
        .header("X-Slack-Request-Timestamp", ts.to_string())
        .header("X-Slack-Signature", sign(&o.secret, ts, &body))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    match client.request(req).await {
        Ok(resp) => {
            let ok = resp.status().is_success();
            let _ = resp.into_body().collect().await;
            if ok {
                stats.ok.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.non_2xx.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(_) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    let latency = start.elapsed().as_micros() as u64;
    stats.latencies_us.lock().unwrap().push(latency);
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

#[tokio::main]
async fn main() {
    let o = Arc::new(parse());
    let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(o.connections).build_http();
    let stats = Arc::new(Stats::default());
    let run = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 & 0xffff_ffff;
    let began = Instant::now();
    let deadline = began + Duration::from_secs(o.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    if o.rate > 0 {
        // Open loop: request n is due at began + n / rate, whatever happened to the others.
        let total = o.rate * o.seconds;
        let interval = Duration::from_secs_f64(1.0 / o.rate as f64);
        for n in 0..total {
            let due = began + interval.mul_f64(n as f64);
            tokio::time::sleep_until(due.into()).await;
            let (client, o, stats) = (client.clone(), o.clone(), stats.clone());
            tasks.spawn(async move { one(&client, &o, run, n, &stats, due).await });
            while tasks.try_join_next().is_some() {}
        }
    } else {
        let counter = Arc::new(AtomicU64::new(0));
        for _ in 0..o.connections {
            let (client, o, stats, counter) = (client.clone(), o.clone(), stats.clone(), counter.clone());
            tasks.spawn(async move {
                while Instant::now() < deadline {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    one(&client, &o, run, n, &stats, Instant::now()).await;
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = began.elapsed().as_secs_f64();
    let mut l = stats.latencies_us.lock().unwrap().clone();
    l.sort_unstable();
    let ok = stats.ok.load(Ordering::Relaxed);
    println!(
        "{label}: mode={mode} sent={sent} ok={ok} non2xx={bad} errors={err} elapsed={elapsed:.2}s ok_per_s={rps:.0} p50_ms={p50:.3} p90_ms={p90:.3} p99_ms={p99:.3} p999_ms={p999:.3} max_ms={max:.3}",
        label = o.label,
        mode = if o.rate > 0 { format!("open@{}/s", o.rate) } else { format!("closed@{}conns", o.connections) },
        sent = l.len(),
        bad = stats.non_2xx.load(Ordering::Relaxed),
        err = stats.errors.load(Ordering::Relaxed),
        rps = ok as f64 / elapsed,
        p50 = pct(&l, 0.50),
        p90 = pct(&l, 0.90),
        p99 = pct(&l, 0.99),
        p999 = pct(&l, 0.999),
        max = pct(&l, 1.0),
    );
}
