//! The pages people read: the overview, the deliveries, one delivery's timeline, the login
//! form and a page of words (errors, results).

use askama::Template;
use http::StatusCode;

use super::{nav, Failure, Reply, Request};
use crate::clock::hms as clock;
use crate::history::describe::{describe, entry_link, redact};
use crate::history::query::{self, Summary};

pub use super::actions::listing::{filter_fields, filter_of, newer_than, no_app, FormFilter};
pub use super::view::{message, render, Context, Nav};

pub async fn get(ctx: &Context<'_>, req: &Request) -> Result<Reply, Failure> {
    let parts: Vec<&str> = req.path.trim_end_matches('/').split('/').skip(2).collect();
    match parts.as_slice() {
        [] => overview(ctx).await,
        ["deliveries"] => deliveries(ctx, req).await,
        ["d", app, id] => delivery(ctx, app, id).await,
        ["done", nonce] => super::actions::result(ctx, nonce).await,
        _ => Ok(message(Some(ctx.viewer), StatusCode::NOT_FOUND, "Not found", "There is no such page.", "/ui/")),
    }
}

#[derive(Template)]
#[template(path = "ui/login.html")]
struct LoginPage<'a> {
    nav: Nav<'a>,
    error: &'a str,
    notice: &'a str,
}

pub fn login(status: StatusCode, error: &str) -> Reply {
    login_with(status, error, "")
}

/// The login form with a `notice` above it (not an error).
pub fn login_with(status: StatusCode, error: &str, notice: &str) -> Reply {
    render(status, &LoginPage { nav: nav(None, "login"), error, notice })
}

/// One app's tiles on the overview.
pub struct AppOverview {
    pub name: String,
    pub acks_per_s: String,
    pub ack_p99: String,
    pub p99_slow: bool,
    pub delivered_per_s: String,
    pub backlog: u64,
    pub oldest: String,
    pub scheduled: u64,
    pub dead: u64,
    /// Deliveries a pause holds now.
    pub paused: u64,
    pub socket: Option<String>,
    pub risk_level: &'static str,
    pub risk_title: &'static str,
    pub risk_words: String,
    pub writes: Vec<(String, u64)>,
}

#[derive(Template)]
#[template(path = "ui/overview.html")]
struct OverviewPage<'a> {
    nav: Nav<'a>,
    apps: Vec<AppOverview>,
    /// The pauses in force, each with its own resume form's nonce.
    pauses: Vec<(crate::pauses::Pause, String, String)>,
    can_act: bool,
    pause_nonce: String,
}

async fn overview(ctx: &Context<'_>) -> Result<Reply, Failure> {
    let config = ctx.ops.config();
    let stats = ctx
        .ops
        .stats(None)
        .await
        .map_err(|e| Failure { status: StatusCode::SERVICE_UNAVAILABLE, text: e.to_string() })?;
    let now = crate::clock::now_ms();
    let prefix = &config.redis.key_prefix;
    let mut apps = Vec::new();
    for (a, s) in config.apps.iter().zip(stats) {
        let mut conn = ctx.ops.conn();
        let minute = query::counts(&mut conn, prefix, &a.name, 1, now).await.map_err(Failure::redis)?;
        let five = query::counts(&mut conn, prefix, &a.name, 5, now).await.map_err(Failure::redis)?;
        let hour = query::counts(&mut conn, prefix, &a.name, 60, now).await.map_err(Failure::redis)?;
        let st = &s.stats;
        let p99 = five.ack_p99_ms();
        let (risk_level, risk_title, risk_words) = risk(&hour);
        let writes = writes_of(&hour);
        let socket = a.socket_mode.as_ref().map(|_| {
            let open = ctx.shared.metrics.socket.connections.with_label_values(&[&a.name, "slack"]).get();
            format!("{open} open")
        });
        apps.push(AppOverview {
            name: a.name.clone(),
            acks_per_s: per_second(minute.requests()),
            ack_p99: match p99 {
                Some(_) if five.requests() == 0 => "no traffic".into(),
                Some(ms) if ms < 1000.0 => format!("≤ {ms} ms"),
                Some(ms) => format!("≤ {:.0} s", ms / 1000.0),
                None => "over 3 s".into(),
            },
            p99_slow: p99.is_none_or(|ms| ms >= 2000.0),
            delivered_per_s: per_second(minute.get("delivered")),
            backlog: st.ready + st.in_flight + st.scheduled + st.held,
            oldest: if st.oldest_age_ms == 0 { "none".into() } else { age(st.oldest_age_ms) },
            scheduled: st.scheduled,
            dead: st.dead,
            paused: st.paused,
            socket,
            risk_level,
            risk_title,
            risk_words,
            writes,
        });
    }
    let page = OverviewPage {
        nav: nav(Some(ctx.viewer), "overview"),
        apps,
        pauses: pause_rows(ctx, now).await?,
        can_act: ctx.can_act(),
        pause_nonce: super::actions::once::nonce(),
    };
    Ok(render(StatusCode::OK, &page))
}

/// The bot's writes through the egress by outcome, as the overview lists them.
fn writes_of(counts: &query::Counts) -> Vec<(String, u64)> {
    let mut writes: Vec<(String, u64)> = counts
        .fields
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("w:")?.replace('_', " "), *v)))
        .filter(|(_, v)| *v > 0)
        .collect();
    writes.sort();
    writes
}

/// The overview's pauses: each with when it began, and its resume form's nonce.
async fn pause_rows(ctx: &Context<'_>, now: u64) -> Result<Vec<(crate::pauses::Pause, String, String)>, Failure> {
    let pauses =
        ctx.ops.pauses().await.map_err(|e| Failure { status: StatusCode::SERVICE_UNAVAILABLE, text: e.to_string() })?;
    let rows = pauses.into_iter().map(|p| {
        let since = format!("{} UTC ({} ago)", crate::clock::hms(p.at_ms), age(now.saturating_sub(p.at_ms)));
        (p, since, super::actions::once::nonce())
    });
    Ok(rows.collect())
}

fn per_second(per_minute: u64) -> String {
    let r = per_minute as f64 / 60.0;
    if r >= 10.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.2}")
    }
}

pub fn age(ms: u64) -> String {
    match ms / 1000 {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

/// Slack's disable risk in words: Slack may disable an app's event subscriptions when fewer
/// than 5 % of its deliveries in the past 60 minutes got a 2xx.
pub fn risk(hour: &query::Counts) -> (&'static str, &'static str, String) {
    let n = hour.requests();
    let Some(failed) = hour.failed_share() else {
        return ("ok", "No risk.", "Slack sent nothing in the last 60 minutes.".into());
    };
    let pct = failed * 100.0;
    let deliveries = if n == 1 { "delivery" } else { "deliveries" };
    let words = format!(
        "{pct:.1} % of Slack's {n} {deliveries} in the last 60 minutes did not get a 2xx; Slack may disable the app's events past 95 %."
    );
    match pct {
        p if p < 5.0 => ("ok", "No risk.", words),
        p if p < 50.0 => ("watch", "Watch it.", words),
        p if p < 95.0 => ("risk", "At risk.", words),
        _ => ("danger", "Slack may disable this app's events now.", words),
    }
}

/// A row of the list.
pub struct Row {
    pub href: String,
    /// Arrival (ms): the live list asks for rows after its newest.
    pub received: u64,
    /// Sent again by an operator.
    pub replay: bool,
    pub when: String,
    pub app: String,
    pub what: String,
    pub channel: String,
    pub user: String,
    pub status: String,
    pub absorbed: u64,
    pub attempts: u64,
    pub replies: u64,
    pub ack: String,
}

impl From<&Summary> for Row {
    fn from(s: &Summary) -> Row {
        Row {
            href: format!("/ui/d/{}/{}", s.app, s.id),
            received: s.received(),
            replay: s.get("via") == "replay",
            when: clock(s.received()),
            app: s.app.clone(),
            what: format!("{} {}", s.get("kind"), s.get("detail")).trim().to_string(),
            channel: s.get("channel").into(),
            user: s.get("user").into(),
            status: s.get("status").into(),
            absorbed: s.num("absorbed"),
            attempts: s.num("attempts"),
            replies: s.num("replies"),
            ack: if s.get("ack_ms").is_empty() { String::new() } else { format!("{} ms", s.get("ack_ms")) },
        }
    }
}

#[derive(Template)]
#[template(path = "ui/rows.html")]
struct RowsPart {
    rows: Vec<Row>,
    any_filter: bool,
}

#[derive(Template)]
#[template(path = "ui/deliveries.html")]
struct DeliveriesPage<'a> {
    nav: Nav<'a>,
    history_on: bool,
    apps: Vec<String>,
    statuses: &'static [&'static str],
    spans: &'static [(&'static str, &'static str)],
    waits: &'static [(&'static str, &'static str)],
    f: FormFilter,
    rows: Vec<Row>,
    /// Of the rows copied to an app's shadow: who answered, how fast.
    shadow: Vec<query::ShadowStats>,
    any_filter: bool,
    more: bool,
    live: bool,
    self_href: String,
    rows_href: String,
    older_href: String,
    can_act: bool,
    filter_fields: Vec<(&'static str, String)>,
    /// When the page was made (ms): the live list asks for what arrives after it.
    now_ms: u64,
}

pub const STATUSES: &[&str] = &[
    "delivered",
    "waiting",
    "retrying",
    "paused",
    "dead",
    "ignored",
    "duplicate",
    "held",
    "superseded",
    "lost",
    "expired",
    "cancelled",
    "shadow_differs",
];
pub const SPANS: &[(&str, &str)] =
    &[("", "any time"), ("15m", "15 minutes"), ("1h", "1 hour"), ("6h", "6 hours"), ("24h", "24 hours")];
pub const WAITS: &[(&str, &str)] =
    &[("", "off"), ("1m", "1 minute"), ("5m", "5 minutes"), ("15m", "15 minutes"), ("1h", "1 hour")];

async fn deliveries(ctx: &Context<'_>, req: &Request) -> Result<Reply, Failure> {
    let config = ctx.ops.config();
    let form = FormFilter::from_request(req);
    let now_ms = crate::clock::now_ms();
    let mut f = filter_of(config, &form, now_ms)?;
    newer_than(&mut f, &req.param("after").unwrap_or_default())?;
    let limit = 50;
    // With the history off nothing kept is shown (the writer deletes it within seconds).
    let page = match config.ui.keeps_history() {
        true => query::list(&mut ctx.ops.conn(), &config.redis.key_prefix, &f, limit, config.ui.history_max)
            .await
            .map_err(Failure::redis)?,
        false => query::Page::default(),
    };
    let rows: Vec<Row> = page.rows.iter().map(Row::from).collect();
    let shadow = page.shadow.clone();
    let any_filter = form.any();
    if req.param("rows").is_some() {
        return Ok(render(StatusCode::OK, &RowsPart { rows, any_filter }));
    }
    let qs = form.query_string();
    let older = page.rows.last().map(|r| r.received().saturating_sub(1)).unwrap_or(0);
    let page = DeliveriesPage {
        nav: nav(Some(ctx.viewer), "deliveries"),
        history_on: config.ui.keeps_history(),
        apps: config.apps.iter().map(|a| a.name.clone()).collect(),
        statuses: STATUSES,
        spans: SPANS,
        waits: WAITS,
        live: form.until.is_empty(),
        self_href: format!("/ui/deliveries?{qs}"),
        rows_href: format!("/ui/deliveries?{qs}&rows=1"),
        older_href: format!("/ui/deliveries?{qs}&until={older}"),
        can_act: ctx.can_act(),
        filter_fields: filter_fields(&form),
        now_ms,
        f: form,
        rows,
        shadow,
        any_filter,
        more: page.more,
    };
    Ok(render(StatusCode::OK, &page))
}

/// One timeline entry as the page shows it.
pub struct Entry {
    pub at: String,
    pub offset: String,
    pub kind: String,
    pub text: String,
    /// A link into Slack and its words.
    pub link: Option<(String, &'static str)>,
}

#[derive(Template)]
#[template(path = "ui/delivery.html")]
struct DeliveryPage<'a> {
    nav: Nav<'a>,
    app: String,
    id: String,
    what: String,
    status: String,
    facts: Vec<(&'static str, String)>,
    gap: String,
    thread_href: String,
    timeline: Vec<Entry>,
    can_act: bool,
    replayable: bool,
    body: Option<String>,
    show_text: bool,
    /// Each form's one-time token: sent twice, it acts once.
    replay_nonce: String,
    purge_nonce: String,
    /// With a copy for the app's shadow: both bots' answers.
    side_by_side: Option<super::side_by_side::SideBySide>,
    /// Its trace, when traces are on and it was sampled: the id and `trace_url`'s link.
    trace: Option<(String, Option<String>)>,
}

async fn delivery(ctx: &Context<'_>, app: &str, id: &str) -> Result<Reply, Failure> {
    let config = ctx.ops.config();
    if !config.apps.iter().any(|a| a.name == app) {
        return Err(no_app(app));
    }
    // With the history off nothing kept is shown (the writer deletes it within seconds).
    let found = match config.ui.keeps_history() {
        true => query::show(&mut ctx.ops.conn(), &config.redis.key_prefix, app, id).await.map_err(Failure::redis)?,
        false => None,
    };
    let Some(mut d) = found else {
        let text = format!("No delivery {id} of app {app} in the history (kept for {:?}).", config.ui.history);
        return Ok(message(Some(ctx.viewer), StatusCode::NOT_FOUND, "Not found", &text, "/ui/deliveries"));
    };
    d.hide_text(config.ui.show_text);
    let s = &d.summary;
    let start = s.received();
    let timeline = d.timeline.iter().map(|e| entry(e, start)).collect();
    let status = s.get("status").to_string();
    let side_by_side = super::side_by_side::of(ctx, app, &d).await?;
    let page = DeliveryPage {
        nav: nav(Some(ctx.viewer), "deliveries"),
        app: app.into(),
        id: id.into(),
        what: format!("{} {}", s.get("kind"), s.get("detail")).trim().to_string(),
        facts: facts(s),
        gap: gap(s),
        thread_href: thread_href(s),
        timeline,
        can_act: ctx.can_act(),
        replayable: status == "dead" || (status == "delivered" && d.body.is_some()),
        body: d.body.as_deref().map(|b| redact(b, config.ui.show_text)),
        show_text: config.ui.show_text,
        replay_nonce: super::actions::once::nonce(),
        purge_nonce: super::actions::once::nonce(),
        side_by_side,
        status,
        trace: crate::telemetry::shown(&config.telemetry, id),
    };
    Ok(render(StatusCode::OK, &page))
}

/// The list of every delivery of this one's thread (its root's `ts` matches them all).
fn thread_href(s: &Summary) -> String {
    if s.get("conversation").is_empty() {
        return String::new();
    }
    let root = if s.get("thread").is_empty() { s.get("ts") } else { s.get("thread") };
    let q: String =
        form_urlencoded::Serializer::new(String::new()).append_pair("app", &s.app).append_pair("q", root).finish();
    format!("/ui/deliveries?{q}")
}

fn entry(e: &serde_json::Value, start: u64) -> Entry {
    let at = e["at"].as_u64().unwrap_or(start);
    let text = |k: &str| e[k].as_str().unwrap_or_default();
    Entry {
        at: clock(at),
        offset: format!("+{:.3} s", (at as i64 - start as i64) as f64 / 1000.0),
        kind: text("what").to_string(),
        text: describe(e),
        link: entry_link(e).map(|url| {
            let what = if text("what") == "wrote" { "open the reply in Slack" } else { "open the message in Slack" };
            (url, what)
        }),
    }
}

fn facts(s: &Summary) -> Vec<(&'static str, String)> {
    let mut out = vec![("Delivery", s.id.clone()), ("App", s.app.clone())];
    for (label, key) in [
        ("Team", "team"),
        ("Channel", "channel"),
        ("User", "user"),
        ("Message ts", "ts"),
        ("Thread", "thread"),
        ("Receipt (event_id / trigger_id)", "receipt"),
        ("Arrived over", "via"),
        ("Ack", "ack_ms"),
        ("Attempts", "attempts"),
        ("Bot's last status", "last_status"),
        ("Replies through the egress", "replies"),
        ("Slack's retries absorbed", "absorbed"),
    ] {
        let v = s.get(key);
        if !v.is_empty() {
            out.push((label, if key == "ack_ms" { format!("{v} ms") } else { v.to_string() }));
        }
    }
    out.push(("Arrived", format!("{} UTC", clock(s.received()))));
    out
}

/// Slack's `event_time` against the arrival.
fn gap(s: &Summary) -> String {
    match s.num("event_time") {
        0 => String::new(),
        t => {
            let gap = s.received() as f64 / 1000.0 - t as f64;
            let by = match gap.abs() {
                g if g < 120.0 => format!("{:.1} s", g),
                g => age(g as u64 * 1000),
            };
            let when = if gap < 0.0 { "before Slack sent it (the clocks disagree)" } else { "later" };
            format!("Slack's event_time (whole seconds) is {} UTC; the gateway had it {by} {when}.", clock(t * 1000))
        }
    }
}
