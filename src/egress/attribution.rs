//! Attribution: a write's channel and thread name a message the gateway delivered (its
//! source). A write whose source was deleted (or edited, with `on_edited = "withhold"`) is
//! withheld and noted; a successful post is recorded as its source's, so that an update or
//! delete of it is attributed to the same source. When attribution is unsure, the write is
//! posted: a duplicate is better than a lost reply.

use super::ctx::Ctx;
use super::model::error::Error;
use super::model::{Attributed, Cached, Reply, Target, Write};
use super::plan;
use super::store::EgressStore;

/// The write's target and source; `None` when it cannot be attributed (no token, channel or
/// identity): it is sent as it is.
pub(super) async fn attribute<'a>(ctx: &Ctx, store: &EgressStore, w: &'a Write) -> Option<Target<'a>> {
    let (Some(th), Some(token), Some(channel)) =
        (w.token_hash.as_deref(), w.call.token.as_ref(), w.call.fields.channel.as_deref())
    else {
        return None;
    };
    let who = ctx.slack.identity(th, token).await?;
    if let Some(t) = &w.call.trace {
        t.team(&who.team);
    }
    let mut to = Target { who, channel, source: None };
    // Outside a thread, a write answers a DM's latest message (there the conversation is
    // the channel); in any other channel nothing matches, so only a channel that may be a
    // DM (`D…`, or a group DM's `G…`) is looked up — or any, when an app takes turns.
    let thread = match w.call.fields.thread() {
        Some(thread) => thread,
        None if ctx.turns_on() || channel.starts_with(['D', 'G']) => crate::slack::WHOLE_CHANNEL,
        None => return Some(to),
    };
    let records = store.conversations(ctx.cfg().attribution_window);
    let found = ctx.step(w, records.source(to.channel(), thread)).await;
    to.source = found.ok().flatten().map(Attributed::from);
    if let (Some(t), Some(source)) = (&w.call.trace, &to.source) {
        t.attributed(&source.delivery);
    }
    Some(to)
}

/// A write whose source message is gone: withheld, counted, kept for a day.
pub(super) async fn withhold(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write) -> Option<Reply> {
    let source = to.source.as_ref()?;
    let gone = plan::withhold(Some(source.state), ctx.cfg().withhold_edited, &w.call.method)?;
    Some(ctx.withheld(store, w, source, Error::Withheld(gone)).await)
}

/// After a successful post: which source an update of it belongs to.
pub(super) async fn remember(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write, answer: &Cached) {
    let Some(source) = &to.source else { return };
    if plan::records_its_post(&w.call.method) {
        let posted = serde_json::from_slice::<serde_json::Value>(&answer.body).ok();
        if let Some(ts) = posted.as_ref().and_then(|v| v["ts"].as_str()) {
            let records = store.conversations(ctx.cfg().attribution_window);
            let _ = ctx.step(w, records.posted(to.channel(), ts, &source.ts)).await;
        }
    }
}
