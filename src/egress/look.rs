//! Looking for a post whose answer was lost: the bot's own message with the same text in the
//! channel (`conversations.history`) or thread (`conversations.replies`) since just before it
//! was sent. A look Slack refuses says why, so the caller can wait as Slack asks.

use std::time::Duration;

use serde_json::Value;

use super::model::{Cached, Identity};
use super::slack_api::SlackApi;
use crate::secret::Secret;
use crate::slack::digest;
use crate::upstream::SendError;

/// Why a look could not be made.
#[derive(Debug)]
pub(super) enum LookError {
    /// Slack said 429, with its `Retry-After` when it gave one.
    RateLimited(Option<Duration>),
    Failed(SendError),
}

impl SlackApi {
    /// Look for the bot's own post of `text` in `channel` (and `thread`) since `since_ms`:
    /// `Ok(Some)` the answer Slack would have given, `Ok(None)` not there, `Err` could not look.
    pub(super) async fn find_post(
        &self,
        token: &Secret,
        who: &Identity,
        channel: &str,
        thread: Option<&str>,
        text: &str,
        since_ms: u64,
    ) -> Result<Option<Cached>, LookError> {
        let oldest = format!("{:.6}", since_ms.saturating_sub(5_000) as f64 / 1000.0);
        let resp = match thread {
            Some(ts) => {
                let form = [("channel", channel), ("ts", ts), ("oldest", &oldest), ("limit", "200")];
                self.own_response("conversations.replies", token, &form).await
            }
            None => {
                let form = [("channel", channel), ("oldest", &oldest), ("limit", "200")];
                self.own_response("conversations.history", token, &form).await
            }
        }
        .map_err(LookError::Failed)?;
        if resp.status == 429 {
            return Err(LookError::RateLimited(resp.retry_after));
        }
        let v: Value = serde_json::from_slice(&resp.body)
            .map_err(|e| LookError::Failed(SendError::Request(format!("history: {e}"))))?;
        if v.get("ok").and_then(Value::as_bool) != Some(true) {
            let error = v.get("error").and_then(Value::as_str).unwrap_or("?");
            return Err(LookError::Failed(SendError::Request(format!("history: {error}"))));
        }
        Ok(found(&v, who, channel, text))
    }
}

/// The bot's own message of `text` in a history page, as the answer Slack would have given.
fn found(page: &Value, who: &Identity, channel: &str, text: &str) -> Option<Cached> {
    let want = digest(text.as_bytes());
    let ours = |m: &&Value| {
        let field = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default();
        let by_us = (!who.bot_id.is_empty() && field("bot_id") == who.bot_id) || field("user") == who.user_id;
        by_us && digest(field("text").as_bytes()) == want
    };
    let m = page.get("messages").and_then(Value::as_array).and_then(|ms| ms.iter().find(ours))?;
    Some(posted(channel, m))
}

/// The answer Slack would have given to the post of `message` in `channel`.
pub(super) fn posted(channel: &str, message: &Value) -> Cached {
    let ts = message.get("ts").cloned().unwrap_or(Value::Null);
    let body = serde_json::json!({ "ok": true, "channel": channel, "ts": ts, "message": message });
    Cached {
        status: 200,
        content_type: "application/json; charset=utf-8".into(),
        body: body.to_string().into(),
        retry_after: None,
        headers: Vec::new(),
    }
}
