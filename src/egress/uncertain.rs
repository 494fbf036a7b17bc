//! A write that may have reached Slack without an answer (a timeout, or the connection dropped
//! after the request was sent) is not sent again blindly. By method:
//!
//! - `chat.postMessage`: looked for — the bot's own message with the same text in the channel
//!   (or thread) since just before it was sent, until `evidence_window` has passed:
//!   1. **From events first.** The post's own message event, which the ingress keeps when the
//!      app gets its own messages (see `seen`). Found: that is the answer, with the real `ts`,
//!      and no history call. Where the gateway sees the app's own posts (one arrived there
//!      within `evidence_recent`), none by the window's end means not posted: posted once.
//!   2. **Else one history look** (`conversations.history`, or `.replies` in a thread) at the
//!      window's end, within the app's budget for that method (`budget`). Found: the answer;
//!      not there: posted once. No budget, or Slack's 429: unknown with `Retry-After` — never
//!      "not found", which would post it twice, and never a loop of looks.
//! - Writes whose repeat does no harm (`chat.update`, `chat.delete`, `reactions.add/remove`,
//!   `views.update/publish`, `pins.add/remove`): sent once more; Slack's answer to that call
//!   (e.g. `already_reacted`) goes to the bot.
//! - Writes that cannot be looked for or repeated (`chat.postEphemeral`, `chat.scheduleMessage`,
//!   `chat.meMessage`, `views.open/push`, `files.completeUploadExternal`, unknown methods):
//!   unknown — never looked for (an ephemeral is not in history), never sent again.
//!
//! Unknown: the bot gets a 503 (`slackgate_uncertain`, `Retry-After`: 5 s, or longer when
//! Slack's budget opens later) that its client retries, the intent is noted (`slackgate
//! egress`, `GET /egress`) and counted (`unknown`). A retry of an unsettled write — its outcome
//! unknown, or its call died with its claim — goes through the same rules: a post is looked
//! for again (its event may have come meanwhile), a harmless write sent again, the rest
//! answered unknown again.

use std::time::Duration;

use tracing::{info, warn};

use super::budget::Budget;
use super::ctx::{forwarded, Ctx};
use super::look::{posted, LookError};
use super::model::error::Error;
use super::model::{Cached, Identity, Outcome, Reply, Write};
use super::plan::{self, FromEvents, Recovery, Window};
use super::store::EgressStore;
use crate::clock::now_ms;
use crate::outbox::NoteList;
use crate::seen::record::Author;

enum Looked {
    Found(Cached),
    NotFound,
    /// Could not tell; Slack's budget opens again after this, when known.
    Unsure(Option<Duration>),
}

impl Looked {
    fn as_label(&self) -> &'static str {
        match self {
            Looked::Found(_) => "found",
            Looked::NotFound => "not_posted",
            Looked::Unsure(_) => "unknown",
        }
    }
}

/// How often an uncertain post's own message event is looked for in Redis.
const EVENT_POLL: Duration = Duration::from_millis(100);

/// What to do with a write whose earlier call never settled.
pub(super) enum Unsettled {
    /// Its answer: found, or unknown again.
    Answer(Reply),
    /// Send it (again): a post that looks covering the window did not find, or a harmless one.
    SendAgain,
}

/// Sleep until the wall clock reads `at_ms`.
async fn sleep_until_ms(at_ms: u64) {
    tokio::time::sleep(Duration::from_millis(at_ms.saturating_sub(now_ms()))).await;
}

/// This call's own write may have reached Slack without an answer.
pub(super) async fn uncertain(ctx: &Ctx, w: &Write, who: Option<&Identity>, sent_ms: u64) -> Reply {
    match plan::recovery(&w.call.method) {
        Recovery::Unknown => unknown(ctx, w, Error::Uncertain).await,
        Recovery::SendAgain => send_once_more(ctx, w).await,
        Recovery::LookFor => match look_for(ctx, w, who, sent_ms, now_ms()).await {
            Looked::Found(answer) => Reply::new(answer, Outcome::Reconciled),
            Looked::NotFound => send_once_more(ctx, w).await,
            Looked::Unsure(after) => unknown_after(ctx, w, Error::Uncertain, after).await,
        },
    }
}

/// An earlier call of this write (sent at `sent_ms`) never settled: its outcome was
/// unknown, or its call died holding the claim.
pub(super) async fn unsettled(ctx: &Ctx, w: &Write, sent_ms: u64) -> Unsettled {
    match plan::recovery(&w.call.method) {
        Recovery::Unknown => Unsettled::Answer(unknown(ctx, w, Error::Uncertain).await),
        Recovery::SendAgain => Unsettled::SendAgain,
        Recovery::LookFor => {
            let who = match (w.token_hash.as_deref(), w.call.token.as_ref()) {
                (Some(th), Some(token)) => ctx.slack.identity(th, token).await,
                _ => None,
            };
            let (sent_ms, from_ms) = plan::unsettled_from(sent_ms, now_ms(), ctx.cfg().timeout);
            match look_for(ctx, w, who.as_ref(), sent_ms, from_ms).await {
                Looked::Found(answer) => Unsettled::Answer(Reply::new(answer, Outcome::Reconciled)),
                Looked::NotFound => Unsettled::SendAgain,
                Looked::Unsure(after) => Unsettled::Answer(unknown_after(ctx, w, Error::Uncertain, after).await),
            }
        }
    }
}

async fn send_once_more(ctx: &Ctx, w: &Write) -> Reply {
    match forwarded(ctx.slack.forward(&w.call, ctx.cfg().timeout).await) {
        Ok(reply) => reply,
        Err(_) => unknown(ctx, w, Error::Uncertain).await,
    }
}

/// Look for a post sent at `sent_ms` whose answer was given up at `from_ms`: its own
/// message event until the window's end, then (where that cannot decide) one history look.
async fn look_for(ctx: &Ctx, w: &Write, who: Option<&Identity>, sent_ms: u64, from_ms: u64) -> Looked {
    let f = &w.call.fields;
    let (Some(who), Some(token), Some(channel), Some(text), Some(store)) =
        (who, w.call.token.as_ref(), f.channel.as_deref(), f.message_text(), ctx.store())
    else {
        return Looked::Unsure(None);
    };
    let post = Post { who, channel, thread: f.thread_ts.as_deref(), text, since_ms: sent_ms.saturating_sub(5_000) };
    let window = Window::new(from_ms, ctx.cfg().evidence_window);
    let (found, sees, read_at) = own_event(store, &post, &window).await;
    let (looked, from) = match (plan::from_events(found.is_some(), sees, &window, read_at), found) {
        (FromEvents::Found, Some(ts)) => {
            ctx.shared.metrics.egress.reconciled.with_label_values(&["events"]).inc();
            (Looked::Found(post.answer(&ts)), "events")
        }
        (FromEvents::NotPosted, _) => (Looked::NotFound, "events"),
        _ => {
            sleep_until_ms(window.end()).await;
            (look_in_history(ctx, store, token, &post).await, "history")
        }
    };
    info!(target: "slackgate::audit", channel, from, settled = looked.as_label(), "egress uncertain post");
    looked
}

/// Wait for the post's own message event until the window's end: its `ts` when it came,
/// else whether the gateway sees the app's posts in the channel (read then, so that a post
/// of the app's that came meanwhile counts), and when it last read. A Redis that cannot
/// tell sees nothing.
async fn own_event(store: &EgressStore, post: &Post<'_>, window: &Window) -> (Option<String>, bool, u64) {
    let seen = store.seen();
    let author = Author { user: &post.who.user_id, bot_id: &post.who.bot_id };
    let place = (post.who.team.as_str(), post.channel, post.thread);
    let want = crate::slack::digest(post.text.as_bytes());
    loop {
        let read_at = now_ms();
        let found = seen.own_post(place, &want, &author, post.since_ms).await;
        match found {
            Ok(Some(p)) => return (Some(p.ts), false, read_at),
            Ok(None) if read_at >= window.end() => {
                let sees = seen.sees(&post.who.team, post.channel, &author).await;
                return (None, sees.unwrap_or(false), read_at);
            }
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, "cannot read the evidence of an uncertain post");
                return (None, false, read_at);
            }
        }
        tokio::time::sleep(EVENT_POLL.min(Duration::from_millis(window.end().saturating_sub(read_at)))).await;
    }
}

/// One look in history, within the app's budget for the method: no budget or Slack's 429
/// is unsure (with when to try again), never "not found".
async fn look_in_history(ctx: &Ctx, store: &EgressStore, token: &crate::secret::Secret, post: &Post<'_>) -> Looked {
    let method = if post.thread.is_some() { "conversations.replies" } else { "conversations.history" };
    let m = &ctx.shared.metrics.egress;
    let budget = Budget { who: post.who, method, per_minute: ctx.cfg().history_tier.per_minute() };
    match store.history_take(&budget, now_ms()).await {
        Ok(None) => {}
        Ok(Some(wait)) => {
            m.history_refused.with_label_values(&[method]).inc();
            return Looked::Unsure(Some(wait));
        }
        // Redis could not say what is left: one look, as without a budget.
        Err(e) => warn!(error = %e, "cannot read the history budget; looking anyway"),
    }
    m.history_calls.with_label_values(&[method, "egress"]).inc();
    match ctx.slack.find_post(token, post.who, post.channel, post.thread, post.text, post.since_ms + 5_000).await {
        Ok(Some(found)) => {
            m.reconciled.with_label_values(&["history"]).inc();
            Looked::Found(found)
        }
        Ok(None) => Looked::NotFound,
        Err(LookError::RateLimited(after)) => {
            let after = after.unwrap_or(Duration::from_secs(60));
            if let Err(e) = store.history_refused(&budget, now_ms(), after).await {
                warn!(error = %e, "cannot keep Slack's Retry-After for history");
            }
            Looked::Unsure(Some(after))
        }
        Err(LookError::Failed(e)) => {
            warn!(error = %e, "cannot look for an uncertain post");
            Looked::Unsure(None)
        }
    }
}

/// Unknown (`Error::Uncertain` or `RetryPending`): noted, and an error the bot's client
/// retries.
pub(super) async fn unknown(ctx: &Ctx, w: &Write, error: Error) -> Reply {
    unknown_after(ctx, w, error, None).await
}

/// The same, to be retried no sooner than `after` (when Slack's budget opens again).
async fn unknown_after(ctx: &Ctx, w: &Write, error: Error, after: Option<Duration>) -> Reply {
    if let Some(store) = ctx.store() {
        let note = serde_json::json!({
            "at": now_ms(), "method": w.call.method, "channel": w.call.fields.channel, "error": error.code(),
        });
        if let Err(e) = ctx.step(w, store.notes().note(NoteList::Unknown, &note, now_ms())).await {
            warn!(error = %e, "cannot keep the note of an unknown write");
        }
    }
    let mut reply = Reply::from(error);
    if let Some(after) = after {
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        reply.answer.retry_after = Some(reply.answer.retry_after.unwrap_or(0).max(secs));
    }
    reply
}

/// An uncertain post, as the looks for it see it.
struct Post<'a> {
    who: &'a Identity,
    channel: &'a str,
    thread: Option<&'a str>,
    text: &'a str,
    /// Its message is no older than this (a little before it was sent).
    since_ms: u64,
}

impl Post<'_> {
    /// The answer Slack would have given, from the post's own message event (`ts`).
    fn answer(&self, ts: &str) -> Cached {
        let mut m = serde_json::json!({
            "type": "message", "user": self.who.user_id, "text": self.text, "ts": ts,
        });
        if !self.who.bot_id.is_empty() {
            m["bot_id"] = self.who.bot_id.clone().into();
        }
        if let Some(thread) = self.thread {
            m["thread_ts"] = thread.into();
        }
        posted(self.channel, &m)
    }
}
