//! Slack's rules as pure functions: request signatures and what a request is. Knows no store
//! and no HTTP server.

pub mod classify;
pub mod filter;
pub mod verify;

pub use classify::{classify, ClassifyError, Delivery, Kind, Message, Request};
pub use filter::{deleted_message_key, ignore_reason, message_key, Rules};
pub use verify::{precheck, sign, verify, VerifyError};

/// How a bot's late answer to a slash command or block action is posted to `response_url`:
/// JSON as is, anything else wrapped as `{"text": …}`. `None` for an empty answer.
pub fn late_reply(content_type: Option<&str>, body: &[u8]) -> Option<Vec<u8>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    if content_type.is_some_and(|ct| ct.to_ascii_lowercase().starts_with("application/json")) {
        return Some(body.to_vec());
    }
    let text = String::from_utf8_lossy(body);
    Some(serde_json::json!({ "text": text }).to_string().into_bytes())
}

/// Whether a late answer of this delivery goes to its `response_url` (Slack keeps it valid
/// for 30 minutes): slash commands and block actions.
pub fn replies_late(kind: Kind, detail: &str) -> bool {
    kind == Kind::Command || (kind == Kind::Interactivity && detail == "block_actions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_replies() {
        assert_eq!(
            late_reply(Some("text/plain; charset=utf-8"), b"deploying prod"),
            Some(br#"{"text":"deploying prod"}"#.to_vec())
        );
        assert_eq!(late_reply(Some("application/json"), br#"{"blocks":[]}"#), Some(br#"{"blocks":[]}"#.to_vec()));
        assert_eq!(late_reply(None, b"  \n"), None);
        assert!(replies_late(Kind::Command, "/deploy"));
        assert!(replies_late(Kind::Interactivity, "block_actions"));
        assert!(!replies_late(Kind::Interactivity, "view_submission"));
        assert!(!replies_late(Kind::Event, "app_mention"));
    }
}
