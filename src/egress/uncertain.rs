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

use super::look::LookError;
use super::notes::NoteList;
use super::slack_api::Identity;
use super::store::Cached;
use super::write::Write;
use super::{cached, Egress, Outcome, Reply};
use crate::clock::now_ms;

/// How a write whose outcome is unknown is recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// What to do with a write whose earlier call never settled.
pub(super) enum Unsettled {
    /// Its answer: found, or unknown again.
    Answer(Reply),
    /// Send it (again): a post that looks covering the window did not find, or a harmless one.
    SendAgain,
}

/// At most this many looks for one post; the first three spread over the evidence window.
const LOOKS: u64 = 4;
/// A refused look waits at least this long before the next, and at most `evidence_window`.
const MIN_LOOK_GAP: Duration = Duration::from_secs(1);

/// Sleep until the wall clock reads `at_ms`.
async fn sleep_until_ms(at_ms: u64) {
    tokio::time::sleep(Duration::from_millis(at_ms.saturating_sub(now_ms()))).await;
}

impl Egress {
    /// This call's own write may have reached Slack without an answer.
    pub(super) async fn uncertain(&self, w: &Write, who: Option<&Identity>, sent_ms: u64) -> Reply {
        match recovery(&w.call.method) {
            Recovery::Unknown => self.unknown(w, "slackgate_uncertain").await,
            Recovery::SendAgain => self.send_once_more(w).await,
            Recovery::LookFor => match self.look_for(w, who, sent_ms, now_ms()).await {
                Looked::Found(answer) => Reply::new(answer, Outcome::Reconciled),
                Looked::NotFound => self.send_once_more(w).await,
                Looked::Unsure => self.unknown(w, "slackgate_uncertain").await,
            },
        }
    }

    /// An earlier call of this write (sent at `sent_ms`) never settled: its outcome was
    /// unknown, or its call died holding the claim.
    pub(super) async fn unsettled(&self, w: &Write, sent_ms: u64) -> Unsettled {
        // A send time from the record is never in the future (it would hold the looks).
        let sent_ms = sent_ms.min(now_ms());
        match recovery(&w.call.method) {
            Recovery::Unknown => Unsettled::Answer(self.unknown(w, "slackgate_uncertain").await),
            Recovery::SendAgain => Unsettled::SendAgain,
            Recovery::LookFor => {
                let who = match (w.token_hash.as_deref(), w.call.token.as_ref()) {
                    (Some(th), Some(token)) => self.slack.identity(th, token).await,
                    _ => None,
                };
                // The dead call may have given up as late as its timeout: the window starts there.
                let from_ms = sent_ms.saturating_add(self.cfg().timeout.as_millis() as u64);
                match self.look_for(w, who.as_ref(), sent_ms, from_ms).await {
                    Looked::Found(answer) => Unsettled::Answer(Reply::new(answer, Outcome::Reconciled)),
                    Looked::NotFound => Unsettled::SendAgain,
                    Looked::Unsure => Unsettled::Answer(self.unknown(w, "slackgate_uncertain").await),
                }
            }
        }
    }

    async fn send_once_more(&self, w: &Write) -> Reply {
        match self.slack.forward(&w.call, self.cfg().timeout).await {
            Ok(r) => Reply::new(cached(r), Outcome::Forwarded),
            Err(e) if e.maybe_sent() => self.unknown(w, "slackgate_uncertain").await,
            Err(_) => Reply::error(502, "slackgate_upstream_error", Outcome::Failed),
        }
    }

    /// Look for a post sent at `sent_ms` whose answer was given up at `from_ms`. A post that
    /// landed late shows by the end of the evidence window after that, so "not found" needs a
    /// look that ran at or after its end; looks refused on the way (429, errors) wait as Slack
    /// asks and stop at twice the window — then unsure.
    async fn look_for(&self, w: &Write, who: Option<&Identity>, sent_ms: u64, from_ms: u64) -> Looked {
        let f = &w.call.fields;
        let (Some(who), Some(token), Some(channel), Some(text)) =
            (who, w.call.token.as_ref(), f.channel.as_deref(), f.text.as_deref())
        else {
            return Looked::Unsure;
        };
        let window = self.cfg().evidence_window;
        let window_ms = window.as_millis() as u64;
        let covered_at = from_ms.saturating_add(window_ms);
        let give_up_at = covered_at.saturating_add(window_ms);
        let mut not_before = 0;
        for i in 1..=LOOKS {
            let at = from_ms.saturating_add(window_ms * i.min(3) / 3).max(not_before);
            if at > give_up_at {
                break;
            }
            sleep_until_ms(at).await;
            let looked_at = now_ms();
            let gap = match self.slack.find_post(token, who, channel, f.thread_ts.as_deref(), text, sent_ms).await {
                Ok(Some(found)) => return Looked::Found(found),
                Ok(None) if looked_at >= covered_at => return Looked::NotFound,
                Ok(None) => Duration::ZERO,
                Err(LookError::RateLimited(after)) => {
                    after.unwrap_or(MIN_LOOK_GAP).clamp(MIN_LOOK_GAP, window.max(MIN_LOOK_GAP))
                }
                Err(LookError::Failed(e)) => {
                    warn!(error = %e, "cannot look for an uncertain post");
                    MIN_LOOK_GAP.min(window)
                }
            };
            not_before = now_ms().saturating_add(gap.as_millis() as u64);
        }
        Looked::Unsure
    }

    /// Unknown: noted, and an error the bot's client retries.
    pub(super) async fn unknown(&self, w: &Write, error: &str) -> Reply {
        if let Some(store) = self.store() {
            let note = serde_json::json!({
                "at": now_ms(), "method": w.call.method, "channel": w.call.fields.channel, "error": error,
            });
            if let Err(e) = self.step(w, store.note(NoteList::Unknown, &note, now_ms())).await {
                warn!(error = %e, "cannot keep the note of an unknown write");
            }
        }
        let mut reply = Reply::error(503, error, Outcome::Unknown);
        reply.answer.retry_after = Some(5);
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_harmless_writes_are_repeated_and_only_posts_looked_for() {
        assert_eq!(recovery("chat.postMessage"), Recovery::LookFor);
        for m in ["chat.update", "chat.delete", "reactions.add", "views.update", "pins.remove"] {
            assert_eq!(recovery(m), Recovery::SendAgain, "{m}");
        }
        for m in [
            "chat.postEphemeral",
            "chat.scheduleMessage",
            "chat.meMessage",
            "views.open",
            "views.push",
            "files.completeUploadExternal",
            "custom.write",
        ] {
            assert_eq!(recovery(m), Recovery::Unknown, "{m}");
        }
    }
}
