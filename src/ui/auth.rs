//! Who may see the operator pages (`/ui/`) and who may act through them.
//!
//! - On a loopback admin listener with no `[server] admin_token`, the pages are open, as the
//!   admin API is there: every viewer is an admin, with no session.
//! - Otherwise a viewer logs in with a token (`POST /ui/login`, form field `token`): the admin
//!   token gives the admin role, `admin_read_token` the read role. A session is a random
//!   256-bit id in an `HttpOnly`, `SameSite=Strict` cookie; Redis keeps only the id's SHA-256
//!   (`{<prefix>:ui}:s:<hex>`) with the role and a proof of the token that made it, for the
//!   session's lifetime ([`sessions`]), so every replica knows the session and a copy of Redis
//!   holds no cookie and no token.
//! - A session lives only as long as its token: every request recomputes the proof from the
//!   configured token of its role, so once that token is rotated (or removed) the session is
//!   refused on every replica, after a restart too. [`sessions::end_all`] ends them all
//!   (`slackgate ui sessions --revoke-all`, or the admins' button).
//! - Failed logins are throttled per client address and per process ([`Throttle`], shared with
//!   the bearer admin API).
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

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use http::{HeaderMap, Method, StatusCode};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use super::throttle::Throttle;
use crate::config::{Secret, ServerConfig};
use crate::store::{Conn, StoreError};

pub mod sessions;

/// The session cookie.
pub const COOKIE: &str = "slackgate_ui";

/// What a session's CSRF token is derived from (keyed by the session id).
const SESSION_CSRF: &[u8] = b"slackgate ui csrf";
/// What the open viewer's CSRF token is derived from (keyed by the process secret).
const OPEN_CSRF: &[u8] = b"slackgate ui csrf (open loopback viewer)";
/// What a session's proof of its token is derived from (keyed by the token), before the id.
const SESSION_PROOF: &[u8] = b"slackgate ui session of token\n";
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
    #[error("too many failed logins from your address: try again in a minute")]
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
    keys: sessions::Keys,
    session_ttl: Duration,
    throttle: Arc<Throttle>,
    /// Keys the open loopback viewer's CSRF token: random per process.
    open_secret: [u8; 32],
}

impl UiAuth {
    /// `session_ttl`: how long a login lasts (at least a second); `throttle`: the failed
    /// tokens of this process (the admin API's too).
    pub fn new(conn: Conn, key_prefix: &str, session_ttl: Duration, throttle: Arc<Throttle>) -> Self {
        UiAuth {
            conn,
            keys: sessions::Keys::new(key_prefix),
            session_ttl: session_ttl.max(Duration::from_secs(1)),
            throttle,
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
        let key = session_key(&self.keys.sessions, id);
        let stored: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut self.conn.clone()).await?;
        // Sessions outlive the process and its config: one whose token is no longer the
        // configured one of its role is refused. Not deleted: in a rolling rotation a replica
        // still on the old config would end the sessions of the new token.
        let role = stored.as_deref().and_then(sessions::parse).and_then(|(role, proof)| {
            let token = granted(server, role)?;
            bool::from(proof.as_bytes().ct_eq(session_proof(token, id).as_bytes())).then_some(role)
        });
        Ok(role.map(|role| Viewer { role, csrf: session_csrf(id), session: Some(key) }))
    }

    /// Log in with `token` (the login form's field) from `client` (the TCP peer; `None`:
    /// unknown): the role and the `Set-Cookie` value of the new session, or why not. `tls`: the
    /// request came over TLS (the cookie is `Secure`).
    pub async fn login(
        &self,
        server: &ServerConfig,
        token: &str,
        client: Option<IpAddr>,
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
        let verdict = match self.throttle.judge(Instant::now(), client, matched.is_some()) {
            Err(_) => Err(LoginRefused::Throttled),
            Ok(()) => matched.ok_or(LoginRefused::WrongToken),
        };
        let role = match verdict {
            Ok(role) => role,
            Err(refused) => {
                tracing::warn!(target: "slackgate::audit", reason = %refused, "ui login refused");
                return Ok(Err(refused));
            }
        };
        let token = granted(server, role).expect("the role was granted by a configured token");
        let id = hex::encode(rand::random::<[u8; ID_BYTES]>());
        let value = sessions::value(role, &session_proof(token, &id));
        let ttl_ms = self.session_ttl.as_millis().try_into().unwrap_or(u64::MAX);
        sessions::store(&mut self.conn.clone(), &self.keys, &id_hash(&id), &value, ttl_ms).await?;
        tracing::info!(target: "slackgate::audit", role = role.as_label(), "ui login");
        Ok(Ok((role, set_cookie(&id, self.session_ttl, tls))))
    }

    /// End the session the request carries (if any): the `Set-Cookie` value that clears it.
    pub async fn logout(&self, headers: &HeaderMap, tls: bool) -> Result<String, StoreError> {
        if let Some(id) = session_id(headers) {
            sessions::end(&mut self.conn.clone(), &self.keys, &id_hash(id)).await?;
        }
        Ok(set_cookie("", Duration::ZERO, tls))
    }

    /// End every session (the caller's too): how many ended, and the `Set-Cookie` value that
    /// clears the caller's cookie.
    pub async fn end_all(&self, tls: bool) -> Result<(u64, String), StoreError> {
        let n = sessions::end_all(&mut self.conn.clone(), &self.keys).await?;
        tracing::warn!(target: "slackgate::audit", sessions = n, "ui sessions all ended");
        Ok((n, set_cookie("", Duration::ZERO, tls)))
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

/// The token a role logs in with, if it is configured (the read token counts only beside the
/// admin token).
fn granted(server: &ServerConfig, role: Role) -> Option<&Secret> {
    let admin = server.admin_token.as_ref()?;
    match role {
        Role::Admin => Some(admin),
        Role::Read => server.admin_read_token.as_ref(),
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
    format!("{keys}{}", id_hash(id))
}

fn id_hash(id: &str) -> String {
    crate::slack::digest(id.as_bytes())
}

/// What a session keeps of the token that made it: an HMAC of its id keyed by the token. The
/// same on every replica with that token; another token, or no id, gives another.
fn session_proof(token: &Secret, id: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token.expose()).expect("HMAC takes a key of any length");
    mac.update(SESSION_PROOF);
    mac.update(id.as_bytes());
    hex::encode(mac.finalize().into_bytes())
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

#[cfg(test)]
mod tests;
