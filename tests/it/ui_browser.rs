//! The operator's pages in a real browser (Debian's Chromium through chromedriver) against a
//! running gateway with real deliveries (issue 20): a login (and a wrong token refused), the
//! list filtered by channel and status, a delivery's attempts and the reply the bot wrote
//! through the egress, a cross-site form refused, a dead letter replayed and delivered, the
//! live list gaining a row without a reload, and no message text with `show_text` off; a
//! session that ends while the list is open takes the page to the login. Each page is
//! photographed into `target/screenshots/`.

use std::time::Duration;

use crate::egress_common::call;
use crate::ui::ADMIN;
use crate::utils::*;

const LIMIT: Duration = Duration::from_secs(15);

fn mention(event_id: &str, ts: &str, channel: &str) -> Vec<u8> {
    serde_json::json!({
        "token": "legacy-verification-token", "type": "event_callback", "event_id": event_id, "team_id": "T1",
        "api_app_id": "A1", "event_time": unix_now(), "authorizations": [{"user_id": "UBOT", "is_bot": true}],
        "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> a private question", "channel": channel, "ts": ts}
    })
    .to_string()
    .into_bytes()
}

struct Site {
    redis: RedisServer,
    prefix: String,
    slack: FakeSlack,
    bot: Receiver,
    gw: Gateway,
}

async fn site() -> Site {
    let redis = RedisServer::start();
    let slack = FakeSlack::start().await;
    let bot = Receiver::start(SECRET).await;
    let prefix = prefix("uibrowser");
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix, &bot.url());
    cfg.server = "admin_token = \"${SG_ADMIN_TOKEN}\"".into();
    cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
    let gw = Gateway::start_with_env(&cfg, &[("SG_ADMIN_TOKEN", ADMIN)]).await;
    Site { redis, prefix, slack, bot, gw }
}

async fn log_in(b: &Browser, base: &str) {
    b.goto(&format!("{base}/ui/")).await;
    b.wait_for("input[name=token]", LIMIT).await;
    b.screenshot("ui_login").await;
    b.fill("token", "not-the-token-at-all").await;
    b.submit("form.login").await;
    b.wait_for("p.error", LIMIT).await;
    assert!(b.text("p.error").await.contains("wrong token"), "{}", b.source().await);
    b.fill("token", ADMIN).await;
    b.submit("form.login").await;
    b.wait_for("section.app", LIMIT).await;
    let cookie = b.cookie("slackgate_ui").await.expect("the session cookie");
    assert!(cookie.http_only && cookie.same_site.as_deref() == Some("Strict"), "{cookie:?}");
}

/// Load `url` until `done` holds of its source (the history is written in the background).
async fn until_page(b: &Browser, url: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let mut source = String::new();
    let ok = until(LIMIT, async || {
        b.goto(url).await;
        source = b.source().await;
        done(&source)
    })
    .await;
    assert!(ok, "{what}: {source}");
    source
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_delivery_sees_its_reply_and_replays_a_dead_letter() {
    let s = site().await;
    let base = format!("http://127.0.0.1:{}", s.gw.admin_port);
    let b = Browser::start().await;
    log_in(&b, &base).await;

    // One mention answered through the egress, one the bot refuses for good (a dead letter).
    let ts = "1700000600.000100";
    assert_eq!(send(s.gw.port, Req::signed("/slack/events", mention("EvBrAsk", ts, "C1"), SECRET)).await.0, 200);
    assert!(eventually(LIMIT, || s.bot.count() == 1).await);
    let reply =
        call(s.gw.egress_port, "chat.postMessage", &format!("channel=C1&thread_ts={ts}&text=the+answer"), &[]).await;
    assert!(reply.ok(), "{}", reply.body);
    s.bot.push(Reply::status(404));
    assert_eq!(
        send(s.gw.port, Req::signed("/slack/events", mention("EvBrDead", "1700000700.000100", "C2"), SECRET)).await.0,
        200
    );
    assert!(eventually(LIMIT, || s.bot.count() == 2).await);
    b.goto(&format!("{base}/ui/")).await;
    b.screenshot("ui_overview").await;

    // Filter by channel and status with the form.
    until_page(&b, &format!("{base}/ui/deliveries"), "both listed", |p| p.matches("href=\"/ui/d/").count() == 2).await;
    b.fill("channel", "C1").await;
    b.fill("status", "delivered").await;
    b.submit("form.filters").await;
    b.wait_until("the filtered list", LIMIT, async || b.url().await.contains("channel=C1")).await.unwrap();
    let rows = b.find_all("#rows tr a").await;
    assert_eq!(rows.len(), 1, "{}", b.source().await);
    b.screenshot("ui_deliveries").await;
    b.click("#rows tr a").await;
    b.wait_for("ol.timeline", LIMIT).await;
    let url = b.url().await;
    let page = until_page(&b, &url, "the attempt and the reply", |p| {
        p.contains("attempt 1 by") && p.contains("the bot wrote chat.postMessage")
    })
    .await;
    assert!(page.contains("open the reply in Slack"), "a link to the posted reply");
    assert!(!page.contains("a private question") && !page.contains("legacy-verification-token"), "no text, no token");
    assert_eq!(s.slack.posts().len(), 1);
    b.screenshot("ui_delivery").await;

    // The dead letter: a form from another site is refused; the page's own button replays it.
    let dead = until_page(&b, &format!("{base}/ui/deliveries?status=dead"), "the dead letter", |p| {
        p.contains("href=\"/ui/d/")
    })
    .await;
    let href = dead.split("href=\"/ui/d/").nth(1).unwrap().split('"').next().unwrap().to_string();
    let evil = format!("data:text/html,<form id=f method=post action=\"{base}/ui/d/{href}/purge\"><input name=csrf value=x></form><script>document.getElementById('f').submit()</script>");
    b.goto(&evil).await;
    b.wait_until("the refusal", LIMIT, async || b.url().await.starts_with(&base)).await.unwrap();
    let refused = b.source().await;
    assert!(refused.contains("Log in first") || refused.contains("Refused"), "{refused}");
    b.goto(&format!("{base}/ui/d/{href}")).await;
    b.wait_for("ol.timeline", LIMIT).await;
    assert!(b.source().await.contains("Replay this dead letter"), "still a dead letter after the cross-site post");
    b.click("div.actions form button").await;
    until_page(&b, &format!("{base}/ui/d/{href}"), "delivered after the replay", |p| {
        p.contains("s-delivered\">delivered") && p.contains("replayed by an operator")
    })
    .await;
    assert_eq!(s.bot.count(), 3, "the replay reached the bot once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_gains_a_row_without_a_reload() {
    let s = site().await;
    let base = format!("http://127.0.0.1:{}", s.gw.admin_port);
    let b = Browser::start().await;
    log_in(&b, &base).await;
    assert_eq!(
        send(s.gw.port, Req::signed("/slack/events", mention("EvBrFirst", "1700000800.000100", "C1"), SECRET)).await.0,
        200
    );
    until_page(&b, &format!("{base}/ui/deliveries"), "the first row", |p| p.matches("href=\"/ui/d/").count() == 1)
        .await;
    b.js("window.stillThisPage = true; return null;").await;
    assert_eq!(
        send(s.gw.port, Req::signed("/slack/events", mention("EvBrLive", "1700000900.000100", "C3"), SECRET)).await.0,
        200
    );
    b.wait_until("a second row", LIMIT, async || b.find_all("#rows tr a").await.len() == 2).await.unwrap();
    assert_eq!(b.js("return window.stillThisPage === true;").await, serde_json::json!(true), "no reload");
    assert!(b.text("#live").await.contains("new"), "the change is announced");
    b.phone().await;
    b.screenshot("ui_deliveries_phone").await;
}

/// Issue 32: the live list's poll followed the redirect of an ended session and drew the
/// login page inside the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_takes_the_open_list_to_the_login() {
    let s = site().await;
    let base = format!("http://127.0.0.1:{}", s.gw.admin_port);
    let b = Browser::start().await;
    log_in(&b, &base).await;
    b.goto(&format!("{base}/ui/deliveries")).await;
    b.wait_for("table[data-live]", LIMIT).await;
    let sessions = s.redis.keys(&format!("{{{}:ui}}:s:*", s.prefix));
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let _: () = redis::cmd("DEL").arg(&sessions).query(&mut s.redis.conn()).unwrap();
    b.wait_until("the login", LIMIT, async || b.url().await.ends_with("/ui/login")).await.unwrap();
    b.wait_for("input[name=token]", LIMIT).await;
    assert!(!b.exists("#rows").await, "the login is a page of its own, not rows of the table");
}

/// Issue 35 in a real browser: a delivery's page shows the live bot's answer and its shadow's
/// side by side, and the list's "shadow differs" finds the one only the live bot answered;
/// the overview's pause and resume buttons hold and release a channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_compares_the_shadow_and_pauses_a_channel() {
    let redis = RedisServer::start();
    let slack = FakeSlack::start().await;
    let (bot, shadow) = (Receiver::start(SECRET).await, Receiver::start(SECRET).await);
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("uibrshadow"), &bot.url());
    cfg.server = "admin_token = \"${SG_ADMIN_TOKEN}\"".into();
    cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
    cfg.app = format!("shadow = {{ upstream = \"{}\" }}", shadow.url());
    let gw = Gateway::start_with_env(&cfg, &[("SG_ADMIN_TOKEN", ADMIN)]).await;
    let base = format!("http://127.0.0.1:{}", gw.admin_port);
    let b = Browser::start().await;
    log_in(&b, &base).await;

    // Both bots answer the first mention; only the live bot the second.
    let (ts1, ts2) = ("1700000800.000100", "1700000800.000200");
    for (id, ts) in [("EvBrSh1", ts1), ("EvBrSh2", ts2)] {
        assert_eq!(send(gw.port, Req::signed("/slack/events", mention(id, ts, "C1"), SECRET)).await.0, 200);
    }
    assert!(eventually(LIMIT, || bot.count() == 2 && shadow.count() == 2).await, "{}", gw.log());
    for ts in [ts1, ts2] {
        let live = call(gw.egress_port, "chat.postMessage", &format!("channel=C1&thread_ts={ts}&text=live"), &[]).await;
        assert!(live.ok(), "{}", live.body);
    }
    let kept =
        call(gw.egress_port, "/shadow/api/chat.postMessage", &format!("channel=C1&thread_ts={ts1}&text=shadow"), &[])
            .await;
    assert!(kept.ok(), "{}", kept.body);
    assert_eq!(slack.posts().len(), 2, "only the live bot's posts reached Slack");

    let first =
        until_page(&b, &format!("{base}/ui/deliveries?q={ts1}"), "the first listed", |p| p.contains("href=\"/ui/d/"))
            .await;
    let href = first.split("href=\"/ui/d/").nth(1).unwrap().split('"').next().unwrap().to_string();
    let page = until_page(&b, &format!("{base}/ui/d/{href}"), "both answers", |p| {
        p.contains("The live bot and its shadow") && p.contains("the shadow bot wrote chat.postMessage")
    })
    .await;
    let table = b.text("table.side-by-side").await;
    assert_eq!(table.matches("chat.postMessage").count(), 2, "each bot's method: {table}\n{page}");
    assert!(table.matches("after ").count() == 2, "each bot's first answer: {table}");
    b.screenshot("ui_shadow").await;
    // With both answers of the first in the history, the list's "shadow differs" is the second.
    let differs = until_page(&b, &format!("{base}/ui/deliveries?status=shadow_differs"), "one differs", |p| {
        p.matches("href=\"/ui/d/").count() == 1
    })
    .await;
    assert!(differs.contains("only the live bot 1"), "the list's stats: {differs}");
    b.click("#rows tr a").await;
    b.wait_for("ol.timeline", LIMIT).await;
    assert!(b.source().await.contains("no answer"), "the second: the shadow never answered");

    // Pause channel C9 with the overview's form; a mention there is held; resume with its button.
    b.goto(&format!("{base}/ui/")).await;
    b.wait_for("form.pause", LIMIT).await;
    b.fill("channel", "C9").await;
    b.submit("form.pause").await;
    b.wait_until("the pause's result", LIMIT, async || b.source().await.contains("Paused app bot channel C9"))
        .await
        .unwrap();
    let held = r#"slackgate_pauses{app="bot"}"#;
    assert!(until(LIMIT, async || metric(gw.admin_port, held).await == 1.0).await);
    assert_eq!(
        send(gw.port, Req::signed("/slack/events", mention("EvBrHeld", "1700000900.000100", "C9"), SECRET)).await.0,
        200
    );
    until_page(&b, &format!("{base}/ui/deliveries?status=paused"), "the held one", |p| p.contains("href=\"/ui/d/"))
        .await;
    assert_eq!(bot.count(), 2, "nothing delivered in the paused channel");
    b.goto(&format!("{base}/ui/")).await;
    b.wait_for("form[action=\"/ui/resume\"] button", LIMIT).await;
    b.screenshot("ui_paused").await;
    b.click("form[action=\"/ui/resume\"] button").await;
    b.wait_until("the resume's result", LIMIT, async || b.source().await.contains("Resumed app bot channel C9"))
        .await
        .unwrap();
    assert!(eventually(LIMIT, || bot.count() == 3).await, "delivered on resume: {}", gw.log());
}
