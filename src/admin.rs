//! The admin listener (loopback by default, never the Slack-facing port): `/metrics`,
//! `/healthz` (the process is alive), `/readyz` (Redis answers within a second).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use http::{Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::outbox::{self, Store};

pub struct Admin {
    redis_url: String,
    store: OnceLock<Store>,
}

impl Admin {
    pub fn new(redis_url: String) -> Self {
        Admin { redis_url, store: OnceLock::new() }
    }

    async fn ready(&self) -> Result<(), String> {
        let store = match self.store.get() {
            Some(s) => s,
            None => {
                let conn = outbox::connect_lazy(&self.redis_url, Duration::from_secs(1)).map_err(|e| e.to_string())?;
                self.store.get_or_init(|| Store::new(conn))
            }
        };
        match tokio::time::timeout(Duration::from_secs(1), store.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("redis did not answer within 1s".into()),
        }
    }
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .header("Content-Length", body.len())
        .body(body)
        .expect("static response parts are valid")
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_string();
        match path.as_str() {
            "/metrics" => reply(StatusCode::OK, "text/plain; version=0.0.4", crate::metrics::render()),
            "/healthz" => reply(StatusCode::OK, "text/plain", b"ok\n".to_vec()),
            "/readyz" => match self.ready().await {
                Ok(()) => reply(StatusCode::OK, "text/plain", b"ready\n".to_vec()),
                Err(e) => {
                    reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("not ready: {e}\n").into_bytes())
                }
            },
            _ => reply(StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec()),
        }
    }
}
