//! Turns against a plain HTTP bot (a receiver that answers after a delay): the rules that hold
//! whatever the bot is — one delivery of a conversation at a time, in `ts` order, across two
//! gateways on one Redis; other conversations in parallel; `latest` superseding what waited,
//! listed; a held delivery cancelled by its deletion; `order` turned off releasing what was
//! held. The Bolt apps' view of turns (replies through the egress) is in `turns`.

use std::time::Duration;

use crate::utils::*;

/// A human message `ts` in `channel`, in the thread `thread` (a top-level one when `None`).
fn message(event_id: &str, channel: &str, ts: &str, thread: Option<&str>) -> Vec<u8> {
    let mut event = serde_json::json!({
        "type": "message", "user": "U1", "text": format!("question {ts}"), "channel": channel,
        "channel_type": "channel", "ts": ts,
    });
    if let Some(t) = thread {
        event["thread_ts"] = t.into();
    }
    serde_json::json!({
        "token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": 1700000000, "event": event,
    })
    .to_string()
    .into_bytes()
}

fn deletion(event_id: &str, channel: &str, ts: &str, thread: &str) -> Vec<u8> {
    serde_json::json!({
        "token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": 1700000000,
        "event": {"type": "message", "subtype": "message_deleted", "channel": channel, "ts": "1700000099.000100",
            "deleted_ts": ts, "previous_message": {"ts": ts, "thread_ts": thread, "user": "U1"}},
    })
    .to_string()
    .into_bytes()
}

async fn post(port: u16, body: Vec<u8>) {
    let (status, _) = send(port, Req::signed("/slack/events", body, SECRET)).await;
    assert_eq!(status, 200);
}

/// The `ts` of each message the bot received, in order of arrival, with when it arrived.
fn arrivals(bot: &Receiver) -> Vec<(String, f64)> {
    bot.received()
        .iter()
        .filter_map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            Some((v["event"]["ts"].as_str()?.to_string(), r.at))
        })
        .collect()
}

fn arrival(bot: &Receiver, ts: &str) -> Option<f64> {
    arrivals(bot).into_iter().find(|(t, _)| t == ts).map(|(_, at)| at)
}

const SLOW: Duration = Duration::from_millis(1500);

fn config(redis: &RedisServer, name: &str, bot: &Receiver, order: &str) -> GatewayConfig {
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.delivery = r#"{ timeout = "5s", retry_initial = "100ms", retry_max = "400ms", lease = "11s" }"#.into();
    cfg.app = format!("turns = {{ order = \"{order}\", end = \"answer\", timeout = \"30s\" }}");
    cfg.redis = "shards = 4".into();
    cfg
}

async fn turns_ended(gw: &Gateway, how: &str, at_least: f64) -> bool {
    let series = format!("slackgate_turns_total{{app=\"bot\",ended=\"{how}\"}}");
    metric_reaches(gw.admin_port, &series, at_least, Duration::from_secs(15)).await
}

#[tokio::test]
async fn a_threads_messages_reach_the_bot_one_turn_at_a_time_and_other_threads_go_on() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    bot.set_default(Reply::status(200).delay(SLOW));
    let cfg = config(&redis, "turnsqueue", &bot, "queue");
    let (one, two) = (Gateway::start(&cfg).await, Gateway::start(&cfg).await);
    // Three messages of one thread, the later ones through the other gateway, and one of
    // another thread.
    post(one.port, message("Ev1", "C1", "1700000001.000100", None)).await;
    assert!(eventually(Duration::from_secs(10), || arrival(&bot, "1700000001.000100").is_some()).await);
    post(two.port, message("Ev3", "C1", "1700000003.000100", Some("1700000001.000100"))).await;
    post(two.port, message("Ev2", "C1", "1700000002.000100", Some("1700000001.000100"))).await;
    post(one.port, message("Ev9", "C2", "1700000009.000100", None)).await;
    let all = ["1700000001.000100", "1700000002.000100", "1700000003.000100", "1700000009.000100"];
    let arrived = eventually(Duration::from_secs(20), || all.iter().all(|ts| arrival(&bot, ts).is_some())).await;
    assert!(arrived, "{:?}\n{}\n{}", arrivals(&bot), one.log(), two.log());
    let at = |ts: &str| arrival(&bot, ts).unwrap();
    let (first, second, third, other) =
        (at("1700000001.000100"), at("1700000002.000100"), at("1700000003.000100"), at("1700000009.000100"));
    let gap = SLOW.as_secs_f64() - 0.1;
    assert!(second - first >= gap, "the thread's second message waited for the first's answer: {:?}", arrivals(&bot));
    assert!(third - second >= gap, "and the third, in ts order, for the second's: {:?}", arrivals(&bot));
    assert!(other - first < gap, "another thread did not wait: {:?}", arrivals(&bot));
    assert_eq!(bot.count(), 4, "each delivered once");
    assert!(turns_ended(&one, "answer", 1.0).await || turns_ended(&two, "answer", 1.0).await);
    one.wait_idle().await;
}

#[tokio::test]
async fn latest_delivers_the_newest_of_what_waited_and_lists_the_rest() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    bot.set_default(Reply::status(200).delay(SLOW));
    let gw = Gateway::start(&config(&redis, "turnslatest", &bot, "latest")).await;
    let thread = Some("1700000001.000100");
    post(gw.port, message("Ev1", "C1", "1700000001.000100", None)).await;
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await);
    for (id, ts) in [("Ev2", "1700000002.000100"), ("Ev3", "1700000003.000100"), ("Ev4", "1700000004.000100")] {
        post(gw.port, message(id, "C1", ts, thread)).await;
    }
    assert!(eventually(Duration::from_secs(15), || bot.count() == 2).await, "{:?}", arrivals(&bot));
    gw.wait_idle().await;
    let got: Vec<String> = arrivals(&bot).into_iter().map(|(ts, _)| ts).collect();
    assert_eq!(got, ["1700000001.000100", "1700000004.000100"], "the first, then only the newest");
    let series = "slackgate_turn_superseded_total{app=\"bot\"}";
    assert!(metric_reaches(gw.admin_port, series, 2.0, Duration::from_secs(5)).await);
    let (status, body) = admin_get(gw.admin_port, "/superseded?app=bot").await;
    assert_eq!(status, 200, "{body}");
    let listed: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let mut ts: Vec<&str> = listed.iter().map(|s| s["ts"].as_str().unwrap()).collect();
    ts.sort();
    assert_eq!(ts, ["1700000002.000100", "1700000003.000100"], "{body}");
    assert!(listed.iter().all(|s| s["thread"] == "1700000001.000100" && !s["by"].as_str().unwrap().is_empty()));
    let stats = outbox_stats(gw.admin_port, None).await;
    assert_eq!(stats[0]["superseded"], 2, "{stats}");
}

#[tokio::test]
async fn a_held_delivery_whose_message_is_deleted_is_cancelled_and_the_thread_goes_on() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    bot.set_default(Reply::status(200).delay(SLOW));
    let mut cfg = config(&redis, "turnscancel", &bot, "queue");
    cfg.app.push_str("\ndedupe = { message = true, cancel_on_delete = true }");
    let gw = Gateway::start(&cfg).await;
    let thread = Some("1700000001.000100");
    post(gw.port, message("Ev1", "C1", "1700000001.000100", None)).await;
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await);
    post(gw.port, message("Ev2", "C1", "1700000002.000100", thread)).await;
    post(gw.port, message("Ev3", "C1", "1700000003.000100", thread)).await;
    let held = until(Duration::from_secs(10), async || outbox_stats(gw.admin_port, None).await[0]["held"] == 2).await;
    assert!(held, "{}", outbox_stats(gw.admin_port, None).await);
    post(gw.port, deletion("Ev4", "C1", "1700000002.000100", "1700000001.000100")).await;
    gw.wait_idle().await;
    // The deletion itself is an event of the thread (not a turn: it is not held).
    let got: Vec<String> =
        arrivals(&bot).into_iter().map(|(ts, _)| ts).filter(|ts| ts != "1700000099.000100").collect();
    assert_eq!(got, ["1700000001.000100", "1700000003.000100"], "the deleted one never reached the bot");
}

#[tokio::test]
async fn turning_order_off_releases_every_held_delivery() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    // The first answer takes long: everything after it in the thread is held.
    bot.push(Reply::status(200).delay(Duration::from_secs(8)));
    let mut cfg = config(&redis, "turnsoff", &bot, "queue");
    cfg.delivery = r#"{ timeout = "10s", retry_initial = "100ms", retry_max = "400ms", lease = "21s" }"#.into();
    let gw = Gateway::start(&cfg).await;
    let thread = Some("1700000001.000100");
    post(gw.port, message("Ev1", "C1", "1700000001.000100", None)).await;
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await);
    for (id, ts) in [("Ev2", "1700000002.000100"), ("Ev3", "1700000003.000100")] {
        post(gw.port, message(id, "C1", ts, thread)).await;
    }
    let held = until(Duration::from_secs(10), async || outbox_stats(gw.admin_port, None).await[0]["held"] == 2).await;
    assert!(held, "{}", outbox_stats(gw.admin_port, None).await);
    cfg.app = String::new();
    gw.rewrite(&cfg);
    gw.reload();
    // Released while the first is still being answered: nothing waits for it any more.
    assert!(eventually(Duration::from_secs(6), || bot.count() == 3).await, "{:?}\n{}", arrivals(&bot), gw.log());
    assert!(turns_ended(&gw, "off", 1.0).await, "{}", gw.log());
    gw.wait_idle().await;
}

/// An upgrade with `shards > 1`: a version before turns put a delivery on its receipt's shard;
/// this one puts it on its conversation's. A Slack retry of a delivery the earlier version
/// recorded still finds its receipt there and is absorbed.
#[tokio::test]
async fn a_retry_across_the_upgrade_finds_the_receipt_an_earlier_version_recorded() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let cfg = config(&redis, "turnsupgrade", &bot, "off");
    // An id whose receipt's shard is not its conversation's.
    let moved = (0..100)
        .map(|i| format!("EvUp{i}"))
        .find(|id| slackgate::outbox::shard_of(&format!("e:{id}"), 4) != event_shard(id, 4));
    let (moved, fresh) = (moved.unwrap(), "EvUpFresh".to_string());
    let earlier = slackgate::outbox::shard_of(&format!("e:{moved}"), 4);
    // What the earlier version left: its register, and the receipt of the delivery it took.
    let mut conn = redis.conn();
    let _: () =
        redis::cmd("HSET").arg(format!("{{{}}}:shards", cfg.prefix)).arg("bot").arg(4).query(&mut conn).unwrap();
    let receipt = format!("{{{}:bot:{earlier}}}:r:e:{moved}", cfg.prefix);
    let _: () = redis::cmd("SET").arg(&receipt).arg(format!("{earlier}-00000000000000aa")).query(&mut conn).unwrap();
    let gw = Gateway::start(&cfg).await;
    let retry = Req::signed("/slack/events", event(&moved), SECRET).header("X-Slack-Retry-Num", "1");
    assert_eq!(send(gw.port, retry).await.0, 200);
    assert_eq!(send(gw.port, Req::signed("/slack/events", event(&fresh), SECRET)).await.0, 200);
    let duplicate = "slackgate_requests_total{app=\"bot\",kind=\"event\",outcome=\"duplicate\"}";
    assert!(metric_reaches(gw.admin_port, duplicate, 1.0, Duration::from_secs(5)).await, "{}", gw.log());
    gw.wait_idle().await;
    assert_eq!(bot.count_body(&moved), 0, "the earlier version's delivery is not delivered again");
    assert_eq!(bot.count_body(&fresh), 1);
    // This version's own receipts, claimed on the earlier shard as well, are no duplicates of
    // themselves: a retry of a new delivery is absorbed by its own record.
    let again = Req::signed("/slack/events", event(&fresh), SECRET).header("X-Slack-Retry-Num", "1");
    assert_eq!(send(gw.port, again).await.0, 200);
    gw.wait_idle().await;
    assert_eq!(bot.count_body(&fresh), 1);
}

// ---------------------------------------------------------------------------------------------
// With the egress: the bot's replies end a turn (`end = "reply"`), and a reply to a question the
// conversation has moved past is withheld (`on_newer = "withhold"`).

struct Replying {
    _redis: RedisServer,
    slack: FakeSlack,
    bot: Receiver,
    gw: Gateway,
}

/// A bot that answers 2xx at once (ack-first, like Bolt's default) and writes through the egress
/// only when the test says so.
async fn replying(name: &str, turns: &str) -> Replying {
    let redis = RedisServer::start();
    let slack = FakeSlack::start().await;
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.app = format!("turns = {turns}");
    cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
    let gw = Gateway::start(&cfg).await;
    Replying { _redis: redis, slack, bot, gw }
}

impl Replying {
    async fn post(&self, body: Vec<u8>) {
        post(self.gw.port, body).await;
    }

    async fn held(&self) -> u64 {
        outbox_stats(self.gw.admin_port, None).await[0]["held"].as_u64().unwrap_or(0)
    }

    /// The bot's write through the egress: `method` with a form body.
    async fn write(&self, method: &str, body: &str) -> crate::egress_common::Answer {
        crate::egress_common::call(self.gw.egress_port, method, body, &[]).await
    }
}

const ROOT: &str = "1700000001.000100";

#[tokio::test]
async fn with_end_reply_a_turn_ends_once_the_bot_has_written_and_gone_quiet() {
    let r = replying("turnsreply", r#"{ order = "queue", quiet = "1s", pass_after = "30s" }"#).await;
    r.post(message("Ev1", "C1", ROOT, None)).await;
    assert!(eventually(Duration::from_secs(5), || r.bot.count() == 1).await);
    r.post(message("Ev2", "C1", "1700000002.000100", Some(ROOT))).await;
    assert!(until(Duration::from_secs(5), async || r.held().await == 1).await, "the second waits for the turn");
    // Answered 2xx long ago; still its turn, until the bot writes and then is quiet.
    let posted = r.write("chat.postMessage", &format!("channel=C1&thread_ts={ROOT}&text=answer+one")).await;
    assert!(posted.ok(), "{}", posted.body);
    let wrote_at = unix_now_f64();
    assert!(eventually(Duration::from_secs(10), || r.bot.count() == 2).await, "{}", r.gw.log());
    let second = arrival(&r.bot, "1700000002.000100").unwrap();
    assert!(second - wrote_at >= 0.9, "delivered a quiet second after the reply: {}", second - wrote_at);
    assert!(turns_ended(&r.gw, "reply", 1.0).await, "{}", r.gw.log());
}

#[tokio::test]
async fn with_end_reply_a_turn_the_bot_does_not_answer_passes() {
    let r = replying("turnspass", r#"{ order = "queue", quiet = "1s", pass_after = "2s" }"#).await;
    r.post(message("Ev1", "C1", ROOT, None)).await;
    assert!(eventually(Duration::from_secs(5), || r.bot.count() == 1).await);
    let first = arrival(&r.bot, ROOT).unwrap();
    r.post(message("Ev2", "C1", "1700000002.000100", Some(ROOT))).await;
    assert!(eventually(Duration::from_secs(10), || r.bot.count() == 2).await, "{}", r.gw.log());
    let second = arrival(&r.bot, "1700000002.000100").unwrap();
    assert!(second - first >= 1.9, "the thread moved on after pass_after: {}", second - first);
    assert!(turns_ended(&r.gw, "passed", 1.0).await, "{}", r.gw.log());
}

#[tokio::test]
async fn a_reply_to_a_question_the_thread_moved_past_is_withheld_and_updates_still_go() {
    let turns = r#"{ order = "queue", on_newer = "withhold", quiet = "2s", pass_after = "30s" }"#;
    let r = replying("turnswithhold", turns).await;
    r.post(message("Ev1", "C1", ROOT, None)).await;
    assert!(eventually(Duration::from_secs(5), || r.bot.count() == 1).await);
    // A placeholder while nothing newer waits: posted.
    let placeholder = r.write("chat.postMessage", &format!("channel=C1&thread_ts={ROOT}&text=thinking")).await;
    assert!(placeholder.ok(), "{}", placeholder.body);
    let placeholder_ts = placeholder.json()["ts"].as_str().unwrap().to_string();
    r.post(message("Ev2", "C1", "1700000002.000100", Some(ROOT))).await;
    assert!(until(Duration::from_secs(5), async || r.held().await == 1).await);
    // Finishing the placeholder is never withheld (no half-answer) ...
    let update = r.write("chat.update", &format!("channel=C1&ts={placeholder_ts}&text=done")).await;
    assert!(update.ok(), "{}", update.body);
    // ... but a new answer to the old question is: the newer one is answered next.
    let stale = r.write("chat.postMessage", &format!("channel=C1&thread_ts={ROOT}&text=more+on+one")).await;
    assert_eq!(stale.json()["error"], "superseded", "{}", stale.body);
    assert!(eventually(Duration::from_secs(5), || r.bot.count() == 2).await, "the withheld write ended the turn");
    let fresh = r.write("chat.postMessage", &format!("channel=C1&thread_ts={ROOT}&text=answer+two")).await;
    assert!(fresh.ok(), "nothing newer waits for the second: {}", fresh.body);
    // The placeholder as its update left it, and the fresh answer.
    let texts: Vec<String> = r.slack.posts().iter().map(|p| p["text"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(texts, ["done", "answer two"], "the stale answer never reached Slack");
    let withheld = crate::egress_common::outcomes(r.gw.admin_port, "withheld_superseded").await;
    assert_eq!(withheld, 1.0);
    assert!(turns_ended(&r.gw, "superseded", 1.0).await);
}

#[tokio::test]
async fn a_dms_messages_take_turns_and_its_replies_without_a_thread_belong_to_them() {
    let turns = r#"{ order = "queue", on_newer = "withhold", quiet = "1s", pass_after = "30s" }"#;
    let r = replying("turnsdm", turns).await;
    let dm = |id: &str, ts: &str| {
        let mut body: serde_json::Value = serde_json::from_slice(&message(id, "D1", ts, None)).unwrap();
        body["event"]["channel_type"] = "im".into();
        body.to_string().into_bytes()
    };
    r.post(dm("Ev1", "1700000001.000100")).await;
    assert!(eventually(Duration::from_secs(5), || r.bot.count() == 1).await);
    r.post(dm("Ev2", "1700000002.000100")).await;
    assert!(until(Duration::from_secs(5), async || r.held().await == 1).await, "a DM is one conversation");
    // Bolt's say() in a DM: no thread_ts. It answers the first message, which the second
    // has moved past.
    let stale = r.write("chat.postMessage", "channel=D1&text=answer+one").await;
    assert_eq!(stale.json()["error"], "superseded", "{}", stale.body);
    assert!(eventually(Duration::from_secs(5), || r.bot.count() == 2).await);
    let fresh = r.write("chat.postMessage", "channel=D1&text=answer+two").await;
    assert!(fresh.ok(), "{}", fresh.body);
    assert!(turns_ended(&r.gw, "reply", 1.0).await, "quiet after the second's reply ends its turn");
}

fn unix_now_f64() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Many messages of one thread at the same moment, half through each of two gateways: the bot
/// never has two of them at once, and gets each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_messages_sent_at_once_to_two_gateways_never_overlap() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let answer = Duration::from_millis(300);
    bot.set_default(Reply::status(200).delay(answer));
    let cfg = config(&redis, "turnsatonce", &bot, "queue");
    let (one, two) = (Gateway::start(&cfg).await, Gateway::start(&cfg).await);
    let ts: Vec<String> = (1..=8).map(|i| format!("17000000{i:02}.000100")).collect();
    let sends = ts.iter().enumerate().map(|(i, ts)| {
        let port = if i % 2 == 0 { one.port } else { two.port };
        let thread = (i > 0).then_some(ROOT);
        let ts = if i == 0 { ROOT.to_string() } else { ts.clone() };
        post(port, message(&format!("EvAt{i}"), "C1", &ts, thread))
    });
    futures_util::future::join_all(sends).await;
    assert!(eventually(Duration::from_secs(30), || bot.count() == 8).await, "{:?}", arrivals(&bot));
    one.wait_idle().await;
    let mut at: Vec<f64> = arrivals(&bot).into_iter().map(|(_, at)| at).collect();
    at.sort_by(f64::total_cmp);
    for pair in at.windows(2) {
        assert!(pair[1] - pair[0] >= answer.as_secs_f64() - 0.05, "two at once: {:?}", arrivals(&bot));
    }
    assert_eq!(bot.count(), 8, "each once");
}
