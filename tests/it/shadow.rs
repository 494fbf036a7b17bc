//! Issue 35: a shadow bot on live traffic. Each delivery the shadow takes reaches it too, signed
//! as the live bot's; its Web API writes at the egress's shadow base are kept with the
//! delivery and answered as Slack would, and never reach Slack; its late answers to a command
//! go to the gateway, never to Slack's `response_url`. (The same with unmodified Bolt apps:
//! `bolt::shadow_*`.)

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::egress_common::*;
use crate::utils::*;

struct Rig {
    _redis: RedisServer,
    slack: FakeSlack,
    live: Receiver,
    shadow: Receiver,
    gw: Gateway,
}

async fn rig(name: &str, shadow_keys: &str) -> Rig {
    rig_with(name, shadow_keys, "").await
}

async fn rig_with(name: &str, shadow_keys: &str, tail: &str) -> Rig {
    let (redis, slack) = (RedisServer::start(), FakeSlack::start().await);
    let (live, shadow) = (Receiver::start(SECRET).await, Receiver::start(SECRET).await);
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &live.url());
    cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
    cfg.app = format!("shadow = {{ upstream = \"{}\"{shadow_keys} }}", shadow.url());
    cfg.tail = tail.into();
    let gw = Gateway::start(&cfg).await;
    Rig { _redis: redis, slack, live, shadow, gw }
}

fn mention(event_id: &str, ts: &str) -> Vec<u8> {
    serde_json::json!({
        "token": "x", "type": "event_callback", "event_id": event_id, "team_id": "T1", "api_app_id": "A1",
        "event_time": 1_700_000_000, "authorizations": [{"user_id": "UBOT", "is_bot": true}],
        "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "channel": "C1", "ts": ts}
    })
    .to_string()
    .into_bytes()
}

fn cli(gw: &Gateway, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(args)
        .args(["--json", "--config"])
        .arg(&gw.config_path)
        .env("SG_TEST_SECRET", SECRET)
        .env_remove("SLACKGATE_REDIS_URL")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shadow_gets_a_copy_and_its_writes_are_kept_never_posted() {
    let r = rig("shcopy", "").await;
    let ts = "1700000400.000100";
    assert_eq!(send(r.gw.port, Req::signed("/slack/events", mention("EvShadow1", ts), SECRET)).await.0, 200);
    assert!(
        eventually(Duration::from_secs(10), || r.live.count() == 1 && r.shadow.count() == 1).await,
        "{}",
        r.gw.log()
    );
    let (to_live, to_shadow) = (&r.live.received()[0], &r.shadow.received()[0]);
    assert_eq!(to_live.body, to_shadow.body, "the same delivery");
    assert!(to_shadow.signature_ok, "signed as the live bot's");
    assert_eq!(to_live.header("x-slackgate-delivery"), to_shadow.header("x-slackgate-delivery"));
    // Both answer in the thread: the live bot's post reaches Slack, the shadow's is kept.
    let body = format!("channel=C1&thread_ts={ts}&text=the+live+answer");
    assert!(call(r.gw.egress_port, "chat.postMessage", &body, &[]).await.ok());
    let body = format!("channel=C1&thread_ts={ts}&text=the+shadow+answer");
    let kept = call(r.gw.egress_port, "/shadow/api/chat.postMessage", &body, &[]).await;
    let a = kept.json();
    assert!(kept.ok() && a["channel"] == "C1" && a["message"]["text"] == "the shadow answer", "{}", kept.body);
    assert!(a["ts"].as_str().is_some_and(|t| t.contains('.')), "a plausible ts: {}", kept.body);
    // A stream's calls, answered likewise.
    let started =
        call(r.gw.egress_port, "/shadow/api/chat.startStream", &format!("channel=C1&thread_ts={ts}"), &[]).await;
    let stream_ts = started.json()["ts"].as_str().unwrap_or_default().to_string();
    for m in ["chat.appendStream", "chat.stopStream"] {
        let a = call(
            r.gw.egress_port,
            &format!("/shadow/api/{m}"),
            &format!("channel=C1&ts={stream_ts}&markdown_text=more"),
            &[],
        )
        .await;
        assert!(a.ok() && a.json()["ts"] == stream_ts.as_str(), "{m}: {}", a.body);
    }
    let posts: Vec<String> =
        r.slack.posts().iter().map(|p| p["text"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(posts, ["the live answer"], "Slack saw only the live bot's post");
    assert!(r.slack.calls_of("chat.startStream").is_empty());
    let kept = r#"slackgate_shadow_calls_total{app="bot",outcome="kept"}"#;
    assert!(metric_reaches(r.gw.admin_port, kept, 4.0, Duration::from_secs(5)).await);
    let copied = r#"slackgate_shadow_copies_total{app="bot",outcome="copied"}"#;
    assert_eq!(metric(r.gw.admin_port, copied).await, 1.0);
    // The delivery's history has both answers.
    let id = to_live.header("x-slackgate-delivery").unwrap();
    let mut shown = Value::Null;
    until(Duration::from_secs(10), async || {
        shown = cli(&r.gw, &["show", &id]);
        shown["summary"]["fields"]["shadow_replies"] == "4"
    })
    .await;
    assert_eq!(shown["summary"]["fields"]["shadow_replies"], "4", "{shown}");
    assert_eq!(shown["summary"]["fields"]["replies"], "1", "the live bot's one: {shown}");
    // The page shows both answers side by side.
    let page = crate::ui::page(r.gw.admin_port, &format!("/ui/d/bot/{id}"), "", None).await;
    assert!(page.body.contains("The live bot and its shadow"), "{}", page.body);
    assert!(
        page.body.contains("chat.postMessage, chat.startStream, chat.appendStream, chat.stopStream"),
        "{}",
        page.body
    );
    // A second mention only the live bot answers: the list's "shadow differs" has it alone, and
    // the list's stats count both.
    let ts2 = "1700000400.000200";
    assert_eq!(send(r.gw.port, Req::signed("/slack/events", mention("EvShadow2", ts2), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || r.shadow.count() == 2).await);
    assert!(call(r.gw.egress_port, "chat.postMessage", &format!("channel=C1&thread_ts={ts2}&text=only+live"), &[])
        .await
        .ok());
    let mut listed = Value::Null;
    until(Duration::from_secs(10), async || {
        listed = cli(&r.gw, &["deliveries", "--status", "shadow_differs"]);
        listed["rows"].as_array().is_some_and(|rows| rows.len() == 1)
    })
    .await;
    assert_eq!(listed["rows"][0]["fields"]["ts"], ts2, "{listed}");
    let all = cli(&r.gw, &["deliveries"]);
    let st = &all["shadow"][0];
    assert_eq!(
        (st["copied"].as_u64(), st["both"].as_u64(), st["only_live"].as_u64()),
        (Some(2), Some(1), Some(1)),
        "{all}"
    );
    assert!(st["live_p50_ms"].is_u64() && st["shadow_p50_ms"].is_u64(), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_answered_by_the_live_bot_and_the_shadows_answer_never_reaches_slack() {
    let r = rig("shcmd", "").await;
    r.live.push(Reply::status(200).body("text/plain", "live says hi"));
    r.shadow.set_default(Reply::status(200).body("text/plain", "shadow says hi"));
    let hook = "https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1%2F1%2Fsecret";
    let form =
        format!("team_id=T1&channel_id=C1&user_id=U1&command=%2Fask&text=q&trigger_id=1.2.3&response_url={hook}");
    let (status, body) = send(r.gw.port, Req::signed("/slack/events", form.into_bytes(), SECRET)).await;
    assert_eq!((status, &body[..]), (200, &b"live says hi"[..]), "the live bot answers Slack");
    assert!(eventually(Duration::from_secs(10), || r.shadow.count() == 1).await, "{}", r.gw.log());
    let got = String::from_utf8_lossy(&r.shadow.received()[0].body).into_owned();
    let url: String = form_urlencoded::parse(got.as_bytes()).find(|(k, _)| k == "response_url").unwrap().1.into();
    let base = format!("http://127.0.0.1:{}/shadow/response/", r.gw.egress_port);
    assert!(url.starts_with(&base), "the shadow's response_url is the gateway's: {url}");
    assert!(!got.contains("hooks.slack.com"));
    assert!(r.shadow.received()[0].signature_ok, "re-signed over the body it got");
    // The shadow bot's late answer (Bolt's respond()) is kept.
    let path = url.strip_prefix(&format!("http://127.0.0.1:{}", r.gw.egress_port)).unwrap();
    let a = call(r.gw.egress_port, path, r#"{"text":"later"}"#, &[]).await;
    assert_eq!((a.status, a.body.as_str()), (200, "ok"));
    let kept = r#"slackgate_shadow_calls_total{app="bot",outcome="kept"}"#;
    assert!(metric_reaches(r.gw.admin_port, kept, 1.0, Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_is_down_changes_nothing_for_the_live_bot_and_a_full_lane_drops_copies() {
    let r = rig("shdown", ", max_backlog = 3").await;
    r.shadow.set_default(Reply::status(503));
    // A burst, then one at a time: copies made at one moment may pass the bound together (it
    // is checked, not locked); once the lane holds its 3, each later copy is dropped.
    for i in 0..8 {
        let ts = format!("1700000500.{:06}", i + 1);
        let event = Req::signed("/slack/events", mention(&format!("EvDown{i}"), &ts), SECRET);
        assert_eq!(send(r.gw.port, event).await.0, 200);
        if i >= 4 {
            assert!(eventually(Duration::from_secs(10), || r.live.count() == i + 1).await, "{}", r.gw.log());
        }
    }
    assert!(eventually(Duration::from_secs(10), || r.live.count() == 8).await, "{}", r.gw.log());
    let dropped = r#"slackgate_shadow_copies_total{app="bot",outcome="dropped"}"#;
    assert!(metric_reaches(r.gw.admin_port, dropped, 1.0, Duration::from_secs(10)).await, "{}", r.gw.log());
    let live = r#"slackgate_deliveries_total{app="bot",outcome="delivered"}"#;
    assert_eq!(metric(r.gw.admin_port, live).await, 8.0, "every live delivery delivered once");
    let retried = r#"slackgate_deliveries_total{app="bot.shadow",outcome="retried"}"#;
    assert!(metric_reaches(r.gw.admin_port, retried, 1.0, Duration::from_secs(10)).await, "the shadow's own retries");
}

/// The live bot's deliveries never wait for the shadow: with a shadow that answers nothing
/// (each of its attempts runs on, toward a 30 s timeout), every delivery reaches the live bot
/// and is recorded delivered while not one of the shadow's attempts has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_never_answers_holds_up_no_live_delivery() {
    let (redis, live, shadow) = (RedisServer::start(), Receiver::start(SECRET).await, Receiver::start(SECRET).await);
    shadow.set_default(Reply::status(200).delay(Duration::from_secs(60)));
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("shslow"), &live.url());
    cfg.delivery = r#"{ timeout = "30s", retry_initial = "100ms", retry_max = "400ms", lease = "40s" }"#.into();
    cfg.egress = "slack_api_url = \"http://127.0.0.1:9/api/\"".into();
    cfg.app = format!("shadow = {{ upstream = \"{}\" }}", shadow.url());
    let gw = Gateway::start(&cfg).await;
    let n = 12;
    for i in 0..n {
        let ts = format!("1700000700.{:06}", i + 1);
        let body =
            String::from_utf8(mention(&format!("EvSlow{i}"), &ts)).unwrap().replace("\"C1\"", &format!("\"C{i}\""));
        assert_eq!(send(gw.port, Req::signed("/slack/events", body.into_bytes(), SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(20), || live.count() == n && shadow.count() >= 1).await, "{}", gw.log());
    let delivered = r#"slackgate_deliveries_total{app="bot",outcome="delivered"}"#;
    assert!(metric_reaches(gw.admin_port, delivered, n as f64, Duration::from_secs(20)).await, "{}", gw.log());
    let shadow_ended = r#"slackgate_deliveries_total{app="bot.shadow","#;
    assert_eq!(metric(gw.admin_port, shadow_ended).await, 0.0, "no attempt of the shadow has ended");
    drop(redis);
}

/// A shadow nothing listens for is probed, not hammered: its lane backs off after a refused
/// connection and sends one copy per probe, the copies wait in its lane, and once the bot
/// comes up every copy reaches it. The live bot gets each delivery meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_cannot_be_reached_is_probed_not_hammered_and_gets_its_copies_once_up() {
    let (redis, live, down) = (RedisServer::start(), Receiver::start(SECRET).await, Reserved::new());
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("shprobe"), &live.url());
    cfg.egress = "slack_api_url = \"http://127.0.0.1:9/api/\"".into();
    cfg.app = format!("shadow = {{ upstream = \"{}\" }}", down.url());
    let gw = Gateway::start(&cfg).await;
    let refused = r#"slackgate_deliveries_total{app="bot.shadow",outcome="retried"}"#;
    let unreachable = r#"slackgate_shadow_unreachable{app="bot"}"#;
    assert_eq!(metric(gw.admin_port, unreachable).await, 0.0, "exported at zero");
    // The first copy finds nothing listening.
    let first = Req::signed("/slack/events", mention("EvProbe0", "1700000600.000001"), SECRET);
    assert_eq!(send(gw.port, first).await.0, 200);
    assert!(metric_reaches(gw.admin_port, refused, 1.0, Duration::from_secs(10)).await, "{}", gw.log());
    assert_eq!(metric(gw.admin_port, unreachable).await, 1.0);
    // Twenty more, all delivered to the live bot and copied while the shadow is down.
    let n = 20;
    for i in 1..=n {
        let ts = format!("1700000600.{:06}", i + 1);
        assert_eq!(
            send(gw.port, Req::signed("/slack/events", mention(&format!("EvProbe{i}"), &ts), SECRET)).await.0,
            200
        );
    }
    assert!(eventually(Duration::from_secs(10), || live.count() == n + 1).await, "{}", gw.log());
    let copied = r#"slackgate_shadow_copies_total{app="bot",outcome="copied"}"#;
    assert!(metric_reaches(gw.admin_port, copied, (n + 1) as f64, Duration::from_secs(10)).await, "{}", gw.log());
    // Two probes later (a doubled wait), the copies have not been tried one by one.
    assert!(metric_reaches(gw.admin_port, refused, 3.0, Duration::from_secs(10)).await, "{}", gw.log());
    let tried = metric(gw.admin_port, refused).await;
    assert!(tried < 8.0, "probed, not tried copy by copy: {tried} refused attempts for {} copies", n + 1);
    // The bot comes up: the next probe finds it and every copy reaches it.
    let shadow = down.start(SECRET).await;
    let all = |r: &Receiver| (0..=n).all(|i| r.count_body(&format!("\"EvProbe{i}\"")) >= 1);
    assert!(
        eventually(Duration::from_secs(30), || all(&shadow)).await,
        "{} of {}: {}",
        shadow.count(),
        n + 1,
        gw.log()
    );
    assert!(until(Duration::from_secs(10), async || metric(gw.admin_port, unreachable).await == 0.0).await);
    assert_eq!(live.count(), n + 1, "the live bot got each once");
    drop(redis);
}

/// The replies' text is kept with `[ui] show_text = true` only, and the page puts both bots'
/// first answers side by side; without it no text is kept or shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_show_text_both_answers_text_is_kept_and_shown_and_never_without() {
    for show_text in [true, false] {
        let tail = format!("[ui]\nshow_text = {show_text}\n");
        let r = rig_with(&format!("shtext{show_text}"), "", &tail).await;
        let ts = "1700000450.000100";
        assert_eq!(send(r.gw.port, Req::signed("/slack/events", mention("EvText", ts), SECRET)).await.0, 200);
        assert!(eventually(Duration::from_secs(10), || r.shadow.count() == 1).await, "{}", r.gw.log());
        let live = format!("channel=C1&thread_ts={ts}&text=the+live+words");
        assert!(call(r.gw.egress_port, "chat.postMessage", &live, &[]).await.ok());
        let shadow = format!("channel=C1&thread_ts={ts}&text=the+shadow+words");
        assert!(call(r.gw.egress_port, "/shadow/api/chat.postMessage", &shadow, &[]).await.ok());
        let id = r.live.received()[0].header("x-slackgate-delivery").unwrap();
        let mut shown = Value::Null;
        until(Duration::from_secs(10), async || {
            shown = cli(&r.gw, &["show", &id]);
            shown["summary"]["fields"]["shadow_replies"] == "1" && shown["summary"]["fields"]["replies"] == "1"
        })
        .await;
        let text = shown.to_string();
        assert_eq!(text.contains("the live words") && text.contains("the shadow words"), show_text, "{shown}");
        let page = crate::ui::page(r.gw.admin_port, &format!("/ui/d/bot/{id}"), "", None).await;
        let both = page.body.contains("the live words") && page.body.contains("the shadow words");
        assert_eq!(both, show_text, "{}", page.body);
        let prefix = format!("*{}*", if show_text { "shtexttrue" } else { "shtextfalse" });
        let kept: Vec<String> = r._redis.keys(&prefix);
        let mut any = false;
        for k in kept {
            let mut c = r._redis.conn();
            let kind: String = redis::cmd("TYPE").arg(&k).query(&mut c).unwrap();
            let read = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&k).query::<redis::Value>(&mut c),
                "hash" => redis::cmd("HGETALL").arg(&k).query(&mut c),
                "list" => redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(&mut c),
                "stream" => redis::cmd("XRANGE").arg(&k).arg("-").arg("+").query(&mut c),
                _ => continue,
            };
            any |= format!("{:?}", read.unwrap()).contains("the shadow words");
        }
        assert_eq!(any, show_text, "kept in Redis when, and only when, show_text is on");
    }
}
