//! Turns (`turns` of the app a write's source was delivered to): a write of a conversation's
//! turn renews it, or ends it (`chat.stopStream`); with `on_newer = "withhold"` a new post of a
//! turn whose conversation has a newer message waiting is withheld — the newer question is about
//! to be answered with the whole thread in view — and that ends the turn. An update or append
//! to a message already posted always goes (never a half-answer), and so does every write the
//! store cannot judge: when unsure, post.

use tracing::{debug, info, warn};

use super::attribution::Target;
use super::error::Error;
use super::plan::{self, Gone};
use super::write::Write;
use super::{Egress, Reply};
use crate::clock::now_ms;
use crate::outbox::NoteList;
use crate::outbox::TurnWrite;

impl Egress {
    /// The write's step in its turn; `Some` with the answer when it is withheld.
    pub(super) async fn turn(&self, to: &Target<'_>, w: &Write) -> Option<Reply> {
        let source = to.source.as_ref().filter(|s| !s.conversation.is_empty())?;
        let kind = plan::turn_write(&w.call.method)?;
        let app = self.app(&source.app)?;
        let rules = app.turns.when_on()?;
        let write = TurnWrite {
            app: &source.app,
            delivery: &source.delivery,
            conversation: &source.conversation,
            ts: &source.ts,
            kind,
        };
        let turns = to.store.turns();
        let step = turns.write(&write, &rules, now_ms());
        let verdict = match self.step(w, step).await {
            Ok(v) => v,
            Err(e) => {
                debug!(error = %e, "cannot judge the write by its turn; posting it");
                return None;
            }
        };
        if let Some(ended) = &verdict.ended {
            crate::history::turns::ended(&self.shared, &source.app, ended);
        }
        if !verdict.withhold {
            return None;
        }
        let error = Error::Withheld(Gone::Superseded);
        info!(
            target: "slackgate::audit",
            app = %source.app,
            delivery = %source.delivery,
            method = %w.call.method,
            "write withheld: a newer message of its conversation waits"
        );
        let note = serde_json::json!({
            "at": now_ms(), "method": w.call.method, "channel": w.call.fields.channel, "source_ts": source.ts,
            "delivery": source.delivery, "reason": error.code(),
        });
        if let Err(e) = self.step(w, to.store.notes().note(NoteList::Withheld, &note, now_ms())).await {
            warn!(error = %e, "cannot keep the note of a withheld write");
        }
        Some(error.into())
    }
}
