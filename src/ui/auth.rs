//! Who may see the operator pages (`/ui/`) and who may act through them.
//!
//! - On a loopback admin listener with no `[server] admin_token`, the pages are open, as the
//!   admin API is there: every viewer is an admin, with no session.
//! - Otherwise a viewer logs in with a token (`POST /ui/login`, form field `token`): the admin
//!   token gives the admin role, `admin_read_token` the read role. A session is a random
//!   256-bit id in an `HttpOnly`, `SameSite=Strict` cookie; Redis keeps only the id's SHA-256
//!   (`{<prefix>:ui}:s:<hex>`) with the role, for the session's lifetime, so every replica
//!   knows the session and a copy of Redis holds no cookie. Failed logins are throttled per
//!   process ([`MAX_FAILURES`] in [`FAILURE_WINDOW`]).
//! - A form is answered only when it is a POST from the page's own origin carrying the
//!   viewer's CSRF token ([`check_form`]); a write wants the admin role too ([`check_write`]).
//!
//! A session's CSRF token is an HMAC keyed by the session id: every replica derives the same
//! one, and nobody derives it without the cookie, which no script can read. The open loopback
//! viewer has no cookie: its token is keyed by a random secret of the process instead (a form
//! rendered by one process and sent to another, e.g. across `run --upgrade`, is refused once
//! and works after a reload).
//!
//! The caller checks the `Host` allow-list first, as for the admin API.

use std::sync::Mutex;
use std::time::Duration;

use hmac::{Hmac, Mac};
use http::{HeaderMap, Method, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use crate::config::{Secret, ServerConfig};
use crate::store::{Conn, StoreError};

/// The session cookie.
pub const COOKIE: &str = "slackgate_ui";
/// At most this many failed logins per process within [`FAILURE_WINDOW`]; past it every login,
/// right or wrong, is refused until the window ends, so a token cannot be guessed fast.
pub const MAX_FAILURES: u32 = 10;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// What a session's CSRF token is derived from (keyed by the session id).
const SESSION_CSRF: &[u8] = b"slackgate ui csrf";
/// What the open viewer's CSRF token is derived from (keyed by the process secret).
const OPEN_CSRF: &[u8] = b"slackgate ui csrf (open loopback viewer)";
/// Bytes of a session id (hex in the cookie).
const ID_BYTES: usize = 32;

/// What a viewer may do: look, or look and act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Read,
    Admin,
}

impl Role {
    /// As stored in a session.
    pub fn as_label(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }

    fn from_label(label: &str) -> Option<Role> {
        match label {
            "read" => Some(Role::Read),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// Someone who may look at the pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub role: Role,
    /// What every form shown to this viewer carries in its `csrf` field.
    pub csrf: String,
    /// The session's key in Redis; `None` for the open loopback viewer.
    session: Option<String>,
}

impl Viewer {
    /// Whether the viewer logged in (and so has a session to log out of).
    pub fn has_session(&self) -> bool {
        self.session.is_some()
    }
}

/// Why a login was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LoginRefused {
    #[error("wrong token: log in with server.admin_token or server.admin_read_token")]
    WrongToken,
    #[error("too many failed logins: try again in a minute")]
    Throttled,
    #[error("no token is configured to log in with (set server.admin_token)")]
    NoToken,
}

impl LoginRefused {
    pub fn status(self) -> StatusCode {
        match self {
            LoginRefused::WrongToken => StatusCode::UNAUTHORIZED,
            LoginRefused::Throttled => StatusCode::TOO_MANY_REQUESTS,
            LoginRefused::NoToken => StatusCode::FORBIDDEN,
        }
    }
}

/// Why a form was refused before it acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WriteRefused {
    #[error("this action changes state: send it with the page's button (POST)")]
    Method,
    #[error("you are logged in with the read-only token: you can look but not act")]
    ReadOnly,
    #[error("refused: the request does not say which page sent it (no Origin header)")]
    NoOrigin,
    #[error("refused: the form was sent from another site than this gateway's pages")]
    CrossOrigin,
    #[error("refused: the form's security token is missing or out of date; reload the page and try again")]
    Csrf,
}

impl WriteRefused {
    pub fn status(self) -> StatusCode {
        match self {
            WriteRefused::Method => StatusCode::METHOD_NOT_ALLOWED,
            _ => StatusCode::FORBIDDEN,
        }
    }
}

/// The pages' gate: sessions in Redis, the login throttle, the open viewer's CSRF secret.
pub struct UiAuth {
    conn: Conn,
    /// `{<key_prefix>:ui}:s:`, followed by a session id's hash.
    keys: String,
    session_ttl: Duration,
    throttle: Throttle,
    /// Keys the open loopback viewer's CSRF token: random per process.
    open_secret: [u8; 32],
}

impl UiAuth {
    /// `session_ttl`: how long a login lasts (at least a second).
    pub fn new(conn: Conn, key_prefix: &str, session_ttl: Duration) -> Self {
        UiAuth {
            conn,
            keys: format!("{{{key_prefix}:ui}}:s:"),
            session_ttl: session_ttl.max(Duration::from_secs(1)),
            throttle: Throttle::default(),
            // `rand::random` draws from the thread's CSPRNG (ChaCha, seeded by the OS).
            open_secret: rand::random(),
        }
    }

    /// Who is looking: `Ok(Some(viewer))` may look; `Ok(None)`: show the login form.
    /// `loopback_listener`: the admin listener is bound to a loopback address.
    pub async fn viewer(
        &self,
        server: &ServerConfig,
        loopback_listener: bool,
        headers: &HeaderMap,
    ) -> Result<Option<Viewer>, StoreError> {
        if is_open(server, loopback_listener) {
            let csrf = hmac_hex(&self.open_secret, OPEN_CSRF);
            return Ok(Some(Viewer { role: Role::Admin, csrf, session: None }));
        }
        let Some(id) = session_id(headers) else { return Ok(None) };
        let key = session_key(&self.keys, id);
        let stored: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut self.conn.clone()).await?;
        // Sessions outlive the process: a role whose token is no longer configured ends them.
        let role = stored.as_deref().and_then(Role::from_label).filter(|r| still_granted(server, *r));
        Ok(role.map(|role| Viewer { role, csrf: session_csrf(id), session: Some(key) }))
    }

    /// Log in with `token` (the login form's field): the role and the `Set-Cookie` value of
    /// the new session, or why not. `tls`: the request came over TLS (the cookie is `Secure`).
    pub async fn login(
        &self,
        server: &ServerConfig,
        token: &str,
        tls: bool,
    ) -> Result<Result<(Role, String), LoginRefused>, StoreError> {
        let Some(admin) = &server.admin_token else { return Ok(Err(LoginRefused::NoToken)) };
        let given = Secret::new(token);
        let matched = if given == *admin {
            Some(Role::Admin)
        } else if server.admin_read_token.as_ref().is_some_and(|r| given == *r) {
            Some(Role::Read)
        } else {
            None
        };
        let role = match self.throttle.judge(Instant::now(), matched) {
            Ok(role) => role,
            Err(refused) => {
                tracing::warn!(target: "slackgate::audit", reason = %refused, "ui login refused");
                return Ok(Err(refused));
            }
        };
        let id = hex::encode(rand::random::<[u8; ID_BYTES]>());
        let _: () = redis::cmd("SET")
            .arg(session_key(&self.keys, &id))
            .arg(role.as_label())
            .arg("EX")
            .arg(self.session_ttl.as_secs())
            .query_async(&mut self.conn.clone())
            .await?;
        tracing::info!(target: "slackgate::audit", role = role.as_label(), "ui login");
        Ok(Ok((role, set_cookie(&id, self.session_ttl, tls))))
    }

    /// End the session the request carries (if any): the `Set-Cookie` value that clears it.
    pub async fn logout(&self, headers: &HeaderMap, tls: bool) -> Result<String, StoreError> {
        if let Some(id) = session_id(headers) {
            let _: () = redis::cmd("DEL").arg(session_key(&self.keys, id)).query_async(&mut self.conn.clone()).await?;
        }
        Ok(set_cookie("", Duration::ZERO, tls))
    }
}

/// The rule for a form that changes state: a POST, by an admin, from the page's own origin,
/// carrying the viewer's CSRF token (`form_csrf`: the form's `csrf` field).
pub fn check_write(
    method: &Method,
    headers: &HeaderMap,
    viewer: &Viewer,
    form_csrf: Option<&str>,
) -> Result<(), WriteRefused> {
    if method == Method::POST && viewer.role != Role::Admin {
        return Err(WriteRefused::ReadOnly);
    }
    check_form(method, headers, viewer, form_csrf)
}

/// The rule for any form, whatever the role (logging out): a POST from the page's own origin
/// carrying the viewer's CSRF token.
pub fn check_form(
    method: &Method,
    headers: &HeaderMap,
    viewer: &Viewer,
    form_csrf: Option<&str>,
) -> Result<(), WriteRefused> {
    if method != Method::POST {
        return Err(WriteRefused::Method);
    }
    check_origin(headers)?;
    let given = form_csrf.unwrap_or_default().as_bytes();
    if given.is_empty() || !bool::from(given.ct_eq(viewer.csrf.as_bytes())) {
        return Err(WriteRefused::Csrf);
    }
    Ok(())
}

/// `Origin` is `http://<Host>` or `https://<Host>` of the request. A missing one is refused:
/// browsers send it on every POST. Also for the login form, which has no viewer yet.
pub fn check_origin(headers: &HeaderMap) -> Result<(), WriteRefused> {
    let origin = headers.get(http::header::ORIGIN).ok_or(WriteRefused::NoOrigin)?;
    let origin = origin.to_str().map_err(|_| WriteRefused::CrossOrigin)?;
    let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).filter(|h| !h.is_empty());
    let Some(host) = host else { return Err(WriteRefused::CrossOrigin) };
    let same = ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme).is_some_and(|rest| rest.eq_ignore_ascii_case(host)));
    if same {
        Ok(())
    } else {
        Err(WriteRefused::CrossOrigin)
    }
}

/// The pages need no login: a loopback admin listener and no admin token.
fn is_open(server: &ServerConfig, loopback_listener: bool) -> bool {
    loopback_listener && server.admin_token.is_none()
}

/// Whether the token a role logs in with is still configured.
fn still_granted(server: &ServerConfig, role: Role) -> bool {
    server.admin_token.is_some()
        && match role {
            Role::Admin => true,
            Role::Read => server.admin_read_token.is_some(),
        }
}

/// The session id a request carries: the first well-formed `slackgate_ui` cookie of any
/// `Cookie` header (`a=1; slackgate_ui=…`); malformed pairs and values are passed over.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == COOKIE && well_formed(value))
        .map(|(_, value)| value)
}

/// A session id as [`UiAuth::login`] makes them: lower-case hex of [`ID_BYTES`] bytes.
fn well_formed(id: &str) -> bool {
    id.len() == 2 * ID_BYTES && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Where a session is stored: under the hash of its id, never the id itself.
fn session_key(keys: &str, id: &str) -> String {
    format!("{keys}{}", hex::encode(Sha256::digest(id.as_bytes())))
}

/// A session's CSRF token, derived from its id alone (the same on every replica).
fn session_csrf(id: &str) -> String {
    hmac_hex(id.as_bytes(), SESSION_CSRF)
}

fn hmac_hex(key: &[u8], message: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    hex::encode(mac.finalize().into_bytes())
}

/// The `Set-Cookie` value for a session (`Max-Age=0` and no id: the one that clears it).
fn set_cookie(id: &str, max_age: Duration, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age={}{secure}", max_age.as_secs())
}

/// Failed logins of this process in the current window: the start of the window (its first
/// failure) and how many.
#[derive(Debug, Default)]
struct Throttle {
    window: Mutex<Option<(Instant, u32)>>,
}

impl Throttle {
    /// The verdict on a login at `now` whose token matched `role` (`None`: no token), counted
    /// under one lock, so many logins at once cannot slip past the limit together.
    fn judge(&self, now: Instant, role: Option<Role>) -> Result<Role, LoginRefused> {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let current = (*window).filter(|(start, _)| now.saturating_duration_since(*start) < FAILURE_WINDOW);
        if current.is_some_and(|(_, failures)| failures >= MAX_FAILURES) {
            return Err(LoginRefused::Throttled);
        }
        match role {
            Some(role) => Ok(role),
            None => {
                *window = Some(current.map_or((now, 1), |(start, failures)| (start, failures + 1)));
                Err(LoginRefused::WrongToken)
            }
        }
    }
}

#[cfg(test)]
mod tests;
