//! What every step of the egress works with, handed to each as one value: the config, the
//! store, Slack, the running apps and the process's shared handles (metrics, history, seen,
//! Socket Mode tickets) — and the few steps several layers take: a Redis step of a write, an
//! answer to the bot, the accounting. Imports no layer.

use std::future::Future;
use std::sync::Arc;

use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use tracing::{info, warn};

use super::headers;
use super::model::error::Error;
use super::model::{Attributed, Cached, Call, Outcome, Reply, Write};
use super::plan::KeyKind;
use super::slack_api::SlackApi;
use super::store::EgressStore;
use crate::clock::now_ms;
use crate::config::{AppConfig, Config, EgressConfig};
use crate::live::Live;
use crate::outbox::{Endpoint, NoteList, StoreError};
use crate::shared::Shared;
use crate::store::Lazy;
use crate::upstream::{Response, SendError};

pub(super) struct Ctx {
    pub config: Arc<Config>,
    pub shared: Arc<Shared>,
    /// Connected on first use, on this service's runtime.
    store: Lazy<EgressStore>,
    pub slack: SlackApi,
    /// The apps as the last reload left them: their `turns`, their Socket Mode tokens.
    pub live: Arc<Live>,
}

impl Ctx {
    pub fn new(config: Arc<Config>, live: Arc<Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        let slack = SlackApi::new(config.egress.slack_api_url.clone());
        let store = Lazy::egress(&redis, &config.redis.key_prefix);
        Ctx { config, shared, store, slack, live }
    }

    /// The app `name` as configured now.
    pub fn app(&self, name: &str) -> Option<Arc<AppConfig>> {
        self.live.get().config.apps.iter().find(|a| a.name == name).cloned()
    }

    /// Some app takes turns, or tracks its runs, now.
    pub fn turns_on(&self) -> bool {
        self.live.get().config.apps.iter().any(|a| a.turns.is_on() || a.runs.is_on())
    }

    pub fn cfg(&self) -> &EgressConfig {
        &self.config.egress
    }

    pub fn store(&self) -> Option<&EgressStore> {
        self.store.get().ok()
    }

    pub fn count(&self, class: &str, outcome: Outcome) {
        self.shared.metrics.egress.calls.with_label_values(&[class, outcome.as_label()]).inc();
    }

    /// Every write's accounting, whether or not its answer reaches the client: counted, and
    /// its audit line (method, channel, which key it carried, outcome — never the token or
    /// the text).
    pub fn account(&self, call: &Call, key: KeyKind, outcome: Outcome) {
        self.count("write", outcome);
        super::trace::export(&self.shared, call, key, outcome, Some(&self.config.egress.slack_api_url.host));
        info!(
            target: "slackgate::audit",
            method = %call.method,
            channel = call.fields.channel.as_deref().unwrap_or(""),
            key = key.as_label(),
            outcome = outcome.as_label(),
            "egress write"
        );
    }

    /// Account for a write and answer its client; `true` when the answer reached it.
    pub async fn answer(&self, call: &Call, key: KeyKind, reply: Reply, session: &mut ServerSession) -> bool {
        self.account(call, key, reply.outcome);
        respond(session, &reply).await
    }

    /// A write whose source is gone (`error`: why): withheld, and noted for a day.
    pub async fn withheld(&self, store: &EgressStore, w: &Write, source: &Attributed, error: Error) -> Reply {
        let call = &w.call;
        let note = serde_json::json!({
            "at": now_ms(), "method": call.method, "channel": call.fields.channel, "source_ts": source.ts,
            "delivery": source.delivery, "reason": error.code(),
        });
        if let Err(e) = self.step(w, store.notes().note(NoteList::Withheld, &note, now_ms())).await {
            warn!(error = %e, "cannot keep the note of a withheld write");
        }
        error.into()
    }

    /// One Redis step of a write. Skipped once an earlier step of the same call found Redis not
    /// answering: each step would wait the store's whole timeout again (a frozen Redis costs
    /// one timeout).
    pub async fn step<T>(&self, w: &Write, op: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        if w.store_down() {
            self.shared.metrics.egress.store_skipped.inc();
            return Err(StoreError::Protocol("skipped: Redis did not answer earlier in this call".into()));
        }
        let result = op.await;
        if result.as_ref().is_err_and(not_answering) {
            w.set_store_down();
        }
        result
    }
}

/// Whether a store error means Redis is not answering (rather than refusing one command).
fn not_answering(e: &StoreError) -> bool {
    match e {
        StoreError::Redis(r) => {
            r.is_timeout() || r.is_io_error() || r.is_connection_dropped() || r.is_connection_refusal()
        }
        _ => false,
    }
}

/// Slack's answer as the egress keeps it.
pub(super) fn cached(r: Response) -> Cached {
    Cached {
        status: r.status,
        content_type: r.content_type.unwrap_or_else(|| "application/json".into()),
        body: r.body,
        retry_after: r.retry_after.map(|d| d.as_secs()),
        headers: headers::kept(&r.headers),
    }
}

/// Slack's answer to one forward, as the bot gets it; `Err` when the call may have reached
/// Slack without an answer (the uncertain-write rules settle it).
pub(super) fn forwarded(result: Result<Response, SendError>) -> Result<Reply, SendError> {
    match result {
        Ok(r) => Ok(Reply::new(cached(r), Outcome::Forwarded)),
        Err(e) if e.maybe_sent() => Err(e),
        Err(_) => Ok(Error::Upstream.into()),
    }
}

/// Write a reply; `false` when it did not reach the client.
pub(super) async fn respond(session: &mut ServerSession, reply: &Reply) -> bool {
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
