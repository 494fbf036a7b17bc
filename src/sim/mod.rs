//! `slackgate sim`: load-test a deployment the way Slack behaves.
//!
//! - `sim send` is Slack: it signs Events API deliveries, sends them open-loop at a fixed rate
//!   or closed-loop with a fixed concurrency, gives each attempt Slack's 3 s, retries failures
//!   on Slack's schedule (at once, after 1 min, after 5 min — `--time-scale` compresses it) with
//!   the real retry headers, and can add concurrent duplicate copies, `app_mention` + `message`
//!   pairs and edits. It reports ack latency from an HDR histogram, measured from each request's
//!   scheduled time in open loop (so a stalled server cannot hide behind a slowed client).
//! - `sim slack` is a fake Slack Web API, for trying and benchmarking the egress.
//! - `sim receive` is a fast bot: it verifies every forwarded signature, counts deliveries per
//!   event and reports duplicated and (with the sender's manifest) lost events, and the
//!   send-to-delivery latency.

mod receive;
mod send;
mod slack;

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum SimCommand {
    /// Behave like Slack toward a gateway.
    Send(SendOpts),
    /// Behave like a fast bot behind a gateway.
    Receive(ReceiveOpts),
    /// A fake Slack Web API, for the egress's `slack_api_url`.
    Slack(SlackOpts),
}

#[derive(Args, Clone)]
pub struct SlackOpts {
    /// Where to listen (`slack_api_url = "http://<this>/api/"`).
    #[arg(long, default_value = "127.0.0.1:8100")]
    pub listen: String,
    /// Stop after this many seconds (default: on Ctrl-C).
    #[arg(long)]
    pub duration: Option<u64>,
}

#[derive(Args, Clone)]
pub struct SendOpts {
    /// The gateway's Slack-facing URL.
    #[arg(long, default_value = "http://127.0.0.1:3000/slack/events")]
    pub url: String,
    /// The app's signing secret (default: the environment variable SLACK_SIGNING_SECRET).
    #[arg(long, env = "SLACK_SIGNING_SECRET", hide_env_values = true)]
    pub secret: String,
    /// Open loop: events per second.
    #[arg(long, conflicts_with = "concurrency")]
    pub rate: Option<u64>,
    /// Closed loop: events in flight at once.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Open loop: at most this many requests in flight (and connections open) at once, like
    /// wrk2's or oha's fixed connections; a request that finds none free waits, and its
    /// latency, counted from its scheduled time, includes the wait.
    #[arg(long, default_value_t = 256)]
    pub connections: usize,
    /// How long to send, in seconds.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Stop after this many events (whichever comes first).
    #[arg(long)]
    pub events: Option<u64>,
    /// Share of events sent as two concurrent copies.
    #[arg(long, default_value_t = 0.0)]
    pub dup_ratio: f64,
    /// Share of events sent as an `app_mention` + `message` pair for one post.
    #[arg(long, default_value_t = 0.0)]
    pub pair_ratio: f64,
    /// Share of events followed by a `message_changed` edit of the same message.
    #[arg(long, default_value_t = 0.0)]
    pub edit_ratio: f64,
    /// Divide Slack's retry delays (1 min, 5 min) by this; 1 is Slack's real schedule.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Write the acked events, one line per expected delivery, for `sim receive --manifest`.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Machine-readable summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct ReceiveOpts {
    /// Where to listen (the gateway's `upstream`).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: String,
    /// The app's signing secret (default: the environment variable SLACK_SIGNING_SECRET).
    #[arg(long, env = "SLACK_SIGNING_SECRET", hide_env_values = true)]
    pub secret: String,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<u64>,
    /// Stop once this long has passed without a delivery (after the first one).
    #[arg(long, default_value_t = 10)]
    pub idle: u64,
    /// The sender's manifest: report events that were acked but never delivered.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Machine-readable summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: SimCommand) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match command {
        SimCommand::Send(o) => rt.block_on(send::run(o)),
        SimCommand::Receive(o) => rt.block_on(receive::run(o)),
        SimCommand::Slack(o) => rt.block_on(slack::run(o)),
    }
}

/// Milliseconds since the epoch.
fn now_ms() -> u64 {
    crate::clock::now_ms()
}

/// p-quantile of a histogram in milliseconds (recorded in microseconds).
fn ms(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn latency_json(h: &hdrhistogram::Histogram<u64>) -> serde_json::Value {
    serde_json::json!({
        "p50_ms": ms(h, 0.5), "p90_ms": ms(h, 0.9), "p99_ms": ms(h, 0.99),
        "p999_ms": ms(h, 0.999), "max_ms": h.max() as f64 / 1000.0,
    })
}

fn latency_line(h: &hdrhistogram::Histogram<u64>) -> String {
    format!(
        "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        ms(h, 0.5),
        ms(h, 0.9),
        ms(h, 0.99),
        ms(h, 0.999),
        h.max() as f64 / 1000.0
    )
}

fn histogram() -> hdrhistogram::Histogram<u64> {
    // 1 µs … 1 h at 3 significant digits.
    hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static bounds")
}
