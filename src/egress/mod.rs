//! The egress for the Slack Web API: the bots' Web API clients point at it (a base-URL setting),
//! and it forwards to Slack. Reads pass straight through with no Redis on their path (the
//! history reads are counted against Slack's budget: `budget`, `replies`); writes
//! happen once, are paced, and are withheld when their source is gone (see `write`).
//!
//! - `call`: one call as the bot sent it, and the fields of a write.
//! - `headers`: which headers cross the egress, both ways.
//! - `read`: the read path, streamed.
//! - `plan`: the write path's decisions, pure (which key layer, what a fingerprint means,
//!   withhold or post, what an outcome settles, an uncertain write by method).
//! - `write`: the write path in order; `keyed` (`Idempotency-Key`) and `retry` (a client's own
//!   retry) in front of it, their in-flight claims kept as leases (`lease`); then
//!   `attribution`, `rerun`, `pacing` (with Slack's 429s); `uncertain` (and `look`) for an
//!   answer lost on the way. Each does the I/O its `plan` rule asks for.
//! - `error`: the egress's own errors, and the one place each becomes the bot's answer.
//! - `slack_api`: Slack's API as the egress calls it (forward, `auth.test`); `identities`:
//!   who each token is, remembered for an hour, bounded.
//! - `store`, `scripts`: the egress's own records in Redis; its withheld and unknown notes are
//!   kept in `outbox::Notes`. What the inbound side delivered, deleted and edited it reads from the conversation
//!   records (`outbox::Conversations`), where the two sides meet.

mod attribution;
mod budget;
mod call;
mod error;
mod headers;
mod identities;
mod keyed;
mod lease;
mod look;
mod pacing;
mod plan;
mod read;
mod replies;
mod rerun;
mod retry;
mod scripts;
mod slack_api;
mod socket_open;
mod store;
mod turn;
mod uncertain;
mod write;

pub use replies::HISTORY_METHODS;
pub use store::{EgressStore, Place};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use tracing::{debug, info};

use crate::config::{Config, EgressConfig};
use crate::outbox::Endpoint;
use crate::shared::Shared;
use crate::store::Lazy;
use call::{Call, Verb};
use error::Error;
use plan::KeyKind;
use slack_api::SlackApi;
use store::Cached;

/// Bodies of Web API calls are read up to this size.
const MAX_CALL_BODY: usize = 8 << 20;
/// What the egress buffers of an answer of Slack's: a write's (kept for its replays) and its
/// own calls' (`auth.test`, the history it reconciles against). Reads are streamed, unbounded.
const MAX_KEPT_ANSWER: usize = 8 << 20;

/// How a call through the egress ended, as the `egress_calls_total` outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Sent to Slack; its answer returned.
    Forwarded,
    /// The answer of an earlier call with the same `Idempotency-Key`, not sent again.
    ReplayedKey,
    /// The answer of an identical earlier call whose answer never reached its client.
    ReplayedRetry,
    /// The answer of the same write of an earlier run of the same delivery.
    ReplayedRerun,
    /// Another call with the same `Idempotency-Key` is in flight: 409.
    Conflict,
    /// The `Idempotency-Key` came with another request than its first: 422.
    KeyReused,
    WithheldDeleted,
    WithheldEdited,
    /// A turn's new post while a newer message of its conversation waits (`on_newer`).
    WithheldSuperseded,
    /// A post whose answer was lost, found in the channel.
    Reconciled,
    /// Could not tell whether Slack took it: the bot gets an error its client retries.
    Unknown,
    /// Held past `max_wait` by pacing or Slack's 429: the 429 goes back to the bot.
    RateLimited,
    /// No answer from Slack (not sent, or a read that failed).
    Failed,
    /// A keyed call while Redis is down: 503, fail closed.
    StoreUnavailable,
    /// Answered by the gateway itself: a Socket Mode bot's `apps.connections.open`.
    SocketOpened,
    /// A `conversations.replies` Slack refused, answered from the gateway's record.
    FromRecord,
}

impl Outcome {
    pub const ALL: [Outcome; 16] = [
        Outcome::Forwarded,
        Outcome::ReplayedKey,
        Outcome::ReplayedRetry,
        Outcome::ReplayedRerun,
        Outcome::Conflict,
        Outcome::KeyReused,
        Outcome::WithheldDeleted,
        Outcome::WithheldEdited,
        Outcome::WithheldSuperseded,
        Outcome::Reconciled,
        Outcome::Unknown,
        Outcome::RateLimited,
        Outcome::Failed,
        Outcome::StoreUnavailable,
        Outcome::SocketOpened,
        Outcome::FromRecord,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::ReplayedKey => "replayed_key",
            Outcome::ReplayedRetry => "replayed_retry",
            Outcome::ReplayedRerun => "replayed_rerun",
            Outcome::Conflict => "conflict",
            Outcome::KeyReused => "key_reused",
            Outcome::WithheldDeleted => "withheld_deleted",
            Outcome::WithheldEdited => "withheld_edited",
            Outcome::WithheldSuperseded => "withheld_superseded",
            Outcome::Reconciled => "reconciled",
            Outcome::Unknown => "unknown",
            Outcome::RateLimited => "rate_limited",
            Outcome::Failed => "failed",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::SocketOpened => "socket_opened",
            Outcome::FromRecord => "from_record",
        }
    }
}

/// What the egress answers the bot.
pub(crate) struct Reply {
    pub answer: Cached,
    pub outcome: Outcome,
    /// Extra response headers (`Idempotent-Replayed`).
    pub headers: Vec<(&'static str, &'static str)>,
}

impl Reply {
    fn new(answer: Cached, outcome: Outcome) -> Self {
        Reply { answer, outcome, headers: Vec::new() }
    }

    /// A JSON answer of the egress's own, shaped like Slack's.
    fn own(status: u16, json: serde_json::Value, outcome: Outcome, retry_after: Option<u64>) -> Self {
        let answer = Cached {
            status,
            content_type: "application/json; charset=utf-8".into(),
            body: Bytes::from(json.to_string()),
            retry_after,
            headers: Vec::new(),
        };
        Reply::new(answer, outcome)
    }
}

pub struct Egress {
    config: Arc<Config>,
    shared: Arc<Shared>,
    /// Connected on first use, on this service's runtime.
    store: Lazy<EgressStore>,
    slack: SlackApi,
    /// The apps as the last reload left them: their `turns`.
    live: Arc<crate::live::Live>,
}

impl Egress {
    pub fn new(config: Arc<Config>, live: Arc<crate::live::Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        let slack = SlackApi::new(config.egress.slack_api_url.clone());
        let store = Lazy::egress(&redis, &config.redis.key_prefix);
        Egress { config, shared, store, slack, live }
    }

    /// The app `name` as configured now.
    fn app(&self, name: &str) -> Option<Arc<crate::config::AppConfig>> {
        self.live.get().config.apps.iter().find(|a| a.name == name).cloned()
    }

    /// Some app takes turns now.
    fn turns_on(&self) -> bool {
        self.live.get().config.apps.iter().any(|a| a.turns.is_on())
    }

    fn cfg(&self) -> &EgressConfig {
        &self.config.egress
    }

    fn store(&self) -> Option<&EgressStore> {
        self.store.get().ok()
    }

    fn count(&self, class: &str, outcome: Outcome) {
        self.shared.metrics.egress.calls.with_label_values(&[class, outcome.as_label()]).inc();
    }

    /// Every write's accounting, whether or not its answer reaches the client: counted, and
    /// its audit line (method, channel, which key it carried, outcome — never the token or
    /// the text).
    fn account(&self, call: &Call, key: KeyKind, outcome: Outcome) {
        self.count("write", outcome);
        info!(
            target: "slackgate::audit",
            method = %call.method,
            channel = call.fields.channel.as_deref().unwrap_or(""),
            key = key.as_label(),
            outcome = outcome.as_label(),
            "egress write"
        );
    }
}

/// Slack's answer as the egress keeps it.
fn cached(r: crate::upstream::Response) -> Cached {
    Cached {
        status: r.status,
        content_type: r.content_type.unwrap_or_else(|| "application/json".into()),
        body: r.body,
        retry_after: r.retry_after.map(|d| d.as_secs()),
        headers: headers::kept(&r.headers),
    }
}

/// Write a reply; `false` when it did not reach the client.
async fn respond(session: &mut ServerSession, reply: &Reply) -> bool {
    let a = &reply.answer;
    let Ok(mut head) = ResponseHeader::build(a.status, Some(4)) else { return false };
    let mut headers = vec![("Content-Type", a.content_type.clone()), ("Content-Length", a.body.len().to_string())];
    if let Some(s) = a.retry_after {
        headers.push(("Retry-After", s.to_string()));
    }
    headers.extend(reply.headers.iter().map(|(k, v)| (*k, v.to_string())));
    for (k, v) in headers {
        if head.insert_header(k, v).is_err() {
            return false;
        }
    }
    for (k, v) in &a.headers {
        // A stored header that is no longer valid is left out, not the answer.
        let _ = head.append_header(k.clone(), v.as_str());
    }
    session.write_response_header(Box::new(head)).await.is_ok()
        && session.write_response_body(a.body.clone(), true).await.is_ok()
        && session.finish_body().await.is_ok()
}

/// Read one call whole, its body within `body_timeout`; `Err` with the reply for a bad request.
async fn read_call(session: &mut ServerSession, body_timeout: Duration) -> Result<Call, Reply> {
    let head = session.req_header();
    // An absolute-form target (`POST http://host/api/…`) is read as its path (RFC 9112
    // §3.2.2); Pingora has refused one whose authority is not its `Host`.
    let path = head.uri.path();
    let Some(method) = call::method_of(path) else { return Err(Error::UnknownMethod.into()) };
    let Some(verb) = Verb::of(&head.method) else { return Err(Error::MethodNotAllowed.into()) };
    let method = method.to_string();
    let path_and_query = head.uri.path_and_query().map_or(path, |p| p.as_str()).to_string();
    let header = |name: &str| head.headers.get(name).and_then(|v| v.to_str().ok()).map(String::from);
    let (content_type, authorization) = (header("content-type"), header("authorization"));
    let idempotency_key = header("idempotency-key").filter(|k| !k.is_empty());
    let forwarded = headers::toward_slack(&head.headers);
    let body = match tokio::time::timeout(body_timeout, read_body(session)).await {
        Ok(body) => body?,
        Err(_) => return Err(Error::RequestTimeout.into()),
    };
    let (fields, body_token) = call::fields(content_type.as_deref(), &body);
    let token = call::token(authorization.as_deref(), body_token);
    Ok(Call { method, verb, path_and_query, idempotency_key, headers: forwarded, body: body.into(), token, fields })
}

async fn read_body(session: &mut ServerSession) -> Result<Vec<u8>, Reply> {
    let too_large = || Reply::from(Error::TooLarge);
    // A length over the cap is refused before a byte of it is read.
    let declared = session.req_header().headers.get(http::header::CONTENT_LENGTH);
    if declared.and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok()).is_some_and(|n| n > MAX_CALL_BODY as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_CALL_BODY => body.extend_from_slice(&chunk),
            Ok(Some(_)) => return Err(too_large()),
            Ok(None) => return Ok(body),
            Err(_) => return Err(Error::BadRequest.into()),
        }
    }
}

/// A request whose head does not parse (`serve::read_head`): 400 `invalid_request`, logged by
/// the error's kind alone (its context holds the request's bytes, a token among them).
fn bad_head(e: &pingora::Error) -> Option<(ResponseHeader, Bytes)> {
    debug!(error = e.etype().as_str(), "a broken request to the egress");
    let reply = Reply::from(Error::InvalidRequest);
    let a = &reply.answer;
    let mut head = ResponseHeader::build(400, Some(2)).ok()?;
    let _ = head.insert_header("Content-Type", a.content_type.as_str());
    let _ = head.insert_header("Content-Length", a.body.len().to_string());
    Some((head, a.body.clone()))
}

#[async_trait]
impl HttpServerApp for Egress {
    async fn process_new_http(
        self: &Arc<Self>,
        mut session: ServerSession,
        _shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        if !crate::serve::read_head(&mut session, bad_head).await {
            return None;
        }
        // A client that takes no byte of its answer (a read streams without end) for a body
        // deadline holds the connection no longer.
        session.set_write_timeout(Some(self.config.server.limits.body_timeout));
        let _in_flight = self.shared.drain.enter(crate::drain::Work::Request);
        let delivered = match read_call(&mut session, self.config.server.limits.body_timeout).await {
            Err(reply) => {
                // The body may be unread: this connection serves nothing more.
                session.set_keepalive(None);
                respond(&mut session, &reply).await;
                return None;
            }
            Ok(call) => match self.socket_bot(&call) {
                Some(app) => self.open_socket(&app, &mut session).await,
                None if self.cfg().is_write(&call.method) => self.write(call, &mut session).await,
                None => self.read(&call, &mut session).await,
            },
        };
        if !delivered {
            return None;
        }
        let settings = HttpPersistentSettings::for_session(&session);
        let reusable = session.finish().await.ok()??;
        Some(ReusedHttpStream::from_reusable_stream(reusable, settings))
    }
}
