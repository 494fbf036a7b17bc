//! The admin listener (loopback by default, never the Slack-facing port): `/metrics`,
//! `/healthz` (the process is alive), `/readyz` (the Slack listener accepts, Redis answers and
//! the workers run), `/stats` and the dead-letter API.
//!
//! Closed unless opened on purpose:
//! - `run` refuses a non-loopback `admin_listen` without `[server] admin_token`;
//! - with a token, everything but `/healthz`, `/readyz` and `/metrics` wants
//!   `Authorization: Bearer <token>`; wrong tokens are counted per client address and per
//!   process with the pages' failed logins (`ui::throttle`), and past the limit answered 429
//!   with `Retry-After`, the right token from that address too;
//! - state-changing routes are POST-only, always want an `Authorization` header and refuse a
//!   request carrying `Origin`, so a browser page cannot trigger them with a simple request;
//! - a request whose `Host` is not an IP address, `localhost` or a name in
//!   `[server] admin_hosts` is refused (DNS rebinding), except on `/healthz`.
//!
//! ```text
//! GET  /stats                      outbox counts GET  /egress            withheld, unknown writes
//!      (a page of each, newest first: ?limit=N&withheld_cursor=C&unknown_cursor=C, from `…_next`)
//! GET  /dlq?app=A&limit=N          list          GET  /dlq/A/ID          show
//! POST /dlq/A/ID/replay            replay one    POST /dlq/A/replay      replay all
//! POST /dlq/A/ID/purge             purge one     POST /dlq/A/purge       purge all
//! ```

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::{Response, StatusCode};
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;

use crate::live::Live;
use crate::ops::{Ops, OpsError};
use crate::outbox::Endpoint;
use crate::outbox::{LazyStore, Notes, Store};
use crate::shared::Shared;
use crate::store::{Lazy, StoreError};
use crate::ui::throttle::{Throttle, Throttled};
use guard::{access, admit, host_allowed, refusal_message, Refusal};

mod guard;

pub struct Admin {
    live: Arc<Live>,
    shared: Arc<Shared>,
    /// Connected on first use, on the admin service's runtime.
    store: LazyStore,
    /// The egress's notes (withheld and unknown writes), read where they are kept.
    notes: Lazy<Notes>,
    ui: crate::ui::Ui,
    /// Failed tokens, the pages' logins and the API's bearer tokens alike.
    throttle: Arc<Throttle>,
}

type Reply = Response<Vec<u8>>;

/// Everything an admin request can fail with, each with its status.
#[derive(Debug, thiserror::Error)]
enum AdminError {
    #[error("{}", refusal_message(*.0))]
    Refused(Refusal),
    #[error("not found")]
    NotFound,
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// The store (the outbox's or the egress's) cannot be had.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("not ready: {0}")]
    NotReady(#[from] NotReady),
    #[error("the form is {0}")]
    BadForm(&'static str),
    #[error("too many wrong tokens from your address: try again in {} s", .0.retry_after_secs())]
    Throttled(Throttled),
}

impl AdminError {
    fn status(&self) -> StatusCode {
        match self {
            AdminError::Refused(Refusal::Host | Refusal::Browser | Refusal::ReadOnly) => StatusCode::FORBIDDEN,
            AdminError::Refused(Refusal::Token) => StatusCode::UNAUTHORIZED,
            AdminError::Refused(Refusal::Method) => StatusCode::METHOD_NOT_ALLOWED,
            AdminError::NotFound => StatusCode::NOT_FOUND,
            AdminError::BadForm(_) => StatusCode::BAD_REQUEST,
            AdminError::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
            AdminError::Ops(OpsError::UnknownApp(_) | OpsError::NotDead(_)) => StatusCode::NOT_FOUND,
            AdminError::Ops(
                OpsError::AppRequired | OpsError::BadId(_) | OpsError::BadCursor(_) | OpsError::BadScope(_),
            ) => StatusCode::BAD_REQUEST,
            AdminError::Ops(OpsError::Store(_)) | AdminError::Store(_) | AdminError::NotReady(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    fn reply(&self) -> Reply {
        let mut reply = text(self.status(), &self.to_string());
        if let AdminError::Throttled(t) = self {
            reply.headers_mut().insert(http::header::RETRY_AFTER, t.retry_after_secs().into());
        }
        reply
    }
}

/// Why `/readyz` answers not ready: each says what is wrong.
#[derive(Debug, thiserror::Error)]
enum NotReady {
    #[error("bad listen address {0}")]
    BadListen(String),
    #[error("the Slack listener {0} does not accept connections: {1}")]
    ListenerRefuses(String, #[source] std::io::Error),
    #[error("the Slack listener {0} did not accept within 1s")]
    ListenerSilent(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("delivery workers are not running")]
    WorkersStopped,
    #[error("redis did not answer within 1s")]
    RedisSilent,
    #[error("Slack disabled Socket Mode for app {0} (link_disabled)")]
    LinkDisabled(String),
}

impl Admin {
    pub fn new(live: Arc<Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        let prefix = live.get().config.redis.key_prefix.clone();
        let notes = Lazy::notes(&redis, &prefix);
        let throttle = Arc::new(Throttle::default());
        let ui = crate::ui::Ui::new(shared.clone(), throttle.clone());
        let store = LazyStore::outbox(&redis, Duration::from_secs(2));
        Admin { live, shared, store, notes, ui, throttle }
    }

    fn store(&self) -> Result<&Store, StoreError> {
        self.store.get()
    }

    /// Operator actions over the apps of the running config.
    fn ops(&self) -> Result<Ops, StoreError> {
        let notes = self.notes.get()?.clone();
        Ok(Ops::new(self.live.get().config.clone(), self.store()?.clone(), notes))
    }

    /// Ready: the Slack listener accepts connections, Redis answers within a second and the
    /// delivery workers run. The detail says what is wrong, and warns about a Redis that may
    /// evict keys.
    async fn ready(&self) -> Result<String, NotReady> {
        let config = self.live.get().config.clone();
        listener_accepts(&config.server.listen).await?;
        let store = self.store()?;
        match tokio::time::timeout(Duration::from_secs(1), store.ping()).await {
            Ok(Ok(())) if self.shared.workers_running() => {}
            Ok(Ok(())) => return Err(NotReady::WorkersStopped),
            Ok(Err(e)) => return Err(NotReady::Store(e)),
            Err(_) => return Err(NotReady::RedisSilent),
        }
        let disabled = |a: &&Arc<crate::config::AppConfig>| {
            self.shared.metrics.socket.link_disabled.with_label_values(&[&a.name]).get() != 0
        };
        if let Some(app) = config.apps.iter().find(disabled) {
            return Err(NotReady::LinkDisabled(app.name.clone()));
        }
        let policy = tokio::time::timeout(Duration::from_secs(1), store.eviction_policy()).await;
        let mut detail = String::from("ready\n");
        for app in apps_without_socket(&self.shared, &config) {
            detail.push_str(&format!("warning: app {app} has no Socket Mode connection to Slack open\n"));
        }
        if let Ok(Ok(topology)) = tokio::time::timeout(Duration::from_secs(1), store.topology()).await {
            detail.push_str(&format!("redis: {topology}\n"));
        }
        if let Ok(Ok(Some(p))) = policy.as_ref().map(|r| r.as_ref().map(|p| p.as_deref())) {
            if p != "noeviction" {
                detail.push_str(&format!(
                    "warning: Redis maxmemory-policy is {p}: it may evict outbox entries (lost deliveries); set noeviction\n"
                ));
            }
        }
        Ok(detail)
    }

    async fn api(&self, path: &str, query: &str) -> Result<Reply, AdminError> {
        let ops = self.ops()?;
        let param =
            |k: &str| form_urlencoded::parse(query.as_bytes()).find(|(n, _)| n == k).map(|(_, v)| v.into_owned());
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        Ok(match parts.as_slice() {
            ["stats"] => json(ops.stats(param("app").as_deref()).await?),
            ["egress"] => {
                let q = crate::ops::NotesQuery {
                    limit: param("limit").and_then(|l| l.parse().ok()),
                    withheld_cursor: param("withheld_cursor"),
                    unknown_cursor: param("unknown_cursor"),
                };
                json(ops.egress_notes(&q).await?)
            }
            ["dlq"] => {
                let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(100);
                json(ops.list(param("app").as_deref(), limit).await?)
            }
            ["superseded"] => {
                let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(100).min(1000);
                json(ops.superseded(param("app").as_deref(), limit).await?)
            }
            ["dlq", app, "replay"] => {
                let n = ops.replay_all(Some(app), |_, _| {}).await?;
                json(serde_json::json!({ "replayed": n.done, "skipped": n.skipped }))
            }
            ["dlq", app, "purge"] => {
                let n = ops.purge_all(Some(app), |_, _| {}).await?;
                json(serde_json::json!({ "purged": n.done, "skipped": n.skipped }))
            }
            ["dlq", app, id, "replay"] => {
                ops.replay(Some(app), id).await?;
                json(serde_json::json!({ "replayed": id }))
            }
            ["dlq", app, id, "purge"] => {
                ops.purge(Some(app), id).await?;
                json(serde_json::json!({ "purged": id }))
            }
            ["dlq", app, id] => json(ops.show(Some(app), id).await?),
            ["pauses"] => json(ops.pauses().await?),
            ["pauses", app, how @ ("pause" | "resume")] => {
                let (team, channel) = (param("team"), param("channel"));
                let scope = crate::ops::Scope { app: Some(app), team: team.as_deref(), channel: channel.as_deref() };
                let by = param("by").unwrap_or_else(|| "admin API".into());
                match *how {
                    "pause" => {
                        let (pause, new) = ops.pause(scope, &by).await?;
                        json(serde_json::json!({ "pause": pause, "new": new }))
                    }
                    _ => json(serde_json::json!({ "resumed": ops.resume(scope, &by).await? })),
                }
            }
            _ => return Err(AdminError::NotFound),
        })
    }
}

/// Whether something accepts connections on the Slack-facing address (a wildcard address is
/// tried on loopback). Checked by `/readyz`: a gateway whose listener is not up is not ready.
async fn listener_accepts(listen: &str) -> Result<(), NotReady> {
    let mut addr: std::net::SocketAddr = listen.parse().map_err(|_| NotReady::BadListen(listen.to_string()))?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    match tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(NotReady::ListenerRefuses(listen.to_string(), e)),
        Err(_) => Err(NotReady::ListenerSilent(listen.to_string())),
    }
}

/// The apps that should have sockets to Slack and have none open and greeted (for `/readyz`),
/// as the sockets' own gauge counts them.
fn apps_without_socket(shared: &Shared, config: &crate::config::Config) -> Vec<String> {
    let open = |app: &str| shared.metrics.socket.connections.with_label_values(&[app, "slack"]).get();
    config
        .apps
        .iter()
        .filter(|a| a.socket_mode.as_ref().is_some_and(|s| s.connections > 0))
        .filter(|a| open(&a.name) <= 0)
        .map(|a| a.name.clone())
        .collect()
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Reply {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .header("Content-Length", body.len())
        .body(body)
        .expect("static response parts are valid")
}

fn text(status: StatusCode, msg: &str) -> Reply {
    reply(status, "text/plain", format!("{}\n", msg.trim_end()).into_bytes())
}

fn json(value: impl serde::Serialize) -> Reply {
    let body = serde_json::to_vec_pretty(&value).unwrap_or_default();
    reply(StatusCode::OK, "application/json", body)
}

/// A form's body, whole, by `timeout`; over `ui::MAX_FORM` is refused.
async fn read_form(session: &mut ServerSession, timeout: Duration) -> Result<Vec<u8>, AdminError> {
    let mut body = Vec::new();
    let read = async {
        while let Some(chunk) = session.read_request_body().await.map_err(|_| AdminError::BadForm("unreadable"))? {
            body.extend_from_slice(&chunk);
            if body.len() > crate::ui::MAX_FORM {
                return Err(AdminError::BadForm("too large"));
            }
        }
        Ok(())
    };
    tokio::time::timeout(timeout, read).await.map_err(|_| AdminError::BadForm("too slow"))??;
    Ok(body)
}

/// A request whose head does not parse: 400, and never logged (the head may hold an
/// `Authorization: Bearer <admin token>`).
fn bad_head(_: &pingora::Error) -> Option<(pingora::http::ResponseHeader, bytes::Bytes)> {
    let (parts, body) = text(StatusCode::BAD_REQUEST, "bad request").into_parts();
    Some((parts.into(), body.into()))
}

#[async_trait]
impl HttpServerApp for Admin {
    async fn process_new_http(
        self: &Arc<Self>,
        mut session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        if !crate::serve::read_head(&mut session, bad_head).await {
            return None;
        }
        let limits = self.live.get().config.server.limits;
        // The connection guard closes idle connections; Pingora's timer is a backstop past it.
        session.set_keepalive((!*shutdown.borrow()).then_some(limits.idle_timeout.as_secs() + 2));
        session.set_write_timeout(Some(limits.body_timeout));
        let answer = match session.req_header().uri.path() {
            p if p == "/ui" || p.starts_with("/ui/") => self.page(&mut session).await,
            _ => self.route(&session).await,
        };
        let (parts, body) = answer.unwrap_or_else(|e| e.reply()).into_parts();
        if session.write_response_header(Box::new(parts.into())).await.is_err() {
            return None;
        }
        if !body.is_empty() && session.write_response_body(body.into(), true).await.is_err() {
            return None;
        }
        let settings = HttpPersistentSettings::for_session(&session);
        let reusable = session.finish().await.ok()??;
        Some(ReusedHttpStream::from_reusable_stream(reusable, settings))
    }
}

impl Admin {
    /// The operator's pages (`/ui/`): behind the same `Host` allow-list, with rules of their
    /// own for who may look and act (see `ui::auth`).
    async fn page(&self, session: &mut ServerSession) -> Result<Reply, AdminError> {
        let config = self.live.get().config.clone();
        let head = session.req_header();
        let host = head.headers.get(http::header::HOST).and_then(|h| h.to_str().ok());
        if !host_allowed(host, &config.server.admin_hosts) {
            return Err(AdminError::Refused(Refusal::Host));
        }
        if head.uri.path() == "/ui" {
            return Ok(crate::ui::redirect("/ui/"));
        }
        let mut req = crate::ui::Request {
            method: head.method.clone(),
            path: head.uri.path().to_string(),
            query: head.uri.query().unwrap_or_default().to_string(),
            headers: head.headers.clone(),
            body: Vec::new(),
            client: client_ip(session),
        };
        if req.method == http::Method::POST {
            req.body = read_form(session, config.server.limits.body_timeout).await?;
        }
        let ops = self.ops()?;
        Ok(self.ui.handle(&ops, &req).await)
    }

    async fn route(&self, session: &ServerSession) -> Result<Reply, AdminError> {
        let head = session.req_header();
        let (method, path) = (head.method.clone(), head.uri.path().to_string());
        let query = head.uri.query().unwrap_or_default().to_string();
        if path == "/healthz" {
            return Ok(text(StatusCode::OK, "ok"));
        }
        let config = self.live.get().config.clone();
        let host = head.headers.get(http::header::HOST).and_then(|h| h.to_str().ok());
        if !host_allowed(host, &config.server.admin_hosts) {
            return Err(AdminError::Refused(Refusal::Host));
        }
        match path.as_str() {
            "/metrics" => {
                // The pressure decays with time, so it is read when asked for.
                self.shared.metrics.overload.pressure.set(self.shared.pressure.level());
                return Ok(reply(StatusCode::OK, "text/plain; version=0.0.4", self.shared.metrics.render()));
            }
            "/readyz" => return Ok(text(StatusCode::OK, &self.ready().await?)),
            _ => {}
        }
        let access = access(&path).ok_or(AdminError::NotFound)?;
        let tokens = (config.server.admin_token.as_ref(), config.server.admin_read_token.as_ref());
        let admitted = admit(&method, access, &head.headers, tokens.0, tokens.1);
        if let Some(good) = guard::token_tried(&head.headers, tokens.0, &admitted) {
            let now = tokio::time::Instant::now();
            self.throttle.judge(now, client_ip(session), good).map_err(AdminError::Throttled)?;
        }
        admitted.map_err(AdminError::Refused)?;
        self.api(&path, &query).await
    }
}

/// The TCP peer's address (a Unix socket's peer has none).
fn client_ip(session: &ServerSession) -> Option<std::net::IpAddr> {
    session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip())
}
