//! The admin listener (loopback by default, never the Slack-facing port): `/metrics`,
//! `/healthz` (the process is alive), `/readyz` (Redis answers and the workers run), `/stats`
//! and the dead-letter API. With `[server] admin_token` set, `/stats` and the dead-letter API
//! want `Authorization: Bearer <token>`; the probes and `/metrics` (which carries no secret and
//! is scraped without credentials by default) stay open.
//!
//! ```text
//! GET    /dlq?app=A&limit=N          list          GET  /dlq/A/ID          show
//! POST   /dlq/A/ID/replay            replay one    POST /dlq/A/replay      replay all
//! DELETE /dlq/A/ID                   purge one     POST /dlq/A/purge       purge all
//! ```

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use http::{Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use subtle::ConstantTimeEq;

use crate::delivery::WORKERS_RUNNING;
use crate::live::Live;
use crate::ops::{Ops, OpsError};
use crate::outbox::{self, Store};

pub struct Admin {
    live: Arc<Live>,
    redis_url: String,
    /// Created on first use, on the admin service's runtime.
    store: OnceLock<Store>,
}

type Reply = Response<Vec<u8>>;

impl Admin {
    pub fn new(live: Arc<Live>, redis_url: String) -> Self {
        Admin { live, redis_url, store: OnceLock::new() }
    }

    fn store(&self) -> Result<&Store, String> {
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let conn = outbox::connect_lazy(&self.redis_url, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        Ok(self.store.get_or_init(|| Store::new(conn)))
    }

    /// Operator actions over the apps of the running config.
    fn ops(&self) -> Result<Ops, String> {
        Ok(Ops::new(self.live.get().config.clone(), self.store()?.clone()))
    }

    async fn ready(&self) -> Result<(), String> {
        let store = self.store()?;
        match tokio::time::timeout(Duration::from_secs(1), store.ping()).await {
            Ok(Ok(())) if WORKERS_RUNNING.load(Ordering::Relaxed) => Ok(()),
            Ok(Ok(())) => Err("delivery workers are not running".into()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("redis did not answer within 1s".into()),
        }
    }

    fn authorized(&self, session: &ServerSession) -> bool {
        let config = self.live.get().config.clone();
        let Some(token) = &config.server.admin_token else { return true };
        let header = session.req_header().headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
        let given = header.and_then(|h| h.strip_prefix(b"Bearer ")).unwrap_or_default();
        bool::from(given.ct_eq(token.expose()))
    }

    async fn api(&self, method: &Method, path: &str, query: &str) -> Reply {
        let ops = match self.ops() {
            Ok(ops) => ops,
            Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, &e),
        };
        let param =
            |k: &str| form_urlencoded::parse(query.as_bytes()).find(|(n, _)| n == k).map(|(_, v)| v.into_owned());
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let result = match (method, parts.as_slice()) {
            (&Method::GET, ["stats"]) => ops.stats(param("app").as_deref()).await.map(json),
            (&Method::GET, ["dlq"]) => {
                let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(100);
                ops.list(param("app").as_deref(), limit).await.map(json)
            }
            (&Method::GET, ["dlq", app, id]) => ops.show(Some(app), id).await.map(json),
            (&Method::POST, ["dlq", app, "replay"]) => {
                ops.all(Some(app), false, |_, _| {}).await.map(|n| json(serde_json::json!({ "replayed": n })))
            }
            (&Method::POST, ["dlq", app, "purge"]) => {
                ops.all(Some(app), true, |_, _| {}).await.map(|n| json(serde_json::json!({ "purged": n })))
            }
            (&Method::POST, ["dlq", app, id, "replay"]) => {
                ops.replay(Some(app), id).await.map(|_| json(serde_json::json!({ "replayed": id })))
            }
            (&Method::DELETE, ["dlq", app, id]) => {
                ops.purge(Some(app), id).await.map(|_| json(serde_json::json!({ "purged": id })))
            }
            _ => return text(StatusCode::NOT_FOUND, "not found"),
        };
        result.unwrap_or_else(|e| {
            let status = match e {
                OpsError::UnknownApp(_) | OpsError::NotDead(_) => StatusCode::NOT_FOUND,
                OpsError::AppRequired | OpsError::BadId(_) => StatusCode::BAD_REQUEST,
                OpsError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            text(status, &e.to_string())
        })
    }
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
    reply(status, "text/plain", format!("{msg}\n").into_bytes())
}

fn json(value: impl serde::Serialize) -> Reply {
    let body = serde_json::to_vec_pretty(&value).unwrap_or_default();
    reply(StatusCode::OK, "application/json", body)
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Reply {
        let head = session.req_header();
        let (method, path) = (head.method.clone(), head.uri.path().to_string());
        let query = head.uri.query().unwrap_or_default().to_string();
        match path.as_str() {
            "/healthz" => return text(StatusCode::OK, "ok"),
            "/metrics" => return reply(StatusCode::OK, "text/plain; version=0.0.4", crate::metrics::render()),
            "/readyz" => {
                return match self.ready().await {
                    Ok(()) => text(StatusCode::OK, "ready"),
                    Err(e) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("not ready: {e}")),
                }
            }
            _ => {}
        }
        if !self.authorized(session) {
            return text(StatusCode::UNAUTHORIZED, "admin token required");
        }
        self.api(&method, &path, &query).await
    }
}
