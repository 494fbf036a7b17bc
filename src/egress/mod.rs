//! The egress for the Slack Web API: the bots' Web API clients point at it (a base-URL setting),
//! and it forwards to Slack. Reads pass straight through with no Redis on their path (the
//! history reads are counted against Slack's budget: `budget`, `replies`); writes
//! happen once, are paced, and are withheld when their source is gone (see `write`).
//!
//! - `model`: what the layers share — the call and its write, the target, Slack's answer as
//!   kept, claims, fingerprints, how a record settles, outcomes, and `model::error`, the
//!   egress's own errors. Imports nothing of the egress.
//! - `plan`: the write path's decisions, pure (which key layer, what a fingerprint means,
//!   withhold or post, what an outcome settles, an uncertain write by method).
//! - `ctx`: what every step works with (config, store, Slack, shared handles), and the steps
//!   several take (a Redis step, an answer, the accounting).
//! - `write`: the write path, the one place that calls its layers in order — `keyed`
//!   (`Idempotency-Key`) or `retry` (a client's own retry), their in-flight claims kept as
//!   leases (`lease`); then `attribution`, `turn`, `rerun`, `pacing` (with Slack's 429s);
//!   `uncertain` (and `look`) for an answer lost on the way. Each layer is a function over the
//!   context that does the I/O its `plan` rule asks for, and imports no other layer.
//! - `stream`: a stream's appends and stop, on the stream the gateway keeps (its text so far):
//!   an answer lost or expired is settled as edits, a stream whose question is gone is closed.
//! - `read`: the read path, streamed; `replies`, `budget`: the history reads and their budget;
//!   `socket_open`: a Socket Mode bot's `apps.connections.open`.
//! - `call`: reading a call and the fields of a write; `headers`: which headers cross the
//!   egress, both ways.
//! - `model::error`: the egress's own errors, and the one place each becomes the bot's answer.
//! - `slack_api`: Slack's API as the egress calls it (forward, `auth.test`); `identities`:
//!   who each token is, remembered for an hour, bounded.
//! - `store`, `scripts`: the egress's own records in Redis; its withheld and unknown notes are
//!   kept in `outbox::Notes`. What the inbound side delivered, deleted and edited it reads from
//!   the conversation records (`outbox::Conversations`), where the two sides meet.

mod attribution;
mod budget;
mod call;
mod ctx;
mod headers;
mod identities;
mod keyed;
mod lease;
mod look;
mod model;
mod pacing;
mod plan;
mod read;
mod replies;
mod rerun;
mod retry;
mod scripts;
mod shadow;
mod slack_api;
mod socket_open;
mod store;
mod stream;
mod trace;
mod turn;
mod uncertain;
mod write;

pub use model::Outcome;
pub use replies::HISTORY_METHODS;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use tracing::debug;

use crate::config::Config;
use crate::live::Live;
use crate::outbox::Endpoint;
use crate::shared::Shared;
use ctx::{respond, Ctx};
use model::error::Error;
use model::{Call, Reply, Verb};

/// Bodies of Web API calls are read up to this size.
const MAX_CALL_BODY: usize = 8 << 20;

/// The egress service: each connection's calls, read and handed to the read or the write path.
pub struct Egress {
    ctx: Arc<Ctx>,
}

impl Egress {
    pub fn new(config: Arc<Config>, live: Arc<Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        Egress { ctx: Arc::new(Ctx::new(config, live, shared, redis)) }
    }
}

/// Which base a call came to: the live bot's (`/api/…`) or the shadow's (`/shadow/api/…`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Base {
    Live,
    Shadow,
}

/// Read one call whole, its body within `body_timeout`; `Err` with the reply for a bad request.
async fn read_call(
    session: &mut ServerSession,
    body_timeout: Duration,
    shared: &Shared,
) -> Result<(Call, Base), Reply> {
    let head = session.req_header();
    // An absolute-form target (`POST http://host/api/…`) is read as its path (RFC 9112
    // §3.2.2); Pingora has refused one whose authority is not its `Host`.
    let (path, base) = match shadow::api_path(head.uri.path()) {
        Some(path) => (path, Base::Shadow),
        None => (head.uri.path(), Base::Live),
    };
    let Some(method) = call::method_of(path) else { return Err(Error::UnknownMethod.into()) };
    let Some(verb) = Verb::of(&head.method) else { return Err(Error::MethodNotAllowed.into()) };
    let method = method.to_string();
    // As it goes to Slack: `/api/<method>` and the query (a shadow's without its base).
    let query = head.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let path_and_query = format!("{path}{query}");
    let header = |name: &str| head.headers.get(name).and_then(|v| v.to_str().ok()).map(String::from);
    let (content_type, authorization) = (header("content-type"), header("authorization"));
    let idempotency_key = header("idempotency-key").filter(|k| !k.is_empty());
    let forwarded = headers::toward_slack(&head.headers);
    let trace = model::CallTrace::of(shared, &head.headers);
    let body = match tokio::time::timeout(body_timeout, read_body(session)).await {
        Ok(body) => body?,
        Err(_) => return Err(Error::RequestTimeout.into()),
    };
    let (fields, body_token) = call::fields(content_type.as_deref(), &body);
    let token = call::token(authorization.as_deref(), body_token);
    let call = Call {
        method,
        verb,
        path_and_query,
        idempotency_key,
        headers: forwarded,
        body: body.into(),
        token,
        fields,
        trace,
    };
    Ok((call, base))
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
        let ctx = &self.ctx;
        let body_timeout = ctx.config.server.limits.body_timeout;
        session.set_write_timeout(Some(body_timeout));
        let _in_flight = ctx.shared.drain.enter(crate::drain::Work::Request);
        if let Some(delivery) = shadow::response_of(session.req_header().uri.path()).map(String::from) {
            // A shadow bot's late answer to a command: kept, never posted.
            let reply = match tokio::time::timeout(body_timeout, read_body(&mut session)).await {
                Ok(Ok(body)) => shadow::response(ctx, &delivery, body.len()).await,
                Ok(Err(reply)) => reply,
                Err(_) => Error::RequestTimeout.into(),
            };
            session.set_keepalive(None);
            respond(&mut session, &reply).await;
            return None;
        }
        let delivered = match read_call(&mut session, body_timeout, &ctx.shared).await {
            Err(reply) => {
                // The body may be unread: this connection serves nothing more.
                session.set_keepalive(None);
                respond(&mut session, &reply).await;
                return None;
            }
            Ok((call, Base::Shadow)) => shadow::call(ctx, call, &mut session).await,
            Ok((call, Base::Live)) => match socket_open::socket_bot(ctx, &call) {
                Some(app) => socket_open::open(ctx, &app, &mut session).await,
                None if ctx.cfg().is_write(&call.method) => write::write(ctx, call, &mut session).await,
                None => read::read(ctx, &call, &mut session).await,
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
