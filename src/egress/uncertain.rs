//! A write that may have reached Slack without an answer (a timeout, or the connection dropped
//! after the request was sent) is not sent again blindly. By method:
//!
//! - `chat.postMessage`: looked for — the bot's own message with the same text in the channel
//!   (or thread) since just before it was sent, a few times over `evidence_window`. Found: that
//!   is the answer. Not found by looks that covered the window (one ran at or after its end):
//!   posted once. Could not look, or the looks that ran did not cover it: unknown.
//! - Writes whose repeat does no harm (`chat.update`, `chat.delete`, `reactions.add/remove`,
//!   `views.update/publish`, `pins.add/remove`): sent once more; Slack's answer to that call
//!   (e.g. `already_reacted`) goes to the bot.
//! - Writes that cannot be looked for or repeated (`chat.postEphemeral`, `chat.scheduleMessage`,
//!   `chat.meMessage`, `views.open/push`, `files.completeUploadExternal`, unknown methods):
//!   unknown — never looked for (an ephemeral is not in history), never sent again.
//!
//! Unknown: the bot gets a 503 (`slackgate_uncertain`, `Retry-After: 5`) that its client
//! retries, the intent is noted (`slackgate egress`, `GET /egress`) and counted (`unknown`).
//! A retry of an unsettled write — its outcome unknown, or its call died with its claim — goes
//! through the same rules: a post is looked for again, a harmless write sent again, the rest
//! answered unknown again.

use std::time::Duration;

use tracing::warn;

use super::error::Error;
use super::look::LookError;
use super::notes::NoteList;
use super::plan::{self, LookGap, Looks, Recovery, LOOKS};
use super::slack_api::Identity;
use super::store::Cached;
use super::write::{forwarded, Write};
use super::{Egress, Outcome, Reply};
use crate::clock::now_ms;

enum Looked {
    Found(Cached),
    NotFound,
    Unsure,
}

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

impl Egress {
    /// This call's own write may have reached Slack without an answer.
    pub(super) async fn uncertain(&self, w: &Write, who: Option<&Identity>, sent_ms: u64) -> Reply {
        match plan::recovery(&w.call.method) {
            Recovery::Unknown => self.unknown(w, Error::Uncertain).await,
            Recovery::SendAgain => self.send_once_more(w).await,
            Recovery::LookFor => match self.look_for(w, who, sent_ms, now_ms()).await {
                Looked::Found(answer) => Reply::new(answer, Outcome::Reconciled),
                Looked::NotFound => self.send_once_more(w).await,
                Looked::Unsure => self.unknown(w, Error::Uncertain).await,
            },
        }
    }

    /// An earlier call of this write (sent at `sent_ms`) never settled: its outcome was
    /// unknown, or its call died holding the claim.
    pub(super) async fn unsettled(&self, w: &Write, sent_ms: u64) -> Unsettled {
        match plan::recovery(&w.call.method) {
            Recovery::Unknown => Unsettled::Answer(self.unknown(w, Error::Uncertain).await),
            Recovery::SendAgain => Unsettled::SendAgain,
            Recovery::LookFor => {
                let who = match (w.token_hash.as_deref(), w.call.token.as_ref()) {
                    (Some(th), Some(token)) => self.slack.identity(th, token).await,
                    _ => None,
                };
                let (sent_ms, from_ms) = plan::unsettled_from(sent_ms, now_ms(), self.cfg().timeout);
                match self.look_for(w, who.as_ref(), sent_ms, from_ms).await {
                    Looked::Found(answer) => Unsettled::Answer(Reply::new(answer, Outcome::Reconciled)),
                    Looked::NotFound => Unsettled::SendAgain,
                    Looked::Unsure => Unsettled::Answer(self.unknown(w, Error::Uncertain).await),
                }
            }
        }
    }

    async fn send_once_more(&self, w: &Write) -> Reply {
        match forwarded(self.slack.forward(&w.call, self.cfg().timeout).await) {
            Ok(reply) => reply,
            Err(_) => self.unknown(w, Error::Uncertain).await,
        }
    }

    /// Look for a post sent at `sent_ms` whose answer was given up at `from_ms`, by the
    /// evidence-window rule ([`Looks`]): looks refused on the way (429, errors) wait as Slack
    /// asks and stop at twice the window — then unsure.
    async fn look_for(&self, w: &Write, who: Option<&Identity>, sent_ms: u64, from_ms: u64) -> Looked {
        let f = &w.call.fields;
        let (Some(who), Some(token), Some(channel), Some(text)) =
            (who, w.call.token.as_ref(), f.channel.as_deref(), f.text.as_deref())
        else {
            return Looked::Unsure;
        };
        let looks = Looks::new(from_ms, self.cfg().evidence_window);
        let mut not_before = 0;
        for i in 1..=LOOKS {
            let Some(at) = looks.at(i, not_before) else { break };
            sleep_until_ms(at).await;
            let looked_at = now_ms();
            let look = match self.slack.find_post(token, who, channel, f.thread_ts.as_deref(), text, sent_ms).await {
                Ok(Some(found)) => return Looked::Found(found),
                Ok(None) if looks.not_found(looked_at) => return Looked::NotFound,
                Ok(None) => LookGap::Ran,
                Err(LookError::RateLimited(after)) => LookGap::RateLimited(after),
                Err(LookError::Failed(e)) => {
                    warn!(error = %e, "cannot look for an uncertain post");
                    LookGap::Failed
                }
            };
            not_before = now_ms().saturating_add(looks.gap(look).as_millis() as u64);
        }
        Looked::Unsure
    }

    /// Unknown (`Error::Uncertain` or `RetryPending`): noted, and an error the bot's client
    /// retries.
    pub(super) async fn unknown(&self, w: &Write, error: Error) -> Reply {
        if let Some(store) = self.store() {
            let note = serde_json::json!({
                "at": now_ms(), "method": w.call.method, "channel": w.call.fields.channel, "error": error.code(),
            });
            if let Err(e) = self.step(w, store.note(NoteList::Unknown, &note, now_ms())).await {
                warn!(error = %e, "cannot keep the note of an unknown write");
            }
        }
        error.into()
    }
}
