//! The egress's own errors, and the one place each becomes what the bot gets: a status, a
//! Slack-shaped `{"ok": false, "error": …}`, the outcome it is counted as, and `Retry-After`.

use super::{Gone, Outcome, Reply};

/// What a bot's client is told to wait before it retries an unknown write.
const UNKNOWN_RETRY_AFTER: u64 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(in crate::egress) enum Error {
    /// No answer from Slack, and the call never reached it (or a read failed).
    #[error("Slack did not answer")]
    Upstream,
    /// Could not tell whether Slack took the write.
    #[error("the write's outcome is unknown")]
    Uncertain,
    /// An identical earlier call is still running past the longest it could take.
    #[error("an identical write is still pending")]
    RetryPending,
    /// A keyed call while Redis is down: fail closed.
    #[error("the store is unavailable")]
    StoreUnavailable,
    #[error("another call with the Idempotency-Key is in flight")]
    KeyInFlight,
    #[error("the Idempotency-Key came with another request")]
    KeyReused,
    #[error("the write's source is gone")]
    Withheld(Gone),
    /// Held past `max_wait` by pacing; the bot may try again after `retry_after` seconds.
    #[error("paced past max_wait")]
    RateLimited { retry_after: u64 },
    #[error("internal error")]
    Internal,
    #[error("not a Web API method")]
    UnknownMethod,
    #[error("only GET and POST")]
    MethodNotAllowed,
    #[error("the body took too long")]
    RequestTimeout,
    #[error("the body is too large")]
    TooLarge,
    #[error("the body could not be read")]
    BadRequest,
    #[error("the request does not parse")]
    InvalidRequest,
}

impl Error {
    /// The `error` field of the answer (and of the operators' notes).
    pub fn code(self) -> &'static str {
        match self {
            Error::Upstream => "slackgate_upstream_error",
            Error::Uncertain => "slackgate_uncertain",
            Error::RetryPending => "slackgate_retry_pending",
            Error::StoreUnavailable => "slackgate_store_unavailable",
            Error::KeyInFlight => "slackgate_idempotency_key_in_flight",
            Error::KeyReused => "idempotency_key_reused",
            Error::Withheld(Gone::Deleted) => "source_deleted",
            Error::Withheld(Gone::Edited) => "source_edited",
            Error::Withheld(Gone::Superseded) => "superseded",
            Error::RateLimited { .. } => "ratelimited",
            Error::Internal => "slackgate_internal",
            Error::UnknownMethod => "unknown_method",
            Error::MethodNotAllowed => "method_not_allowed",
            Error::RequestTimeout => "request_timeout",
            Error::TooLarge => "request_too_large",
            Error::BadRequest => "bad_request",
            Error::InvalidRequest => "invalid_request",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            // Slack answers a write it refuses 200 with `"ok": false`; so does the egress.
            Error::Withheld(_) => 200,
            Error::BadRequest | Error::InvalidRequest => 400,
            Error::UnknownMethod => 404,
            Error::MethodNotAllowed => 405,
            Error::RequestTimeout => 408,
            Error::KeyInFlight => 409,
            Error::TooLarge => 413,
            Error::KeyReused => 422,
            Error::RateLimited { .. } => 429,
            Error::Internal => 500,
            Error::Upstream => 502,
            Error::Uncertain | Error::RetryPending | Error::StoreUnavailable => 503,
        }
    }

    pub fn outcome(self) -> Outcome {
        match self {
            Error::Uncertain | Error::RetryPending => Outcome::Unknown,
            Error::StoreUnavailable => Outcome::StoreUnavailable,
            Error::KeyInFlight => Outcome::Conflict,
            Error::KeyReused => Outcome::KeyReused,
            Error::Withheld(gone) => gone.outcome(),
            Error::RateLimited { .. } => Outcome::RateLimited,
            Error::Upstream
            | Error::Internal
            | Error::UnknownMethod
            | Error::MethodNotAllowed
            | Error::RequestTimeout
            | Error::TooLarge
            | Error::BadRequest
            | Error::InvalidRequest => Outcome::Failed,
        }
    }

    fn retry_after(self) -> Option<u64> {
        match self {
            Error::Uncertain | Error::RetryPending => Some(UNKNOWN_RETRY_AFTER),
            Error::RateLimited { retry_after } => Some(retry_after),
            _ => None,
        }
    }
}

impl From<Error> for Reply {
    fn from(e: Error) -> Reply {
        let json = serde_json::json!({ "ok": false, "error": e.code() });
        let mut reply = Reply::own(e.status(), json, e.outcome(), e.retry_after());
        if e == Error::MethodNotAllowed {
            reply.headers.push(("Allow", "GET, POST"));
        }
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_is_the_answer_the_bot_got_before() {
        let cases: &[(Error, u16, &str, Outcome, Option<u64>)] = &[
            (Error::Upstream, 502, "slackgate_upstream_error", Outcome::Failed, None),
            (Error::Uncertain, 503, "slackgate_uncertain", Outcome::Unknown, Some(5)),
            (Error::RetryPending, 503, "slackgate_retry_pending", Outcome::Unknown, Some(5)),
            (Error::StoreUnavailable, 503, "slackgate_store_unavailable", Outcome::StoreUnavailable, None),
            (Error::KeyInFlight, 409, "slackgate_idempotency_key_in_flight", Outcome::Conflict, None),
            (Error::KeyReused, 422, "idempotency_key_reused", Outcome::KeyReused, None),
            (Error::Withheld(Gone::Deleted), 200, "source_deleted", Outcome::WithheldDeleted, None),
            (Error::Withheld(Gone::Edited), 200, "source_edited", Outcome::WithheldEdited, None),
            (Error::Withheld(Gone::Superseded), 200, "superseded", Outcome::WithheldSuperseded, None),
            (Error::RateLimited { retry_after: 2 }, 429, "ratelimited", Outcome::RateLimited, Some(2)),
            (Error::Internal, 500, "slackgate_internal", Outcome::Failed, None),
            (Error::UnknownMethod, 404, "unknown_method", Outcome::Failed, None),
            (Error::MethodNotAllowed, 405, "method_not_allowed", Outcome::Failed, None),
            (Error::RequestTimeout, 408, "request_timeout", Outcome::Failed, None),
            (Error::TooLarge, 413, "request_too_large", Outcome::Failed, None),
            (Error::BadRequest, 400, "bad_request", Outcome::Failed, None),
            (Error::InvalidRequest, 400, "invalid_request", Outcome::Failed, None),
        ];
        for &(e, status, code, outcome, retry_after) in cases {
            let r = Reply::from(e);
            assert_eq!((r.answer.status, r.outcome, r.answer.retry_after), (status, outcome, retry_after), "{e:?}");
            let body = format!(r#"{{"error":"{code}","ok":false}}"#);
            assert_eq!(r.answer.body, body.as_bytes(), "{e:?}");
            assert_eq!(r.answer.content_type, "application/json; charset=utf-8");
            let allow = e == Error::MethodNotAllowed;
            assert_eq!(r.headers == [("Allow", "GET, POST")], allow, "{e:?}");
        }
    }
}
