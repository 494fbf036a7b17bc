//! `slackgate deliveries` and `slackgate show`: the delivery history the pages show, in a
//! terminal (`--json` for scripts).

use std::time::Duration;

use clap::Args;

use super::ops::{connect, print_json, runtime, Target};
use crate::clock::hms as clock;
use crate::config::parse_duration;
use crate::history::describe::{describe, entry_link, redact};
use crate::history::query::{self, Filter};
use crate::out::out;

#[derive(Args)]
pub struct DeliveriesOpts {
    #[command(flatten)]
    target: Target,
    #[arg(long)]
    team: Option<String>,
    #[arg(long)]
    channel: Option<String>,
    /// delivered, waiting, retrying, dead, ignored, duplicate, held, superseded.
    #[arg(long)]
    status: Option<String>,
    /// event, command, interactivity, or a type (`app_mention`, `/ask`, `block_actions`).
    #[arg(long)]
    kind: Option<String>,
    /// Only what arrived this long ago or since (`15m`, `2h`).
    #[arg(long)]
    since: Option<String>,
    /// A delivery id, an event_id, a trigger_id or a message ts.
    #[arg(long)]
    search: Option<String>,
    /// Mentions and DMs delivered at least this long ago with no reply attributed (`5m`).
    #[arg(long)]
    never_answered: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

#[derive(Args)]
pub struct ShowOpts {
    #[command(flatten)]
    target: Target,
    /// The delivery id (`<shard>-<hex>`), from `slackgate deliveries` or a log line.
    delivery: String,
}

fn duration(key: &str, v: &Option<String>) -> anyhow::Result<Option<Duration>> {
    v.as_deref().map(|s| parse_duration(s).map_err(|e| anyhow::anyhow!("--{key}: {e}"))).transpose()
}

pub fn deliveries(o: &DeliveriesOpts) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let ops = connect(&o.target).await?;
        let config = ops.config();
        let apps = match &o.target.app {
            Some(a) => vec![ops.app(Some(a))?.name.clone()],
            None => config.apps.iter().map(|a| a.name.clone()).collect(),
        };
        let now = crate::clock::now_ms();
        let f = Filter {
            apps,
            team: o.team.clone().unwrap_or_default(),
            channel: o.channel.clone().unwrap_or_default(),
            kind: o.kind.clone().unwrap_or_default(),
            status: o.status.clone().unwrap_or_default(),
            since_ms: duration("since", &o.since)?.map(|d| now.saturating_sub(d.as_millis() as u64)),
            until_ms: None,
            search: o.search.clone().unwrap_or_default(),
            never_answered: duration("never-answered", &o.never_answered)?,
            // The CLI lists what the history holds, an operator's replays included.
            replays: true,
        };
        if !config.ui.keeps_history() {
            anyhow::bail!("the delivery history is off ([ui] history = \"off\"): nothing is kept or shown");
        }
        let page = query::list(&mut ops.conn(), &config.redis.key_prefix, &f, o.limit, config.ui.history_max).await?;
        if o.target.json {
            return print_json(&page);
        }
        print_page(&page);
        print_shadow_stats(&page.shadow);
        Ok(())
    })
}

pub fn show(o: &ShowOpts) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let ops = connect(&o.target).await?;
        let config = ops.config();
        let prefix = &config.redis.key_prefix;
        let apps: Vec<String> = match &o.target.app {
            Some(a) => vec![ops.app(Some(a))?.name.clone()],
            None => config.apps.iter().map(|a| a.name.clone()).collect(),
        };
        if !config.ui.keeps_history() {
            anyhow::bail!("the delivery history is off ([ui] history = \"off\"): nothing is kept or shown");
        }
        let mut found = None;
        for app in &apps {
            if let Some(d) = query::show(&mut ops.conn(), prefix, app, &o.delivery).await? {
                found = Some(d);
                break;
            }
        }
        let Some(mut d) = found else {
            anyhow::bail!("no delivery {} in the history (kept for {:?})", o.delivery, config.ui.history)
        };
        d.body = d.body.map(|b| redact(&b, config.ui.show_text));
        d.hide_text(config.ui.show_text);
        let trace = crate::telemetry::shown(&config.telemetry, &d.summary.id);
        d.trace_id = trace.as_ref().map(|(id, _)| id.clone());
        if o.target.json {
            return print_json(&d);
        }
        print_detail(&d);
        if let Some((id, link)) = trace {
            out!("trace {id}{}", link.map(|l| format!("  {l}")).unwrap_or_default());
        }
        Ok(())
    })
}

fn print_detail(d: &query::Detail) {
    let s = &d.summary;
    out!("{} {} — {} {} — {}", s.app, s.id, s.get("kind"), s.get("detail"), s.get("status"));
    out!(
        "team {}  channel {}  user {}  ts {}  thread {}",
        s.get("team"),
        s.get("channel"),
        s.get("user"),
        s.get("ts"),
        s.get("thread")
    );
    out!("receipt {}  conversation {}", s.get("receipt"), s.get("conversation"));
    if let Some(t) = s.get("event_time").parse::<u64>().ok().filter(|t| *t > 0) {
        let gap = s.received() as i64 - (t * 1000) as i64;
        out!("Slack's event_time {} UTC, arrived {:.1} s later", clock(t * 1000), gap as f64 / 1000.0);
    }
    let start = s.received();
    for e in &d.timeline {
        let at = e["at"].as_u64().unwrap_or(start);
        out!("  {} (+{:>7.3} s)  {}", clock(at), (at as i64 - start as i64) as f64 / 1000.0, describe(e));
        if let Some(link) = entry_link(e) {
            out!("{:>26}{link}", "");
        }
    }
    if let Some(body) = &d.body {
        out!("\n{body}");
    }
}

/// The list as a table, a row per delivery, and whether more matched.
fn print_page(page: &query::Page) {
    out!(
        "{:<8} {:<12} {:<20} {:<22} {:<12} {:<10} {:>3} {:>7} {:>8}",
        "arrived",
        "app",
        "delivery",
        "what",
        "channel",
        "status",
        "try",
        "replies",
        "ack ms"
    );
    for r in &page.rows {
        let what = format!("{} {}", r.get("kind"), r.get("detail"));
        out!(
            "{:<8} {:<12} {:<20} {:<22} {:<12} {:<10} {:>3} {:>7} {:>8}",
            clock(r.received()),
            r.app,
            r.id,
            what,
            r.get("channel"),
            r.get("status"),
            r.num("attempts"),
            r.num("replies"),
            r.get("ack_ms")
        );
    }
    if page.more {
        out!("(more match: narrow the filter or raise --limit)");
    }
}

/// The list's word on the shadow: of the rows copied to it, who answered, how fast.
fn print_shadow_stats(stats: &[crate::history::query::ShadowStats]) {
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
    for st in stats {
        out!(
            "{} and its shadow, of {} listed copied to it: both answered {}, only live {}, only shadow {}, neither {}; \
             first answer p50/p90 live {}/{}, shadow {}/{}",
            st.app,
            st.copied,
            st.both,
            st.only_live,
            st.only_shadow,
            st.neither,
            ms(st.live_p50_ms),
            ms(st.live_p90_ms),
            ms(st.shadow_p50_ms),
            ms(st.shadow_p90_ms)
        );
    }
}
