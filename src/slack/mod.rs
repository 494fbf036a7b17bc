//! Slack's rules as pure functions: request signatures and what a request is. Knows no store
//! and no HTTP server.

pub mod classify;
pub mod verify;

pub use classify::{classify, ClassifyError, Delivery, Kind, Request};
pub use verify::{sign, verify, VerifyError};
