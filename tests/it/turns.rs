//! Issue 18, turns: one turn at a time per conversation, with real, unmodified Bolt bots
//! (`tests/bolt/python/turns_app.py`, `tests/bolt/js/turns_app.js`) that answer in thread after
//! a "model call" (`ANSWER_DELAY`) through the gateway's egress, against the fake Slack Web API.
//! Each scenario runs for both frameworks; where the way the bot answers Slack matters, both
//! ack-first (Bolt's default; `end = "reply"`) and process-before-response (`end = "answer"`).
//!
//! What a test asserts on: the bot's `HANDLED start|answered|withheld|… <ts>` lines, in the order
//! the bot printed them (one process, so one order), the posts the fake Slack kept (channel,
//! `thread_ts`, text `answer to <ts>`), and the gateway's metrics and admin API.
//!
//! The bot's Web API client reaches the egress through a [`Relay`] (a stable address across a
//! gateway's restart, which binds new ports, and in front of two replicas).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::utils::*;

/// How the bot answers Slack's request: Bolt's default, ack first (2xx, then the work), or
/// after the work (`process_before_response`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ack {
    First,
    AfterWork,
}

impl Ack {
    /// The `end` the gateway is configured with for such a bot, which is also how its turns end.
    fn end(self) -> &'static str {
        match self {
            Ack::First => "reply",
            Ack::AfterWork => "answer",
        }
    }
}

/// The app's `turns = { … }` with the suite's short times.
fn turns(order: &str, on_newer: &str, quiet: &str, ack: Ack) -> String {
    format!(
        r#"turns = {{ order = "{order}", on_newer = "{on_newer}", end = "{}", quiet = "{quiet}", pass_after = "3s", timeout = "8s" }}"#,
        ack.end()
    )
}

/// The bot process (`turns_app`), killed on drop.
struct Bot(BoltProcess);

impl std::ops::Deref for Bot {
    type Target = BoltProcess;
    fn deref(&self) -> &BoltProcess {
        &self.0
    }
}

impl Bot {
    async fn start(kind: Bolt, ack: Ack, delay: f64, api_url: &str) -> Bot {
        let env = [
            ("SLACK_API_URL", api_url.to_string()),
            ("ACK_FIRST", if ack == Ack::First { "1" } else { "0" }.to_string()),
            ("ANSWER_DELAY", delay.to_string()),
        ];
        Bot(BoltProcess::start(kind, "turns_app", &env).await)
    }

    /// The app's `HANDLED <what> <ts> …` lines as `<what> <ts>`, in the order it printed them.
    fn seen(&self) -> Vec<String> {
        self.stdout()
            .lines()
            .filter_map(|l| l.strip_prefix("HANDLED "))
            .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect()
    }
}

/// One human message as Slack sends it.
struct Msg {
    channel: &'static str,
    channel_type: &'static str,
    ts: String,
    thread_ts: Option<String>,
    text: String,
}

impl Msg {
    /// The text the bot answers it with.
    fn answer(&self) -> String {
        format!("answer to {}", self.ts)
    }

    fn event(&self) -> Vec<u8> {
        let mut event = json!({
            "type": "message", "user": "U1", "text": self.text, "ts": self.ts, "team": "T1",
            "channel": self.channel, "channel_type": self.channel_type, "event_ts": self.ts, "blocks": []
        });
        if let Some(thread) = &self.thread_ts {
            event["thread_ts"] = json!(thread);
            event["parent_user_id"] = json!("U1");
        }
        json!({
            "token": "verification-token",
            "team_id": "T1",
            "api_app_id": "A1",
            "event": event,
            "type": "event_callback",
            "event_id": format!("Ev{}{}", self.channel, self.ts.replace('.', "")),
            "event_time": unix_now(),
            "authorizations": [{
                "enterprise_id": null, "team_id": "T1", "user_id": "UBOT", "is_bot": true, "is_enterprise_install": false
            }],
            "is_ext_shared_channel": false,
            "event_context": "4-eyJldCI6Im1lc3NhZ2UifQ"
        })
        .to_string()
        .into_bytes()
    }
}

/// `start`/`answered` of each message in turn: what one turn at a time looks like.
fn one_at_a_time(msgs: &[&Msg]) -> Vec<String> {
    msgs.iter().flat_map(|m| [format!("start {}", m.ts), format!("answered {}", m.ts)]).collect()
}

/// The sum of the samples of `name` on a gateway's `/metrics` whose labels include `labels`.
async fn series(admin_port: u16, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, body) = admin_get(admin_port, "/metrics").await;
    body.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Redis, the fake Slack Web API, the relay, the bot and its gateways (all on one Redis).
struct Rig {
    redis: RedisServer,
    slack: FakeSlack,
    relay: Relay,
    bot: Bot,
    gws: Vec<Gateway>,
    /// The seconds part of this test's message timestamps (now, as Slack's are).
    base: i64,
}

impl Rig {
    async fn start(kind: Bolt, ack: Ack, name: &str, turns: String, delay: f64) -> Rig {
        Self::start_n(kind, ack, name, turns, delay, 1).await
    }

    /// With `n` gateways on one Redis; the relay spreads the bot's Web API calls over them.
    async fn start_n(kind: Bolt, ack: Ack, name: &str, turns: String, delay: f64, n: usize) -> Rig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let relay = Relay::start().await;
        let bot = Bot::start(kind, ack, delay, &relay.api_url()).await;
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(&format!("turns{kind:?}{ack:?}{name}")), &bot.url());
        // One attempt outlives the slowest "model call" of a bot that answers after its work.
        cfg.delivery = r#"{ timeout = "5s", retry_initial = "100ms", retry_max = "400ms", lease = "8s" }"#.into();
        cfg.app = turns;
        cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
        let mut gws = Vec::new();
        for _ in 0..n {
            gws.push(Gateway::start(&cfg).await);
        }
        relay.point_at(&gws.iter().map(|g| g.egress_port).collect::<Vec<_>>());
        Rig { redis, slack, relay, bot, gws, base: unix_now() }
    }

    fn ts(&self, i: u32) -> String {
        format!("{}.{i:06}", self.base)
    }

    /// A top-level message in channel C1 (it starts its own thread).
    fn top(&self, i: u32, text: &str) -> Msg {
        Msg { channel: "C1", channel_type: "channel", ts: self.ts(i), thread_ts: None, text: text.into() }
    }

    /// A reply in C1 in the thread of top-level message `root`.
    fn reply(&self, root: u32, i: u32, text: &str) -> Msg {
        Msg { thread_ts: Some(self.ts(root)), ..self.top(i, text) }
    }

    /// A message in the DM D1, not in a thread.
    fn dm(&self, i: u32, text: &str) -> Msg {
        Msg { channel: "D1", channel_type: "im", ..self.top(i, text) }
    }

    /// Slack sends `m` to gateway `gw`, which acks it.
    async fn send(&self, gw: usize, m: &Msg) {
        let (status, body) = send(self.gws[gw].port, Req::signed("/slack/events", m.event(), SECRET)).await;
        assert_eq!(status, 200, "{body:?}\n{}", self.logs());
    }

    /// Wait until the bot printed `HANDLED <what> <m.ts>`; when it was first seen.
    async fn wait(&self, what: &str, m: &Msg, within: Duration) -> Instant {
        let line = format!("{what} {}", m.ts);
        assert!(
            eventually(within, || self.bot.seen().contains(&line)).await,
            "the bot never printed {line:?} within {within:?}\n{}",
            self.logs()
        );
        Instant::now()
    }

    /// The texts the bot posted to `channel`, in thread `thread` (None: not in a thread).
    fn posts_in(&self, channel: &str, thread: Option<&str>) -> Vec<String> {
        let thread = thread.map_or(Value::Null, |t| Value::String(t.into()));
        self.slack
            .posts()
            .iter()
            .filter(|p| p["channel"] == channel && p["thread_ts"] == thread)
            .filter_map(|p| p["text"].as_str().map(String::from))
            .collect()
    }

    /// Turns that ended `how`, summed over the gateways.
    async fn ended(&self, how: &str) -> f64 {
        let mut sum = 0.0;
        for gw in &self.gws {
            sum += series(gw.admin_port, "slackgate_turns_total", &[("app", "bot"), ("ended", how)]).await;
        }
        sum
    }

    /// Wait until `n` turns ended `how`.
    async fn ended_reaches(&self, how: &str, n: f64) {
        let mut got = 0.0;
        let reached = until(Duration::from_secs(20), async || {
            got = self.ended(how).await;
            got >= n
        })
        .await;
        assert!(reached, "turns ended {how:?}: {got}, expected {n}\n{}", self.logs());
    }

    fn logs(&self) -> String {
        let mut s = self.bot.logs();
        for (i, gw) in self.gws.iter().enumerate() {
            s += &format!("--- gateway {i} ---\n{}", gw.log());
        }
        let calls: Vec<String> =
            self.slack.calls().iter().map(|c| format!("{} {}", c.method, String::from_utf8_lossy(&c.body))).collect();
        s + &format!("--- Slack API calls ---\n{}\n--- Redis ---\n{}", calls.join("\n"), self.redis_dump())
    }

    /// Every key in Redis with what it holds (for a failure's message).
    fn redis_dump(&self) -> String {
        let Ok(mut c) = redis::Client::open(self.redis.url()).and_then(|c| c.get_connection()) else {
            return "(no connection)".into();
        };
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap_or_default();
        keys.sort();
        let mut out = String::new();
        for key in keys {
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut c).unwrap_or_default();
            let what: redis::RedisResult<redis::Value> = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&key).query(&mut c),
                "hash" => redis::cmd("HGETALL").arg(&key).query(&mut c),
                "zset" => redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").query(&mut c),
                "set" => redis::cmd("SMEMBERS").arg(&key).query(&mut c),
                "stream" => redis::cmd("XPENDING").arg(&key).arg("slackgate").arg("-").arg("+").arg(20).query(&mut c),
                _ => Ok(redis::Value::Nil),
            };
            let what: String = format!("{what:?}").chars().take(400).collect();
            out += &format!("{key} ({kind}): {what}\n");
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// 1. queue: the second message of a thread reaches the bot only after the first's reply.

async fn queue_delivers_a_thread_one_turn_at_a_time(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "queue", turns("queue", "post", "1s", ack), 1.5).await;
    let (a, b) = (rig.top(1, "how do I deploy?"), rig.reply(1, 2, "also, for staging"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    // Slack's pace, not a wait for the gateway: the follow-up comes 300 ms later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.send(0, &b).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer()], "in order, in the thread\n{}", rig.logs());
    rig.ended_reaches(ack.end(), 2.0).await;
}

// ---------------------------------------------------------------------------------------------
// 2. latest: of the messages waiting when a turn ends only the newest is delivered.

async fn latest_delivers_only_the_newest_waiting(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "latest", turns("latest", "post", "1s", ack), 1.5).await;
    let (a, b, c) = (rig.top(1, "summarize this"), rig.reply(1, 2, "in French"), rig.reply(1, 3, "no, in German"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    rig.send(0, &c).await;
    rig.wait("answered", &c, Duration::from_secs(20)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &c]), "the bot ran twice: first and newest\n{}", rig.logs());
    // Both turns are over: nothing more is coming for this thread.
    rig.ended_reaches(ack.end(), 2.0).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &c]), "{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), c.answer()], "{}", rig.logs());
    let admin = rig.gws[0].admin_port;
    assert_eq!(series(admin, "slackgate_turn_superseded_total", &[("app", "bot")]).await, 1.0, "{}", rig.logs());
    let (status, listed) = admin_get(admin, "/superseded?app=bot").await;
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap_or_else(|e| panic!("{e}: {listed}"));
    let listed: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap_or_else(|| panic!("a list: {listed}"))
        .iter()
        .map(|d| (d["ts"].as_str().unwrap_or_default(), d["thread"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(listed, [(b.ts.as_str(), a.ts.as_str())], "the superseded delivery, and only it, is listed");
}

// ---------------------------------------------------------------------------------------------
// 3. on_newer = "withhold": an answer to a question the thread moved past is withheld.

async fn withhold_answers_only_the_newest(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "withhold", turns("queue", "withhold", "1s", ack), 2.0).await;
    let (a, b) = (rig.top(1, "which region?"), rig.reply(1, 2, "the one in Europe"));
    rig.send(0, &a).await;
    let started = rig.wait("start", &a, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.send(0, &b).await;
    let next = rig.wait("start", &b, Duration::from_secs(20)).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    // B waits for A's turn, which its withheld write ends: B's delivery and the bot's
    // `withheld` line for A then race, so they may come in either order.
    let held = next - started;
    assert!(held >= Duration::from_millis(1500), "B reached the bot {held:?} after A, while A ran\n{}", rig.logs());
    let mut seen = rig.bot.seen();
    seen[1..3].sort();
    let expected = [format!("start {}", a.ts), format!("start {}", b.ts), format!("withheld {}", a.ts)];
    assert_eq!(seen, [&expected[..], &[format!("answered {}", b.ts)]].concat(), "{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [b.answer()], "exactly one answer, to B\n{}", rig.logs());
    let withheld = series(
        rig.gws[0].admin_port,
        "slackgate_egress_calls_total",
        &[("class", "write"), ("outcome", "withheld_superseded")],
    )
    .await;
    assert_eq!(withheld, 1.0, "{}", rig.logs());
    rig.ended_reaches("superseded", 1.0).await;
}

// ---------------------------------------------------------------------------------------------
// 4. Two threads of one channel: neither waits for the other.

async fn two_threads_run_at_once(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "threads", turns("queue", "post", "1s", ack), 1.5).await;
    let (a, b) = (rig.top(1, "first question"), rig.top(2, "another topic"));
    rig.send(0, &a).await;
    rig.send(0, &b).await;
    rig.wait("answered", &a, Duration::from_secs(20)).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    let seen = rig.bot.seen();
    let first_answer = seen.iter().position(|l| l.starts_with("answered ")).unwrap();
    let mut starts = seen[..first_answer].to_vec();
    starts.sort();
    assert_eq!(starts, [format!("start {}", a.ts), format!("start {}", b.ts)], "both started\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer()]);
    assert_eq!(rig.posts_in("C1", Some(&b.ts)), [b.answer()]);
}

// ---------------------------------------------------------------------------------------------
// 5. A DM is one conversation, and the bot's say() there (no thread_ts) belongs to the turn.

async fn a_dm_is_one_conversation(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "dm", turns("queue", "post", "1s", ack), 1.5).await;
    let (a, b) = (rig.dm(1, "hi"), rig.dm(2, "are you there?"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.send(0, &b).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("D1", None), [a.answer(), b.answer()], "said in the channel\n{}", rig.logs());
    // Each turn ended by the bot's answer, not by waiting out pass_after or the timeout.
    rig.ended_reaches(ack.end(), 2.0).await;
    assert_eq!(rig.ended("passed").await + rig.ended("timeout").await, 0.0, "{}", rig.logs());
}

// ---------------------------------------------------------------------------------------------
// 6. A message the bot does not answer holds the thread only until pass_after.

async fn an_unanswered_message_passes_after_pass_after(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "pass", turns("queue", "post", "1s", ack), 0.5).await;
    let (a, b) = (rig.top(1, "ignore this, just a note"), rig.reply(1, 2, "now a question"));
    rig.send(0, &a).await;
    let started = rig.wait("start", &a, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.send(0, &b).await;
    let next = rig.wait("start", &b, Duration::from_secs(20)).await;
    let held = next - started;
    // pass_after is 3 s, the timeout 8 s.
    assert!(held >= Duration::from_millis(2500), "held {held:?}, less than pass_after\n{}", rig.logs());
    assert!(held < Duration::from_secs(6), "held {held:?}: until the timeout, not pass_after\n{}", rig.logs());
    rig.wait("answered", &b, Duration::from_secs(10)).await;
    let ignored = [format!("start {}", a.ts), format!("ignored {}", a.ts)];
    assert_eq!(rig.bot.seen()[..2], ignored, "{}", rig.logs());
    assert_eq!(rig.bot.seen()[2..], one_at_a_time(&[&b]), "{}", rig.logs());
    rig.ended_reaches("passed", 1.0).await;
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [b.answer()]);
}

// ---------------------------------------------------------------------------------------------
// 7. A bot stuck mid-turn (it keeps editing its placeholder) holds the thread until timeout.

async fn a_stalled_turn_ends_at_the_timeout(kind: Bolt, ack: Ack) {
    // It edits every second: a quiet of 3 s never comes.
    let rig = Rig::start(kind, ack, "stall", turns("queue", "post", "3s", ack), 0.5).await;
    let (a, b) = (rig.top(1, "stall on this one"), rig.reply(1, 2, "hello?"));
    rig.send(0, &a).await;
    let started = rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.wait("stalling", &a, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.send(0, &b).await;
    let next = rig.wait("start", &b, Duration::from_secs(25)).await;
    let held = next - started;
    assert!(held >= Duration::from_secs(7), "held {held:?}, less than the 8 s timeout\n{}", rig.logs());
    assert!(rig.slack.calls_of("chat.update").len() >= 5, "the bot kept writing\n{}", rig.logs());
    rig.wait("answered", &b, Duration::from_secs(10)).await;
    rig.ended_reaches("timeout", 1.0).await;
    let placeholder = format!("thinking about {}", a.ts);
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [placeholder, b.answer()], "{}", rig.logs());
}

// ---------------------------------------------------------------------------------------------
// 8. A gateway killed mid-turn and restarted, and two gateways on one Redis: order holds.

/// kill -9 while A's turn runs and B is held (`held_first`), or at once after B's ack (B may
/// then be in the killed gateway's hands: read from the stream, leased, not yet put to wait);
/// the same config comes back on new ports and C comes to it. Order holds: A, B, C, one at a
/// time — also when B's lease has to run out before anyone sees it again.
async fn order_holds_across_a_gateway_killed(kind: Bolt, ack: Ack, held_first: bool) {
    let name = if held_first { "killheld" } else { "killacked" };
    let mut rig = Rig::start(kind, ack, name, turns("queue", "post", "1s", ack), 2.0).await;
    let (a, b, c) = (rig.top(1, "deploy it"), rig.reply(1, 2, "to staging"), rig.reply(1, 3, "and tell me"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    if held_first {
        let admin = rig.gws[0].admin_port;
        let held = until(Duration::from_secs(10), async || outbox_stats(admin, None).await[0]["held"] == 1).await;
        assert!(held, "B is held while A's turn runs\n{}", rig.logs());
    }
    rig.gws[0].restart().await;
    rig.relay.point_at(&[rig.gws[0].egress_port]);
    rig.send(0, &c).await;
    rig.wait("answered", &b, Duration::from_secs(40)).await;
    rig.wait("answered", &c, Duration::from_secs(40)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b, &c]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer(), c.answer()], "{}", rig.logs());
}

async fn order_holds_across_a_gateway_killed_mid_turn(kind: Bolt, ack: Ack) {
    order_holds_across_a_gateway_killed(kind, ack, true).await
}

async fn order_holds_across_a_gateway_killed_right_after_an_ack(kind: Bolt, ack: Ack) {
    order_holds_across_a_gateway_killed(kind, ack, false).await
}

async fn order_holds_across_two_gateways(kind: Bolt, ack: Ack) {
    let rig = Rig::start_n(kind, ack, "replicas", turns("queue", "post", "1s", ack), 1.5, 2).await;
    let (a, b, c) = (rig.top(1, "one"), rig.reply(1, 2, "two"), rig.reply(1, 3, "three"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.send(1, &b).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.send(0, &c).await;
    rig.wait("answered", &c, Duration::from_secs(30)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b, &c]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer(), c.answer()], "{}", rig.logs());
    rig.ended_reaches(ack.end(), 3.0).await;
}

// ---------------------------------------------------------------------------------------------
// 9. Redis restarts mid-turn (an operator's restart, which loses nothing Redis acknowledged):
// order holds and nothing is lost.

async fn order_holds_across_a_redis_restart(kind: Bolt, ack: Ack) {
    let mut rig = Rig::start(kind, ack, "redis", turns("queue", "post", "1s", ack), 2.0).await;
    let (a, b) = (rig.top(1, "what broke?"), rig.reply(1, 2, "since the restart"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    rig.redis.restart_graceful();
    rig.wait("answered", &b, Duration::from_secs(40)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer()], "each answered once\n{}", rig.logs());
}

/// One `#[tokio::test]` per (framework, ack mode) of a scenario.
macro_rules! scenario {
    ($scenario:ident: $($test:ident => $kind:ident, $ack:ident;)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                $scenario(Bolt::$kind, Ack::$ack).await
            }
        )+
    };
}

scenario!(queue_delivers_a_thread_one_turn_at_a_time:
    python_queue_ack_first => Python, First;
    python_queue_after_work => Python, AfterWork;
    js_queue_ack_first => Js, First;
    js_queue_after_work => Js, AfterWork;
);
scenario!(latest_delivers_only_the_newest_waiting:
    python_latest_ack_first => Python, First;
    python_latest_after_work => Python, AfterWork;
    js_latest_ack_first => Js, First;
    js_latest_after_work => Js, AfterWork;
);
scenario!(withhold_answers_only_the_newest:
    python_withhold_ack_first => Python, First;
    python_withhold_after_work => Python, AfterWork;
    js_withhold_ack_first => Js, First;
    js_withhold_after_work => Js, AfterWork;
);
scenario!(two_threads_run_at_once:
    python_two_threads_ack_first => Python, First;
    python_two_threads_after_work => Python, AfterWork;
    js_two_threads_ack_first => Js, First;
    js_two_threads_after_work => Js, AfterWork;
);
scenario!(a_dm_is_one_conversation:
    python_dm_ack_first => Python, First;
    python_dm_after_work => Python, AfterWork;
    js_dm_ack_first => Js, First;
    js_dm_after_work => Js, AfterWork;
);
// pass_after and the timeout are how the turns of an ack-first bot end without an answer (a
// bot that answers after its work ends its turn with that answer).
scenario!(an_unanswered_message_passes_after_pass_after:
    python_pass_after_ack_first => Python, First;
    js_pass_after_ack_first => Js, First;
);
scenario!(a_stalled_turn_ends_at_the_timeout:
    python_stall_ack_first => Python, First;
    js_stall_ack_first => Js, First;
);
// Killed mid-turn: an ack-first bot's delivery is done and its turn is all that is left in
// flight (a bot that answers after its work would see its delivery again, as any delivery).
scenario!(order_holds_across_a_gateway_killed_mid_turn:
    python_gateway_killed_ack_first => Python, First;
    js_gateway_killed_ack_first => Js, First;
);
scenario!(order_holds_across_a_gateway_killed_right_after_an_ack:
    python_gateway_killed_after_an_ack_ack_first => Python, First;
    js_gateway_killed_after_an_ack_ack_first => Js, First;
);
scenario!(order_holds_across_two_gateways:
    python_two_gateways_ack_first => Python, First;
    python_two_gateways_after_work => Python, AfterWork;
    js_two_gateways_ack_first => Js, First;
    js_two_gateways_after_work => Js, AfterWork;
);
scenario!(order_holds_across_a_redis_restart:
    python_redis_restart_ack_first => Python, First;
    js_redis_restart_ack_first => Js, First;
);
