//! Issue 21, thread reads Slack refuses (`[egress] replies_fallback = "record"`): real,
//! unmodified Bolt bots (`tests/bolt/python/context_app.py`, `tests/bolt/js/context_app.js`)
//! that read their thread with `conversations.replies` before each answer, as AI bots do, behind
//! the gateway's egress, against the fake Web API at Slack's tier 1 for that method (one call a
//! minute per token, 15 messages a page).
//!
//! A burst of mentions spends Slack's one read a minute at the first; with the fallback on, the
//! gateway answers the rest from the thread it recorded from the message events it received, so
//! every mention is answered with its context (`context <n> <root text>`); with it off each later
//! read gets Slack's 429, and the bot says so (`no context <ts>`). A thread the gateway did not
//! see from its root is never answered from the record, and edits and deletions show as Slack
//! would show them.
//!
//! Every scenario runs well within one minute, so the fake's tier allows exactly the first read
//! of a test: the later ones are all 429s at Slack, whatever the bot got back.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};

use crate::utils::*;

/// The counter of thread reads the egress answered from its record.
const FROM_RECORD: &str = "slackgate_egress_replies_from_record_total";

/// Redis, the fake Slack at tier 1 for `conversations.replies`, the bot and its gateway.
struct Rig {
    _redis: RedisServer,
    slack: FakeSlack,
    _relay: Relay,
    bot: BoltProcess,
    gw: Gateway,
    /// The seconds part of this test's message timestamps (now, as Slack's are).
    base: i64,
}

impl Rig {
    async fn start(kind: Bolt, name: &str, fallback: bool) -> Rig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        slack.tier("conversations.replies", 1, 15);
        // The bot starts first (the gateway's upstream is its port), so its Web API client gets
        // the relay's stable address, pointed at the egress once the gateway is up.
        let relay = Relay::start().await;
        let bot = BoltProcess::start(kind, "context_app", &[("SLACK_API_URL", relay.api_url())]).await;
        let mut cfg =
            GatewayConfig::new(&redis.url(), &prefix(&format!("replies{kind:?}{name}{fallback}")), &bot.url());
        cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
        if fallback {
            cfg.egress += "\nreplies_fallback = \"record\"";
        }
        let gw = Gateway::start(&cfg).await;
        relay.point_at(&[gw.egress_port]);
        Rig { _redis: redis, slack, _relay: relay, bot, gw, base: unix_now() }
    }

    fn ts(&self, i: u32) -> String {
        format!("{}.{i:06}", self.base)
    }

    /// A person's message `i` in C1 (in the thread of message `thread`, if any): Slack shows it
    /// in history (the fake's own answer to a read) and sends it to the gateway, which acks it.
    async fn say(&self, i: u32, thread: Option<u32>, text: &str) -> String {
        let ts = self.ts(i);
        let mut event = json!({
            "type": "message", "user": "U1", "text": text, "ts": ts, "team": "T1",
            "channel": "C1", "channel_type": "channel", "event_ts": ts, "blocks": []
        });
        if let Some(root) = thread {
            event["thread_ts"] = json!(self.ts(root));
            event["parent_user_id"] = json!("U1");
        }
        let mut shown = json!({"type": "message", "user": "U1", "text": text, "ts": ts});
        if let Some(root) = thread {
            shown["thread_ts"] = json!(self.ts(root));
        }
        self.slack.add_message("C1", shown);
        self.deliver(event).await;
        ts
    }

    /// Slack sends `event` in an Events API envelope of team T1 to the gateway, which acks it.
    async fn deliver(&self, event: Value) {
        let id = format!("Ev{}", event["event_ts"].as_str().unwrap_or_default().replace('.', ""));
        let body = json!({
            "token": "verification-token", "team_id": "T1", "api_app_id": "A1", "event": event,
            "type": "event_callback", "event_id": id, "event_time": unix_now(),
            "authorizations": [{
                "enterprise_id": null, "team_id": "T1", "user_id": "UBOT", "is_bot": true, "is_enterprise_install": false
            }],
            "is_ext_shared_channel": false, "event_context": "4-eyJldCI6Im1lc3NhZ2UifQ"
        });
        let (status, answer) =
            send(self.gw.port, Req::signed("/slack/events", body.to_string().into_bytes(), SECRET)).await;
        assert_eq!(status, 200, "{answer:?}\n{}", self.logs());
    }

    /// Wait until the bot printed `HANDLED <what> <ts>` (any of `whats`); the line it printed.
    async fn wait(&self, whats: &[&str], ts: &str) -> String {
        let mut line = None;
        let seen = eventually(Duration::from_secs(20), || {
            line = self.bot.stdout().lines().filter_map(|l| l.strip_prefix("HANDLED ")).find_map(|l| {
                let mut words = l.split(' ');
                let (what, at) = (words.next()?, words.next()?);
                (whats.contains(&what) && at == ts).then(|| l.to_string())
            });
            line.is_some()
        })
        .await;
        assert!(seen, "the bot never printed {whats:?} for {ts} within 20 s\n{}", self.logs());
        line.unwrap()
    }

    /// Wait until the bot handled the mention `ts` (answered or told of Slack's 429).
    async fn handled(&self, ts: &str) -> String {
        self.wait(&["answered", "ratelimited"], ts).await
    }

    /// The texts the bot posted in C1's thread `thread`, in order.
    fn posts_in(&self, thread: &str) -> Vec<String> {
        let posts = self.slack.posts();
        let in_thread = posts.iter().filter(|p| p["channel"] == "C1" && p["thread_ts"] == thread);
        in_thread.filter_map(|p| p["text"].as_str().map(String::from)).collect()
    }

    /// Every `conversations.replies` call reached the fake within one minute of the first, so
    /// its tier let only that first one through: every later answer came from elsewhere.
    fn assert_one_read_allowed(&self) {
        let calls = self.slack.calls_of("conversations.replies");
        let first = calls.first().unwrap_or_else(|| panic!("the fake saw no thread read\n{}", self.logs())).at;
        let last = calls.last().unwrap().at;
        assert!(
            last.duration_since(first) < Duration::from_secs(60),
            "the reads spread over a minute\n{}",
            self.logs()
        );
    }

    /// `conversations.replies` of C1's thread `ts` through the egress, as the bot's client sends
    /// it (a GET with its token): the status, `X-Slackgate-Source` and the body.
    async fn read_thread(&self, ts: &str) -> Read {
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Full<Bytes>>();
        let request = hyper::Request::get(format!(
            "http://127.0.0.1:{}/api/conversations.replies?channel=C1&ts={ts}",
            self.gw.egress_port
        ))
        .header("Authorization", "Bearer xoxb-test")
        .body(Full::new(Bytes::new()))
        .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(request)).await;
        let resp = resp.expect("the egress answered within 10 s").expect("the egress answered");
        let status = resp.status().as_u16();
        let source = resp.headers().get("x-slackgate-source").and_then(|v| v.to_str().ok()).map(String::from);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let body =
            serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
        Read { status, source, body }
    }

    /// Read thread `ts` through the egress until it lists `texts` (the bot's own answer is
    /// recorded from the egress's answer to its post, in the background).
    async fn read_until(&self, ts: &str, texts: &[&str]) -> Read {
        let mut got = Read { status: 0, source: None, body: Value::Null };
        let listed = until(Duration::from_secs(10), async || {
            got = self.read_thread(ts).await;
            got.texts() == texts
        })
        .await;
        assert!(listed, "the thread read {:?}, expected {texts:?}\n{}", got, self.logs());
        got
    }

    /// Thread reads the egress answered from its record (0 before the counter exists).
    async fn served_from_record(&self) -> f64 {
        metric(self.gw.admin_port, FROM_RECORD).await
    }

    fn logs(&self) -> String {
        let calls: Vec<String> = self
            .slack
            .calls()
            .iter()
            .map(|c| format!("{} {} {}", c.method, c.query.as_deref().unwrap_or(""), String::from_utf8_lossy(&c.body)))
            .collect();
        format!("{}--- gateway ---\n{}--- Slack API calls ---\n{}", self.bot.logs(), self.gw.log(), calls.join("\n"))
    }
}

/// What a thread read through the egress got.
#[derive(Debug)]
struct Read {
    status: u16,
    /// `X-Slackgate-Source` (`record` when the record answered).
    source: Option<String>,
    body: Value,
}

impl Read {
    fn texts(&self) -> Vec<&str> {
        let messages = self.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
        messages.iter().map(|m| m["text"].as_str().unwrap_or_default()).collect()
    }

    /// Slack's 429 as it came: no record's answer in its place.
    fn assert_slacks_429(&self) {
        assert_eq!((self.status, self.source.as_deref()), (429, None), "{self:?}");
        assert_eq!(self.body["error"], "ratelimited", "{self:?}");
    }
}

/// The burst's size: Slack's one read a minute answers the first of them.
const BURST: u32 = 8;

/// A thread with context (a root the bot ignores, a person's reply), then a burst of mentions,
/// each its own thread, then a mention in the thread with context.
async fn a_burst_of_mentions_keeps_its_context(kind: Bolt, fallback: bool) {
    let rig = Rig::start(kind, "burst", fallback).await;
    let root = rig.say(100, None, "the deploy failed on staging").await;
    let reply = rig.say(101, Some(100), "it says the disk is full").await;
    rig.wait(&["skipped"], &root).await;
    rig.wait(&["skipped"], &reply).await;
    let mut burst = Vec::new();
    for i in 1..=BURST {
        burst.push(rig.say(i, None, &format!("<@UBOT> question {i}")).await);
    }
    for ts in &burst {
        rig.handled(ts).await;
    }
    // Slack's minute is spent by now: this read is refused at Slack whatever the burst did.
    let ask = rig.say(102, Some(100), "<@UBOT> what now?").await;
    rig.handled(&ask).await;
    rig.assert_one_read_allowed();
    if fallback {
        burst_answered_from_record(&rig, &burst, &root).await;
    } else {
        burst_got_slacks_429(&rig, &burst, &root, &ask).await;
    }
}

/// `context 1 <@UBOT> question <i>`: mention i (from 1) answered with its one-message thread.
fn with_context(i: usize) -> Vec<String> {
    vec![format!("context 1 <@UBOT> question {}", i + 1)]
}

fn no_context(ts: &str) -> Vec<String> {
    vec![format!("no context {ts}")]
}

/// Fallback on: every mention answered with its thread (Slack's one read for the first, the
/// record for the rest), the thread with context whole, in Slack's shape.
async fn burst_answered_from_record(rig: &Rig, burst: &[String], root: &str) {
    for (i, ts) in burst.iter().enumerate() {
        assert_eq!(rig.posts_in(ts), with_context(i), "mention {} answered with its thread\n{}", i + 1, rig.logs());
    }
    let context = "context 3 the deploy failed on staging";
    assert_eq!(rig.posts_in(root), [context], "root, reply and mention, from the record\n{}", rig.logs());
    let served = rig.served_from_record().await;
    assert!(served >= f64::from(BURST), "{FROM_RECORD} = {served}, expected ≥ {BURST}\n{}", rig.logs());
    // The bot's own answer is in the record too, taken from the egress's answer to its post.
    let thread = ["the deploy failed on staging", "it says the disk is full", "<@UBOT> what now?", context];
    let read = rig.read_until(root, &thread).await;
    assert_eq!((read.status, read.source.as_deref()), (200, Some("record")), "{read:?}");
    let shape = (&read.body["ok"], &read.body["has_more"], &read.body["response_metadata"]["next_cursor"]);
    assert_eq!(shape, (&json!(true), &json!(false), &json!("")), "Slack's shape: {read:?}");
}

/// Fallback off: the mention the bot read first got Slack's one read, the rest its 429.
async fn burst_got_slacks_429(rig: &Rig, burst: &[String], root: &str, ask: &str) {
    let answers: Vec<Vec<String>> = burst.iter().map(|ts| rig.posts_in(ts)).collect();
    let first = (0..answers.len()).find(|&i| answers[i] == with_context(i));
    let first = first.unwrap_or_else(|| panic!("no mention got Slack's one read: {answers:?}\n{}", rig.logs()));
    for (i, got) in answers.iter().enumerate() {
        let expected = if i == first { with_context(i) } else { no_context(&burst[i]) };
        assert_eq!(*got, expected, "mention {}\n{}", i + 1, rig.logs());
    }
    assert_eq!(rig.posts_in(root), no_context(ask), "{}", rig.logs());
    assert_eq!(rig.served_from_record().await, 0.0, "{}", rig.logs());
    rig.read_thread(root).await.assert_slacks_429();
}

/// A thread whose root the gateway never received (it came before the gateway, or Slack never
/// sent it): its read is refused at Slack, and the record does not answer for it.
async fn a_thread_not_seen_from_its_root_gets_slacks_429(kind: Bolt, fallback: bool) {
    let rig = Rig::start(kind, "unseen", fallback).await;
    // Slack's one read of the minute.
    let first = rig.say(1, None, "<@UBOT> hello").await;
    assert!(rig.handled(&first).await.starts_with("answered "), "{}", rig.logs());
    // The root is in Slack's history only; the reply and the mention reach the gateway.
    let root = rig.ts(100);
    rig.slack.add_message("C1", json!({"type": "message", "user": "U2", "text": "from before", "ts": root}));
    let reply = rig.say(101, Some(100), "a reply the gateway saw").await;
    rig.wait(&["skipped"], &reply).await;
    let ask = rig.say(102, Some(100), "<@UBOT> what was that about?").await;
    let line = rig.handled(&ask).await;
    assert_eq!(line, format!("ratelimited {ask}"), "Slack's 429 reached the bot\n{}", rig.logs());
    assert_eq!(rig.posts_in(&root), [format!("no context {ask}")], "{}", rig.logs());
    assert_eq!(rig.posts_in(&first), ["context 1 <@UBOT> hello"], "{}", rig.logs());
    rig.assert_one_read_allowed();
    assert_eq!(rig.served_from_record().await, 0.0, "{}", rig.logs());
    rig.read_thread(&root).await.assert_slacks_429();
}

/// The root edited and a reply deleted before the mention: the record shows the root as edited
/// and the deleted reply not at all, as Slack's history would.
async fn edits_and_deletions_show_as_slack_shows_them(kind: Bolt, fallback: bool) {
    let rig = Rig::start(kind, "edits", fallback).await;
    let first = rig.say(1, None, "<@UBOT> hello").await;
    assert!(rig.handled(&first).await.starts_with("answered "), "{}", rig.logs());
    let root = rig.say(100, None, "the deploy failed").await;
    let kept = rig.say(101, Some(100), "it says the disk is full").await;
    let gone = rig.say(102, Some(100), "wrong thread, sorry").await;
    for ts in [&root, &kept, &gone] {
        rig.wait(&["skipped"], ts).await;
    }
    let (edit, delete) = (rig.ts(200), rig.ts(201));
    rig.deliver(json!({
        "type": "message", "subtype": "message_changed", "hidden": true, "channel": "C1", "channel_type": "channel",
        "ts": edit, "event_ts": edit,
        "message": {"type": "message", "user": "U1", "text": "the deploy failed on staging", "ts": root, "team": "T1",
            "thread_ts": root, "reply_count": 2, "edited": {"user": "U1", "ts": edit}},
        "previous_message": {"type": "message", "user": "U1", "text": "the deploy failed", "ts": root, "thread_ts": root}
    }))
    .await;
    rig.deliver(json!({
        "type": "message", "subtype": "message_deleted", "hidden": true, "channel": "C1", "channel_type": "channel",
        "ts": delete, "event_ts": delete, "deleted_ts": gone,
        "previous_message": {"type": "message", "user": "U1", "text": "wrong thread, sorry", "ts": gone, "thread_ts": root}
    }))
    .await;
    rig.wait(&["skipped"], &edit).await;
    rig.wait(&["skipped"], &delete).await;
    let ask = rig.say(103, Some(100), "<@UBOT> what now?").await;
    rig.handled(&ask).await;
    rig.assert_one_read_allowed();
    if !fallback {
        assert_eq!(rig.posts_in(&root), [format!("no context {ask}")], "{}", rig.logs());
        return rig.read_thread(&root).await.assert_slacks_429();
    }
    let context = "context 3 the deploy failed on staging";
    assert_eq!(rig.posts_in(&root), [context], "root (edited), the kept reply, the mention\n{}", rig.logs());
    let read = rig
        .read_until(&root, &["the deploy failed on staging", "it says the disk is full", "<@UBOT> what now?", context])
        .await;
    assert_eq!(read.body["messages"][0]["edited"]["ts"], json!(edit), "the root as edited: {read:?}");
}

/// One `#[tokio::test]` per (framework, fallback) of a scenario.
macro_rules! scenario {
    ($scenario:ident: $($test:ident => $kind:ident, $fallback:expr;)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                $scenario(Bolt::$kind, $fallback).await
            }
        )+
    };
}

const ON: bool = true;
const OFF: bool = false;

scenario!(a_burst_of_mentions_keeps_its_context:
    python_burst_fallback_on => Python, ON;
    python_burst_fallback_off => Python, OFF;
    js_burst_fallback_on => Js, ON;
    js_burst_fallback_off => Js, OFF;
);
scenario!(a_thread_not_seen_from_its_root_gets_slacks_429:
    python_unseen_root_fallback_on => Python, ON;
    js_unseen_root_fallback_on => Js, ON;
);
// Off: the same edit and deletion reach the bot (and are skipped), and the read gets Slack's 429.
scenario!(edits_and_deletions_show_as_slack_shows_them:
    python_edits_fallback_on => Python, ON;
    python_edits_fallback_off => Python, OFF;
    js_edits_fallback_on => Js, ON;
    js_edits_fallback_off => Js, OFF;
);
