//! The turns tests' rig: Redis, the fake Slack Web API, a relay, an unmodified Bolt bot and the
//! gateways in front of it; the messages a test sends and what it reads back.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::utils::*;

/// How the bot answers Slack's request: Bolt's default, ack first (2xx, then the work), or
/// after the work (`process_before_response`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Ack {
    First,
    AfterWork,
}

impl Ack {
    /// The `end` the gateway is configured with for such a bot, which is also how its turns end.
    pub(crate) fn end(self) -> &'static str {
        match self {
            Ack::First => "reply",
            Ack::AfterWork => "answer",
        }
    }
}

/// The app's `turns = { … }` with the suite's short times.
pub(crate) fn turns(order: &str, on_newer: &str, quiet: &str, ack: Ack) -> String {
    format!(
        r#"turns = {{ order = "{order}", on_newer = "{on_newer}", end = "{}", quiet = "{quiet}", pass_after = "3s", timeout = "8s" }}"#,
        ack.end()
    )
}

/// The bot process (`turns_app`), killed on drop.
pub(crate) struct Bot(BoltProcess);

impl std::ops::Deref for Bot {
    type Target = BoltProcess;
    fn deref(&self) -> &BoltProcess {
        &self.0
    }
}

impl Bot {
    pub(crate) async fn start(kind: Bolt, ack: Ack, delay: f64, api_url: &str) -> Bot {
        let env = [
            ("SLACK_API_URL", api_url.to_string()),
            ("ACK_FIRST", if ack == Ack::First { "1" } else { "0" }.to_string()),
            ("ANSWER_DELAY", delay.to_string()),
        ];
        Bot(BoltProcess::start(kind, "turns_app", &env).await)
    }

    /// Another bot script (`stream_app`, …) with its own environment.
    pub(crate) async fn script(kind: Bolt, script: &str, env: &[(&str, String)]) -> Bot {
        Bot(BoltProcess::start(kind, script, env).await)
    }

    /// The app's `HANDLED <what> <ts> …` lines as `<what> <ts>`, in the order it printed them
    /// (but the `run` lines, which say which run a `start` is).
    pub(crate) fn seen(&self) -> Vec<String> {
        self.stdout()
            .lines()
            .filter_map(|l| l.strip_prefix("HANDLED "))
            .filter(|l| !l.starts_with("run "))
            .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect()
    }
}

/// One human message as Slack sends it.
pub(crate) struct Msg {
    pub(crate) channel: &'static str,
    pub(crate) channel_type: &'static str,
    pub(crate) ts: String,
    pub(crate) thread_ts: Option<String>,
    pub(crate) text: String,
}

impl Msg {
    /// The text the bot answers it with.
    pub(crate) fn answer(&self) -> String {
        format!("answer to {}", self.ts)
    }

    pub(crate) fn event(&self) -> Vec<u8> {
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
pub(crate) fn one_at_a_time(msgs: &[&Msg]) -> Vec<String> {
    msgs.iter().flat_map(|m| [format!("start {}", m.ts), format!("answered {}", m.ts)]).collect()
}

/// The sum of the samples of `name` on a gateway's `/metrics` whose labels include `labels`.
pub(crate) async fn series(admin_port: u16, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, body) = admin_get(admin_port, "/metrics").await;
    body.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Redis, the fake Slack Web API, the relay, the bot and its gateways (all on one Redis).
pub(crate) struct Rig {
    pub(crate) redis: RedisServer,
    pub(crate) slack: FakeSlack,
    pub(crate) relay: Relay,
    pub(crate) bot: Bot,
    pub(crate) gws: Vec<Gateway>,
    /// The seconds part of this test's message timestamps (now, as Slack's are).
    pub(crate) base: i64,
}

impl Rig {
    pub(crate) async fn start(kind: Bolt, ack: Ack, name: &str, turns: String, delay: f64) -> Rig {
        Self::start_n(kind, ack, name, turns, delay, 1).await
    }

    /// With `n` gateways on one Redis; the relay spreads the bot's Web API calls over them.
    pub(crate) async fn start_n(kind: Bolt, ack: Ack, name: &str, turns: String, delay: f64, n: usize) -> Rig {
        let relay = Relay::start().await;
        let bot = Bot::start(kind, ack, delay, &relay.api_url()).await;
        let name = format!("turns{kind:?}{ack:?}{name}");
        Self::with_bot(bot, relay, &name, turns, String::new(), n).await
    }

    /// `bot` (its Web API client pointed at `relay`) behind `n` gateways whose app says
    /// `app` and whose `[egress]` adds `egress` to the fake Slack's URL.
    pub(crate) async fn with_bot(bot: Bot, relay: Relay, name: &str, app: String, egress: String, n: usize) -> Rig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
        // One attempt outlives the slowest "model call" of a bot that answers after its work.
        cfg.delivery = r#"{ timeout = "5s", retry_initial = "100ms", retry_max = "400ms", lease = "8s" }"#.into();
        cfg.app = app;
        cfg.egress = format!("slack_api_url = \"{}\"\n{egress}", slack.api_url());
        let mut gws = Vec::new();
        for _ in 0..n {
            gws.push(Gateway::start(&cfg).await);
        }
        relay.point_at(&gws.iter().map(|g| g.egress_port).collect::<Vec<_>>());
        Rig { redis, slack, relay, bot, gws, base: unix_now() }
    }

    pub(crate) fn ts(&self, i: u32) -> String {
        format!("{}.{i:06}", self.base)
    }

    /// A top-level message in channel C1 (it starts its own thread).
    pub(crate) fn top(&self, i: u32, text: &str) -> Msg {
        Msg { channel: "C1", channel_type: "channel", ts: self.ts(i), thread_ts: None, text: text.into() }
    }

    /// A reply in C1 in the thread of top-level message `root`.
    pub(crate) fn reply(&self, root: u32, i: u32, text: &str) -> Msg {
        Msg { thread_ts: Some(self.ts(root)), ..self.top(i, text) }
    }

    /// A message in the DM D1, not in a thread.
    pub(crate) fn dm(&self, i: u32, text: &str) -> Msg {
        Msg { channel: "D1", channel_type: "im", ..self.top(i, text) }
    }

    /// Slack sends `m` to gateway `gw`, which acks it.
    pub(crate) async fn send(&self, gw: usize, m: &Msg) {
        let (status, body) = send(self.gws[gw].port, Req::signed("/slack/events", m.event(), SECRET)).await;
        assert_eq!(status, 200, "{body:?}\n{}", self.logs());
    }

    /// Wait until the bot printed `HANDLED <what> <m.ts>`; when it was first seen.
    pub(crate) async fn wait(&self, what: &str, m: &Msg, within: Duration) -> Instant {
        let line = format!("{what} {}", m.ts);
        assert!(
            eventually(within, || self.bot.seen().contains(&line)).await,
            "the bot never printed {line:?} within {within:?}\n{}",
            self.logs()
        );
        Instant::now()
    }

    /// The texts the bot posted to `channel`, in thread `thread` (None: not in a thread).
    pub(crate) fn posts_in(&self, channel: &str, thread: Option<&str>) -> Vec<String> {
        let thread = thread.map_or(Value::Null, |t| Value::String(t.into()));
        self.slack
            .posts()
            .iter()
            .filter(|p| p["channel"] == channel && p["thread_ts"] == thread)
            .filter_map(|p| p["text"].as_str().map(String::from))
            .collect()
    }

    /// Turns that ended `how`, summed over the gateways.
    pub(crate) async fn ended(&self, how: &str) -> f64 {
        let mut sum = 0.0;
        for gw in &self.gws {
            sum += series(gw.admin_port, "slackgate_turns_total", &[("app", "bot"), ("ended", how)]).await;
        }
        sum
    }

    /// Wait until `n` turns ended `how`.
    /// Wait until `n` deliveries of the app wait for their conversation's turn (the store's
    /// count, whichever gateway holds them).
    pub(crate) async fn held_reaches(&self, n: u64) {
        let admin = self.gws[0].admin_port;
        let mut got = serde_json::Value::Null;
        let reached = until(Duration::from_secs(10), async || {
            got = outbox_stats(admin, None).await[0]["held"].clone();
            got.as_u64().is_some_and(|h| h >= n)
        })
        .await;
        assert!(reached, "held: {got}, expected {n}\n{}", self.logs());
    }

    pub(crate) async fn ended_reaches(&self, how: &str, n: f64) {
        let mut got = 0.0;
        let reached = until(Duration::from_secs(20), async || {
            got = self.ended(how).await;
            got >= n
        })
        .await;
        assert!(reached, "turns ended {how:?}: {got}, expected {n}\n{}", self.logs());
    }

    pub(crate) fn logs(&self) -> String {
        let mut s = self.bot.logs();
        for (i, gw) in self.gws.iter().enumerate() {
            s += &format!("--- gateway {i} ---\n{}", gw.log());
        }
        let calls: Vec<String> =
            self.slack.calls().iter().map(|c| format!("{} {}", c.method, String::from_utf8_lossy(&c.body))).collect();
        s + &format!("--- Slack API calls ---\n{}\n--- Redis ---\n{}", calls.join("\n"), self.redis_dump())
    }

    /// Every key in Redis with what it holds (for a failure's message).
    pub(crate) fn redis_dump(&self) -> String {
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
