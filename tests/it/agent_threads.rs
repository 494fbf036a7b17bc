//! Issue 34, agent threads: Slack's AI apps behind a gateway that takes turns. In the assistant
//! container (`assistant_view`) a chat is a thread of the user's DM with the app: its
//! `assistant_thread_started` and `assistant_thread_context_changed` live with the thread's
//! messages (one shard) but take no turn, and the user's messages there are turns of the thread.
//! A DM without threads (`agent_view`, opened by `app_home_opened` with `tab = "messages"`) is
//! one conversation, the channel. `assistant.threads.setTitle`, `.setSuggestedPrompts`,
//! `agents.sessions.setStatus` and `.rename` are egress writes that never hold, end or withhold
//! a turn.
//!
//! No Slack workspace is reachable from here: the payloads are built from Slack's documented
//! examples of each event (docs.slack.dev/reference/events/…), with this test's ids. The bot is
//! a plain recording receiver that acks; its Web API calls are made by the test, through the
//! egress, to the fake Slack Web API.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::egress_common::{call, outcomes};
use crate::utils::*;

const SHARDS: u16 = 16;
/// The DM of the assistant container, and its chat's thread (the root's `ts`).
const ASSISTANT_DM: &str = "D0AGENT01";
const THREAD: &str = "1729999327.187299";
/// The DM of an agent without threads.
const AGENT_DM: &str = "D0AGENT02";

/// Redis, the fake Slack Web API, the bot and a gateway whose app takes turns one at a time,
/// withholding an answer to a question the conversation moved past, ending a turn by the bot's
/// writes (`end = "reply"`) — or, when it writes nothing, after `pass_after`.
struct Rig {
    _redis: RedisServer,
    slack: FakeSlack,
    bot: Receiver,
    gw: Gateway,
}

impl Rig {
    async fn start(name: &str) -> Rig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let bot = Receiver::start(SECRET).await;
        bot.set_default(Reply::status(200));
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
        cfg.app = r#"turns = { order = "queue", on_newer = "withhold", end = "reply", quiet = "1s", pass_after = "4s", timeout = "30s" }"#.into();
        cfg.redis = format!("shards = {SHARDS}");
        cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
        let gw = Gateway::start(&cfg).await;
        Rig { _redis: redis, slack, bot, gw }
    }

    async fn send(&self, body: Value) {
        let (status, answer) =
            send(self.gw.port, Req::signed("/slack/events", body.to_string().into_bytes(), SECRET)).await;
        assert_eq!(status, 200, "{answer:?}\n{}", self.gw.log());
    }

    /// The delivery the bot received for `event_id` (its `X-Slackgate-Delivery`), once it came.
    async fn delivered(&self, event_id: &str) -> String {
        let id = || {
            self.bot.received().iter().find_map(|r| {
                let v: Value = serde_json::from_slice(&r.body).ok()?;
                (v["event_id"] == event_id).then(|| r.header("x-slackgate-delivery")).flatten()
            })
        };
        assert!(
            eventually(Duration::from_secs(20), || id().is_some()).await,
            "{event_id} never came\n{}",
            self.gw.log()
        );
        id().unwrap()
    }

    /// The event ids the bot received, in order.
    fn arrivals(&self) -> Vec<String> {
        let id = |body: &[u8]| serde_json::from_slice::<Value>(body).ok()?["event_id"].as_str().map(String::from);
        self.bot.received().iter().filter_map(|r| id(&r.body)).collect()
    }

    async fn held_reaches(&self, n: u64) {
        let mut got = Value::Null;
        let reached = until(Duration::from_secs(10), async || {
            got = outbox_stats(self.gw.admin_port, None).await[0]["held"].clone();
            got.as_u64().is_some_and(|h| h >= n)
        })
        .await;
        assert!(reached, "held: {got}, expected {n}\n{}", self.gw.log());
    }

    async fn turns_ended(&self, how: &str) -> f64 {
        metric(self.gw.admin_port, &format!("slackgate_turns_total{{app=\"bot\",ended=\"{how}\"}}")).await
    }

    /// `slackgate show <id> --json` once `done` holds of it.
    async fn shown_when(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut shown = Value::Null;
        until(Duration::from_secs(10), async || {
            shown = show(&self.gw, id);
            done(&shown)
        })
        .await;
        assert!(done(&shown), "{id}: {shown:#}");
        shown
    }
}

fn show(gw: &Gateway, id: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(["show", id, "--json", "--config"])
        .arg(&gw.config_path)
        .env("SG_TEST_SECRET", SECRET)
        .env_remove("SLACKGATE_REDIS_URL")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// What a delivery's timeline says, in order (`arrived`, `held`, `attempt`, `wrote`, …).
fn steps(shown: &Value) -> Vec<String> {
    let t = shown["timeline"].as_array().map_or(&[][..], Vec::as_slice);
    t.iter().filter_map(|e| e["what"].as_str().map(String::from)).collect()
}

fn summary<'a>(shown: &'a Value, field: &str) -> &'a str {
    shown["summary"]["fields"][field].as_str().unwrap_or_default()
}

/// The shard a delivery lives on, as its id names it (`<shard>-<16 hex>`).
fn shard_of_delivery(id: &str) -> u16 {
    id.split('-').next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a delivery id: {id}"))
}

/// Slack's envelope around `event`, as its documented examples wrap every event.
fn envelope(event_id: &str, event: Value) -> Value {
    json!({
        "token": "XXYYZZ", "team_id": "T1", "api_app_id": "A1", "event": event, "type": "event_callback",
        "authorizations": [{"enterprise_id": null, "team_id": "T1", "user_id": "UBOT", "is_bot": true,
            "is_enterprise_install": false}],
        "event_id": event_id, "event_time": 1729999327
    })
}

/// `assistant_thread_started` or `assistant_thread_context_changed` of the assistant thread,
/// the user looking at channel `viewing`.
fn assistant_thread(event_id: &str, kind: &str, viewing: &str) -> Value {
    envelope(
        event_id,
        json!({
            "type": kind,
            "assistant_thread": {
                "user_id": "U1", "context": {"channel_id": viewing, "team_id": "T1", "enterprise_id": null},
                "channel_id": ASSISTANT_DM, "thread_ts": THREAD
            },
            "event_ts": "1729999327.200000"
        }),
    )
}

/// A user's message (`message.im`), in `thread` of `channel` or, with `None`, outside a thread.
fn dm(event_id: &str, channel: &str, ts: &str, thread: Option<&str>) -> Value {
    let mut event = json!({
        "type": "message", "channel": channel, "user": "U1", "text": format!("question {ts}"), "ts": ts,
        "event_ts": ts, "channel_type": "im", "team": "T1"
    });
    if let Some(t) = thread {
        event["thread_ts"] = json!(t);
        event["parent_user_id"] = json!("UBOT");
    }
    envelope(event_id, event)
}

fn key_shard(key: &str) -> u16 {
    slackgate::outbox::shard_of(key, SHARDS)
}

// ---------------------------------------------------------------------------------------------
// a. assistant_view: the thread's events and its messages are one conversation's.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assistant_threads_events_live_with_its_messages_and_take_no_turn() {
    let rig = Rig::start("agentthread").await;
    let thread_shard = key_shard(&format!("c:T1:{ASSISTANT_DM}:{THREAD}"));
    // Keyed by anything else (its receipt, the DM as a whole), the events land elsewhere.
    for other in ["e:EvThreadStarted", "e:EvContextChanged", &format!("c:T1:{ASSISTANT_DM}:-")] {
        assert_ne!(key_shard(other), thread_shard, "{other}: this test's ids tell the keys apart");
    }
    rig.send(assistant_thread("EvThreadStarted", "assistant_thread_started", "C0VIEWING")).await;
    let started = rig.delivered("EvThreadStarted").await;
    // The user's question, then a follow-up that waits for its turn.
    let (q1, q2) = ("1729999340.000100", "1729999341.000100");
    rig.send(dm("EvQuestion1", ASSISTANT_DM, q1, Some(THREAD))).await;
    let first = rig.delivered("EvQuestion1").await;
    rig.send(dm("EvQuestion2", ASSISTANT_DM, q2, Some(THREAD))).await;
    rig.held_reaches(1).await;
    // The user looks at another channel while the first turn runs: no question, not held.
    rig.send(assistant_thread("EvContextChanged", "assistant_thread_context_changed", "C0OTHER")).await;
    let changed = rig.delivered("EvContextChanged").await;
    let second = rig.delivered("EvQuestion2").await;
    assert_eq!(
        rig.arrivals(),
        ["EvThreadStarted", "EvQuestion1", "EvContextChanged", "EvQuestion2"],
        "the context change reached the bot while the follow-up waited for the first turn\n{}",
        rig.gw.log()
    );
    for (what, id) in [("started", &started), ("changed", &changed), ("q1", &first), ("q2", &second)] {
        assert_eq!(shard_of_delivery(id), thread_shard, "{what} ({id}) on the thread's shard");
    }
    // The history names the thread of each; only the messages are turns of its conversation.
    let conversation = format!("T1:{ASSISTANT_DM}:{THREAD}");
    for id in [&started, &changed] {
        let shown = rig.shown_when(id, |s| steps(s).contains(&"attempt".to_string())).await;
        assert_eq!((summary(&shown, "channel"), summary(&shown, "thread")), (ASSISTANT_DM, THREAD), "{shown:#}");
        assert_eq!(summary(&shown, "conversation"), "", "no turn of its own: {shown:#}");
        assert!(!steps(&shown).contains(&"held".to_string()), "{shown:#}");
    }
    let shown = rig.shown_when(&second, |s| steps(s).contains(&"attempt".to_string())).await;
    assert_eq!(summary(&shown, "conversation"), conversation, "{shown:#}");
    assert!(steps(&shown).contains(&"held".to_string()), "the follow-up waited for its turn: {shown:#}");
}

// ---------------------------------------------------------------------------------------------
// b. agent_view: a DM without threads is the channel, and opening it is no turn.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_dm_without_threads_is_one_conversation_and_opening_it_takes_no_turn() {
    let rig = Rig::start("agentview").await;
    let opened = envelope(
        "EvMessagesTab",
        json!({"type": "app_home_opened", "user": "U1", "channel": AGENT_DM, "tab": "messages",
            "event_ts": "1729999400.000100"}),
    );
    rig.send(opened).await;
    let tab = rig.delivered("EvMessagesTab").await;
    let (q1, q2) = ("1729999401.000100", "1729999402.000100");
    rig.send(dm("EvAgentQ1", AGENT_DM, q1, None)).await;
    let first = rig.delivered("EvAgentQ1").await;
    // Two top-level messages of the DM: the second waits for the first's turn.
    rig.send(dm("EvAgentQ2", AGENT_DM, q2, None)).await;
    rig.held_reaches(1).await;
    let second = rig.delivered("EvAgentQ2").await;
    assert_eq!(rig.arrivals(), ["EvMessagesTab", "EvAgentQ1", "EvAgentQ2"], "{}", rig.gw.log());
    let attempted = |s: &Value| steps(s).contains(&"attempt".to_string());
    let shown = rig.shown_when(&tab, attempted).await;
    assert_eq!((summary(&shown, "conversation"), summary(&shown, "channel")), ("", AGENT_DM), "{shown:#}");
    let channel = format!("T1:{AGENT_DM}:-");
    let shown = rig.shown_when(&first, attempted).await;
    assert_eq!(summary(&shown, "conversation"), channel, "{shown:#}");
    assert!(!steps(&shown).contains(&"held".to_string()), "opening the DM took no turn: {shown:#}");
    let shown = rig.shown_when(&second, attempted).await;
    assert_eq!(summary(&shown, "conversation"), channel, "{shown:#}");
    assert!(steps(&shown).contains(&"held".to_string()), "one conversation, one turn at a time: {shown:#}");
    // The first turn, without a write, ended by pass_after.
    assert!(until(Duration::from_secs(10), async || rig.turns_ended("passed").await >= 1.0).await);
}

// ---------------------------------------------------------------------------------------------
// c. The thread's title, prompts and agent session: writes that are no answer.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn titles_prompts_and_sessions_never_hold_end_or_withhold_a_turn() {
    let rig = Rig::start("agentwrites").await;
    let (q1, q2) = ("1729999500.000100", "1729999501.000100");
    rig.send(dm("EvWriteQ1", ASSISTANT_DM, q1, Some(THREAD))).await;
    let first = rig.delivered("EvWriteQ1").await;
    // A newer question waits: a new answer to the first would be withheld now.
    rig.send(dm("EvWriteQ2", ASSISTANT_DM, q2, Some(THREAD))).await;
    rig.held_reaches(1).await;
    let thread = format!("channel_id={ASSISTANT_DM}&thread_ts={THREAD}");
    let prompts = r#"[{"title":"Summarize","message":"Summarize this channel"}]"#;
    let writes = [
        ("assistant.threads.setTitle", format!("{thread}&title=Deploys")),
        ("assistant.threads.setSuggestedPrompts", format!("{thread}&prompts={}", urlencode(prompts))),
        ("agents.sessions.setStatus", format!("{thread}&status=processing")),
        ("agents.sessions.rename", format!("{thread}&title=Deploys+to+staging")),
    ];
    for (method, body) in &writes {
        let answer = call(rig.gw.egress_port, method, body, &[]).await;
        assert!(answer.ok(), "{method}: {} {}\n{}", answer.status, answer.body, rig.gw.log());
        assert_eq!(rig.slack.calls_of(method).len(), 1, "{method} reached Slack");
    }
    let admin = rig.gw.admin_port;
    assert_eq!(outcomes(admin, "forwarded").await, 4.0, "each a write, sent\n{}", rig.gw.log());
    assert_eq!(outcomes(admin, "withheld_superseded").await, 0.0);
    // Each is the first turn's (attributed to its question), and none of them ended it, kept it
    // open or was its answer: without an answer the turn passed, after pass_after.
    let methods: Vec<&str> = writes.iter().map(|(m, _)| *m).collect();
    let wrote = |s: &Value| -> Vec<String> {
        let t = s["timeline"].as_array().map_or(&[][..], Vec::as_slice);
        t.iter().filter(|e| e["what"] == "wrote").filter_map(|e| e["method"].as_str().map(String::from)).collect()
    };
    let shown = rig.shown_when(&first, |s| wrote(s).len() == methods.len()).await;
    assert_eq!(wrote(&shown), methods, "{shown:#}");
    rig.delivered("EvWriteQ2").await;
    assert!(until(Duration::from_secs(10), async || rig.turns_ended("passed").await >= 1.0).await);
    assert_eq!(rig.turns_ended("reply").await, 0.0, "no write of the turn\n{}", rig.gw.log());
    assert_eq!(rig.turns_ended("superseded").await, 0.0, "{}", rig.gw.log());
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
