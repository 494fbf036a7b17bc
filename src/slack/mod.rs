//! Slack's rules as pure functions: request signatures, what a request is, its receipt and
//! message keys, filters, where a late reply may go. Knows no store, no HTTP server and no
//! other module of this crate.

pub mod classify;
pub mod conversation;
pub mod filter;
pub mod reply;
pub mod retry;
pub mod ssl_check;
pub mod verify;

pub use classify::{classify, AssistantThread, ClassifyError, Delivery, Kind, Message, Request};
pub use conversation::{addressed, conversation_key, conversation_of, thread_key, Conversation, WHOLE_CHANNEL};
pub use filter::{deleted_message_key, ignore_reason, message_key, IgnoreReason, Rules};
pub use reply::{check_response_url, late_reply, replies_late, with_response_url, RefusedUrl, ReplyOutcome};
pub use retry::{retry_num, RetryReason};
pub use ssl_check::{is_form, is_unsigned_ssl_check, SSL_CHECK_MAX};
pub use verify::{precheck, sign, verify, VerifyError};

/// SHA-256 hex of some bytes (bodies, keys, texts, ids): what stands for them in Redis and in
/// the evidence. The one digest of the crate.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
