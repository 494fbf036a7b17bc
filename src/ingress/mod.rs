//! The Slack-facing side, on Pingora: route by path, read the body under a cap, verify the
//! signature, classify, record in one Redis round trip, ack. Passthrough paths are plainly
//! reverse-proxied to the app's bot. Every answer here is decided by [`Ingress::answer`]; the
//! trait methods only move bytes.

mod conn;
mod inline;
mod passthrough;
mod plan;

pub use conn::Guarded;

use crate::live::Live;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use tracing::{info, warn};

use crate::config::{AppConfig, Config, RouteKind};
use crate::delivery::now_ms;
use crate::metrics::METRICS;
use crate::outbox::{self, NewDelivery, Recorded, ShardKeys, Store};
use crate::slack::{self, Request};
use crate::upstream::UpstreamClient;

pub struct Ingress {
    /// `[server]` and `[redis]`, which only change on restart.
    config: Arc<Config>,
    /// The apps and their routes, which a reload may replace.
    live: Arc<Live>,
    redis_url: String,
    client: Arc<UpstreamClient>,
    /// Created on first use, on this service's runtime (see `outbox::connect_lazy`).
    store: OnceLock<Store>,
    response_url_hosts: Arc<[String]>,
}

/// Per-request state: which app the path belongs to, for passthrough and logging.
pub struct Ctx {
    app: Option<Arc<AppConfig>>,
    audit: Audit,
}

/// What the one audit line per ingress decision says, gathered along the way.
#[derive(Default)]
struct Audit {
    detail: String,
    receipt: String,
    message_key: String,
    delivery: String,
    retry_num: String,
    retry_reason: String,
    reason: String,
}

/// What the gateway answers Slack, and how it is counted.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: Cow<'static, str>,
    pub body: Bytes,
    pub kind: &'static str,
    pub outcome: &'static str,
}

impl Answer {
    fn empty(status: u16, kind: &'static str, outcome: &'static str) -> Self {
        Answer { status, content_type: Cow::Borrowed("text/plain"), body: Bytes::new(), kind, outcome }
    }
    fn text(status: u16, kind: &'static str, outcome: &'static str, msg: &'static str) -> Self {
        Answer { body: Bytes::from_static(msg.as_bytes()), ..Self::empty(status, kind, outcome) }
    }
}

impl Ingress {
    pub fn new(live: Arc<Live>, redis_url: String) -> Self {
        let config = live.get().config.clone();
        Ingress {
            response_url_hosts: config.server.response_url_hosts.clone().into(),
            config,
            live,
            redis_url,
            client: Arc::new(UpstreamClient::new()),
            store: OnceLock::new(),
        }
    }

    fn store(&self) -> Result<&Store, outbox::StoreError> {
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let conn = outbox::connect_lazy(&self.redis_url, self.config.server.ack_budget)?;
        Ok(self.store.get_or_init(|| Store::new(conn)))
    }

    /// Everything between the request line and the answer for one Slack route.
    async fn answer(&self, session: &mut Session, app: &Arc<AppConfig>, audit: &mut Audit) -> Answer {
        if session.req_header().method != http::Method::POST {
            return Answer::text(405, "unknown", "bad_method", "method not allowed\n");
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
        let (ts, sig) =
            (single_header(session, "x-slack-request-timestamp"), single_header(session, "x-slack-signature"));
        // Unsigned, stale or malformed: refused before a byte of the body is buffered.
        if let Err(e) = slack::precheck(ts, sig, now) {
            audit.reason = e.to_string();
            return Answer::text(401, "unknown", "unauthorized", "invalid signature\n");
        }
        let limits = &self.config.server;
        let body = match tokio::time::timeout(limits.limits.body_timeout, read_body(session, limits.max_body)).await {
            Ok(Ok(b)) => b,
            Ok(Err(answer)) => return answer,
            Err(_) => return Answer::text(408, "unknown", "body_timeout", "request body too slow\n"),
        };
        let header = |name: &str| single_header(session, name);
        if let Err(e) =
            slack::verify(&app.secrets, header("x-slack-request-timestamp"), header("x-slack-signature"), &body, now)
        {
            audit.reason = e.to_string();
            return Answer::text(401, "unknown", "unauthorized", "invalid signature\n");
        }
        let content_type = header("content-type").unwrap_or_default().to_vec();
        let request = match slack::classify(&content_type, &body) {
            Ok(r) => r,
            Err(e) => {
                audit.reason = e.to_string();
                return Answer::text(400, "unknown", "bad_request", "unparseable payload\n");
            }
        };
        if let Some(num) = header("x-slack-retry-num") {
            let reason = header("x-slack-retry-reason").map(String::from_utf8_lossy).unwrap_or_default();
            let reason = match reason.as_ref() {
                "http_timeout" | "http_error" | "connection_failed" | "ssl_error" | "too_many_redirects" => reason,
                _ => "other".into(),
            };
            METRICS.slack_retries.with_label_values(&[app.name.as_str(), reason.as_ref()]).inc();
            audit.retry_num = String::from_utf8_lossy(num).chars().take(8).collect();
            audit.retry_reason = reason.into_owned();
        }
        match request {
            Request::UrlVerification { challenge } => {
                let body = serde_json::json!({ "challenge": challenge }).to_string();
                Answer {
                    content_type: Cow::Borrowed("application/json"),
                    body: body.into(),
                    ..Answer::empty(200, "url_verification", "answered")
                }
            }
            Request::SslCheck => Answer::empty(200, "ssl_check", "answered"),
            Request::RateLimited => {
                warn!(app = %app.name, "Slack reports app_rate_limited: it is dropping events for this app");
                Answer::empty(200, "app_rate_limited", "ignored")
            }
            Request::Delivery(d) => self.record(session, app, d, content_type, body, audit).await,
        }
    }

    /// Filters, then the one Redis round trip before the ack (bounded by the pre-ack budget),
    /// then for commands and interactions the inline attempt.
    async fn record(
        &self,
        session: &Session,
        app: &Arc<AppConfig>,
        d: slack::Delivery,
        ct: Vec<u8>,
        body: Bytes,
        audit: &mut Audit,
    ) -> Answer {
        let kind = d.kind.as_str();
        audit.detail.clone_from(&d.detail);
        audit.receipt = d.receipt.clone().unwrap_or_default();
        let received_ms = now_ms();
        let plan = plan::plan(&d, app, self.config.redis.shards, received_ms, rand::random::<u64>());
        if let Some(reason) = plan.ignored {
            METRICS.ignored.with_label_values(&[&app.name, reason]).inc();
            audit.reason = reason.into();
        }
        if plan.skips_store() {
            return Answer::empty(200, kind, "ignored");
        }
        audit.message_key = plan.claim.clone().or_else(|| plan.cancel.clone()).unwrap_or_default();
        let keys = ShardKeys::new(&self.config.redis.key_prefix, &app.name, plan.shard);
        let path = session.req_header().uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let new = NewDelivery {
            id: &plan.id,
            receipt: d.receipt.as_deref(),
            body: &body,
            content_type: &ct,
            path,
            kind: d.kind,
            received_ms,
            ttl: app.receipt_ttl,
            placement: plan.placement,
            claim: plan.claim.as_deref(),
            cancel: plan.cancel.as_deref(),
            detail: &d.detail,
            response_url: d.response_url.as_deref().unwrap_or(""),
        };
        let store = match self.store() {
            Ok(store) => store,
            Err(e) => return store_unavailable(app, kind, &e.to_string()),
        };
        let recorded = match tokio::time::timeout(self.config.server.ack_budget, store.record(&keys, &new)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return store_unavailable(app, kind, &e.to_string()),
            Err(_) => return store_unavailable(app, kind, "the pre-ack budget ran out"),
        };
        match recorded {
            Recorded::Duplicate(original) => {
                audit.delivery = original;
                Answer::empty(200, kind, "duplicate")
            }
            Recorded::DuplicateMessage(original) => {
                audit.delivery = original;
                Answer::empty(200, kind, "duplicate_message")
            }
            Recorded::New { cancelled } => {
                if cancelled {
                    METRICS.cancelled.with_label_values(&[&app.name]).inc();
                    METRICS.deliveries.with_label_values(&[&app.name, "cancelled"]).inc();
                    audit.reason = "cancelled the deleted message's delivery".into();
                }
                if plan.ignored.is_some() {
                    return Answer::empty(200, kind, "ignored");
                }
                audit.delivery.clone_from(&plan.id);
                let Some(budget) = plan.inline else { return Answer::empty(200, kind, "accepted") };
                let job = inline::InlineJob {
                    app: app.clone(),
                    keys,
                    store: store.clone(),
                    client: self.client.clone(),
                    path: path.to_string(),
                    id: plan.id,
                    kind: d.kind,
                    detail: d.detail,
                    response_url: d.response_url,
                    response_url_hosts: self.response_url_hosts.clone(),
                    content_type: String::from_utf8_lossy(&ct).into_owned(),
                    body,
                    received_ms,
                };
                inline::run(job, budget).await
            }
        }
    }
}

fn store_unavailable(app: &AppConfig, kind: &'static str, why: &str) -> Answer {
    METRICS.store_errors.with_label_values(&[&app.name, "record"]).inc();
    warn!(app = %app.name, error = why, "cannot record; answering 503 so Slack retries");
    Answer::text(503, kind, "store_unavailable", "store unavailable\n")
}

/// A header's value when it occurs exactly once: two signatures or two timestamps are not
/// something Slack sends, so neither is trusted.
fn single_header<'a>(session: &'a Session, name: &str) -> Option<&'a [u8]> {
    let mut values = session.req_header().headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => Some(v.as_bytes()),
        _ => None,
    }
}

/// Read the whole body, refusing more than `max` bytes with 413.
async fn read_body(session: &mut Session, max: usize) -> Result<Bytes, Answer> {
    let too_large = || Answer::text(413, "unknown", "too_large", "payload too large\n");
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
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
                chunks.push(chunk);
            }
            Ok(None) if chunks.len() <= 1 => return Ok(chunks.pop().unwrap_or_default()),
            Ok(None) => return Ok(chunks.concat().into()),
            Err(_) => return Err(Answer::text(400, "unknown", "bad_request", "cannot read body\n")),
        }
    }
}

async fn respond(session: &mut Session, answer: &Answer) -> Result<()> {
    let mut resp = ResponseHeader::build(answer.status, Some(2))?;
    resp.insert_header("Content-Type", answer.content_type.as_ref())?;
    resp.insert_header("Content-Length", answer.body.len().to_string())?;
    if answer.status >= 400 {
        // The request body may be unread; never reuse such a connection.
        session.set_keepalive(None);
    }
    session.write_response_header(Box::new(resp), answer.body.is_empty()).await?;
    if !answer.body.is_empty() {
        session.write_response_body(Some(answer.body.clone()), true).await?;
    }
    Ok(())
}

#[async_trait]
impl ProxyHttp for Ingress {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx { app: None, audit: Audit::default() }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let started = Instant::now();
        let _in_flight = crate::drain::REQUESTS.enter();
        // The connection's watchdog (`conn`) closes idle connections at `idle_timeout`; Pingora's
        // own keep-alive timer is set past it, as a backstop only.
        session.set_keepalive(Some(self.config.server.limits.idle_timeout.as_secs() + 2));
        let snapshot = self.live.get();
        let route = snapshot.route(session.req_header().uri.path());
        let (app, answer) = match route {
            Some((app, RouteKind::Passthrough)) => {
                ctx.app = Some(app.clone());
                // Pingora streams a passthrough body itself; bound each read of it.
                session.set_read_timeout(Some(self.config.server.limits.body_timeout));
                return Ok(false);
            }
            Some((app, RouteKind::Slack)) => (app.name.as_str(), self.answer(session, app, &mut ctx.audit).await),
            None => ("", Answer::text(404, "unknown", "not_found", "not found\n")),
        };
        let written = respond(session, &answer).await;
        let elapsed = started.elapsed();
        if !app.is_empty() {
            METRICS.requests.with_label_values(&[app, answer.kind, answer.outcome]).inc();
            METRICS.ack_seconds.with_label_values(&[app]).observe(elapsed.as_secs_f64());
        }
        let a = &ctx.audit;
        info!(
            target: "slackgate::audit",
            app,
            kind = answer.kind,
            detail = %a.detail,
            outcome = answer.outcome,
            status = answer.status,
            receipt = %a.receipt,
            message_key = %a.message_key,
            delivery = %a.delivery,
            retry_num = %a.retry_num,
            retry_reason = %a.retry_reason,
            reason = %a.reason,
            ack_ms = elapsed.as_secs_f64() * 1000.0,
            "ingress"
        );
        written.map(|_| true)
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let app = ctx.app.as_ref().ok_or_else(|| Error::new(ErrorType::InternalError))?;
        passthrough::peer(app).await
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let app = ctx.app.as_ref().ok_or_else(|| Error::new(ErrorType::InternalError))?;
        let client = session.client_addr().and_then(|a| a.as_inet()).copied();
        passthrough::rewrite(req, &app.upstream, client)
    }
}
