//! The operator's pages over HTTP (issue 20): who may look, the rule for writes, replay and
//! purge, bulk replay after a count. The same pages in a real browser: `ui_browser`.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

use crate::utils::*;

pub const ADMIN: &str = "ui-admin-token-0123456789abcdef";
pub const READER: &str = "ui-read-token-0123456789abcdef";

/// A page's answer: status, headers, body.
pub struct Page {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn header(&self, k: &str) -> &str {
        self.headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    /// The value of the first `name="csrf"` field.
    pub fn csrf(&self) -> String {
        self.field("csrf")
    }

    /// The value of the first field named `name`.
    pub fn field(&self, name: &str) -> String {
        let needle = format!("name=\"{name}\" value=\"");
        let at =
            self.body.find(&needle).map(|i| i + needle.len()).unwrap_or_else(|| panic!("no {name}: {}", self.body));
        self.body[at..].split('"').next().unwrap().to_string()
    }

    /// The session cookie the answer sets (`name=value`).
    pub fn cookie(&self) -> String {
        self.header("set-cookie").split(';').next().unwrap_or_default().to_string()
    }
}

/// One request to the admin listener: `cookie` and `origin` when given; a form body makes it
/// a POST.
pub async fn page(port: u16, path: &str, cookie: &str, form: Option<(&str, Option<&str>)>) -> Page {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    let method = if form.is_some() { "POST" } else { "GET" };
    let mut b = hyper::Request::builder().method(method).uri(format!("http://127.0.0.1:{port}{path}"));
    if !cookie.is_empty() {
        b = b.header("cookie", cookie);
    }
    let body = match form {
        Some((body, origin)) => {
            b = b.header("content-type", "application/x-www-form-urlencoded");
            if let Some(o) = origin {
                b = b.header("origin", o);
            }
            body.to_string()
        }
        None => String::new(),
    };
    let resp =
        tokio::time::timeout(Duration::from_secs(30), client.request(b.body(Full::new(Bytes::from(body))).unwrap()))
            .await
            .expect("an answer within 30 s")
            .expect("an answer");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let body = String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
    Page { status, headers, body }
}

/// A gateway with both tokens, its bot answering 404 (every delivery a dead letter).
async fn with_tokens(name: &str) -> (RedisServer, Receiver, Gateway) {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    bot.set_default(Reply::status(404));
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.server = "admin_token = \"${SG_ADMIN_TOKEN}\"\nadmin_read_token = \"${SG_READ_TOKEN}\"".into();
    let gw = Gateway::start_with_env(&cfg, &[("SG_ADMIN_TOKEN", ADMIN), ("SG_READ_TOKEN", READER)]).await;
    (redis, bot, gw)
}

async fn login(port: u16, token: &str) -> String {
    let origin = format!("http://127.0.0.1:{port}");
    let p = page(port, "/ui/login", "", Some((&format!("token={token}"), Some(&origin)))).await;
    assert_eq!(p.status, 303, "{}", p.body);
    p.cookie()
}

/// The page of the first delivery the list shows for `search`, once there.
async fn delivery_href(port: u16, cookie: &str, search: &str, status: &str) -> String {
    let mut href = String::new();
    until(Duration::from_secs(10), async || {
        let p = page(port, &format!("/ui/deliveries?q={search}&status={status}"), cookie, None).await;
        href = p
            .body
            .split("href=\"/ui/d/")
            .nth(1)
            .map(|r| format!("/ui/d/{}", r.split('"').next().unwrap()))
            .unwrap_or_default();
        !href.is_empty()
    })
    .await;
    assert!(!href.is_empty(), "{search} never listed as {status}");
    href
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_pages_want_a_login_and_a_write_wants_the_pages_own_form() {
    let (_redis, bot, gw) = with_tokens("uilogin").await;
    let port = gw.admin_port;
    let origin = format!("http://127.0.0.1:{port}");
    let p = page(port, "/ui/", "", None).await;
    assert_eq!((p.status, p.header("location")), (303, "/ui/login"));
    let wrong = page(port, "/ui/login", "", Some(("token=not-the-token", Some(&origin)))).await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.header("set-cookie").is_empty());
    let ok = page(port, "/ui/login", "", Some((&format!("token={ADMIN}"), Some(&origin)))).await;
    let set = ok.header("set-cookie").to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/ui"), "{set}");
    let cookie = ok.cookie();
    assert_eq!(page(port, "/ui/", &cookie, None).await.status, 200);

    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvUiDead"), SECRET)).await.0, 200);
    let href = delivery_href(port, &cookie, "EvUiDead", "dead").await;
    let shown = page(port, &href, &cookie, None).await;
    assert!(shown.body.contains("Replay this dead letter"), "{}", shown.body);
    let csrf = shown.csrf();
    let replay = format!("{href}/replay");
    let form = format!("csrf={csrf}&nonce={}", shown.field("nonce"));
    for (why, body, origin) in [
        ("no Origin", form.as_str(), None),
        ("another site's form", form.as_str(), Some("http://evil.example")),
        ("no CSRF token", "csrf=", Some(origin.as_str())),
    ] {
        let p = page(port, &replay, &cookie, Some((body, origin))).await;
        assert_eq!(p.status, 403, "{why}: {}", p.body);
    }
    assert_eq!(bot.count(), 1, "nothing refused was replayed");
    let reader = login(port, READER).await;
    let read_only = page(port, &href, &reader, None).await;
    assert!(!read_only.body.contains("Replay this dead letter"), "a reader sees no buttons");
    let p = page(port, &replay, &reader, Some((&format!("csrf={}", read_only.csrf()), Some(&origin)))).await;
    assert_eq!(p.status, 403, "the read token cannot act: {}", p.body);

    bot.set_default(Reply::status(200));
    let p = page(port, &replay, &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!((p.status, p.header("location")), (303, href.as_str()));
    assert!(eventually(Duration::from_secs(10), || bot.count() == 2).await, "the replayed dead letter reaches the bot");
    delivery_href(port, &cookie, "EvUiDead", "delivered").await;
    let again = page(port, &replay, &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("Already done") && again.body.contains("nothing was replayed again"), "{}", again.body);
    gw.wait_idle_with(Some(ADMIN)).await;
    assert_eq!(bot.count(), 2, "the same form sent twice replays once");

    let out = page(port, "/ui/logout", &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!((out.status, out.header("location")), (303, "/ui/login"));
    assert_eq!(page(port, "/ui/", &cookie, None).await.status, 303, "the session is over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_states_the_count_then_replays_everything_the_filter_matches() {
    let (_redis, bot, gw) = with_tokens("uibulk").await;
    let port = gw.admin_port;
    let origin = format!("http://127.0.0.1:{port}");
    let cookie = login(port, ADMIN).await;
    for (i, channel) in ["C1", "C1", "C1", "C2"].iter().enumerate() {
        let body =
            String::from_utf8(event(&format!("EvBulk{i}"))).unwrap().replace("\"C1\"", &format!("\"{channel}\""));
        assert_eq!(send(gw.port, Req::signed("/slack/events", body.into_bytes(), SECRET)).await.0, 200);
    }
    let dead_in = async |channel: &str| {
        let p = page(port, &format!("/ui/deliveries?channel={channel}&status=dead"), &cookie, None).await;
        p.body.matches("href=\"/ui/d/").count()
    };
    until(Duration::from_secs(10), async || dead_in("C1").await == 3 && dead_in("C2").await == 1).await;
    assert_eq!((dead_in("C1").await, dead_in("C2").await), (3, 1));
    let list = page(port, "/ui/deliveries?channel=C1&status=dead", &cookie, None).await;
    let csrf = list.csrf();
    let form = format!("csrf={csrf}&channel=C1&status=dead");
    let confirm = page(port, "/ui/replay", &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("Replay 3 deliveries?"), "{}", confirm.body);
    assert_eq!(bot.count(), 4, "nothing sent before the confirmation");
    bot.set_default(Reply::status(200));
    let confirmed = format!("csrf={csrf}&confirm={}", confirm.field("confirm"));
    let done = page(port, "/ui/replay", &cookie, Some((&confirmed, Some(&origin)))).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let result = page(port, done.header("location"), &cookie, None).await;
    assert!(result.body.contains("Replayed 3 of the 3 deliveries confirmed"), "{}", result.body);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 7).await, "{} reached the bot", bot.count());
    assert_eq!(dead_in("C2").await, 1, "what the filter did not match stays dead");
}

/// Issue 32: a confirmation that said "Replay 4" and was sent again (a reload) replayed what
/// matched then, replays included: 4, then 8, then 16.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_replay_sent_twice_replays_what_was_confirmed_once() {
    let (_redis, bot, gw) = with_tokens("uionce").await;
    bot.set_default(Reply::status(200));
    let port = gw.admin_port;
    let origin = format!("http://127.0.0.1:{port}");
    let cookie = login(port, ADMIN).await;
    for i in 0..4 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvOnce{i}")), SECRET)).await.0, 200);
    }
    let listed = async |query: &str| {
        let p = page(port, &format!("/ui/deliveries?status=delivered{query}"), &cookie, None).await;
        p.body.matches("href=\"/ui/d/").count()
    };
    until(Duration::from_secs(10), async || listed("").await == 4).await;
    assert_eq!(listed("").await, 4);
    let csrf = page(port, "/ui/deliveries", &cookie, None).await.csrf();
    let ask = async || {
        page(port, "/ui/replay", &cookie, Some((&format!("csrf={csrf}&status=delivered"), Some(&origin)))).await
    };
    let confirm = ask().await;
    assert!(confirm.body.contains("Replay 4 deliveries?"), "{}", confirm.body);

    // One more arrives between the count and the confirmation: it was not confirmed.
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvOnceLate"), SECRET)).await.0, 200);
    until(Duration::from_secs(10), async || listed("").await == 5).await;
    let confirmed = format!("csrf={csrf}&confirm={}", confirm.field("confirm"));
    let done = page(port, "/ui/replay", &cookie, Some((&confirmed, Some(&origin)))).await;
    assert_eq!(done.status, 303, "the answer is a redirect to the result: {}", done.body);
    let result_href = done.header("location").to_string();
    assert!(result_href.starts_with("/ui/done/"), "{result_href}");
    assert!(eventually(Duration::from_secs(10), || bot.count() == 9).await, "{} reached the bot", bot.count());
    for _ in 0..2 {
        let result = page(port, &result_href, &cookie, None).await;
        assert!(result.body.contains("Replayed 4 of the 4 deliveries confirmed"), "{}", result.body);
    }
    let again = page(port, "/ui/replay", &cookie, Some((&confirmed, Some(&origin)))).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("Already done") && again.body.contains("nothing was replayed again"), "{}", again.body);
    gw.wait_idle_with(Some(ADMIN)).await;
    assert_eq!(bot.count(), 9, "the result page reloaded and the form sent again replay nothing more");

    // The replays are marked: listed when asked for, never counted again by default.
    until(Duration::from_secs(10), async || listed("&replays=1").await == 9).await;
    assert_eq!((listed("").await, listed("&replays=1").await), (5, 9));
    let fresh = ask().await;
    assert!(fresh.body.contains("Replay 5 deliveries?"), "replays left out: {}", fresh.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_twice_purges_once_and_says_so() {
    let (_redis, _bot, gw) = with_tokens("uipurge").await;
    let port = gw.admin_port;
    let origin = format!("http://127.0.0.1:{port}");
    let cookie = login(port, ADMIN).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvUiPurge"), SECRET)).await.0, 200);
    let href = delivery_href(port, &cookie, "EvUiPurge", "dead").await;
    let shown = page(port, &href, &cookie, None).await;
    let nonces: Vec<&str> =
        shown.body.split("name=\"nonce\" value=\"").skip(1).map(|r| r.split('"').next().unwrap()).collect();
    assert_eq!(nonces.len(), 2, "the replay and the purge forms: {}", shown.body);
    let form = format!("csrf={}&nonce={}", shown.csrf(), nonces[1]);
    let purge = format!("{href}/purge");
    let done = page(port, &purge, &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert!(page(port, done.header("location"), &cookie, None).await.body.contains("Purged"));
    let again = page(port, &purge, &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("Already done"), "{}", again.body);
    // A fresh page's form: the letter is gone, and the page says it was done already.
    let fresh = format!("csrf={}&nonce={}", shown.csrf(), "0123456789abcdef0123456789abcdef");
    let gone = page(port, &purge, &cookie, Some((&fresh, Some(&origin)))).await;
    assert_eq!(gone.status, 409, "{}", gone.body);
    assert!(gone.body.contains("Already done") && gone.body.contains("purged or replayed already"), "{}", gone.body);
}

/// Issue 32: `?never=<huge>` overflowed an addition (a panic in a debug build); an unknown
/// app answered 400, or 503 for a purge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_time_answers_a_page_and_an_unknown_app_is_not_found() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let cfg = GatewayConfig::new(&redis.url(), &prefix("uihuge"), &bot.url());
    let gw = Gateway::start(&cfg).await;
    let port = gw.admin_port;
    let origin = format!("http://127.0.0.1:{port}");
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvUiHuge"), SECRET)).await.0, 200);
    delivery_href(port, "", "EvUiHuge", "delivered").await;
    for (query, status) in [
        ("never=18446744073709551615ms", 200),
        ("never=213503982334d", 200),
        ("never=99999999999999999999d", 400),
        ("since=18446744073709551615ms", 200),
        ("until=18446744073709551615", 200),
        ("until=99999999999999999999", 400),
        ("rows=1&after=18446744073709551615", 200),
        ("rows=1&never=18446744073709551615ms&after=0", 200),
    ] {
        let p = page(port, &format!("/ui/deliveries?{query}"), "", None).await;
        assert_eq!(p.status, status, "{query}: {}", p.body);
    }
    let all = page(port, "/ui/deliveries?never=18446744073709551615ms", "", None).await;
    assert!(all.body.contains("Nothing matches"), "nothing was delivered that long ago: {}", all.body);

    let csrf = page(port, "/ui/deliveries", "", None).await.csrf();
    let nonce = "0123456789abcdef0123456789abcdef";
    for (path, form) in [
        ("/ui/deliveries?app=nope", None),
        ("/ui/deliveries?app=nope&rows=1", None),
        ("/ui/d/nope/0-0123456789abcdef", None),
        ("/ui/replay", Some(format!("csrf={csrf}&app=nope"))),
        ("/ui/d/nope/0-0123456789abcdef/replay", Some(format!("csrf={csrf}&nonce={nonce}"))),
        ("/ui/d/nope/0-0123456789abcdef/purge", Some(format!("csrf={csrf}&nonce={nonce}"))),
    ] {
        let p = page(port, path, "", form.as_deref().map(|f| (f, Some(origin.as_str())))).await;
        assert_eq!(p.status, 404, "{path}: {}", p.body);
        assert!(p.body.contains("no app named nope"), "{path}: {}", p.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_loopback_without_a_token_the_pages_open_and_never_show_tokens_or_text() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let cfg = GatewayConfig::new(&redis.url(), &prefix("uiopen"), &bot.url());
    let gw = Gateway::start(&cfg).await;
    let port = gw.admin_port;
    let overview = page(port, "/ui/", "", None).await;
    assert_eq!(overview.status, 200);
    assert!(
        overview.body.contains("<h2 id=\"app-bot\">bot</h2>") && overview.body.contains("No risk"),
        "{}",
        overview.body
    );
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvUiOpen"), SECRET)).await.0, 200);
    let href = delivery_href(port, "", "EvUiOpen", "delivered").await;
    let shown = page(port, &href, "", None).await;
    assert!(shown.body.contains("attempt 1 by") && shown.body.contains("EvUiOpen"), "{}", shown.body);
    assert!(!shown.body.contains("&lt;@B1&gt; hi") && !shown.body.contains("<@B1> hi"), "no text with show_text off");
    assert!(!shown.body.contains("\"x\"") && !shown.body.contains("&#34;x&#34;"), "never the verification token");
    let rows = page(port, "/ui/deliveries?rows=1", "", None).await;
    assert!(
        rows.body.trim_start().starts_with("<tr data-received=") && rows.body.contains(&href),
        "the live list's rows alone"
    );
    let received: u64 = rows.body.split("data-received=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
    let newer = |after: u64| format!("/ui/deliveries?rows=1&after={after}");
    assert!(!page(port, &newer(received), "", None).await.body.contains(&href), "the poll asks only for newer rows");
    assert!(page(port, &newer(received - 1), "", None).await.body.contains(&href));
    let overview = page(port, "/ui/", "", None).await;
    assert!(overview.body.contains("of Slack&#39;s 1 delivery in"), "{}", overview.body);
}

/// Issue 35: the overview's pause and resume buttons — an admin's, a form posted twice acts
/// once, a reader sees the pause but no button; what the pause held is shown and delivered on
/// resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_from_the_overview_acts_once_and_resuming_delivers_what_it_held() {
    let (_redis, bot, gw) = with_tokens("uipause").await;
    bot.set_default(Reply::status(200));
    let port = gw.admin_port;
    let origin = format!("http://127.0.0.1:{port}");
    let cookie = login(port, ADMIN).await;
    let overview = page(port, "/ui/", &cookie, None).await;
    assert!(overview.body.contains("Nothing is paused."), "{}", overview.body);
    let form = format!("csrf={}&nonce={}&app=bot&team=&channel=C7", overview.csrf(), overview.field("nonce"));
    let done = page(port, "/ui/pause", &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert!(page(port, done.header("location"), &cookie, None).await.body.contains("Paused app bot channel C7"));
    let again = page(port, "/ui/pause", &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!(again.status, 409, "posted twice acts once: {}", again.body);
    let series = r#"slackgate_pauses{app="bot"}"#;
    assert!(until(Duration::from_secs(5), async || metric(port, series).await == 1.0).await);
    assert_eq!(send(gw.port, Req::signed("/slack/events", event_in("EvUiPaused", "C7"), SECRET)).await.0, 200);
    delivery_href(port, &cookie, "EvUiPaused", "paused").await;
    // A reader sees the pause, with no button.
    let reader = login(port, READER).await;
    let shown = page(port, "/ui/", &reader, None).await;
    assert!(
        shown.body.contains("app bot channel C7") && !shown.body.contains("action=\"/ui/resume\""),
        "{}",
        shown.body
    );
    let refused = page(port, "/ui/resume", &reader, Some((&form, Some(&origin)))).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(bot.count(), 0);
    // The admin's resume button.
    let shown = page(port, "/ui/", &cookie, None).await;
    let at = shown.body.find("action=\"/ui/resume\"").expect("a resume button");
    let nonce = shown.body[at..].split("name=\"nonce\" value=\"").nth(1).unwrap().split('"').next().unwrap();
    let form = format!("csrf={}&nonce={nonce}&app=bot&team=*&channel=C7", shown.csrf());
    let done = page(port, "/ui/resume", &cookie, Some((&form, Some(&origin)))).await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await, "{}", gw.log());
    delivery_href(port, &cookie, "EvUiPaused", "delivered").await;
}
