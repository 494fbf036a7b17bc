//! The Slack-facing side, on Pingora: route by path, read the body under a cap, verify the
//! signature, classify, record in one Redis round trip, ack. Passthrough paths are plainly
//! reverse-proxied to the app's bot.
//!
//! - `admission`: how many records may be pending at once (adaptive); the excess gets 503.
//! - `shard_gate`: a shard that records nothing (its primary gone) cannot take every slot.
//! - `answer`: what the gateway answers and how it is counted.
//! - `budget`: the bytes of unverified bodies, bounded across all connections.
//! - `slack_route`: the decision for one Slack request (verify, classify, record, inline).
//! - [`plan`]: what recording a verified delivery will do, decided without the store.
//! - `inline`: the inline attempt for commands and interactions.
//! - `passthrough`: the reverse proxy for OAuth and install pages.
//! - `conn`: per-connection deadlines and the connection cap around Pingora's app.
//!
//! The phases only move bytes; counting and the one audit line per request happen in Pingora's
//! `logging` phase, which runs for every request that reached the proxy.

mod admission;
mod answer;
mod budget;
mod conn;
mod envelope;
mod history;
mod inline;
mod passthrough;
pub mod plan;
mod shard_gate;
mod slack_route;
mod trace;

pub use admission::Shed;
pub use answer::counted as counted_requests;
pub use conn::{Closed, Guarded};
pub use envelope::{EnvelopeAnswer, EnvelopeRequest};

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use tracing::info;

use crate::config::{AppConfig, Config, RouteKind};
use crate::drain::{InFlight, Work};
use crate::live::Live;
use crate::outbox::Endpoint;
use crate::outbox::{self, LazyStore, ShardKeys, Store};
use crate::shared::Shared;
use crate::upstream::UpstreamClient;
use admission::Admission;
use answer::{Answer, Outcome, RequestKind};
use shard_gate::ShardGate;

pub struct Ingress {
    /// `[server]` and `[redis]`, which only change on restart.
    config: Arc<Config>,
    /// The apps and their routes, which a reload may replace.
    live: Arc<Live>,
    shared: Arc<Shared>,
    client: Arc<UpstreamClient>,
    /// Connected on first use, on this service's runtime, as durable as `[redis]` says.
    store: LazyStore,
    /// Each app's shards' keys, by app (see `shard_keys`).
    shard_keys: std::collections::HashMap<String, Vec<Arc<ShardKeys>>>,
    response_url_hosts: Arc<[String]>,
    /// With the egress on, how long deletions and edits are kept in the conversation records
    /// (the egress withholds stale replies by them).
    attribution_window: Option<std::time::Duration>,
    /// How many records may be pending at once; the excess is answered 503 at once.
    admission: Arc<Admission>,
    /// Records for a shard that records nothing are held to a few (its primary is gone).
    shard_gate: Arc<ShardGate>,
    /// The bytes of bodies not yet verified, across all connections.
    unverified: Arc<budget::Budget>,
}

/// What Pingora runs: the ingress, which the Socket Mode connections to Slack share (one
/// admission, one shard gate, one store).
pub struct Proxy(pub Arc<Ingress>);

impl std::ops::Deref for Proxy {
    type Target = Ingress;

    fn deref(&self) -> &Ingress {
        &self.0
    }
}

/// Per-request state, from Pingora's `new_ctx` to its `logging`.
pub struct Ctx {
    started: Instant,
    app: Option<Arc<AppConfig>>,
    route: Option<RouteKind>,
    /// How a Slack route was answered: status, kind, outcome.
    answered: Option<(u16, RequestKind, Outcome)>,
    audit: Audit,
    /// Counted in flight for the drain until the request's log line is written.
    _in_flight: InFlight,
}

/// What the one audit line per ingress decision says, gathered along the way.
#[derive(Default)]
struct Audit {
    /// "socket" for a Socket Mode envelope; empty for HTTP.
    via: &'static str,
    detail: String,
    receipt: String,
    message_key: String,
    delivery: String,
    retry_num: String,
    retry_reason: &'static str,
    reason: String,
    /// What the delivery history keeps (when it is on), and the id of an ignored delivery
    /// (recorded nowhere else).
    arrival: Option<Box<crate::history::Arrival>>,
    history_id: String,
    /// A message event, for the egress's evidence and thread record (queued after the answer).
    sight: Option<crate::seen::Sight>,
    /// With traces on: what the request's spans need.
    trace: Option<Box<trace::RequestTrace>>,
}

impl Ingress {
    pub fn new(live: Arc<Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        let config = live.get().config.clone();
        let attribution_window = config.egress.listen.as_ref().map(|_| config.egress.attribution_window);
        let a = &config.server.admission;
        let m = &shared.metrics;
        let admission = Admission::new(
            admission::Settings {
                max_pending: a.max_pending,
                wait: a.wait,
                slow: config.server.ack_budget / 8,
                floor: config.server.ack_budget / 400,
            },
            shared.pressure.clone(),
            admission::Gauges {
                limit: m.overload.limit.clone(),
                pending: m.overload.pending.clone(),
                waiting: m.overload.waiting.clone(),
            },
        );
        // A lane busy for half the budget without one record is a dead or frozen primary.
        let shard_gate = ShardGate::new(config.server.ack_budget / 2);
        let store = LazyStore::durable(&redis, config.server.ack_budget, config.redis.durability);
        let prefix = &config.redis.key_prefix;
        let shard_keys = config
            .apps
            .iter()
            .map(|a| {
                (
                    a.name.clone(),
                    (0..config.redis.shards).map(|i| Arc::new(ShardKeys::new(prefix, &a.name, i))).collect(),
                )
            })
            .collect();
        Ingress {
            store,
            shard_keys,
            unverified: budget::Budget::new(config.server.unverified_budget, m.overload.unverified_bytes.clone()),
            admission,
            shard_gate,
            attribution_window,
            response_url_hosts: config.server.response_url_hosts.clone().into(),
            config,
            live,
            shared,
            client: Arc::new(UpstreamClient::new()),
        }
    }

    fn store(&self) -> Result<&Store, outbox::StoreError> {
        self.store.get()
    }

    /// The keys of an app's shard: made once per app and shard (five strings a request
    /// otherwise), or now for an app the config it started with did not have.
    fn shard_keys(&self, app: &str, shard: u16) -> Arc<ShardKeys> {
        match self.shard_keys.get(app).and_then(|keys| keys.get(usize::from(shard))) {
            Some(keys) => keys.clone(),
            None => Arc::new(ShardKeys::new(&self.config.redis.key_prefix, app, shard)),
        }
    }

    /// Count one answered Slack route and write its audit line.
    fn account(&self, ctx: &mut Ctx, answered: (u16, RequestKind, Outcome)) {
        let app = ctx.app.clone();
        let app = app.as_ref().map_or("", |a| a.name.as_str());
        self.account_parts(app, ctx.started, &mut ctx.audit, answered);
    }

    fn account_parts(
        &self,
        app: &str,
        started: Instant,
        a: &mut Audit,
        (status, kind, outcome): (u16, RequestKind, Outcome),
    ) {
        let elapsed = started.elapsed();
        // With traces on, the line names the delivery's trace (empty when not sampled).
        let traced = self.shared.telemetry.of(&a.delivery);
        let trace_id = traced.map(|(_, t)| t.trace_id.to_string()).unwrap_or_default();
        if !app.is_empty() {
            let m = &self.shared.metrics;
            m.requests.with_label_values(&[app, kind.as_label(), outcome.as_label()]).inc();
            m.ack_seconds.with_label_values(&[app]).observe(elapsed.as_secs_f64());
        }
        info!(
            target: "slackgate::audit",
            app,
            kind = kind.as_label(),
            detail = %a.detail,
            outcome = outcome.as_label(),
            status,
            receipt = %a.receipt,
            message_key = %a.message_key,
            delivery = %a.delivery,
            retry_num = %a.retry_num,
            retry_reason = a.retry_reason,
            reason = %a.reason,
            ack_ms = elapsed.as_secs_f64() * 1000.0,
            via = if a.via.is_empty() { "http" } else { a.via },
            trace_id,
            "ingress"
        );
        if let Some(traced) = traced {
            trace::export(traced, app, a, started, (status, kind, outcome));
        }
        self.remember(app, a, (status, kind, outcome), elapsed.as_secs_f64() * 1000.0);
        if let Some(sight) = a.sight.take() {
            self.shared.seen.note(sight);
        }
    }
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            started: Instant::now(),
            app: None,
            route: None,
            answered: None,
            audit: Audit::default(),
            _in_flight: self.shared.drain.enter(Work::Request),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        // The connection's watchdog (`conn`) closes idle connections at `idle_timeout`; Pingora's
        // own keep-alive timer is set past it, as a backstop only.
        session.set_keepalive(Some(self.config.server.limits.idle_timeout.as_secs() + 2));
        let snapshot = self.live.get();
        let route = snapshot.route(session.req_header().uri.path());
        ctx.app = route.map(|(app, _)| app.clone());
        ctx.route = route.map(|(_, kind)| kind);
        let answer = match route {
            Some((_, RouteKind::Passthrough)) => {
                // Pingora streams a passthrough body itself; bound each read of it.
                session.set_read_timeout(Some(self.config.server.limits.body_timeout));
                return Ok(false);
            }
            Some((app, RouteKind::Slack)) => {
                let deadline = tokio::time::Instant::from_std(ctx.started) + self.config.server.ack_budget;
                self.answer(session, app, &mut ctx.audit, deadline).await
            }
            None => Answer::refuse(404, Outcome::NotFound, "not found\n"),
        };
        ctx.answered = Some((answer.status, answer.kind, answer.outcome));
        answer.write(session).await.map(|_| true)
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

    /// What Pingora's own error lines (`Fail to proxy: …`) say of the request: the method and
    /// the path, never the query — a passthrough's query is an OAuth `code` and `state`.
    fn request_summary(&self, session: &Session, _ctx: &Ctx) -> String {
        let head = session.req_header();
        format!("{} {}", head.method, head.uri.path())
    }

    async fn logging(&self, session: &mut Session, error: Option<&pingora::Error>, ctx: &mut Ctx) {
        if let Some(answered) = ctx.answered {
            return self.account(ctx, answered);
        }
        if ctx.route == Some(RouteKind::Passthrough) {
            let status = session.response_written().map_or(0, |r| r.status.as_u16());
            let app = ctx.app.as_ref().map_or("", |a| a.name.as_str());
            let error = error.map(|e| e.etype().as_str()).unwrap_or_default();
            let path = session.req_header().uri.path();
            info!(target: "slackgate::audit", app, path, status, error, "passthrough");
        }
    }
}
