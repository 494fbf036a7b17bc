//! A run lost with its bot is run again (`rerun_lost`), answered once: an unmodified Bolt bot
//! killed mid-answer (it acked first, as Bolt does) and started again gets the question again
//! as a new run — not Slack's retry — and its writes replay the lost run's (the placeholder it
//! posted is handed back, and its update edits it).

use std::time::Duration;

use crate::bolt::payloads;
use crate::utils::*;

mod http;

const XAPP: &str = "xapp-1-A1-bot-token";
const WAIT: Duration = Duration::from_secs(30);
/// The run's rules: a run passes after 3 s without a write, is quiet 1 s after its last one,
/// and lasts 60 s at most.
const TURNS: &str = r#"turns = { pass_after = "3s", quiet = "1s", timeout = "60s" }"#;

/// A gateway in front of a Socket Mode bot (`upstream = "socket"`), its egress to a fake Slack.
struct SocketRig {
    slack: FakeSlack,
    gws: Vec<Gateway>,
    relay: Option<Relay>,
    _redis: RedisServer,
}

impl SocketRig {
    async fn start(name: &str, app: &str) -> SocketRig {
        Self::start_n(name, app, 1).await
    }

    /// `n` gateways sharing one Redis; with more than one, the bots reach their egresses
    /// through a relay.
    async fn start_n(name: &str, app: &str, n: usize) -> SocketRig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), "socket");
        cfg.passthrough = "[]".into();
        cfg.server = "socket_listen = \"127.0.0.1:0\"".into();
        let turns = if app.contains("turns =") { "" } else { TURNS };
        cfg.app = format!("socket_mode = {{ app_token = \"${{SG_XAPP}}\", connections = 0 }}\n{turns}\n{app}");
        cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
        cfg.delivery = r#"{ timeout = "10s", retry_initial = "100ms", retry_max = "400ms", lease = "20s" }"#.into();
        let mut gws = Vec::new();
        for _ in 0..n {
            gws.push(Gateway::start_with_env(&cfg, &[("SG_XAPP", XAPP)]).await);
        }
        let relay = match n {
            1 => None,
            _ => {
                let relay = Relay::start().await;
                relay.point_at(&gws.iter().map(|g| g.egress_port).collect::<Vec<_>>());
                Some(relay)
            }
        };
        SocketRig { slack, gws, relay, _redis: redis }
    }

    fn gw(&self) -> &Gateway {
        &self.gws[0]
    }

    fn api_url(&self) -> String {
        match &self.relay {
            Some(relay) => relay.api_url(),
            None => format!("http://127.0.0.1:{}/api/", self.gw().egress_port),
        }
    }

    async fn bot(&self, kind: Bolt, env: &[(&str, &str)]) -> BoltProcess {
        let mut all = vec![("SLACK_APP_TOKEN", XAPP.to_string()), ("SLACK_API_URL", self.api_url())];
        all.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
        BoltProcess::start_connected(kind, "socket_app", &all).await
    }

    async fn mention(&self, id: &str) -> String {
        let ts = event_ts(id);
        let body = payloads::app_mention(id, &ts, "<@UBOT> what is the answer?");
        assert_eq!(send(self.gw().port, Req::signed("/slack/events", body, SECRET)).await.0, 200);
        ts
    }

    /// An `app_mention` in the thread of `thread`.
    async fn mention_in(&self, id: &str, thread: &str) -> String {
        let ts = event_ts(id);
        let mut body: serde_json::Value =
            serde_json::from_slice(&payloads::app_mention(id, &ts, "<@UBOT> and then?")).unwrap();
        body["event"]["thread_ts"] = thread.into();
        let req = Req::signed("/slack/events", body.to_string().into_bytes(), SECRET);
        assert_eq!(send(self.gw().port, req).await.0, 200);
        ts
    }

    /// Turns (runs) that ended `how`, summed over the gateways.
    async fn ended(&self, how: &str) -> f64 {
        let mut sum = 0.0;
        for gw in &self.gws {
            sum += metric(gw.admin_port, &format!("slackgate_turns_total{{app=\"bot\",ended=\"{how}\"}}")).await;
        }
        sum
    }

    async fn reruns(&self, reason: &str) -> f64 {
        let mut sum = 0.0;
        for gw in &self.gws {
            sum += metric(gw.admin_port, &format!("slackgate_reruns_total{{app=\"bot\",reason=\"{reason}\"}}")).await;
        }
        sum
    }

    fn logs(&self) -> String {
        self.gws.iter().map(Gateway::log).collect::<Vec<_>>().join("\n----\n")
    }
}

/// The timeline `slackgate show` gives of the delivery of event `event_id`, once `done` holds.
async fn timeline_when(
    gw: &Gateway,
    event_id: &str,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let mut timeline = Vec::new();
    until(WAIT, async || {
        let page = gw.cli_json(&["deliveries", "--search", event_id]);
        let Some(id) = page["rows"][0]["id"].as_str() else { return false };
        let shown = gw.cli_json(&["show", id]);
        timeline = shown["timeline"].as_array().cloned().unwrap_or_default();
        done(&timeline)
    })
    .await;
    timeline
}

/// The placeholder a bot posted for the message `ts` (from its `HANDLED placeholder` line).
fn placeholder_of(bot: &BoltProcess, ts: &str) -> Option<String> {
    let line = bot.handled_lines(&format!("placeholder {ts}")).into_iter().next()?;
    line.split_whitespace().last().map(str::to_string)
}

async fn a_socket_bot_killed_mid_run_answers_once_when_started_again(kind: Bolt, skip_retries: bool) {
    let rig = SocketRig::start(&format!("rerunsock{kind:?}{skip_retries}"), "").await;
    assert_eq!(rig.reruns("socket_closed").await, 0.0, "exported at 0 from the start");
    assert_eq!(rig.reruns("silent").await, 0.0);
    let first = rig.bot(kind, &[("THINK", "600")]).await;
    let ts = rig.mention(&format!("EvRerun{kind:?}{skip_retries}")).await;
    let placed = eventually(WAIT, || placeholder_of(&first, &ts).is_some()).await;
    assert!(placed, "the bot never began its answer:\n{}\n{}", first.logs(), rig.logs());
    let placeholder = placeholder_of(&first, &ts).unwrap();
    drop(first); // SIGKILL mid-answer: the placeholder says "thinking" for good.
    let skip = if skip_retries { "1" } else { "0" };
    let second = rig.bot(kind, &[("THINK", "0.2"), ("SKIP_RETRIES", skip)]).await;
    let answered = eventually(WAIT, || !second.handled_lines(&format!("answered {ts}")).is_empty()).await;
    assert!(answered, "the question was never answered:\n{}\n{}", second.logs(), rig.logs());
    let seen = second.handled_lines("app_mention");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].ends_with("retry=0"), "a re-run is not Slack's retry: {seen:?}\n{}", rig.logs());
    assert!(second.handled_lines("skipped_retry").is_empty(), "{}", second.stdout());
    assert_eq!(
        placeholder_of(&second, &ts).as_deref(),
        Some(placeholder.as_str()),
        "the lost run's placeholder reused"
    );
    let posts = rig.slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 1, "posted once: {posts:?}");
    let messages = rig.slack.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].ts, placeholder);
    assert_eq!(messages[0].text, format!("answer to {ts}"), "the re-run edited the placeholder");
    assert_eq!(rig.reruns("socket_closed").await, 1.0);
    let replayed = "slackgate_egress_calls_total{class=\"write\",outcome=\"replayed_rerun\"}";
    assert_eq!(metric(rig.gw().admin_port, replayed).await, 1.0, "{}", rig.logs());
    // The delivery's page lists its runs: the first (sent, 2xx, its placeholder), lost and
    // why, the re-run (sent, 2xx, its writes).
    let event = format!("EvRerun{kind:?}{skip_retries}");
    let whats = |t: &[serde_json::Value]| -> Vec<String> {
        t.iter()
            .map(|e| match e["what"].as_str().unwrap_or_default() {
                "attempt" => format!("attempt run {} {}", e["run"], e["outcome"].as_str().unwrap_or_default()),
                "rerun" => format!("rerun {} run {}", e["reason"].as_str().unwrap_or_default(), e["run"]),
                "wrote" => format!(
                    "wrote {} {}",
                    e["method"].as_str().unwrap_or_default(),
                    e["outcome"].as_str().unwrap_or_default()
                ),
                other => other.to_string(),
            })
            .collect()
    };
    let timeline =
        timeline_when(rig.gw(), &event, |t| whats(t).iter().any(|w| w == "wrote chat.update forwarded")).await;
    let seen = whats(&timeline);
    let expected = [
        "attempt run 1 delivered",
        "wrote chat.postMessage forwarded",
        "rerun socket_closed run 2",
        "attempt run 2 delivered",
        "wrote chat.postMessage replayed_rerun",
        "wrote chat.update forwarded",
    ];
    let runs: Vec<&String> = seen.iter().filter(|w| expected.contains(&w.as_str())).collect();
    assert_eq!(runs, expected, "{seen:?}");
    let vias: Vec<&str> =
        timeline.iter().filter(|e| e["what"] == "attempt").filter_map(|e| e["via"].as_str()).collect();
    assert_eq!(vias, ["socket", "socket"], "each attempt says it went over the bot's socket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bolt_python_socket_mode_killed_mid_run_answers_once_when_started_again() {
    a_socket_bot_killed_mid_run_answers_once_when_started_again(Bolt::Python, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bolt_js_socket_mode_killed_mid_run_answers_once_when_started_again() {
    a_socket_bot_killed_mid_run_answers_once_when_started_again(Bolt::Js, false).await;
}

/// A bot that drops Slack's retries (as many do) still gets the re-run: it is run 2, not
/// retry 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_that_drops_slacks_retries_still_gets_the_rerun() {
    a_socket_bot_killed_mid_run_answers_once_when_started_again(Bolt::Python, true).await;
}

/// The limit reached: a run lost as many times as `rerun_limit` allows re-runs ends `lost`,
/// counted, and is not run a third time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_lost_past_the_limit_ends_lost_and_is_not_run_again() {
    let rig = SocketRig::start("rerunlimit", "rerun_limit = 1").await;
    let first = rig.bot(Bolt::Python, &[("THINK", "600")]).await;
    let ts = rig.mention("EvRerunLimit").await;
    assert!(eventually(WAIT, || placeholder_of(&first, &ts).is_some()).await, "{}", rig.logs());
    drop(first);
    let second = rig.bot(Bolt::Python, &[("THINK", "600")]).await;
    let again = eventually(WAIT, || placeholder_of(&second, &ts).is_some()).await;
    assert!(again, "never run again:\n{}\n{}", second.logs(), rig.logs());
    drop(second);
    let lost = until(WAIT, async || rig.ended("lost").await >= 1.0).await;
    assert!(lost, "the run never ended lost:\n{}", rig.logs());
    assert_eq!(rig.reruns("socket_closed").await, 1.0, "one re-run, not two");
    // A new question after the third bot is up: it comes; the lost one never does.
    let third = rig.bot(Bolt::Python, &[]).await;
    let next = rig.mention("EvRerunLimitNext").await;
    assert!(eventually(WAIT, || !third.handled_lines(&format!("replied {next}")).is_empty()).await, "{}", rig.logs());
    assert_eq!(third.handled_lines("app_mention").len(), 1, "no third run:\n{}", third.stdout());
    assert_eq!(rig.slack.calls_of("chat.postMessage").len(), 2, "the placeholder, and the next answer");
}

/// Never run again: a bot that answers (its run ended `reply`) and is killed afterwards; a bot
/// that passes on a mention while its socket stays open; a slash command and a view
/// submission (their inline answer is the bot's ack) whose bot is killed right after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_that_ended_and_payloads_answered_inline_are_never_run_again() {
    let rig = SocketRig::start("rerunnever", "").await;
    let first = rig.bot(Bolt::Python, &[]).await;
    let answered = rig.mention("EvRerunNeverA").await;
    assert!(eventually(WAIT, || !first.handled_lines(&format!("replied {answered}")).is_empty()).await);
    let (status, body) =
        send(rig.gw().port, Req::signed("/slack/events", payloads::slash_command("/ask", "life", "TrNever"), SECRET))
            .await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("answer to life"));
    let (status, _) =
        send(rig.gw().port, Req::signed("/slack/events", payloads::view_submission("TrNeverV"), SECRET)).await;
    assert_eq!(status, 200);
    assert!(eventually(WAIT, || !first.handled_lines("view form").is_empty()).await, "{}", first.logs());
    let ended = until(WAIT, async || rig.ended("reply").await >= 1.0).await;
    assert!(ended, "the answered run never ended:\n{}", rig.logs());
    drop(first);
    // A bot that passes (writes nothing) with its socket open: its run ends `passed`.
    let quiet = rig.bot(Bolt::Python, &[("ANSWER", "0")]).await;
    let passed_on = rig.mention("EvRerunNeverB").await;
    assert!(eventually(WAIT, || !quiet.handled_lines("app_mention EvRerunNeverB").is_empty()).await);
    assert!(until(WAIT, async || rig.ended("passed").await >= 1.0).await, "{}", rig.logs());
    drop(quiet);
    // Whatever a killed bot's socket carried that could run again would come before this.
    let last = rig.bot(Bolt::Python, &[]).await;
    let next = rig.mention("EvRerunNeverC").await;
    assert!(eventually(WAIT, || !last.handled_lines(&format!("replied {next}")).is_empty()).await, "{}", rig.logs());
    let seen = last.stdout();
    assert!(!seen.contains(&answered) && !seen.contains(&passed_on), "run again: {seen}");
    assert!(last.handled_lines("command").is_empty() && last.handled_lines("view").is_empty(), "{seen:?}");
    assert_eq!(rig.reruns("socket_closed").await, 0.0, "{}", rig.logs());
}

/// With `order = "queue"`, the conversation's turn is held through the re-run: the next
/// question of the thread waits for the re-run's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_question_of_the_thread_waits_for_the_rerun() {
    let rig = SocketRig::start(
        "rerunqueue",
        r#"turns = { order = "queue", pass_after = "3s", quiet = "5s", timeout = "60s" }"#,
    )
    .await;
    let first = rig.bot(Bolt::Python, &[("THINK", "600")]).await;
    let a = rig.mention("EvRerunQueueA").await;
    assert!(eventually(WAIT, || placeholder_of(&first, &a).is_some()).await, "{}", rig.logs());
    let b = rig.mention_in("EvRerunQueueB", &a).await;
    let held = until(WAIT, async || metric(rig.gw().admin_port, "slackgate_turn_held{app=\"bot\"}").await >= 1.0).await;
    assert!(held, "the thread's next question was not held:\n{}", rig.logs());
    drop(first);
    let second = rig.bot(Bolt::Python, &[("THINK", "0.3")]).await;
    let both = eventually(WAIT, || !second.handled_lines(&format!("answered {b}")).is_empty()).await;
    assert!(both, "not both answered:\n{}\n{}", second.logs(), rig.logs());
    let out = second.stdout();
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("HANDLED ")).collect();
    let at = |what: &str| lines.iter().position(|l| l.starts_with(&format!("HANDLED {what}"))).unwrap();
    assert!(at(&format!("answered {a}")) < at("app_mention EvRerunQueueB"), "B before A's re-run ended: {lines:?}");
    assert_eq!(rig.slack.calls_of("chat.postMessage").len(), 2, "one placeholder each");
}

/// The gateway process that held the bot's socket is killed mid-run: the bot reconnects
/// through the other replica, which runs the question again once the dead one stops beating;
/// answered once. The run must still be open when the dead one is missed (10 to 15 s): `quiet`
/// is longer than that. (Bolt for JavaScript: its socket client sees the close at once; Bolt
/// for Python's built-in client notices a dead socket only at its next pings, up to a minute.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_while_it_held_the_bots_socket_loses_no_question() {
    let turns = r#"turns = { pass_after = "3s", quiet = "30s", timeout = "90s" }"#;
    let mut rig = SocketRig::start_n("rerunreplica", turns, 2).await;
    let bot = rig.bot(Bolt::Js, &[("THINK", "3")]).await;
    let holds = |i: usize| metric(rig.gws[i].admin_port, "slackgate_socket_connections{app=\"bot\",direction=\"bot\"}");
    let holder = if holds(0).await >= 1.0 { 0 } else { 1 };
    let other = 1 - holder;
    let ts = event_ts("EvRerunReplica");
    let body = payloads::app_mention("EvRerunReplica", &ts, "<@UBOT> what is the answer?");
    assert_eq!(send(rig.gws[other].port, Req::signed("/slack/events", body, SECRET)).await.0, 200);
    assert!(eventually(WAIT, || placeholder_of(&bot, &ts).is_some()).await, "{}", rig.logs());
    rig.gws[holder].kill9();
    rig.relay.as_ref().unwrap().point_at(&[rig.gws[other].egress_port]);
    let rerun = until(Duration::from_secs(60), async || {
        metric(rig.gws[other].admin_port, "slackgate_reruns_total{app=\"bot\",reason=\"socket_closed\"}").await >= 1.0
    })
    .await;
    assert!(rerun, "never run again:\n{}\n{}", bot.logs(), rig.gws[other].log());
    let twice = eventually(WAIT, || bot.handled_lines(&format!("answered {ts}")).len() >= 2).await;
    assert!(twice, "the lost listener and the re-run both finish:\n{}", bot.logs());
    let runs = bot.handled_lines("app_mention");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs[1].ends_with("retry=0"), "{runs:?}");
    assert_eq!(rig.slack.calls_of("chat.postMessage").len(), 1, "posted once");
    let messages = rig.slack.messages();
    assert_eq!((messages.len(), messages[0].text.as_str()), (1, format!("answer to {ts}").as_str()));
}

/// A bot killed mid-stream: its re-run is handed the stream the lost run left open, which the
/// gateway stops (never left streaming) and continues as edits with the re-run's answer alone
/// (never the first half twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_left_open_by_a_lost_run_carries_the_reruns_answer_once() {
    let rig = SocketRig::start("rerunstream", "").await;
    let first = rig.bot(Bolt::Python, &[("THINK", "600"), ("STREAM", "1")]).await;
    let ts = rig.mention("EvRerunStream").await;
    let streaming = eventually(WAIT, || !first.handled_lines(&format!("streaming {ts}")).is_empty()).await;
    assert!(streaming, "the bot never began its stream:\n{}\n{}", first.logs(), rig.logs());
    drop(first);
    let second = rig.bot(Bolt::Python, &[("THINK", "0.2"), ("STREAM", "1")]).await;
    let streamed = eventually(WAIT, || !second.handled_lines(&format!("streamed {ts}")).is_empty()).await;
    assert!(streamed, "the re-run never finished:\n{}\n{}", second.logs(), rig.logs());
    assert_eq!(rig.slack.calls_of("chat.startStream").len(), 1, "one stream");
    // The re-run words its answer its own way: the message is its answer alone.
    let line = second.handled_lines(&format!("streaming {ts}")).remove(0);
    let pid = line.rsplit(' ').next().unwrap().to_string();
    let whole = format!("answer to {ts} by {pid}: the first half; the second half.");
    let done = eventually(WAIT, || rig.slack.messages().first().is_some_and(|m| m.text == whole)).await;
    let messages = rig.slack.messages();
    assert!(done, "{messages:?}\n{}", rig.logs());
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(!messages[0].streaming, "never left streaming: {messages:?}");
    assert_eq!(rig.reruns("socket_closed").await, 1.0);
}

/// A gateway stopped gracefully (SIGTERM) while it holds the bot's socket mid-run loses nothing:
/// the bot lives on, reconnects through the other replica and finishes its answer there — the
/// run is not run again (neither at once, nor by the others when the stopped one falls silent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_drained_while_it_holds_the_bots_socket_runs_nothing_again() {
    let turns = r#"turns = { pass_after = "3s", quiet = "20s", timeout = "90s" }"#;
    let mut rig = SocketRig::start_n("rerundrain", turns, 2).await;
    let bot = rig.bot(Bolt::Js, &[("THINK", "4")]).await;
    let holds = |i: usize| metric(rig.gws[i].admin_port, "slackgate_socket_connections{app=\"bot\",direction=\"bot\"}");
    let holder = if holds(0).await >= 1.0 { 0 } else { 1 };
    let other = 1 - holder;
    let ts = event_ts("EvRerunDrain");
    let body = payloads::app_mention("EvRerunDrain", &ts, "<@UBOT> what is the answer?");
    assert_eq!(send(rig.gws[other].port, Req::signed("/slack/events", body, SECRET)).await.0, 200);
    assert!(eventually(WAIT, || placeholder_of(&bot, &ts).is_some()).await, "{}", rig.logs());
    rig.relay.as_ref().unwrap().point_at(&[rig.gws[other].egress_port]);
    let pid = rig.gws[holder].pid().to_string();
    std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(rig.gws[holder].wait_exit(WAIT).await, "the drained gateway never exited");
    let answered = eventually(WAIT, || !bot.handled_lines(&format!("answered {ts}")).is_empty()).await;
    assert!(answered, "the bot's answer never went through:\n{}\n{}", bot.logs(), rig.gws[other].log());
    // The run ends `reply` 20 s after the answer: past the stopped process's 10 s of silence
    // and the sweep that would run its runs again.
    let ended = until(Duration::from_secs(60), async || {
        metric(rig.gws[other].admin_port, "slackgate_turns_total{app=\"bot\",ended=\"reply\"}").await >= 1.0
    })
    .await;
    assert!(ended, "the run never ended:\n{}", rig.gws[other].log());
    assert_eq!(bot.handled_lines("app_mention").len(), 1, "run again:\n{}", bot.stdout());
    let rerun = "slackgate_reruns_total{app=\"bot\",reason=\"socket_closed\"}";
    assert_eq!(metric(rig.gws[other].admin_port, rerun).await, 0.0);
    assert_eq!(rig.slack.calls_of("chat.postMessage").len(), 1);
}
