//! The operator pages' login, sessions and logout (`slackgate::ui::auth`) against a real Redis.

use std::path::Path;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method};
use sha2::{Digest, Sha256};
use slackgate::config::{Config, Overrides, ServerConfig};
use slackgate::store::{connect_lazy, Endpoint};
use slackgate::ui::auth::{check_write, LoginRefused, Role, UiAuth, WriteRefused, MAX_FAILURES};

use crate::utils::*;

const ADMIN: &str = "ui-admin-token-0123456789";
const READ: &str = "ui-read-token-0123456789";
const TTL: Duration = Duration::from_secs(12 * 3600);

/// `[server]` of a config: `tokens` ("admin", "admin+read" or "none") on a public listener
/// (none: the default loopback one).
fn server(tokens: &str) -> ServerConfig {
    std::env::set_var("SG_IT_UI_ADMIN", ADMIN);
    std::env::set_var("SG_IT_UI_READ", READ);
    std::env::set_var("SG_IT_UI_SECRET", "ui-signing-secret");
    let server = match tokens {
        "admin" => "admin_listen = \"0.0.0.0:9090\"\nadmin_token = \"${SG_IT_UI_ADMIN}\"",
        "admin+read" => {
            "admin_listen = \"0.0.0.0:9090\"\nadmin_token = \"${SG_IT_UI_ADMIN}\"\nadmin_read_token = \"${SG_IT_UI_READ}\""
        }
        _ => "",
    };
    let text = format!(
        "[server]\n{server}\n[[app]]\nname = \"a\"\nsigning_secret = \"${{SG_IT_UI_SECRET}}\"\nupstream = \"http://127.0.0.1:8000\"\n"
    );
    Config::from_toml(&text, Path::new("gateway.toml"), &Overrides::default()).unwrap().server
}

fn setup(test: &str) -> (RedisServer, UiAuth, String) {
    let redis = RedisServer::start();
    let conn = connect_lazy(&Endpoint::url(&redis.url()), Duration::from_secs(2)).unwrap();
    let prefix = prefix(test);
    let auth = UiAuth::new(conn, &prefix, TTL);
    (redis, auth, prefix)
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
    auth.login(server, token, false).await.unwrap()
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
    assert_eq!(stored, "admin");
    let ttl: i64 = redis::cmd("TTL").arg(&keys[0]).query(&mut c).unwrap();
    assert!((43_190..=43_200).contains(&ttl), "{ttl}");
    // Over TLS the cookie is Secure; each login is a session of its own.
    let (_, secure) = auth.login(&server, ADMIN, true).await.unwrap().unwrap();
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
async fn a_wrong_token_is_refused_and_many_stop_every_login() {
    let (redis, auth, prefix) = setup("ui_wrong");
    let server = server("admin+read");
    for wrong in ["", "ui-admin-token-012345678", "ui-admin-token-01234567890", "UI-ADMIN-TOKEN-0123456789"] {
        assert_eq!(login(&auth, &server, wrong).await, Err(LoginRefused::WrongToken), "{wrong:?}");
    }
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty(), "no session for a wrong token");
    // A made-up cookie is no session.
    let made_up = format!("slackgate_ui={}; Path=/ui", "ab".repeat(32));
    assert_eq!(auth.viewer(&server, false, &form_with(&made_up)).await.unwrap(), None);
    for _ in 4..MAX_FAILURES {
        assert_eq!(login(&auth, &server, "guess-guess-guess-1").await, Err(LoginRefused::WrongToken));
    }
    // The limit is reached: the right token waits too.
    assert_eq!(login(&auth, &server, ADMIN).await, Err(LoginRefused::Throttled));
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty());
    // Another process (its own throttle) is not held up.
    let other = UiAuth::new(connect_lazy(&Endpoint::url(&redis.url()), Duration::from_secs(2)).unwrap(), &prefix, TTL);
    assert_eq!(login(&other, &server, READ).await.map(|(r, _)| r), Ok(Role::Read));
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
