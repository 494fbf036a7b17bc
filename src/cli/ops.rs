//! `slackgate stats` and `slackgate dlq …`: readable tables by default, `--json` for scripts.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::ConfigOpt;
use crate::clock::now_ms;
use crate::config::{Config, Overrides, RedisTarget};
use crate::ops::Ops;
use crate::out::out;
use crate::outbox;

#[derive(Args)]
pub struct Target {
    #[command(flatten)]
    config: ConfigOpt,
    /// Only this app (required for per-delivery actions when the config has several).
    #[arg(long, global = true)]
    pub(super) app: Option<String>,
    /// Machine-readable output.
    #[arg(long, global = true)]
    pub(super) json: bool,
    /// Redis URL (beats [redis] url).
    #[arg(long, env = "SLACKGATE_REDIS_URL", global = true)]
    redis_url: Option<String>,
    /// The data dir of a running `slackgate run` with the embedded Redis.
    #[arg(long, env = "SLACKGATE_DATA_DIR", default_value = "data", global = true)]
    data_dir: PathBuf,
}

/// `pause` and `resume`: the app (`--app`, unless the config has one), and a team or channel.
#[derive(Args)]
pub struct PauseOpts {
    #[command(flatten)]
    target: Target,
    /// Only this workspace's deliveries.
    #[arg(long)]
    team: Option<String>,
    /// Only this channel's deliveries.
    #[arg(long)]
    channel: Option<String>,
    /// Who pauses (shown with the pause; the user running this by default).
    #[arg(long, env = "USER", default_value = "cli")]
    by: String,
}

#[derive(Subcommand)]
pub enum DlqAction {
    /// The oldest dead letters.
    List {
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// One dead letter in full, body included.
    Show { id: String },
    /// Put dead letters back on the outbox (after fixing the bot).
    Replay {
        id: Option<String>,
        #[arg(long, conflicts_with = "id")]
        all: bool,
    },
    /// Forget dead letters and their bodies.
    Purge {
        id: Option<String>,
        #[arg(long, conflicts_with = "id")]
        all: bool,
    },
}

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub(super) async fn connect(t: &Target) -> anyhow::Result<Ops> {
    let overrides = Overrides { redis_url: t.redis_url.clone(), secrets_optional: true, ..Overrides::default() };
    let config = Arc::new(Config::from_file(&t.config.config, &overrides)?);
    let target = match &config.redis.target {
        RedisTarget::Embedded => {
            let socket = t.data_dir.join("redis.sock");
            anyhow::ensure!(
                socket.exists(),
                "the embedded Redis is not running ({} is missing): start `slackgate run` or pass --redis-url",
                socket.display()
            );
            RedisTarget::Url(format!("redis+unix://{}", socket.canonicalize()?.display()))
        }
        target => target.clone(),
    };
    let endpoint = outbox::Endpoint::new(target, config.redis.auth.clone());
    let store = outbox::LazyStore::outbox(&endpoint, Duration::from_secs(5)).get()?.clone();
    store.ping().await.context("cannot reach Redis")?;
    let notes = crate::store::Lazy::notes(&endpoint, &config.redis.key_prefix).get()?.clone();
    Ok(Ops::new(config, store, notes))
}

fn age(ms: u64) -> String {
    match ms / 1000 {
        0 if ms == 0 => "-".into(),
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}

pub(super) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    out!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub fn stats(t: &Target) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let ops = connect(t).await?;
        let stats = ops.stats(t.app.as_deref()).await?;
        if t.json {
            return print_json(&stats);
        }
        out!(
            "{:<20} {:>8} {:>9} {:>9} {:>8} {:>8} {:>14} {:>6} {:>10}",
            "app",
            "ready",
            "in_flight",
            "scheduled",
            "dead",
            "oldest",
            "delivered/min",
            "held",
            "superseded"
        );
        for s in stats {
            let st = &s.stats;
            out!(
                "{:<20} {:>8} {:>9} {:>9} {:>8} {:>8} {:>14} {:>6} {:>10}",
                s.app,
                st.ready,
                st.in_flight,
                st.scheduled,
                st.dead,
                age(st.oldest_age_ms),
                st.delivered_last_minute,
                st.held,
                st.superseded
            );
        }
        if ops.egress_enabled() {
            let notes = ops.egress_notes(&Default::default()).await?;
            out!(
                "egress, last day: {} withheld, {} unknown (`slackgate egress` lists them)",
                notes.withheld_total,
                notes.unknown_total
            );
        }
        Ok(())
    })
}

pub fn egress(t: &Target) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let notes = connect(t).await?.egress_notes(&Default::default()).await?;
        if t.json {
            return print_json(&notes);
        }
        out!("withheld in the last day: {} (newest {} below)", notes.withheld_total, notes.withheld.len());
        for n in &notes.withheld {
            out!(
                "  {} {} in {} (source {}, delivery {})",
                n["reason"],
                n["method"],
                n["channel"],
                n["source_ts"],
                n["delivery"]
            );
        }
        out!("unknown outcome in the last day: {} (newest {} below)", notes.unknown_total, notes.unknown.len());
        for n in &notes.unknown {
            out!("  {} in {}", n["method"], n["channel"]);
        }
        Ok(())
    })
}

pub fn dlq(t: &Target, action: DlqAction) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let ops = connect(t).await?;
        let app = t.app.as_deref();
        match action {
            DlqAction::List { limit } => {
                let letters = ops.list(app, limit).await?;
                if t.json {
                    return print_json(&letters);
                }
                out!("{:<12} {:<20} {:>9} {:>6} {:>8}  error", "app", "delivery", "parked", "status", "attempts");
                let now = crate::clock::now_ms();
                for d in letters {
                    let l = &d.letter;
                    let status = l.status.map_or_else(|| "-".to_string(), |s| s.to_string());
                    let parked = age(now.saturating_sub(l.parked_ms).max(1));
                    out!("{:<12} {:<20} {:>9} {:>6} {:>8}  {}", d.app, l.delivery, parked, status, l.attempts, l.error);
                }
            }
            DlqAction::Show { id } => {
                let d = ops.show(app, &id).await?;
                if t.json {
                    return print_json(&d);
                }
                out!("app:          {}\ndelivery:     {}\nkind:         {} {}", d.app, d.delivery, d.kind, d.detail);
                out!("path:         {}\ncontent type: {}\nattempts:     {}", d.path, d.content_type, d.attempts);
                let status = d.last_status.map_or_else(|| "-".to_string(), |s| s.to_string());
                out!("last status:  {status}\nlast error:   {}\n\n{}", d.last_error, d.body);
            }
            DlqAction::Replay { id: Some(id), .. } => ops.replay(app, &id).await.map(|_| out!("replayed {id}"))?,
            DlqAction::Purge { id: Some(id), .. } => ops.purge(app, &id).await.map(|_| out!("purged {id}"))?,
            DlqAction::Replay { id: None, all: true } => all(&ops, app, false, t.json).await?,
            DlqAction::Purge { id: None, all: true } => all(&ops, app, true, t.json).await?,
            DlqAction::Replay { .. } | DlqAction::Purge { .. } => anyhow::bail!("give a delivery id or --all"),
        }
        Ok(())
    })
}

async fn all(ops: &Ops, app: Option<&str>, purge: bool, json: bool) -> anyhow::Result<()> {
    let verb = if purge { "purged" } else { "replayed" };
    let mut last = std::time::Instant::now();
    let progress = |done: u64, total: u64| {
        // A progress line on stderr, redrawn at most ten times a second.
        if !json && (last.elapsed() > Duration::from_millis(100) || done == total) {
            last = std::time::Instant::now();
            let width = 30;
            let filled = (done * width / total.max(1)) as usize;
            eprint!("\r[{}{}] {done}/{total}", "#".repeat(filled), " ".repeat(width as usize - filled));
            let _ = std::io::stderr().flush();
        }
    };
    let n = match purge {
        true => ops.purge_all(app, progress).await?,
        false => ops.replay_all(app, progress).await?,
    };
    if json {
        return print_json(&serde_json::json!({ verb: n.done, "skipped": n.skipped }));
    }
    eprintln!();
    out!("{verb} {}", n.done);
    if n.skipped > 0 {
        out!("skipped {} (no longer dead)", n.skipped);
    }
    Ok(())
}

pub fn pause(o: &PauseOpts, pause: bool) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let ops = connect(&o.target).await?;
        let scope =
            crate::ops::Scope { app: o.target.app.as_deref(), team: o.team.as_deref(), channel: o.channel.as_deref() };
        if pause {
            let (p, new) = ops.pause(scope, &o.by).await?;
            if o.target.json {
                return print_json(&serde_json::json!({ "pause": p, "new": new }));
            }
            match new {
                true => out!("paused {}: every gateway holds its deliveries within 1 s", p.describe()),
                false => out!(
                    "{} was paused already, by {} {} ago",
                    p.describe(),
                    p.by,
                    age(now_ms().saturating_sub(p.at_ms))
                ),
            }
            return Ok(());
        }
        let ended = ops.resume(scope, &o.by).await?;
        if o.target.json {
            return print_json(&serde_json::json!({ "resumed": ended }));
        }
        match ended {
            Some(p) => out!(
                "resumed {} (paused by {} {} ago): what it held is delivered within seconds",
                p.describe(),
                p.by,
                age(now_ms().saturating_sub(p.at_ms))
            ),
            None => anyhow::bail!("no such pause: `slackgate pauses` lists them"),
        }
        Ok(())
    })
}

pub fn pauses(t: &Target) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let ops = connect(t).await?;
        let stats = ops.stats(t.app.as_deref()).await?;
        let pauses: Vec<_> = ops.pauses().await?.into_iter().filter(|p| t.app.as_deref().is_none_or(|a| a == p.app)).collect();
        if t.json {
            return print_json(&serde_json::json!({ "pauses": pauses, "waiting": stats.iter().map(|s| (s.app.clone(), s.stats.paused)).collect::<std::collections::BTreeMap<_, _>>() }));
        }
        if pauses.is_empty() {
            out!("no pauses");
        }
        for p in &pauses {
            out!("{:<40} by {:<16} {} ago", p.describe(), p.by, age(now_ms().saturating_sub(p.at_ms).max(1)));
        }
        for s in stats.iter().filter(|s| s.stats.paused > 0) {
            out!("{}: {} deliveries waiting for a pause to end", s.app, s.stats.paused);
        }
        Ok(())
    })
}
