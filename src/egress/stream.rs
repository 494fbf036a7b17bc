//! Streams (`chat.startStream` → `chat.appendStream`… → `chat.stopStream`): every stream the
//! gateway saw start ends, with the whole answer, once.
//!
//! - A start that went through keeps the stream's record: its text so far (`store::stream`).
//! - An append or stop adds its text to the record and reads the stream's question in the
//!   same Redis call; with turns, a second call renews (or, for the stop, ends) its turn. That
//!   is all an append costs on the happy path.
//! - An append or stop whose answer is lost (or past `[egress] timeout`), or that Slack refuses
//!   with `message_not_in_streaming_state` (it ends streams after about five minutes), is
//!   settled here, never handed to the bot: the gateway ends the stream and continues the
//!   answer as an edited message — `chat.update` with the whole text so far, which is the same
//!   edit however often it is sent. Every later append becomes such an edit, at most one a
//!   second per message (the edits between coalesced, the last always sent). The bot sees `ok`
//!   and the stream's `ts` throughout.
//! - An append Slack refuses for another reason takes its text back and gets Slack's answer.
//! - When the stream's question is deleted (or edited, with `on_edited = "withhold"`), its next
//!   append is withheld and the gateway closes the message (`close_stream`: replaced by
//!   `close_line`, or deleted), and its turn ends. The bot's own stop of it is answered `ok`.
//! - A stream the gateway did not see start (a start before an upgrade, or its record gone)
//!   goes on as any write.
//!
//! Each stream's end is counted (`egress_streams_total{ending}`), noted in its delivery's
//! history and, when the gateway settled or closed it, in the audit log.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tracing::{info, warn};

use super::ctx::{cached, forwarded, Ctx};
use super::model::error::Error;
use super::model::{Attributed, Cached, Gone, Outcome, Place, Reply, SourceState, Target, Write};
use super::plan::{self, StreamAnswer, EDIT_EVERY, MARKDOWN_MAX};
use super::store::{EgressStore, StreamCall, StreamState};
use super::turn;
use crate::clock::now_ms;
use crate::secret::Secret;

/// A stream's call as the gateway keeps it: where it is, and the call's own token (used for
/// the gateway's edits of the message, never kept).
#[derive(Clone)]
struct On {
    team: String,
    channel: String,
    ts: String,
    token: Secret,
}

impl On {
    fn place(&self) -> Place<'_> {
        Place { team: &self.team, channel: &self.channel }
    }

    /// What Slack answers a stream's call that went through: the stream's channel and ts.
    fn ok(&self, outcome: Outcome) -> Reply {
        Reply::own(200, json!({"ok": true, "channel": self.channel, "ts": self.ts}), outcome, None)
    }
}

/// A start went through (`answer`, Slack's): the stream's record, with the start's text.
pub(super) async fn opened(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write, answer: &Cached) {
    if w.call.method != plan::START_STREAM {
        return;
    }
    let posted = serde_json::from_slice::<serde_json::Value>(&answer.body).ok();
    let Some(ts) = posted.as_ref().and_then(|v| v["ts"].as_str()) else { return };
    let text = w.call.fields.appended.as_deref().unwrap_or_default();
    let source = to.source.as_ref().map_or(("", ""), |s| (s.delivery.as_str(), s.app.as_str()));
    if let Err(e) = ctx.step(w, store.stream_open(&to.place(), ts, text, now_ms(), source)).await {
        warn!(error = %e, "cannot keep a stream's record; it goes on as plain calls");
    }
}

/// A re-run's `chat.startStream` was handed the stream its lost run started (`earlier`): the
/// lost run's partial text gives way to the re-run's answer, continued as edits of the message
/// (a stream Slack still streams is stopped first, so it is never left streaming).
pub(super) async fn rerun(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write, earlier: &Cached) {
    let posted = serde_json::from_slice::<serde_json::Value>(&earlier.body).ok();
    let (Some(ts), Some(token)) = (posted.as_ref().and_then(|v| v["ts"].as_str()), w.call.token.as_ref()) else {
        return;
    };
    let on =
        On { team: to.who.team.clone(), channel: to.channel.to_string(), ts: ts.to_string(), token: token.clone() };
    let text = w.call.fields.appended.as_deref().unwrap_or_default();
    match ctx.step(w, store.stream_rerun(&on.place(), ts, text, now_ms())).await {
        Ok(Some(state)) => {
            if state == "open" {
                let form = [("channel", on.channel.as_str()), ("ts", on.ts.as_str())];
                let _ = ctx.slack.own_response(plan::STOP_STREAM, &on.token, &form).await;
            }
            let edited = !text.is_empty() && edit(ctx, &on, text).await;
            info!(
                target: "slackgate::audit",
                channel = %on.channel,
                ts = %on.ts,
                edited,
                delivery = to.source.as_ref().map_or("", |s| s.delivery.as_str()),
                "egress stream of a lost run handed to its re-run: continued as edits"
            );
        }
        Ok(None) => {}
        Err(e) => warn!(error = %e, "cannot hand a lost run's stream to its re-run"),
    }
}

/// An append or stop of a stream the gateway keeps: its answer. `None` when it keeps none
/// (no token, channel, `ts` or identity; Redis did not answer; a stream it did not see
/// start): the write path goes on as for any write.
pub(super) async fn continued(ctx: &Arc<Ctx>, w: &Write) -> Option<Reply> {
    let store = ctx.store()?;
    let f = &w.call.fields;
    let (th, token, channel, ts) =
        (w.token_hash.as_deref()?, w.call.token.as_ref()?, f.channel.as_deref()?, f.ts.as_deref()?);
    let who = ctx.slack.identity(th, token).await?;
    let on = On { team: who.team.clone(), channel: channel.to_string(), ts: ts.to_string(), token: token.clone() };
    let stop = w.call.method == plan::STOP_STREAM;
    let call = StreamCall {
        ts,
        text: f.appended.as_deref().unwrap_or_default(),
        stop,
        withhold_edited: ctx.cfg().withhold_edited,
        edit_every: EDIT_EVERY,
    };
    let (state, source) = ctx.step(w, store.stream_call(&on.place(), &call, now_ms())).await.ok()?;
    if state == StreamState::Unknown {
        return None;
    }
    let to = Target { who, channel, source: source.map(Attributed::from) };
    // A stream's append or stop is never withheld for a newer message: an append renews its
    // turn before it goes; a stop ends it once it went (the next question's answer comes after).
    let judged = !matches!(state, StreamState::Gone(_));
    if judged && !stop {
        turn::turn(ctx, store, &to, w).await;
    }
    let reply = match state {
        StreamState::Unknown | StreamState::Stopped => forward(ctx, w).await,
        StreamState::Closed if stop => on.ok(Outcome::Continued),
        StreamState::Closed => Error::Withheld(gone_of(to.source.as_ref())).into(),
        StreamState::Gone(_) => close(ctx, store, &on, &to, w).await,
        StreamState::Open { appends, added } => open(ctx, store, &on, &to, w, (appends, added)).await,
        // (Its end was counted when the gateway settled it.)
        StreamState::Edit(text) => {
            edit(ctx, &on, &text).await;
            on.ok(Outcome::Continued)
        }
        StreamState::Wait(due) => {
            flush_at(ctx.clone(), on.clone(), due);
            on.ok(Outcome::Continued)
        }
    };
    if judged && stop {
        turn::turn(ctx, store, &to, w).await;
    }
    Some(reply)
}

/// Why a stream's question is gone, by its record (deleted unless it says edited).
fn gone_of(source: Option<&Attributed>) -> Gone {
    match source.map(|s| s.state) {
        Some(SourceState::Edited) => Gone::Edited,
        _ => Gone::Deleted,
    }
}

/// Sent as it is: Slack answers (a stopped stream's call, one the gateway does not keep).
async fn forward(ctx: &Ctx, w: &Write) -> Reply {
    match forwarded(ctx.slack.forward(&w.call, ctx.cfg().timeout).await) {
        Ok(reply) => reply,
        Err(_) => Error::Upstream.into(),
    }
}

/// An open stream's append or stop (the record's `appends` so far, the bytes this one added):
/// sent; settled by the gateway when its answer is lost or Slack no longer streams it.
async fn open(ctx: &Ctx, store: &EgressStore, on: &On, to: &Target<'_>, w: &Write, (n, added): (u64, u64)) -> Reply {
    let stop = w.call.method == plan::STOP_STREAM;
    let sent = forwarded(ctx.slack.forward(&w.call, ctx.cfg().timeout).await);
    let answer = sent.as_ref().ok().map(|r| &r.answer);
    let why = match plan::stream_answer(answer) {
        StreamAnswer::Taken => {
            if stop {
                let _ = ctx.step(w, store.stream_stopped(&on.place(), &on.ts)).await;
                ended(ctx, store, on, to.source.as_ref(), None).await;
            }
            return sent.unwrap_or_else(|_| Error::Upstream.into());
        }
        StreamAnswer::Refused => {
            if let Err(e) = ctx.step(w, store.stream_undo(&on.place(), &on.ts, added, n)).await {
                warn!(error = %e, "cannot take back the text of an append Slack refused");
            }
            return sent.unwrap_or_else(|_| Error::Upstream.into());
        }
        StreamAnswer::Expired => "expired",
        StreamAnswer::Lost => "lost",
    };
    settle(ctx, store, on, to, w, why).await
}

/// The gateway ends the stream and continues its answer as an edit of the whole text so far.
async fn settle(ctx: &Ctx, store: &EgressStore, on: &On, to: &Target<'_>, w: &Write, why: &'static str) -> Reply {
    let stop = w.call.method == plan::STOP_STREAM;
    let text = match ctx.step(w, store.stream_settle(&on.place(), &on.ts, why, stop, now_ms())).await {
        Ok(Some(text)) => text,
        // Another call settled it first: its edit carries this call's text too.
        Ok(None) => return on.ok(Outcome::Continued),
        Err(e) => {
            warn!(error = %e, "cannot settle a stream; the bot gets Slack's error");
            return Error::Uncertain.into();
        }
    };
    if why == "lost" {
        // Slack may still stream it: ended, so it is never left streaming.
        let _ = ctx.slack.own_response(plan::STOP_STREAM, &on.token, &[("channel", &on.channel), ("ts", &on.ts)]).await;
    }
    let edited = edit(ctx, on, &text).await;
    let ending = if why == "lost" { "continued_lost" } else { "continued_expired" };
    info!(
        target: "slackgate::audit",
        channel = %on.channel,
        ts = %on.ts,
        why,
        edited,
        delivery = to.source.as_ref().map_or("", |s| s.delivery.as_str()),
        "egress stream continued as edits"
    );
    ended(ctx, store, on, to.source.as_ref(), Some(ending)).await;
    on.ok(Outcome::Continued)
}

/// The stream's question is gone: this append is withheld, and the gateway stops the message
/// and replaces its text with `close_line` (or deletes it); its turn ends.
async fn close(ctx: &Ctx, store: &EgressStore, on: &On, to: &Target<'_>, w: &Write) -> Reply {
    let gone = gone_of(to.source.as_ref());
    let _ = ctx.slack.own_response(plan::STOP_STREAM, &on.token, &[("channel", &on.channel), ("ts", &on.ts)]).await;
    let cfg = ctx.cfg();
    let done = if cfg.close_by_delete {
        let form = [("channel", on.channel.as_str()), ("ts", on.ts.as_str())];
        ctx.slack.own_response("chat.delete", &on.token, &form).await.is_ok_and(|r| cached(r).succeeded())
    } else {
        edit(ctx, on, &cfg.close_line).await
    };
    let ending = if gone == Gone::Edited { "closed_edited" } else { "closed_deleted" };
    info!(
        target: "slackgate::audit",
        channel = %on.channel,
        ts = %on.ts,
        how = if cfg.close_by_delete { "delete" } else { "replace" },
        done,
        delivery = to.source.as_ref().map_or("", |s| s.delivery.as_str()),
        "egress stream closed: its question is gone"
    );
    ended(ctx, store, on, to.source.as_ref(), Some(ending)).await;
    match &to.source {
        Some(source) => {
            turn::closed(ctx, store, source, w).await;
            ctx.withheld(store, w, source, Error::Withheld(gone)).await
        }
        None => Error::Withheld(gone).into(),
    }
}

/// Edit the stream's message to `text` (the whole answer so far); whether Slack took it.
async fn edit(ctx: &Ctx, on: &On, text: &str) -> bool {
    let field = if text.chars().count() <= MARKDOWN_MAX { "markdown_text" } else { "text" };
    let form = [("channel", on.channel.as_str()), ("ts", on.ts.as_str()), (field, text)];
    match ctx.slack.own_response("chat.update", &on.token, &form).await {
        Ok(r) => {
            let ok = cached(r).succeeded();
            if !ok {
                warn!(channel = %on.channel, ts = %on.ts, "Slack refused the gateway's edit of a stream");
            }
            ok
        }
        Err(e) => {
            warn!(error = %e, channel = %on.channel, ts = %on.ts, "the gateway's edit of a stream failed");
            false
        }
    }
}

/// A coalesced edit, sent when it is due (`due_ms`) unless a later call sent it first.
fn flush_at(ctx: Arc<Ctx>, on: On, due_ms: u64) {
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(due_ms.saturating_sub(now_ms()))).await;
        let Some(store) = ctx.store() else { return };
        match store.stream_flush(&on.place(), &on.ts, now_ms(), EDIT_EVERY).await {
            Ok(Some(text)) => {
                edit(&ctx, &on, &text).await;
            }
            Ok(None) => {}
            Err(e) => warn!(error = %e, "cannot read a stream's coalesced edit"),
        }
    });
}

/// The stream ended (`ending`: how, when the gateway ended it; else stopped by the bot):
/// counted, and in its delivery's history with its appends and bytes.
async fn ended(ctx: &Ctx, store: &EgressStore, on: &On, source: Option<&Attributed>, ending: Option<&'static str>) {
    let ending = ending.unwrap_or("stopped");
    ctx.shared.metrics.egress.streams.with_label_values(&[ending]).inc();
    let Some(source) = source else { return };
    let summary = store.stream_summary(&on.place(), &on.ts).await.unwrap_or_default();
    let num = |i: usize| summary.get(i).cloned().flatten().and_then(|v| v.parse().ok()).unwrap_or(0);
    let end = crate::history::StreamEnd {
        channel: on.channel.clone(),
        ts: on.ts.clone(),
        appends: num(2),
        bytes: num(3),
        ending,
    };
    super::trace::stream(&ctx.shared, &source.delivery, &end, num(4));
    ctx.shared.history.step(&source.app, &source.delivery, || crate::history::What::Stream(end));
}
