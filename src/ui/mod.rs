//! The operator's pages, `/ui/` on the admin listener: an overview per app, the deliveries
//! (filtered, following new ones), each delivery's timeline, and replay and purge.
//! Server-rendered HTML (askama templates under `templates/ui`, compiled into the binary),
//! one stylesheet and one small script, both in the binary too. Every page works without
//! JavaScript; the script only keeps the list moving.
//!
//! Who may look and act is [`auth`]'s: open on a loopback listener without an admin token,
//! otherwise a login; a write is a POST from the pages' own origin with the viewer's CSRF
//! token, by an admin. The admin API's `Host` allow-list is checked before anything here.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use http::{HeaderMap, Method, Response, StatusCode};

use crate::ops::Ops;
use crate::shared::Shared;

mod actions;
pub mod auth;
mod pages;
mod side_by_side;
pub mod throttle;
mod view;

use auth::{UiAuth, Viewer};
use throttle::Throttle;

pub type Reply = Response<Vec<u8>>;

/// The most a form may send.
pub const MAX_FORM: usize = 16 * 1024;

/// One request to the pages, read whole (a form's body included).
pub struct Request {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// The TCP peer's address (never a forwarded header's: whoever sends one chooses it).
    pub client: Option<IpAddr>,
}

impl Request {
    /// A query or form parameter (the form's first, then the query's).
    pub fn param(&self, key: &str) -> Option<String> {
        let find = |bytes: &[u8]| form_urlencoded::parse(bytes).find(|(k, _)| k == key).map(|(_, v)| v.into_owned());
        find(&self.body).or_else(|| find(self.query.as_bytes()))
    }

    /// Behind a TLS-terminating proxy (the session cookie is then `Secure`).
    fn tls(&self) -> bool {
        self.headers.get("x-forwarded-proto").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
    }
}

/// The pages of one admin listener.
pub struct Ui {
    shared: Arc<Shared>,
    /// Made on first use (on the admin service's runtime, from the ops' connection).
    auth: OnceLock<UiAuth>,
    /// Failed logins, shared with the admin API's failed tokens.
    throttle: Arc<Throttle>,
}

impl Ui {
    pub fn new(shared: Arc<Shared>, throttle: Arc<Throttle>) -> Self {
        Ui { shared, auth: OnceLock::new(), throttle }
    }

    fn auth(&self, ops: &Ops) -> &UiAuth {
        self.auth.get_or_init(|| {
            let config = ops.config();
            UiAuth::new(ops.conn(), &config.redis.key_prefix, config.ui.session, self.throttle.clone())
        })
    }

    /// Answer one request under `/ui`.
    pub async fn handle(&self, ops: &Ops, req: &Request) -> Reply {
        if let Some(asset) = asset(&req.path) {
            return asset;
        }
        match self.gated(ops, req).await {
            Ok(reply) => reply,
            Err(e) => pages::message(None, e.status, "Something went wrong", &e.text, "/ui/"),
        }
    }

    async fn gated(&self, ops: &Ops, req: &Request) -> Result<Reply, Failure> {
        let config = ops.config().clone();
        let auth = self.auth(ops);
        if req.path == "/ui/login" {
            return self.login(auth, &config, req).await;
        }
        let loopback = listener_is_loopback(config.server.admin_listen.as_deref());
        let Some(viewer) = auth.viewer(&config.server, loopback, &req.headers).await.map_err(Failure::store)? else {
            return Ok(match req.method {
                Method::GET | Method::HEAD => redirect("/ui/login"),
                _ => pages::message(
                    None,
                    StatusCode::UNAUTHORIZED,
                    "Log in first",
                    "Your session has ended.",
                    "/ui/login",
                ),
            });
        };
        let ctx = pages::Context { ops, shared: &self.shared, viewer: &viewer };
        if req.method == Method::POST {
            return actions::post(&ctx, auth, req).await;
        }
        if req.method != Method::GET && req.method != Method::HEAD {
            return Ok(pages::message(
                Some(&viewer),
                StatusCode::METHOD_NOT_ALLOWED,
                "Not allowed",
                "Pages are read with GET and act with POST.",
                "/ui/",
            ));
        }
        pages::get(&ctx, req).await
    }

    async fn login(&self, auth: &UiAuth, config: &crate::config::Config, req: &Request) -> Result<Reply, Failure> {
        if req.method != Method::POST {
            // After "End all sessions": how many ended (a number, or nothing said).
            let ended = req.param("ended").and_then(|n| n.parse::<u64>().ok());
            let notice = ended.map(|n| format!("{n} sessions ended, yours too. Log in again.")).unwrap_or_default();
            return Ok(pages::login_with(StatusCode::OK, "", &notice));
        }
        if let Err(refused) = auth::check_origin(&req.headers) {
            return Ok(pages::login(refused.status(), &refused.to_string()));
        }
        let token = req.param("token").unwrap_or_default();
        match auth.login(&config.server, &token, req.client, req.tls()).await.map_err(Failure::store)? {
            Ok((_, cookie)) => {
                let mut r = redirect("/ui/");
                r.headers_mut().insert(http::header::SET_COOKIE, cookie.parse().map_err(|_| Failure::internal())?);
                Ok(r)
            }
            Err(refused) => Ok(pages::login(refused.status(), &refused.to_string())),
        }
    }
}

/// Why a page could not be made: its status and words for a person.
pub struct Failure {
    pub status: StatusCode,
    pub text: String,
}

impl Failure {
    fn store(e: crate::store::StoreError) -> Failure {
        Failure { status: StatusCode::SERVICE_UNAVAILABLE, text: format!("Redis did not answer: {e}") }
    }

    fn redis(e: redis::RedisError) -> Failure {
        Failure { status: StatusCode::SERVICE_UNAVAILABLE, text: format!("Redis did not answer: {e}") }
    }

    fn internal() -> Failure {
        Failure { status: StatusCode::INTERNAL_SERVER_ERROR, text: "the answer could not be built".into() }
    }
}

fn listener_is_loopback(addr: Option<&str>) -> bool {
    addr.and_then(|a| a.parse::<std::net::SocketAddr>().ok()).is_some_and(|a| a.ip().is_loopback())
}

/// A page's HTML, never cached (it is live data, maybe behind a login).
pub fn html(status: StatusCode, body: String) -> Reply {
    Response::builder()
        .status(status)
        .header("Content-Type", "text/html; charset=utf-8")
        .header("Content-Length", body.len())
        .header("Cache-Control", "no-store")
        .header("X-Frame-Options", "DENY")
        .header(
            "Content-Security-Policy",
            "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        )
        .header("Referrer-Policy", "same-origin")
        .header("X-Content-Type-Options", "nosniff")
        .body(body.into_bytes())
        .expect("static response parts are valid")
}

/// After a form: see the result at `to` (303, so a reload does not send the form again).
pub fn redirect(to: &str) -> Reply {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header("Location", to)
        .header("Content-Length", 0)
        .header("Cache-Control", "no-store")
        .body(Vec::new())
        .expect("static response parts are valid")
}

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");

fn asset(path: &str) -> Option<Reply> {
    let (body, kind) = match path {
        "/ui/assets/ui.css" => (CSS, "text/css; charset=utf-8"),
        "/ui/assets/ui.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return None,
    };
    Some(
        Response::builder()
            .status(StatusCode::OK)
            .header("Content-Type", kind)
            .header("Content-Length", body.len())
            .header("Cache-Control", "max-age=300")
            .header("X-Content-Type-Options", "nosniff")
            .body(body.as_bytes().to_vec())
            .expect("static response parts are valid"),
    )
}

/// The viewer a page is shown to, as the header needs it.
pub fn nav<'a>(viewer: Option<&'a Viewer>, current: &'a str) -> pages::Nav<'a> {
    pages::Nav {
        current,
        csrf: viewer.map_or("", |v| v.csrf.as_str()),
        session: viewer.is_some_and(Viewer::has_session),
        read_only: viewer.is_some_and(|v| v.role == auth::Role::Read),
    }
}
