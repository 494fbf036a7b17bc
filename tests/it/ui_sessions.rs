//! The pages' sessions over HTTP and in a browser (issue 32): a session ends with its token,
//! on every replica; an admin ends them all from the pages or with
//! `slackgate ui sessions --revoke-all`.

use std::process::Command;
use std::time::Duration;

use crate::ui::{page, ADMIN, READER};
use crate::utils::*;

/// A rotated admin token.
const NEW_ADMIN: &str = "ui-admin-token-rotated-fedcba987654";

/// A gateway on `redis` under `prefix` with `admin` (its variable's value) and the read token.
async fn gateway(redis: &RedisServer, prefix: &str, bot: &Receiver, admin: &str) -> Gateway {
    let mut cfg = GatewayConfig::new(&redis.url(), prefix, &bot.url());
    cfg.server = "admin_token = \"${SG_ADMIN_TOKEN}\"\nadmin_read_token = \"${SG_READ_TOKEN}\"".into();
    Gateway::start_with_env(&cfg, &[("SG_ADMIN_TOKEN", admin), ("SG_READ_TOKEN", READER)]).await
}

async fn login(port: u16, token: &str) -> String {
    let origin = format!("http://127.0.0.1:{port}");
    let p = page(port, "/ui/login", "", Some((&format!("token={token}"), Some(&origin)))).await;
    assert_eq!(p.status, 303, "{}", p.body);
    p.cookie()
}

/// Whether `cookie` opens the overview of the gateway at `port` (else: back to the login).
async fn opens(port: u16, cookie: &str) -> bool {
    let p = page(port, "/ui/", cookie, None).await;
    match (p.status, p.header("location")) {
        (200, _) => true,
        (303, "/ui/login") => false,
        other => panic!("{other:?}: {}", p.body),
    }
}

fn cli(gw: &Gateway, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(args)
        .arg("--config")
        .arg(&gw.config_path)
        .env("SG_TEST_SECRET", SECRET)
        .env_remove("SG_ADMIN_TOKEN")
        .env_remove("SLACKGATE_REDIS_URL")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_a_rotated_token_goes_back_to_the_login_on_every_replica() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let prefix = prefix("uirotate");
    let old = gateway(&redis, &prefix, &bot, ADMIN).await;
    let admin = login(old.admin_port, ADMIN).await;
    let reader = login(old.admin_port, READER).await;
    assert!(opens(old.admin_port, &admin).await && opens(old.admin_port, &reader).await);
    // The admin token rotated: a gateway started with the new one (a restart, or a replica)
    // on the same Redis refuses the old token's session and keeps the read token's.
    let new = gateway(&redis, &prefix, &bot, NEW_ADMIN).await;
    assert!(!opens(new.admin_port, &admin).await, "a session of the old admin token");
    assert!(opens(new.admin_port, &reader).await, "the read token did not change");
    // Its forms are refused as a missing session is; nothing acts.
    let origin = format!("http://127.0.0.1:{}", new.admin_port);
    let p = page(new.admin_port, "/ui/sessions/revoke", &admin, Some(("csrf=x", Some(&origin)))).await;
    assert_eq!(p.status, 401, "{}", p.body);
    assert!(opens(new.admin_port, &reader).await);
    let fresh = login(new.admin_port, NEW_ADMIN).await;
    assert!(opens(new.admin_port, &fresh).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_ends_every_session_from_the_pages_or_the_cli() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let prefix = prefix("uiend");
    let gw = gateway(&redis, &prefix, &bot, ADMIN).await;
    let port = gw.admin_port;
    let origin = format!("http://127.0.0.1:{port}");
    let (admin, other, reader) = (login(port, ADMIN).await, login(port, ADMIN).await, login(port, READER).await);
    let (ok, out, err) = cli(&gw, &["ui", "sessions"]);
    assert!(ok, "{err}");
    assert_eq!(out, "admin 2\nread  1\n");
    // The button is an admin's; a reader's post is refused and ends nothing.
    let read_page = page(port, "/ui/", &reader, None).await;
    assert!(!read_page.body.contains("End all sessions"), "{}", read_page.body);
    let form = format!("csrf={}", read_page.csrf());
    let p = page(port, "/ui/sessions/revoke", &reader, Some((&form, Some(&origin)))).await;
    assert_eq!(p.status, 403, "{}", p.body);
    let overview = page(port, "/ui/", &admin, None).await;
    assert!(overview.body.contains("End all sessions"), "{}", overview.body);
    let form = format!("csrf={}", overview.csrf());
    for (why, body, origin) in [
        ("another site's form", form.as_str(), Some("http://evil.example")),
        ("no CSRF token", "csrf=", Some(origin.as_str())),
    ] {
        assert_eq!(page(port, "/ui/sessions/revoke", &admin, Some((body, origin))).await.status, 403, "{why}");
    }
    assert!(opens(port, &other).await && opens(port, &reader).await, "nothing refused ended a session");
    // The admin's own post: every session ends, theirs too, and the login says how many.
    let p = page(port, "/ui/sessions/revoke", &admin, Some((&form, Some(&origin)))).await;
    assert_eq!((p.status, p.header("location")), (303, "/ui/login?ended=3"), "{}", p.body);
    assert!(p.header("set-cookie").contains("Max-Age=0"), "{}", p.header("set-cookie"));
    for cookie in [&admin, &other, &reader] {
        assert!(!opens(port, cookie).await);
    }
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty(), "no session and no index is left in Redis");
    let shown = page(port, "/ui/login?ended=3", "", None).await;
    assert!(shown.body.contains("3 sessions ended, yours too."), "{}", shown.body);
    // The same from a terminal.
    let (again, reader) = (login(port, ADMIN).await, login(port, READER).await);
    let (ok, out, err) = cli(&gw, &["ui", "sessions", "--revoke-all"]);
    assert!(ok, "{err}");
    assert_eq!(out, "ended 2 sessions\n");
    assert!(!opens(port, &again).await && !opens(port, &reader).await);
    assert!(redis.keys(&format!("{{{prefix}:ui}}:*")).is_empty());
    let (ok, out, err) = cli(&gw, &["ui", "sessions", "--json"]);
    assert!(ok, "{err}");
    let count: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(count, serde_json::json!({"admin": 0, "read": 0}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_end_all_sessions_lands_on_the_login_saying_how_many() {
    const LIMIT: Duration = Duration::from_secs(15);
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let gw = gateway(&redis, &prefix("uiendbr"), &bot, ADMIN).await;
    let port = gw.admin_port;
    let base = format!("http://127.0.0.1:{port}");
    let reader = login(port, READER).await;
    let b = Browser::start().await;
    b.goto(&format!("{base}/ui/")).await;
    b.wait_for("input[name=token]", LIMIT).await;
    b.fill("token", ADMIN).await;
    b.submit("form.login").await;
    b.wait_for("section.sessions button", LIMIT).await;
    b.screenshot("ui_sessions").await;
    b.click("section.sessions button").await;
    b.wait_for("p.notice", LIMIT).await;
    assert_eq!(b.text("p.notice").await, "2 sessions ended, yours too. Log in again.");
    assert!(b.exists("input[name=token]").await, "the login form");
    assert!(b.cookie("slackgate_ui").await.is_none_or(|c| c.value.is_empty()), "the cookie is cleared");
    b.goto(&format!("{base}/ui/")).await;
    b.wait_for("input[name=token]", LIMIT).await;
    assert!(!opens(port, &reader).await, "the other session ended too");
}
