//! The shadow's base (`/shadow/api/<method>`), where a shadow bot's Web API client points: its
//! writes are kept with the delivery they answer and answered as Slack would (`ok`, a
//! plausible `ts`, the message echoed; a stream's calls alike), so that the bot runs its whole
//! answer — and nothing reaches Slack. Its reads go to Slack as the live bot's do (within the
//! app's history budget). A shadow's write never touches the live bot's turns, pacing, keys or
//! attribution: it is looked up only in the shadow's own conversation records (what its lane
//! delivered). Its late answers to a command (`response_url`, pointed at
//! `/shadow/response/<delivery>` in the copy it got) are kept the same way.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pingora::protocols::http::ServerSession;
use serde_json::{json, Value};
use tracing::info;

use super::call::token_hash;
use super::ctx::{respond, Ctx};
use super::model::{Call, Outcome, Reply};
use crate::clock::now_ms;
use crate::outbox::{Channel, Conversations};

/// The history's outcome of a shadow's write, on the live delivery it answers.
pub const KEPT: &str = crate::history::SHADOW_KEPT;

/// `/api/<method>` of `/shadow/api/<method>`; `None` for any other path.
pub(super) fn api_path(path: &str) -> Option<&str> {
    path.strip_prefix("/shadow").filter(|p| p.starts_with("/api/"))
}

/// The delivery a `/shadow/response/<delivery>` names.
pub(super) fn response_of(path: &str) -> Option<&str> {
    let id = path.strip_prefix("/shadow/response/")?;
    crate::ops::looks_like_id(id).then_some(id)
}

/// One call at the shadow's base: a read passes to Slack; a write is kept and answered.
pub(super) async fn call(ctx: &Arc<Ctx>, call: Call, session: &mut ServerSession) -> bool {
    if !ctx.cfg().is_write(&call.method) {
        count(ctx, &shadow_app(ctx), "read");
        return super::read::read(ctx, &call, session).await;
    }
    let started = Instant::now();
    let found = attribute(ctx, &call).await;
    let answer = as_slack(&call);
    let ts = answer["ts"].as_str().or(answer["message_ts"].as_str()).unwrap_or_default().to_string();
    if let Some(found) = &found {
        // An update, an append or a stop of this message is this delivery's too.
        let _ = found.records.posted(found.at(), &ts, &found.source_ts).await;
    }
    let answered = found.map(|f| (f.app, f.delivery));
    let app = answered.as_ref().map_or_else(|| shadow_app(ctx), |(app, _)| app.clone());
    let channel = call.fields.channel.clone().unwrap_or_default();
    match &answered {
        Some((app, delivery)) => {
            let wrote = crate::queue::history::Write {
                method: call.method.clone(),
                channel: channel.clone(),
                outcome: KEPT,
                key: "none",
                ts,
                took_ms: started.elapsed().as_millis() as u64,
                bytes: call.body.len() as u64,
                text: crate::queue::history::kept_text(ctx.live.get().config.ui.show_text, call.fields.message_text()),
            };
            ctx.shared.history.step(app, delivery, || crate::history::What::Wrote(wrote));
            count(ctx, app, "kept");
        }
        None => count(ctx, &app, "unattributed"),
    }
    let delivery = answered.as_ref().map_or("", |(_, d)| d.as_str());
    if let Some(t) = call.trace.as_deref().filter(|_| !delivery.is_empty()) {
        t.attributed(delivery);
    }
    // Its span has no `server.address`: it never went anywhere.
    super::trace::export(&ctx.shared, &call, super::plan::KeyKind::None, Outcome::Kept, None);
    info!(
        target: "slackgate::audit",
        app = %app, method = %call.method, channel = %channel, delivery, bytes = call.body.len(),
        "shadow write kept"
    );
    respond(session, &Reply::own(200, answer, Outcome::Kept, None)).await
}

/// `POST /shadow/response/<delivery>`: the shadow bot's late answer to a command or action,
/// kept (its size, on the delivery's page), answered as Slack's `response_url` answers.
pub(super) async fn response(ctx: &Arc<Ctx>, delivery: &str, body_len: usize) -> Reply {
    let app = shadow_app(ctx);
    if !app.is_empty() {
        let wrote = crate::queue::history::Write {
            method: "response_url".into(),
            channel: String::new(),
            outcome: KEPT,
            key: "none",
            ts: String::new(),
            took_ms: 0,
            bytes: body_len as u64,
            text: None,
        };
        ctx.shared.history.step(&app, delivery, || crate::history::What::Wrote(wrote));
    }
    count(ctx, &app, "kept");
    info!(target: "slackgate::audit", app = %app, delivery, bytes = body_len, "shadow write kept");
    let answer = super::model::Cached {
        status: 200,
        content_type: "text/plain".into(),
        body: bytes::Bytes::from_static(b"ok"),
        retry_after: None,
        headers: Vec::new(),
    };
    Reply::new(answer, Outcome::Kept)
}

fn count(ctx: &Ctx, app: &str, outcome: &str) {
    ctx.shared.metrics.routes.shadow_calls.with_label_values(&[app, outcome]).inc();
}

/// The app a call at the shadow's base belongs to when nothing else says: the one app with a
/// shadow ('' when several have one).
fn shadow_app(ctx: &Ctx) -> String {
    let live = ctx.live.get();
    let mut with = live.config.apps.iter().filter(|a| a.shadow.is_some());
    match (with.next(), with.next()) {
        (Some(a), None) => a.name.clone(),
        _ => String::new(),
    }
}

/// The delivery a shadow's write answers, and where it was found.
struct Found {
    /// The live app, and the delivery (the live one's id: its copy has the same).
    app: String,
    delivery: String,
    /// The message it answers, in `team`'s `channel`, and the shadow's records.
    source_ts: String,
    team: String,
    channel: String,
    records: Conversations,
}

impl Found {
    fn at(&self) -> Channel<'_> {
        Channel { team: &self.team, channel: &self.channel }
    }
}

/// The delivery a shadow's write answers: the one its lane delivered in the write's thread (or
/// DM), or whose message the write's `ts` answered before — from the shadow's own
/// conversation records, never the live bot's.
async fn attribute(ctx: &Ctx, call: &Call) -> Option<Found> {
    let (store, token, channel) = (ctx.store()?, call.token.as_ref()?, call.fields.channel.as_deref()?);
    let key = store.hash_key().await.ok()?;
    let who = ctx.slack.identity(&token_hash(&key, token), token).await?;
    let thread = call.fields.thread().unwrap_or(crate::slack::WHOLE_CHANNEL);
    let prefix = crate::config::shadow_prefix(&ctx.config.redis.key_prefix);
    let records = Conversations::new(store.conn.clone(), &prefix, ctx.cfg().attribution_window);
    let source = records.source(Channel { team: &who.team, channel }, thread).await.ok()??;
    Some(Found {
        app: crate::config::live_of_lane(&source.app)?.to_string(),
        delivery: source.delivery,
        source_ts: source.ts,
        team: who.team,
        channel: channel.to_string(),
        records,
    })
}

/// What Slack would answer the write: `ok`, and what its method returns — a new message's
/// plausible `ts` and the message echoed, a stream's `ts`, a view with an id.
fn as_slack(call: &Call) -> Value {
    let f = &call.fields;
    let channel = f.channel.clone().unwrap_or_default();
    let message = |ts: &str| {
        let mut m = json!({ "type": "message", "text": f.message_text().unwrap_or_default(), "ts": ts });
        if let Some(t) = &f.thread_ts {
            m["thread_ts"] = t.as_str().into();
        }
        m
    };
    match call.method.as_str() {
        "chat.postMessage" | "chat.meMessage" | "chat.startStream" => {
            let ts = new_ts();
            json!({ "ok": true, "channel": channel, "ts": ts, "message": message(&ts) })
        }
        "chat.postEphemeral" => json!({ "ok": true, "message_ts": new_ts() }),
        "chat.scheduleMessage" => {
            json!({ "ok": true, "channel": channel, "scheduled_message_id": format!("Q{}", new_ts().replace('.', "")) })
        }
        "chat.update" | "chat.appendStream" | "chat.stopStream" => {
            let ts = f.ts.clone().unwrap_or_default();
            json!({ "ok": true, "channel": channel, "ts": ts, "text": f.message_text().unwrap_or_default(), "message": message(&ts) })
        }
        "chat.delete" => json!({ "ok": true, "channel": channel, "ts": f.ts.clone().unwrap_or_default() }),
        m if m.starts_with("views.") => {
            json!({ "ok": true, "view": { "id": format!("V{}", new_ts().replace('.', "")) } })
        }
        _ => json!({ "ok": true }),
    }
}

/// A `ts` as Slack makes them: this second, and a sequence number within it.
fn new_ts() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed) % 1_000_000;
    format!("{}.{n:06}", now_ms() / 1000)
}
