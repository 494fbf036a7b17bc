//! The copy of a delivery the app's shadow bot takes, offered as the live bot's attempt saw it.

use bytes::Bytes;

use crate::config::AppConfig;
use crate::shared::Shared;
use crate::slack::Kind;

/// A delivery the app's shadow may take a copy of (`shadow = { … }`), as the live bot's
/// attempt saw it. [`ShadowCopy::offer`] decides and queues; the delivery service's copier
/// makes the copy, so the live bot's attempt never waits for it.
pub struct ShadowCopy<'a> {
    pub app: &'a AppConfig,
    pub shared: &'a Shared,
    pub id: &'a str,
    pub body: &'a Bytes,
    pub content_type: &'a str,
    pub path: &'a str,
    pub kind: Kind,
    pub detail: &'a str,
    pub team: Option<&'a str>,
    pub channel: Option<&'a str>,
    pub received_ms: u64,
    /// Its conversation, encoded ('' when none).
    pub conversation: String,
}

impl ShadowCopy<'_> {
    /// Queue the copy when the app's shadow takes it (its `match`, its `share`); a full queue
    /// drops it, counted and noted on the delivery.
    pub fn offer(self) {
        let Some(shadow) = &self.app.shadow else { return };
        let facts =
            crate::config::Facts { kind: self.kind, detail: self.detail, team: self.team, channel: self.channel };
        if !shadow.takes(&facts, self.id) {
            return;
        }
        let copy = crate::queue::shadow::Copy {
            app: self.app.name.clone(),
            id: self.id.to_string(),
            body: self.body.clone(),
            content_type: self.content_type.to_string(),
            path: self.path.to_string(),
            kind: self.kind,
            detail: self.detail.to_string(),
            received_ms: self.received_ms,
            conversation: self.conversation,
        };
        if !self.shared.shadow.push(copy) {
            self.shared.metrics.routes.shadow_copies.with_label_values(&[&self.app.name, "dropped"]).inc();
            self.shared.history.step(&self.app.name, self.id, || crate::history::What::Shadow { outcome: "dropped" });
        }
    }
}
