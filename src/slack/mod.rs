//! Slack's rules as pure functions: request signatures and what a request is. Knows no store
//! and no HTTP server.

pub mod classify;
pub mod filter;
pub mod reply;
pub mod verify;

pub use classify::{classify, ClassifyError, Delivery, Kind, Message, Request};
pub use filter::{deleted_message_key, ignore_reason, message_key, Rules};
pub use reply::{check_response_url, late_reply, replies_late, RefusedUrl};
pub use verify::{precheck, sign, verify, VerifyError};
