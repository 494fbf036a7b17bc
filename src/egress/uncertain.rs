//! A write that may have reached Slack without an answer (a timeout, or the connection dropped
//! after the request was sent) is not sent again blindly. By method:
//!
//! - `chat.postMessage`: looked for — the bot's own message with the same text in the channel
//!   (or thread) since just before it was sent, a few times over `evidence_window`. Found: that
//!   is the answer. Not found, having looked: posted once. Could not look: unknown.
//! - Writes whose repeat does no harm (`chat.update`, `chat.delete`, `reactions.add/remove`,
//!   `views.update/publish`, `pins.add/remove`): sent once more; Slack's answer to that call
//!   (e.g. `already_reacted`) goes to the bot.
//! - Writes that cannot be looked for or repeated (`chat.postEphemeral`, `chat.scheduleMessage`,
//!   `chat.meMessage`, `views.open/push`, `files.completeUploadExternal`, unknown methods):
//!   unknown.
//!
//! Unknown: the bot gets a 503 (`slackgate_uncertain`, `Retry-After: 5`) that its client
//! retries, and the intent is kept for a day (`slackgate stats`, the admin API, metrics). A
//! retry of an unknown post is looked for again before it is posted.

use std::time::Duration;

use tracing::warn;

use super::slack_api::Identity;
use super::store::Cached;
use super::write::Write;
use super::{cached, Egress, Outcome, Reply};
use crate::clock::now_ms;

enum Recovery {
    LookFor,
    SendAgain,
    Unknown,
}

fn recovery(method: &str) -> Recovery {
    match method {
        "chat.postMessage" => Recovery::LookFor,
        "chat.update" | "chat.delete" | "reactions.add" | "reactions.remove" | "views.update" | "views.publish"
        | "pins.add" | "pins.remove" => Recovery::SendAgain,
        _ => Recovery::Unknown,
    }
}

enum Looked {
    Found(Cached),
    NotFound,
    Unsure,
}

impl Egress {
    pub(super) async fn uncertain(&self, w: &Write, who: &Identity, sent_ms: u64) -> Reply {
        match recovery(&w.call.method) {
            Recovery::Unknown => self.unknown(w).await,
            Recovery::SendAgain => self.send_once_more(w).await,
            Recovery::LookFor => match self.look_for(w, who, sent_ms).await {
                Looked::Found(answer) => Reply::new(answer, Outcome::Reconciled),
                Looked::NotFound => self.send_once_more(w).await,
                Looked::Unsure => self.unknown(w).await,
            },
        }
    }

    /// A retry of a write whose outcome was unknown: found now, or `None` to post it.
    pub(super) async fn reconcile_again(&self, w: &Write, sent_ms: u64) -> Option<Reply> {
        let who = self.slack.identity(w.token_hash.as_deref()?, &w.token).await?;
        match self.look_for(w, &who, sent_ms).await {
            Looked::Found(answer) => Some(Reply::new(answer, Outcome::Reconciled)),
            Looked::NotFound | Looked::Unsure => None,
        }
    }

    async fn send_once_more(&self, w: &Write) -> Reply {
        match self.slack.forward(&w.call, self.cfg().timeout).await {
            Ok(r) => Reply::new(cached(r), Outcome::Forwarded),
            Err(e) if e.maybe_sent() => self.unknown(w).await,
            Err(_) => Reply::error(502, "slackgate_upstream_error", Outcome::Failed),
        }
    }

    async fn look_for(&self, w: &Write, who: &Identity, sent_ms: u64) -> Looked {
        let f = &w.call.fields;
        let (Some(channel), Some(text)) = (f.channel.as_deref(), f.text.as_deref()) else { return Looked::Unsure };
        const TRIES: u32 = 3;
        let pause = self.cfg().evidence_window / TRIES;
        let mut looked = false;
        for _ in 0..TRIES {
            tokio::time::sleep(pause).await;
            match self.slack.find_post(&w.token, who, channel, f.thread_ts.as_deref(), text, sent_ms).await {
                Ok(Some(found)) => return Looked::Found(found),
                Ok(None) => looked = true,
                Err(e) => warn!(error = %e, "cannot look for an uncertain post"),
            }
        }
        if looked {
            Looked::NotFound
        } else {
            Looked::Unsure
        }
    }

    /// Unknown: kept for a day, and an error the bot's client retries.
    async fn unknown(&self, w: &Write) -> Reply {
        if let Some(store) = self.store() {
            let note = serde_json::json!({ "at": now_ms(), "method": w.call.method, "channel": w.call.fields.channel });
            if let Err(e) = store.note("unknown", &note, now_ms()).await {
                warn!(error = %e, "cannot keep the note of an unknown write");
            }
        }
        let mut reply = Reply::error(503, "slackgate_uncertain", Outcome::Unknown);
        reply.answer.retry_after = Some(Duration::from_secs(5).as_secs());
        reply
    }
}
