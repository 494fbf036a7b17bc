//! The chaos suite (run it with `bench/chaos.sh N`): N Slack events through a real gateway while
//! things break, then an account of every event.
//!
//! - 30 % of events are sent as two concurrent copies (Slack's duplicate deliveries);
//! - the bot answers 30 % of attempts 5xx and 10 % slower than the delivery timeout (it still
//!   does the work, as a real slow bot would, so those count as deliveries);
//! - the gateway is killed with SIGKILL three times and restarted; Redis (AOF, `appendfsync
//!   always`) is killed and restarted once;
//! - like Slack, the sender retries every copy that was not acked 2xx.
//!
//! It prints events sent, acked, **lost** (acked but never delivered: must be 0), duplicated
//! deliveries with the bound that leases imply, ack latency and the time to drain, and exits
//! non-zero if anything was lost. Loopback only; every wait is bounded.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

const SECRET: &str = "chaos-signing-secret";
const MAX_IN_FLIGHT: u64 = 64;
const TIMEOUT_MS: u64 = 1000;

struct Opts {
    events: usize,
    rate: u64,
    gateway: PathBuf,
}

fn opts() -> Opts {
    let mut o = Opts { events: 5000, rate: 500, gateway: "target/release/slackgate".into() };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let v = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--events" => o.events = v.parse().expect("--events N"),
            "--rate" => o.rate = v.parse().expect("--rate N"),
            "--gateway" => o.gateway = v.into(),
            other => panic!("unknown flag {other}"),
        }
    }
    o
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn sign(ts: u64, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// What the bot saw.
#[derive(Default)]
struct Bot {
    /// event id → attempts the bot completed (answered 200, in time or late).
    done: Mutex<HashMap<String, u32>>,
    attempts: AtomicU64,
    late: AtomicU64,
    bad_signatures: AtomicU64,
}

async fn bot_handler(
    bot: Arc<Bot>,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible> {
    let ts: u64 =
        req.headers().get("x-slack-request-timestamp").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0);
    let sig = req.headers().get("x-slack-signature").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if sign(ts, &body) != sig || now_s().abs_diff(ts) > 5 {
        bot.bad_signatures.fetch_add(1, Ordering::Relaxed);
        return Ok(hyper::Response::builder().status(401).body(Full::new(Bytes::new())).unwrap());
    }
    bot.attempts.fetch_add(1, Ordering::Relaxed);
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = event["event_id"].as_str().unwrap_or_default().to_string();
    let roll = rand::random::<f64>();
    if roll < 0.30 {
        return Ok(hyper::Response::builder().status(503).body(Full::new(Bytes::new())).unwrap());
    }
    if roll < 0.40 {
        bot.late.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(TIMEOUT_MS + 500)).await;
    }
    *bot.done.lock().unwrap().entry(id).or_default() += 1;
    Ok(hyper::Response::new(Full::new(Bytes::new())))
}

async fn start_bot(bot: Arc<Bot>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let bot = bot.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| bot_handler(bot.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    port
}

struct Redis {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Redis {
    fn start(port: u16, dir: PathBuf) -> Redis {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "always"])
            .args(["--port", &port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        wait_port(port, Duration::from_secs(10));
        Redis { port, dir, child }
    }

    fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = Redis::start(self.port, self.dir.clone());
    }
}

fn wait_port(port: u16, limit: Duration) {
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} did not open");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Gateway {
    child: Child,
    bin: PathBuf,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
}

impl Gateway {
    fn start(bin: PathBuf, config: PathBuf, data: PathBuf, log: PathBuf, port: u16) -> Gateway {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let child = Command::new(&bin)
            .args(["run", "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .env("CHAOS_SECRET", SECRET)
            .env("RUST_LOG", "warn")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("gateway binary");
        wait_port(port, Duration::from_secs(20));
        Gateway { child, bin, config, data, log, port }
    }

    fn kill9_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = Gateway::start(self.bin.clone(), self.config.clone(), self.data.clone(), self.log.clone(), self.port);
    }
}

/// One copy of one event, sent like Slack: a 3 s timeout, retried until acked (bounded).
async fn deliver_copy(
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: String,
    body: Bytes,
) -> Option<Duration> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut retry = 0;
    while Instant::now() < deadline {
        let ts = now_s();
        let mut req = hyper::Request::post(&url)
            .header("Content-Type", "application/json")
            .header("X-Slack-Request-Timestamp", ts.to_string())
            .header("X-Slack-Signature", sign(ts, &body));
        if retry > 0 {
            req = req.header("X-Slack-Retry-Num", retry.to_string()).header("X-Slack-Retry-Reason", "http_error");
        }
        let started = Instant::now();
        let answer =
            tokio::time::timeout(Duration::from_secs(3), client.request(req.body(Full::new(body.clone())).unwrap()))
                .await;
        if let Ok(Ok(resp)) = answer {
            let ok = resp.status().is_success();
            let _ = resp.into_body().collect().await;
            if ok {
                return Some(started.elapsed());
            }
        }
        retry += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let o = opts();
    let work = tempfile::tempdir().unwrap();
    let bot = Arc::new(Bot::default());
    let bot_port = start_bot(bot.clone()).await;
    let redis_dir = work.path().join("redis");
    std::fs::create_dir_all(&redis_dir).unwrap();
    let mut redis = Redis::start(free_port(), redis_dir);
    let gw_port = free_port();
    let config = work.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
listen = "127.0.0.1:{gw_port}"
admin_listen = "off"
shutdown_grace = "1s"
[redis]
url = "redis://127.0.0.1:{redis_port}/"
key_prefix = "chaos"
[[app]]
name = "chaos"
signing_secret = "${{CHAOS_SECRET}}"
upstream = "http://127.0.0.1:{bot_port}"
dedupe = {{ ttl = "1h" }}
delivery = {{ timeout = "{TIMEOUT_MS}ms", max_in_flight = {MAX_IN_FLIGHT}, retry_initial = "50ms", retry_max = "500ms", lease = "3s" }}
"#,
            redis_port = redis.port
        ),
    )
    .unwrap();
    let log = work.path().join("gateway.log");
    let mut gw = Gateway::start(o.gateway.clone(), config, work.path().join("data"), log.clone(), gw_port);

    let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(64).build_http::<Full<Bytes>>();
    let url = format!("http://127.0.0.1:{gw_port}/slack/events");
    let acks = Arc::new(Mutex::new(Vec::new()));
    let acked_events = Arc::new(Mutex::new(Vec::new()));
    let copies = Arc::new(AtomicU64::new(0));
    let send_secs = o.events as f64 / o.rate as f64;
    println!("chaos: {} events at {}/s (~{send_secs:.0}s), 30% duplicate copies, bot 30% 5xx and 10% slow, 3 gateway kills, 1 Redis kill", o.events, o.rate);

    // The chaos itself, on a timeline relative to the sending.
    let started = Instant::now();
    let chaos = tokio::task::spawn_blocking(move || {
        let at = |f: f64| started + Duration::from_secs_f64(send_secs * f);
        let mut log = Vec::new();
        for (when, what) in [(0.2, "gateway"), (0.45, "gateway"), (0.55, "redis"), (0.7, "gateway")] {
            std::thread::sleep(at(when).saturating_duration_since(Instant::now()));
            match what {
                "gateway" => gw.kill9_and_restart(),
                _ => redis.kill_and_restart(),
            }
            log.push(format!("{:.1}s: killed and restarted {what}", started.elapsed().as_secs_f64()));
        }
        (gw, redis, log)
    });

    let mut senders = tokio::task::JoinSet::new();
    let interval = Duration::from_secs_f64(1.0 / o.rate as f64);
    for n in 0..o.events {
        tokio::time::sleep_until((started + interval.mul_f64(n as f64)).into()).await;
        let id = format!("EvChaos{n:07}");
        let body = Bytes::from(
            serde_json::json!({"type": "event_callback", "event_id": id, "team_id": "T1",
                "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> chaos", "channel": "C1", "ts": format!("1700000000.{n:06}")}})
            .to_string(),
        );
        let n_copies = if rand::random::<f64>() < 0.30 { 2 } else { 1 };
        let (client, url, acks, acked_events, copies) =
            (client.clone(), url.clone(), acks.clone(), acked_events.clone(), copies.clone());
        senders.spawn(async move {
            let tasks: Vec<_> =
                (0..n_copies).map(|_| tokio::spawn(deliver_copy(client.clone(), url.clone(), body.clone()))).collect();
            copies.fetch_add(n_copies, Ordering::Relaxed);
            let mut acked = false;
            for t in tasks {
                if let Ok(Some(latency)) = t.await {
                    acks.lock().unwrap().push(latency);
                    acked = true;
                }
            }
            if acked {
                acked_events.lock().unwrap().push(id);
            }
        });
        while senders.try_join_next().is_some() {}
    }
    while senders.join_next().await.is_some() {}
    let sent_at = Instant::now();
    let (gw, mut redis, chaos_log) = chaos.await.unwrap();

    // Drain: every acked event delivered at least once, or give up after 180 s.
    let acked: Vec<String> = acked_events.lock().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let missing = {
            let done = bot.done.lock().unwrap();
            acked.iter().filter(|id| !done.contains_key(*id)).count()
        };
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain = sent_at.elapsed();
    tokio::time::sleep(Duration::from_millis(TIMEOUT_MS + 1000)).await; // late answers land

    let done = bot.done.lock().unwrap().clone();
    let lost: Vec<&String> = acked.iter().filter(|id| !done.contains_key(*id)).collect();
    let duplicated: u64 = done.values().map(|&c| u64::from(c.saturating_sub(1))).sum();
    let events_with_dups = done.values().filter(|&&c| c > 1).count();
    let late = bot.late.load(Ordering::Relaxed);
    // A late answer is one the gateway timed out on and will retry; each kill can cut at most
    // `max_in_flight` attempts after the bot did the work.
    let bound = late + 3 * MAX_IN_FLIGHT;
    let mut latencies = acks.lock().unwrap().clone();
    latencies.sort_unstable();
    for line in &chaos_log {
        println!("  {line}");
    }
    println!(
        "events sent:           {} ({} copies sent, duplicates included, retries not counted)",
        o.events,
        copies.load(Ordering::Relaxed)
    );
    println!("events acked:          {}", acked.len());
    println!("lost:                  {}", lost.len());
    println!("duplicated deliveries: {duplicated} over {events_with_dups} events (bound from leases: {bound} = {late} attempts slower than the timeout + 3 kills x {MAX_IN_FLIGHT} in flight)");
    println!(
        "bot attempts:          {} ({} bad signatures)",
        bot.attempts.load(Ordering::Relaxed),
        bot.bad_signatures.load(Ordering::Relaxed)
    );
    println!(
        "ack latency:           p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(&latencies, 0.5),
        pct(&latencies, 0.99),
        pct(&latencies, 1.0)
    );
    println!("time to drain:         {:.1} s after the last event was acked", drain.as_secs_f64());
    let _ = redis.child.kill();
    let mut gw = gw;
    let _ = gw.child.kill();
    let failed = !lost.is_empty()
        || acked.len() != o.events
        || duplicated > bound
        || bot.bad_signatures.load(Ordering::Relaxed) > 0;
    if failed {
        eprintln!(
            "CHAOS FAILED: lost {:?}…; gateway log: {}",
            &lost[..lost.len().min(5)],
            std::fs::read_to_string(&log).unwrap_or_default().lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
        std::process::exit(1);
    }
    println!("chaos: ok — nothing lost");
}
