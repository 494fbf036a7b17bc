//! What the gateway answers Slack, and how each answer is counted: the request's kind and the
//! outcome, each a fixed label set.

use std::borrow::Cow;

use bytes::Bytes;
use http::HeaderName;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::Session;

use super::budget::Held;
use crate::slack::Kind;

/// What a Slack-facing request was, as the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Event,
    Command,
    Interactivity,
    Opaque,
    UrlVerification,
    SslCheck,
    AppRateLimited,
    /// Refused before it could be classified (bad method, signature, body).
    Unknown,
}

impl RequestKind {
    pub fn as_label(self) -> &'static str {
        match self {
            RequestKind::Event => "event",
            RequestKind::Command => "command",
            RequestKind::Interactivity => "interactivity",
            RequestKind::Opaque => "opaque",
            RequestKind::UrlVerification => "url_verification",
            RequestKind::SslCheck => "ssl_check",
            RequestKind::AppRateLimited => "app_rate_limited",
            RequestKind::Unknown => "unknown",
        }
    }
}

impl From<Kind> for RequestKind {
    fn from(k: Kind) -> Self {
        match k {
            Kind::Event => RequestKind::Event,
            Kind::Command => RequestKind::Command,
            Kind::Interactivity => RequestKind::Interactivity,
            Kind::Opaque => RequestKind::Opaque,
        }
    }
}

/// How a Slack-facing request ended, as the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Duplicate,
    DuplicateMessage,
    Ignored,
    /// Answered by the gateway (a handshake) or with the bot's own answer (inline).
    Answered,
    Unauthorized,
    BadRequest,
    BadMethod,
    TooLarge,
    BodyTimeout,
    NotFound,
    StoreUnavailable,
    /// Not admitted: the store was at its limit (503 at once, nothing recorded).
    Shed,
}

impl Outcome {
    pub fn as_label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Duplicate => "duplicate",
            Outcome::DuplicateMessage => "duplicate_message",
            Outcome::Ignored => "ignored",
            Outcome::Answered => "answered",
            Outcome::Unauthorized => "unauthorized",
            Outcome::BadRequest => "bad_request",
            Outcome::BadMethod => "bad_method",
            Outcome::TooLarge => "too_large",
            Outcome::BodyTimeout => "body_timeout",
            Outcome::NotFound => "not_found",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::Shed => "shed",
        }
    }
}

/// Every `(kind, outcome)` an app's requests can be counted with (404s name no app).
pub fn counted() -> Vec<(&'static str, &'static str)> {
    use Outcome::*;
    let delivery = [Accepted, Duplicate, Ignored, StoreUnavailable, Shed];
    let table: [(RequestKind, &[Outcome]); 8] = [
        (RequestKind::Event, &[DuplicateMessage]),
        (RequestKind::Command, &[Answered]),
        (RequestKind::Interactivity, &[Answered]),
        (RequestKind::Opaque, &[]),
        (RequestKind::UrlVerification, &[Answered]),
        (RequestKind::SslCheck, &[Answered]),
        (RequestKind::AppRateLimited, &[Ignored]),
        (RequestKind::Unknown, &[Unauthorized, BadRequest, BadMethod, TooLarge, BodyTimeout, Shed]),
    ];
    let mut out = Vec::new();
    for (kind, extra) in table {
        let base: &[Outcome] = match kind {
            RequestKind::Event | RequestKind::Command | RequestKind::Interactivity | RequestKind::Opaque => &delivery,
            _ => &[],
        };
        out.extend(base.iter().chain(extra).map(|o| (kind.as_label(), o.as_label())));
    }
    out
}

/// The gateway's answer to one Slack-facing request.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: Cow<'static, str>,
    pub body: Bytes,
    pub kind: RequestKind,
    pub outcome: Outcome,
}

impl Answer {
    pub fn empty(status: u16, kind: RequestKind, outcome: Outcome) -> Self {
        Answer { status, content_type: Cow::Borrowed("text/plain"), body: Bytes::new(), kind, outcome }
    }

    /// A refusal with a short reason, before the request could be classified.
    pub fn refuse(status: u16, outcome: Outcome, msg: &'static str) -> Self {
        Answer { body: Bytes::from_static(msg.as_bytes()), ..Self::empty(status, RequestKind::Unknown, outcome) }
    }

    /// Write it; a connection whose request may be half read is not kept alive.
    pub async fn write(&self, session: &mut Session) -> Result<()> {
        let mut resp = ResponseHeader::build(self.status, Some(2))?;
        resp.insert_header("Content-Type", self.content_type.as_ref())?;
        resp.insert_header("Content-Length", self.body.len().to_string())?;
        if self.status >= 400 && !session.is_body_done() {
            session.set_keepalive(None);
        }
        session.write_response_header(Box::new(resp), self.body.is_empty()).await?;
        if !self.body.is_empty() {
            session.write_response_body(Some(self.body.clone()), true).await?;
        }
        Ok(())
    }
}

/// The headers the Slack routes read, named once (a name given as text is parsed and checked
/// on every lookup).
pub mod names {
    use http::HeaderName;

    pub const TIMESTAMP: HeaderName = HeaderName::from_static("x-slack-request-timestamp");
    pub const SIGNATURE: HeaderName = HeaderName::from_static("x-slack-signature");
    pub const RETRY_NUM: HeaderName = HeaderName::from_static("x-slack-retry-num");
    pub const RETRY_REASON: HeaderName = HeaderName::from_static("x-slack-retry-reason");
    pub const CONTENT_TYPE: HeaderName = http::header::CONTENT_TYPE;
}

/// A header's value when it occurs exactly once: two signatures or two timestamps are not
/// something Slack sends, so neither is trusted.
pub fn single_header<'a>(session: &'a Session, name: &HeaderName) -> Option<&'a [u8]> {
    let mut values = session.req_header().headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => Some(v.as_bytes()),
        _ => None,
    }
}

/// Why a body was not read whole.
pub enum BodyError {
    /// Refused: too large (413) or unreadable (400).
    Refused(Answer),
    /// The budget of unverified bytes has no room for it: the gateway is busy.
    Busy,
}

/// Read the whole body, refusing more than `max` bytes with 413, its bytes taken from `held`
/// as they arrive (the declared length up front).
pub async fn read_body(session: &mut Session, max: usize, held: &mut Held) -> Result<Bytes, BodyError> {
    let too_large = || BodyError::Refused(Answer::refuse(413, Outcome::TooLarge, "payload too large\n"));
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    if !held.grow_to(declared.unwrap_or(0) as usize) {
        return Err(BodyError::Busy);
    }
    // Memory grows with the bytes that arrive, never with what Content-Length claims; a body
    // that came in one chunk (the common case) is kept as it is, without a copy.
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0;
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                total += chunk.len();
                if total > max {
                    return Err(too_large());
                }
                if !held.grow_to(total) {
                    return Err(BodyError::Busy);
                }
                chunks.push(chunk);
            }
            Ok(None) if chunks.len() <= 1 => return Ok(chunks.pop().unwrap_or_default()),
            Ok(None) => return Ok(chunks.concat().into()),
            Err(_) => return Err(BodyError::Refused(Answer::refuse(400, Outcome::BadRequest, "cannot read body\n"))),
        }
    }
}
