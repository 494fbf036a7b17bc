//! Attribution: a write's channel and thread name a message the gateway delivered (its
//! source). A write whose source was deleted (or edited, with `on_edited = "withhold"`) is
//! withheld and noted; a successful post is recorded as its source's, so that an update or
//! delete of it is attributed to the same source. When attribution is unsure, the write is
//! posted: a duplicate is better than a lost reply.

use tracing::warn;

use super::error::Error;
use super::plan;
use super::slack_api::Identity;
use super::store::{Attributed, Cached, EgressStore, Place};
use super::write::Write;
use super::{Egress, Reply};
use crate::clock::now_ms;
use crate::outbox::Channel;
use crate::outbox::NoteList;

/// Where an attributable write goes, who sends it, and the delivered message it answers.
pub(super) struct Target<'a> {
    pub store: &'a EgressStore,
    pub who: Identity,
    pub channel: &'a str,
    pub source: Option<Attributed>,
}

impl Target<'_> {
    pub fn place(&self) -> Place<'_> {
        Place { team: &self.who.team, channel: self.channel }
    }

    /// The same place, as the conversation records name it.
    pub fn channel(&self) -> Channel<'_> {
        Channel { team: &self.who.team, channel: self.channel }
    }
}

impl Egress {
    /// The write's target and source; `None` when it cannot be attributed (no store, token,
    /// channel or identity): it is sent as it is.
    pub(super) async fn attribute<'a>(&'a self, w: &'a Write) -> Option<Target<'a>> {
        let (Some(store), Some(th), Some(token), Some(channel)) =
            (self.store(), w.token_hash.as_deref(), w.call.token.as_ref(), w.call.fields.channel.as_deref())
        else {
            return None;
        };
        let who = self.slack.identity(th, token).await?;
        let mut to = Target { store, who, channel, source: None };
        // Outside a thread, a write answers a DM's latest message (there the conversation is
        // the channel); in any other channel nothing matches, so only a channel that may be a
        // DM (`D…`, or a group DM's `G…`) is looked up — or any, when an app takes turns.
        let thread = match w.call.fields.thread() {
            Some(thread) => thread,
            None if self.turns_on() || channel.starts_with(['D', 'G']) => crate::slack::WHOLE_CHANNEL,
            None => return Some(to),
        };
        let records = store.conversations(self.cfg().attribution_window);
        let found = self.step(w, records.source(to.channel(), thread)).await;
        to.source = found.ok().flatten().map(Attributed::from);
        Some(to)
    }

    /// A write whose source message is gone: withheld, counted, kept for a day.
    pub(super) async fn withhold(&self, to: &Target<'_>, w: &Write) -> Option<Reply> {
        let source = to.source.as_ref()?;
        let error = Error::Withheld(plan::withhold(Some(source.state), self.cfg().withhold_edited)?);
        let call = &w.call;
        let note = serde_json::json!({
            "at": now_ms(), "method": call.method, "channel": call.fields.channel, "source_ts": source.ts,
            "delivery": source.delivery, "reason": error.code(),
        });
        if let Err(e) = self.step(w, to.store.notes().note(NoteList::Withheld, &note, now_ms())).await {
            warn!(error = %e, "cannot keep the note of a withheld write");
        }
        Some(error.into())
    }

    /// After a successful post: which source an update of it belongs to.
    pub(super) async fn remember(&self, to: &Target<'_>, w: &Write, answer: &Cached) {
        let Some(source) = &to.source else { return };
        if plan::records_its_post(&w.call.method) {
            let posted = serde_json::from_slice::<serde_json::Value>(&answer.body).ok();
            if let Some(ts) = posted.as_ref().and_then(|v| v["ts"].as_str()) {
                let records = to.store.conversations(self.cfg().attribution_window);
                let _ = self.step(w, records.posted(to.channel(), ts, &source.ts)).await;
            }
        }
    }
}
