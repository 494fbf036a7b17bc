//! The operator pages' login, sessions and logout (`slackgate::ui::auth`) against a real Redis.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method};
use sha2::{Digest, Sha256};
use slackgate::config::{Config, Overrides, ServerConfig};
use slackgate::store::{connect_lazy, Endpoint};
use slackgate::ui::auth::sessions::{self, Keys};
use slackgate::ui::auth::{check_write, LoginRefused, Role, UiAuth, WriteRefused};
use slackgate::ui::throttle::{Limits, Throttle};

use crate::utils::*;

const ADMIN: &str = "ui-admin-token-0123456789";
const READ: &str = "ui-read-token-0123456789";
/// The tokens they are rotated to.
const NEW_ADMIN: &str = "ui-admin-token-rotated-987654";
const NEW_READ: &str = "ui-read-token-rotated-987654";
/// Two clients' addresses.
const A: &str = "192.0.2.10";
const B: &str = "198.51.100.20";
const TTL: Duration = Duration::from_secs(12 * 3600);

/// `[server]` of a config: `tokens` ("admin", "admin+read", "none", or rotated: "new-admin+read",
/// "admin+new-read") on a public listener (none: the default loopback one).
fn server(tokens: &str) -> ServerConfig {
    // Each variable always holds the same value: tests running at once agree.
    for (var, value) in [
        ("SG_IT_UI_ADMIN", ADMIN),
        ("SG_IT_UI_READ", READ),
        ("SG_IT_UI_ADMIN_NEW", NEW_ADMIN),
        ("SG_IT_UI_READ_NEW", NEW_READ),
        ("SG_IT_UI_SECRET", "ui-signing-secret"),
    ] {
        std::env::set_var(var, value);
    }
    let (admin, read) = match tokens {
        "admin" => (Some("SG_IT_UI_ADMIN"), None),
        "admin+read" => (Some("SG_IT_UI_ADMIN"), Some("SG_IT_UI_READ")),
        "new-admin+read" => (Some("SG_IT_UI_ADMIN_NEW"), Some("SG_IT_UI_READ")),
        "admin+new-read" => (Some("SG_IT_UI_ADMIN"), Some("SG_IT_UI_READ_NEW")),
        _ => (None, None),
    };
    let mut server = String::new();
    if let Some(admin) = admin {
        server.push_str(&format!("admin_listen = \"0.0.0.0:9090\"\nadmin_token = \"${{{admin}}}\"\n"));
    }
    if let Some(read) = read {
        server.push_str(&format!("admin_read_token = \"${{{read}}}\"\n"));
    }
    let text = format!(
        "[server]\n{server}\n[[app]]\nname = \"a\"\nsigning_secret = \"${{SG_IT_UI_SECRET}}\"\nupstream = \"http://127.0.0.1:8000\"\n"
    );
    Config::from_toml(&text, Path::new("gateway.toml"), &Overrides::default()).unwrap().server
}

fn setup(test: &str) -> (RedisServer, UiAuth, String) {
    let redis = RedisServer::start();
    let prefix = prefix(test);
    let auth = process(&redis, &prefix, Throttle::default());
    (redis, auth, prefix)
}

/// The pages' gate of one gateway process (its own throttle) on `redis`.
fn process(redis: &RedisServer, prefix: &str, throttle: Throttle) -> UiAuth {
    let conn = connect_lazy(&Endpoint::url(&redis.url()), Duration::from_secs(2)).unwrap();
    UiAuth::new(conn, prefix, TTL, Arc::new(throttle))
}

fn ip(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

/// The session id a `Set-Cookie` value carries.
fn id_of(set_cookie: &str) -> String {
    let first = set_cookie.split(';').next().unwrap();
    first.strip_prefix("slackgate_ui=").unwrap().to_string()
}

/// A form sent from the pages themselves, with the session's cookie among others.
fn form_with(set_cookie: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("cookie", format!("theme=dark; slackgate_ui={}", id_of(set_cookie)).parse().unwrap());
    h.insert("host", "gw.internal:9090".parse().unwrap());
    h.insert("origin", "https://gw.internal:9090".parse().unwrap());
    h
}

async fn login(auth: &UiAuth, server: &ServerConfig, token: &str) -> Result<(Role, String), LoginRefused> {
    login_from(auth, server, token, A).await
}

async fn login_from(
    auth: &UiAuth,
    server: &ServerConfig,
    token: &str,
    from: &str,
) -> Result<(Role, String), LoginRefused> {
    auth.login(server, token, ip(from), false).await.unwrap()
}

/// Whether the session `cookie` lets its viewer look under `server`.
async fn looks(auth: &UiAuth, server: &ServerConfig, cookie: &str) -> bool {
    auth.viewer(server, false, &form_with(cookie)).await.unwrap().is_some()
}

#[tokio::test]
async fn a_login_stores_the_hash_of_its_session_and_the_role() {
    let (redis, auth, prefix) = setup("ui_login");
    let server = server("admin+read");
    let (role, cookie) = login(&auth, &server, ADMIN).await.unwrap();
    assert_eq!(role, Role::Admin);
    assert!(cookie.ends_with("; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=43200"), "{cookie}");
    let id = id_of(&cookie);
    assert_eq!(id.len(), 64, "256 random bits: {id}");
    let keys = redis.keys(&format!("{{{prefix}:ui}}:s:*"));
    assert_eq!(keys, [format!("{{{prefix}:ui}}:s:{}", hex::encode(Sha256::digest(id.as_bytes())))]);
    assert!(!keys[0].contains(&id), "the id itself is never stored");
    let mut c = redis.conn();
    let stored: String = redis::cmd("GET").arg(&keys[0]).query(&mut c).unwrap();
    let proof = stored.strip_prefix("admin:").unwrap_or_else(|| panic!("the role, then the token's proof: {stored}"));
    assert_eq!(proof.len(), 64, "{stored}");
    assert!(!stored.contains(ADMIN) && !stored.contains(&id), "neither the token nor the id: {stored}");
    let ttl: i64 = redis::cmd("TTL").arg(&keys[0]).query(&mut c).unwrap();
    assert!((43_190..=43_200).contains(&ttl), "{ttl}");
    // The index of sessions expires with its last one.
    let index = format!("{{{prefix}:ui}}:sessions");
    let members: Vec<String> = redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1).query(&mut c).unwrap();
    assert_eq!(members, [keys[0].rsplit(':').next().unwrap()]);
    let ttl: i64 = redis::cmd("TTL").arg(&index).query(&mut c).unwrap();
    assert!((43_190..=43_200).contains(&ttl), "{ttl}");
    // Over TLS the cookie is Secure; each login is a session of its own.
    let (_, secure) = auth.login(&server, ADMIN, ip(A), true).await.unwrap().unwrap();
    assert!(secure.ends_with("; Secure"), "{secure}");
    assert_ne!(id_of(&secure), id);
    // The session lets its viewer look, with a CSRF token of its own.
    let v = auth.viewer(&server, false, &form_with(&cookie)).await.unwrap().expect("a viewer");
    let w = auth.viewer(&server, false, &form_with(&secure)).await.unwrap().expect("a viewer");
    assert_eq!((v.role, v.has_session()), (Role::Admin, true));
    assert_ne!(v.csrf, w.csrf);
    assert_eq!(check_write(&Method::POST, &form_with(&cookie), &v, Some(&v.csrf)), Ok(()));
    assert_eq!(check_write(&Method::POST, &form_with(&cookie), &v, Some(&w.csrf)), Err(WriteRefused::Csrf));
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_many_stop_that_address_only() {
    let (redis, auth, prefix) = setup("ui_wrong");
    let server = server("admin+read");
    for wrong in ["", "ui-admin-token-012345678", "ui-admin-token-01234567890", "UI-ADMIN-TOKEN-0123456789"] {
        assert_eq!(login(&auth, &server, wrong).await, Err(LoginRefused::WrongToken), "{wrong:?}");
    }
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty(), "no session for a wrong token");
    // A made-up cookie is no session.
    let made_up = format!("slackgate_ui={}; Path=/ui", "ab".repeat(32));
    assert_eq!(auth.viewer(&server, false, &form_with(&made_up)).await.unwrap(), None);
    for _ in 4..Limits::TOKENS.per_address {
        assert_eq!(login(&auth, &server, "guess-guess-guess-1").await, Err(LoginRefused::WrongToken));
    }
    // Address A reached the limit: the right token from A waits too.
    assert_eq!(login(&auth, &server, ADMIN).await, Err(LoginRefused::Throttled));
    assert_eq!(login(&auth, &server, "guess-guess-guess-1").await, Err(LoginRefused::Throttled));
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty());
    // The operator at address B logs in meanwhile.
    let (role, cookie) = login_from(&auth, &server, ADMIN, B).await.unwrap();
    assert_eq!(role, Role::Admin);
    assert!(looks(&auth, &server, &cookie).await);
    assert_eq!(login_from(&auth, &server, READ, B).await.map(|(r, _)| r), Ok(Role::Read));
}

#[tokio::test]
async fn many_addresses_failing_together_reach_the_ceiling_of_the_process() {
    let (redis, _, prefix) = setup("ui_ceiling");
    let server = server("admin");
    let limits = Limits { global: 25, ..Limits::TOKENS };
    let auth = process(&redis, &prefix, Throttle::new(limits));
    // 25 failures from five addresses, none over its own 10.
    for i in 0..25 {
        let from = format!("203.0.113.{}", i % 5);
        assert_eq!(login_from(&auth, &server, "guess-guess-guess-2", &from).await, Err(LoginRefused::WrongToken));
    }
    // Past the ceiling every address waits, a fresh one with the right token too.
    assert_eq!(login_from(&auth, &server, ADMIN, B).await, Err(LoginRefused::Throttled));
    // Another process (its own throttle) is not held up.
    let other = process(&redis, &prefix, Throttle::new(limits));
    assert_eq!(login_from(&other, &server, ADMIN, B).await.map(|(r, _)| r), Ok(Role::Admin));
}

#[tokio::test]
async fn a_session_ends_when_its_token_is_rotated_on_every_process_after_a_restart_too() {
    let (redis, auth, prefix) = setup("ui_rotate");
    let before = server("admin+read");
    let (_, admin) = login(&auth, &before, ADMIN).await.unwrap();
    let (_, reader) = login(&auth, &before, READ).await.unwrap();
    assert!(looks(&auth, &before, &admin).await && looks(&auth, &before, &reader).await);
    // A restart with the same tokens (a new process on the same Redis) keeps both.
    let restarted = process(&redis, &prefix, Throttle::default());
    assert!(looks(&restarted, &before, &admin).await && looks(&restarted, &before, &reader).await);
    // The admin token rotated: its sessions end, on the old process and a new one alike;
    // the read token's stay.
    let rotated = server("new-admin+read");
    for p in [&auth, &restarted] {
        assert!(!looks(p, &rotated, &admin).await, "a session of the old admin token");
        assert!(looks(p, &rotated, &reader).await, "the read token did not change");
    }
    // A login with the new token works; with the old one it is refused.
    assert_eq!(login(&restarted, &rotated, ADMIN).await, Err(LoginRefused::WrongToken));
    let (_, fresh) = login(&restarted, &rotated, NEW_ADMIN).await.unwrap();
    assert!(looks(&auth, &rotated, &fresh).await);
    // The read token rotated: the read sessions end, the admin's of the current token stay.
    let read_rotated = server("admin+new-read");
    let (_, admin) = login(&auth, &read_rotated, ADMIN).await.unwrap();
    assert!(!looks(&auth, &read_rotated, &reader).await, "a session of the old read token");
    assert!(looks(&auth, &read_rotated, &admin).await);
    // Rotated back (a rollback of the config): the old token's session is good again, as it
    // was never deleted (a replica still on the old config must not end the new sessions).
    assert!(looks(&auth, &before, &reader).await);
}

#[tokio::test]
async fn revoke_all_ends_every_session_and_counts_them() {
    let (redis, auth, prefix) = setup("ui_revoke");
    let server = server("admin+read");
    let keys = Keys::new(&prefix);
    let mut conn = connect_lazy(&Endpoint::url(&redis.url()), Duration::from_secs(2)).unwrap();
    assert_eq!(sessions::count(&mut conn, &keys).await.unwrap(), sessions::Count::default());
    let mut cookies = Vec::new();
    for token in [ADMIN, ADMIN, READ] {
        cookies.push(login(&auth, &server, token).await.unwrap().1);
    }
    assert_eq!(sessions::count(&mut conn, &keys).await.unwrap(), sessions::Count { admin: 2, read: 1 });
    // One logged out is no longer counted.
    auth.logout(&form_with(&cookies.pop().unwrap()), false).await.unwrap();
    assert_eq!(sessions::count(&mut conn, &keys).await.unwrap(), sessions::Count { admin: 2, read: 0 });
    let (ended, clear) = auth.end_all(false).await.unwrap();
    assert_eq!(ended, 2);
    assert!(clear.contains("Max-Age=0"), "{clear}");
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty(), "no session and no index is left");
    for cookie in &cookies {
        assert!(!looks(&auth, &server, cookie).await);
    }
    assert_eq!(sessions::end_all(&mut conn, &keys).await.unwrap(), 0, "nothing left to end");
    // Logins after it work as before.
    let (_, after) = login(&auth, &server, ADMIN).await.unwrap();
    assert!(looks(&auth, &server, &after).await);
}

#[tokio::test]
async fn a_read_session_looks_but_cannot_write() {
    let (_redis, auth, _) = setup("ui_read");
    let server = server("admin+read");
    let (role, cookie) = login(&auth, &server, READ).await.unwrap();
    assert_eq!(role, Role::Read);
    let v = auth.viewer(&server, false, &form_with(&cookie)).await.unwrap().expect("a viewer");
    assert_eq!(v.role, Role::Read);
    assert_eq!(check_write(&Method::POST, &form_with(&cookie), &v, Some(&v.csrf)), Err(WriteRefused::ReadOnly));
    assert_eq!(slackgate::ui::auth::check_form(&Method::POST, &form_with(&cookie), &v, Some(&v.csrf)), Ok(()));
    // A restart without the read token ends the read sessions (not the admin ones).
    let (_, admin) = login(&auth, &server, ADMIN).await.unwrap();
    let without = self::server("admin");
    assert_eq!(auth.viewer(&without, false, &form_with(&cookie)).await.unwrap(), None);
    assert!(auth.viewer(&without, false, &form_with(&admin)).await.unwrap().is_some());
    assert_eq!(login(&auth, &without, READ).await, Err(LoginRefused::WrongToken));
}

#[tokio::test]
async fn logout_and_expiry_end_a_session() {
    let (redis, auth, prefix) = setup("ui_logout");
    let server = server("admin");
    let (_, cookie) = login(&auth, &server, ADMIN).await.unwrap();
    let (_, kept) = login(&auth, &server, ADMIN).await.unwrap();
    assert!(auth.viewer(&server, false, &form_with(&cookie)).await.unwrap().is_some());
    let cleared = auth.logout(&form_with(&cookie), true).await.unwrap();
    assert_eq!(cleared, "slackgate_ui=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0; Secure");
    assert_eq!(auth.viewer(&server, false, &form_with(&cookie)).await.unwrap(), None, "the old cookie is no session");
    assert_eq!(redis.keys(&format!("{{{prefix}:ui}}:s:*")).len(), 1, "the other session stays");
    // Logging out without a session only clears the cookie.
    assert!(auth.logout(&HeaderMap::new(), false).await.unwrap().ends_with("Max-Age=0"));
    // A session Redis expires is gone as well.
    let key = redis.keys(&format!("{{{prefix}:ui}}:s:*")).remove(0);
    let _: i64 = redis::cmd("PEXPIRE").arg(&key).arg(1).query(&mut redis.conn()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while auth.viewer(&server, false, &form_with(&kept)).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the expired session still lets its viewer in");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_pages_are_open_only_on_loopback_without_a_token() {
    let (redis, auth, prefix) = setup("ui_open");
    let open = server("none");
    let v = auth.viewer(&open, true, &HeaderMap::new()).await.unwrap().expect("the open viewer");
    assert_eq!((v.role, v.has_session()), (Role::Admin, false));
    assert_eq!(v.csrf.len(), 64);
    let again = auth.viewer(&open, true, &HeaderMap::new()).await.unwrap().unwrap();
    assert_eq!(again.csrf, v.csrf, "one token per process");
    let mut form = HeaderMap::new();
    form.insert("host", "127.0.0.1:9090".parse().unwrap());
    form.insert("origin", "http://127.0.0.1:9090".parse().unwrap());
    assert_eq!(check_write(&Method::POST, &form, &v, Some(&v.csrf)), Ok(()));
    assert_eq!(check_write(&Method::POST, &form, &v, None), Err(WriteRefused::Csrf));
    // Not on loopback, or with a token: the login form.
    assert_eq!(auth.viewer(&open, false, &HeaderMap::new()).await.unwrap(), None);
    assert_eq!(auth.viewer(&server("admin"), true, &HeaderMap::new()).await.unwrap(), None);
    // Without a token there is nothing to log in with.
    assert_eq!(login(&auth, &open, "").await, Err(LoginRefused::NoToken));
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty());
}
