//! The history reads (`conversations.history`, `.replies`) of the bots: still streamed from
//! Slack untouched, but counted against the app's budget for the method (`budget`), so the
//! egress's own looks know what is left; a 429 of Slack's keeps its `Retry-After` for them.
//!
//! With `egress.replies_fallback = "record"`, a `conversations.replies` Slack refused (429)
//! is answered from the gateway's record of the thread (`seen`) when it holds the thread from
//! its root and missed nothing: Slack's shape (`ok`, `messages` oldest first with the fields
//! the events carried, `has_more`, `response_metadata.next_cursor`, honouring `limit`,
//! `cursor`, `oldest`, `latest`, `inclusive`), marked `X-Slackgate-Source: record`. Its next
//! pages (a cursor of the record's) come from the record too. Otherwise Slack's 429 goes back
//! as it came.

use std::collections::HashMap;
use std::time::Duration;

use super::budget::Budget;
use super::call::token_hash;
use super::ctx::Ctx;
use super::model::{Call, Identity, Outcome, Reply};
use crate::clock::now_ms;
use crate::seen::RepliesQuery;
use tracing::warn;

/// How long a refused `conversations.replies` waits for this process to have written what it
/// queued (the thread's root may have arrived a moment ago).
const SETTLE: Duration = Duration::from_millis(500);

/// The methods whose budget the egress keeps (the `method` label of its history series).
pub const HISTORY_METHODS: [&str; 2] = ["conversations.history", "conversations.replies"];

pub(super) fn is_history(method: &str) -> bool {
    HISTORY_METHODS.contains(&method)
}

/// A read's arguments: the body's (form or JSON), then the query's.
fn args(call: &Call) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = HashMap::new();
    let body = &call.body;
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        if let Ok(serde_json::Value::Object(o)) = serde_json::from_slice(body) {
            for (k, v) in o {
                let v = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                out.insert(k, v);
            }
        }
    } else {
        out.extend(form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())));
    }
    let query = call.path_and_query.split_once('?').map_or("", |(_, q)| q);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        out.entry(k.into_owned()).or_insert_with(|| v.into_owned());
    }
    out
}

/// Who makes a history read, with the call counted against its budget; `None` when it is
/// not one, or who it is cannot be told (no token, no Redis).
pub(super) async fn history_read(ctx: &Ctx, call: &Call) -> Option<Identity> {
    if !is_history(&call.method) {
        return None;
    }
    let (token, store) = (call.token.as_ref()?, ctx.store()?);
    let th = token_hash(&store.hash_key().await.ok()?, token);
    let who = ctx.slack.identity(&th, token).await?;
    ctx.shared.metrics.egress.history_calls.with_label_values(&[&call.method, "bot"]).inc();
    // Counted beside the call, not before it: the read never waits on Redis.
    let (store, counted, method) = (store.clone(), who.clone(), call.method.clone());
    let per_minute = ctx.cfg().history_tier.per_minute();
    tokio::spawn(async move {
        let budget = Budget { who: &counted, method: &method, per_minute };
        if let Err(e) = store.history_count(&budget, now_ms()).await {
            warn!(error = %e, "cannot count a history read against its budget");
        }
    });
    Some(who)
}

/// The next page of a thread the record answered: from the record again (Slack would not
/// know its cursor).
pub(super) async fn record_page(ctx: &Ctx, call: &Call, who: Option<&Identity>) -> Option<Reply> {
    if call.method != "conversations.replies" || !ctx.cfg().replies_fallback {
        return None;
    }
    let a = args(call);
    let q = RepliesQuery::from_args(|k| a.get(k).cloned())?;
    if !q.continues_record() {
        return None;
    }
    let Some(who) = who else { return Some(invalid_cursor()) };
    Some(answer_from_record(ctx, who, &q).await.unwrap_or_else(invalid_cursor))
}

/// Slack refused a history read (429, `retry_after`): kept for the egress's own looks, and
/// a `conversations.replies` answered from the record when it can be.
pub(super) async fn refused_read(
    ctx: &Ctx,
    call: &Call,
    who: Option<&Identity>,
    retry_after: Option<Duration>,
) -> Option<Reply> {
    let (who, store) = (who?, ctx.store()?);
    let budget = Budget { who, method: &call.method, per_minute: ctx.cfg().history_tier.per_minute() };
    let after = retry_after.unwrap_or(Duration::from_secs(60));
    if let Err(e) = store.history_refused(&budget, now_ms(), after).await {
        warn!(error = %e, "cannot keep Slack's Retry-After for history");
    }
    if call.method != "conversations.replies" || !ctx.cfg().replies_fallback {
        return None;
    }
    let a = args(call);
    let q = RepliesQuery::from_args(|k| a.get(k).cloned())?;
    answer_from_record(ctx, who, &q).await
}

/// The thread from the record, when it holds it from its root.
async fn answer_from_record(ctx: &Ctx, who: &Identity, q: &RepliesQuery) -> Option<Reply> {
    ctx.shared.seen.settled(SETTLE).await;
    let store = ctx.store()?;
    let messages = match store.seen().thread(&who.team, &q.channel, &q.ts).await {
        Ok(m) => m?,
        Err(e) => {
            warn!(error = %e, "cannot read the record of a thread");
            return None;
        }
    };
    let page = q.page(&messages, ctx.cfg().history_tier.page())?;
    ctx.shared.metrics.egress.replies_from_record.inc();
    tracing::info!(target: "slackgate::audit", channel = %q.channel, thread = %q.ts, "egress replies from the record");
    let mut reply = Reply::own(200, page, Outcome::FromRecord, None);
    reply.headers.push(("X-Slackgate-Source", "record"));
    Some(reply)
}

/// Slack's answer to a cursor it does not know.
fn invalid_cursor() -> Reply {
    Reply::own(200, serde_json::json!({"ok": false, "error": "invalid_cursor"}), Outcome::FromRecord, None)
}
