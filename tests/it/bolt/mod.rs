//! Compatibility with real, unmodified Bolt apps: Bolt for Python (`tests/bolt/python/app.py`)
//! and Bolt for JavaScript (`tests/bolt/js/app.js`) run as the gateway's upstream, each with its
//! own signature check on and `processBeforeResponse`. Every scenario runs once per framework.
//!
//! The apps print one `HANDLED …` line to stdout per request that reached a listener; Bolt logs
//! the requests it rejects (401 on a bad signature) to stderr. `scripts/deps` installs both
//! frameworks (`slack_bolt` from PyPI, `@slack/bolt` from npm).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::utils::*;

pub(crate) mod payloads;
mod shadow;
mod traces;
use payloads::*;

/// What Bolt logs when it answers 401 to a bad signature.
fn rejection_log(kind: Bolt) -> &'static str {
    match kind {
        Bolt::Python => "Invalid request signature detected",
        Bolt::Js => "Failed to parse and verify the request data",
    }
}

/// The compatibility app (`app.py` / `app.js`), killed on drop.
struct BoltApp(BoltProcess);

impl std::ops::Deref for BoltApp {
    type Target = BoltProcess;
    fn deref(&self) -> &BoltProcess {
        &self.0
    }
}

impl BoltApp {
    /// Start the app; its `app_mention` listener sleeps `slow` seconds.
    async fn start(kind: Bolt, slow: u64) -> BoltApp {
        Self::start_with(kind, slow, &[]).await
    }

    /// With extra environment (`SLACK_API_URL`, `SLACK_API_TIMEOUT`, `SLOW_ONCE`).
    async fn start_with(kind: Bolt, slow: u64, env: &[(&str, String)]) -> BoltApp {
        let mut all = vec![("SLOW", slow.to_string())];
        all.extend(env.iter().cloned());
        BoltApp(BoltProcess::start(kind, "app", &all).await)
    }

    fn handled(&self, what: &str) -> usize {
        self.handled_lines(what).len()
    }
}

/// Redis, the Bolt app and the gateway in front of it.
struct Rig {
    gw: Gateway,
    app: BoltApp,
    redis: RedisServer,
    prefix: String,
}

impl Rig {
    async fn start(kind: Bolt, name: &str, slow: u64) -> Rig {
        let redis = RedisServer::start();
        let app = BoltApp::start(kind, slow).await;
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(&format!("bolt{kind:?}{name}")), &app.url());
        // One attempt must outlive the slow listener (4 s), or the gateway would retry it.
        cfg.delivery = r#"{ timeout = "10s", retry_initial = "100ms", retry_max = "400ms", lease = "20s" }"#.into();
        let gw = Gateway::start(&cfg).await;
        Rig { gw, app, redis, prefix: cfg.prefix }
    }

    /// Entries in the app's dead-letter stream.
    fn dead(&self) -> usize {
        self.redis.xlen(&format!("{{{}:bot:0}}:dead", self.prefix))
    }

    /// Deliveries not yet completed (a delivery record is deleted when the bot answered 2xx).
    fn pending(&self) -> usize {
        self.redis.keys(&format!("{{{}:bot:0}}:d:*", self.prefix)).len()
    }

    fn logs(&self) -> String {
        format!("{}--- gateway ---\n{}", self.app.logs(), self.gw.log())
    }

    /// Every delivery completed with a 2xx from Bolt; none dead-lettered.
    async fn assert_all_delivered(&self) {
        assert!(eventually(Duration::from_secs(10), || self.pending() == 0).await, "undelivered\n{}", self.logs());
        assert_eq!(self.dead(), 0, "Bolt refused a forwarded delivery (401: bad signature?)\n{}", self.logs());
    }
}

/// Send one request; returns status, content type and body (the gateway's answer to "Slack").
async fn send_full(port: u16, req: Req) -> (u16, Option<String>, String) {
    let (status, ct, body) = exchange(port, req).await.expect("the gateway answered");
    (status, ct, String::from_utf8_lossy(&body).into_owned())
}

/// Wait until the app printed `HANDLED <what>` at least once and the gateway's outbox is idle
/// (a duplicate would have been delivered by then: the apps answer after their listener, with
/// `processBeforeResponse`), and return how many it printed.
async fn handled_after_settling(rig: &Rig, what: &str, within: Duration) -> usize {
    assert!(eventually(within, || rig.app.handled(what) >= 1).await, "the app never handled {what}\n{}", rig.logs());
    rig.gw.wait_idle().await;
    rig.app.handled(what)
}

// ---------------------------------------------------------------------------------------------
// 1. An event is forwarded once, and Bolt accepts the gateway's signature.

async fn app_mention_is_handled_once_with_a_valid_signature(kind: Bolt) {
    let rig = Rig::start(kind, "mention", 0).await;

    // Control: the app really checks signatures (so a 2xx below means the gateway's was valid).
    let forged = Req::signed("/slack/events", app_mention("EvForged", "1700000000.000001", "forged"), "not-the-secret");
    assert_eq!(send(rig.app.port, forged).await.0, 401, "{}", rig.logs());
    assert!(
        eventually(Duration::from_secs(5), || rig.app.stderr().contains(rejection_log(kind))).await,
        "Bolt logs what it rejects\n{}",
        rig.logs()
    );
    assert_eq!(rig.app.handled("app_mention"), 0);

    let body = app_mention("EvMention1", "1700000000.000100", "<@UBOT> hello there");
    let (status, answer) = send(rig.gw.port, Req::signed("/slack/events", body, SECRET)).await;
    assert_eq!(status, 200, "{}", rig.logs());
    assert!(answer.is_empty());

    assert_eq!(handled_after_settling(&rig, "app_mention", Duration::from_secs(10)).await, 1, "{}", rig.logs());
    assert_eq!(rig.app.handled_lines("app_mention"), ["HANDLED app_mention 1700000000.000100 <@UBOT> hello there"]);
    assert_eq!(rig.app.handled("message"), 0);
    rig.assert_all_delivered().await;
}

// ---------------------------------------------------------------------------------------------
// 2. A slow listener: Slack is acked at once, its retries are absorbed, the bot runs once.

async fn slow_handler_runs_once_despite_slack_retries(kind: Bolt) {
    let rig = Rig::start(kind, "slow", 4).await;
    let body = app_mention("EvSlow1", "1700000000.000200", "<@UBOT> take your time");
    let start = tokio::time::Instant::now();
    for retry in 0..3u64 {
        // Slack's pace, not a wait: its retries come a second apart while the listener runs.
        tokio::time::sleep_until(start + Duration::from_secs(retry)).await;
        let mut req = Req::signed("/slack/events", body.clone(), SECRET);
        if retry > 0 {
            req = req.header("X-Slack-Retry-Num", &retry.to_string()).header("X-Slack-Retry-Reason", "http_timeout");
        }
        let sent = Instant::now();
        let (status, _) = send(rig.gw.port, req).await;
        let took = sent.elapsed();
        assert_eq!(status, 200, "delivery {retry}\n{}", rig.logs());
        assert!(took < Duration::from_secs(1), "Slack waited {took:?} for delivery {retry}\n{}", rig.logs());
    }
    // The listener takes 4 s; once nothing waits in the outbox it has finished exactly once.
    assert_eq!(handled_after_settling(&rig, "app_mention", Duration::from_secs(10)).await, 1, "{}", rig.logs());
    rig.assert_all_delivered().await;
    assert_eq!(rig.app.handled("app_mention"), 1, "{}", rig.logs());
}

// ---------------------------------------------------------------------------------------------
// 3. Synchronous pass-through: Bolt's ack() body reaches Slack in the HTTP response.

async fn slash_command_reply_is_returned_synchronously(kind: Bolt) {
    let rig = Rig::start(kind, "slash", 0).await;
    let body = slash_command("/deploy", "prod", "1700000000.111.slash");
    assert!(String::from_utf8_lossy(&body).contains("command=%2Fdeploy&text=prod"));
    let (status, ct, answer) = send_full(rig.gw.port, Req::signed("/slack/events", body, SECRET)).await;
    assert_eq!(status, 200, "{}", rig.logs());
    assert_eq!(handled_after_settling(&rig, "command /deploy", Duration::from_secs(5)).await, 1, "{}", rig.logs());
    rig.assert_all_delivered().await;
    assert!(
        answer.contains("deploying prod"),
        "Slack must get Bolt's ack() text in the response; got {answer:?} ({ct:?})\n{}",
        rig.logs()
    );
}

async fn view_submission_errors_are_returned_synchronously(kind: Bolt) {
    let rig = Rig::start(kind, "view", 0).await;
    let (status, ct, answer) =
        send_full(rig.gw.port, Req::signed("/slack/events", view_submission("1700000000.222.view"), SECRET)).await;
    assert_eq!(status, 200, "{}", rig.logs());
    assert_eq!(handled_after_settling(&rig, "view_submission form", Duration::from_secs(5)).await, 1, "{}", rig.logs());
    rig.assert_all_delivered().await;
    let reply: Value = serde_json::from_str(&answer).unwrap_or_else(|_| {
        panic!("Slack must get Bolt's response_action JSON; got {answer:?} ({ct:?})\n{}", rig.logs())
    });
    assert_eq!(reply["response_action"], "errors", "{answer}");
    assert_eq!(reply["errors"]["field"], "too short", "{answer}");
    assert!(ct.as_deref().is_some_and(|c| c.starts_with("application/json")), "content type {ct:?}");
}

async fn block_suggestion_options_are_returned_synchronously(kind: Bolt) {
    let rig = Rig::start(kind, "options", 0).await;
    let (status, ct, answer) =
        send_full(rig.gw.port, Req::signed("/slack/events", block_suggestion("al"), SECRET)).await;
    assert_eq!(status, 200, "{}", rig.logs());
    assert_eq!(
        handled_after_settling(&rig, "block_suggestion picker", Duration::from_secs(5)).await,
        1,
        "{}",
        rig.logs()
    );
    rig.assert_all_delivered().await;
    let reply: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|_| panic!("Slack must get Bolt's options JSON; got {answer:?} ({ct:?})\n{}", rig.logs()));
    let options = reply["options"].as_array().unwrap_or_else(|| panic!("no options list in {answer}"));
    assert!(options.iter().any(|o| o["text"]["text"] == "Alpha" && o["value"] == "a"), "{answer}");
    assert!(ct.as_deref().is_some_and(|c| c.starts_with("application/json")), "content type {ct:?}");
}

async fn block_action_is_acked_and_handled_once(kind: Bolt) {
    let rig = Rig::start(kind, "action", 0).await;
    let (status, _, _) =
        send_full(rig.gw.port, Req::signed("/slack/events", block_actions("1700000000.333.action"), SECRET)).await;
    assert_eq!(status, 200, "{}", rig.logs());
    assert_eq!(handled_after_settling(&rig, "block_action", Duration::from_secs(5)).await, 1, "{}", rig.logs());
    rig.assert_all_delivered().await;
}

/// Redis, the fake Slack Web API, the gateway with its egress, and the Bolt app whose Web API
/// client points at the egress. The app needs the egress's address and the gateway the app's:
/// the gateway starts first with a placeholder upstream, then is reloaded with the app's.
struct EgressRig {
    rig: Rig,
    slack: FakeSlack,
}

impl EgressRig {
    async fn start(kind: Bolt, name: &str, egress: &str, delivery: &str, env: &[(&str, String)]) -> EgressRig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let placeholder = Reserved::new();
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(&format!("bolteg{kind:?}{name}")), &placeholder.url());
        cfg.delivery = delivery.into();
        cfg.egress = format!("slack_api_url = \"{}\"\n{egress}", slack.api_url());
        let gw = Gateway::start(&cfg).await;
        let mut env: Vec<(&str, String)> = env.to_vec();
        env.push(("SLACK_API_URL", format!("http://127.0.0.1:{}/api/", gw.egress_port)));
        let app = BoltApp::start_with(kind, 0, &env).await;
        cfg.upstream = app.url();
        gw.rewrite(&cfg);
        Command::new("kill").arg("-HUP").arg(gw.pid().to_string()).status().unwrap();
        assert!(eventually(Duration::from_secs(5), || gw.log().contains("config reloaded")).await, "{}", gw.log());
        EgressRig { rig: Rig { gw, app, redis, prefix: cfg.prefix }, slack }
    }

    async fn mention(&self, event_id: &str, ts: &str) {
        let req = Req::signed("/slack/events", app_mention(event_id, ts, "<@UBOT> status?"), SECRET);
        assert_eq!(send(self.rig.gw.port, req).await.0, 200);
    }

    fn logs(&self) -> String {
        let calls: Vec<String> = self.slack.calls().iter().map(|c| c.method.clone()).collect();
        format!("{}--- Slack API calls ---\n{calls:?}\n", self.rig.logs())
    }
}

/// The bot replies in thread through the egress; Slack takes the post but its answer comes
/// only after the bot's client gave up: the client retries, and still one post is visible.
async fn reply_posts_once_across_a_client_retry(kind: Bolt) {
    let delivery = r#"{ timeout = "15s", retry_initial = "100ms", retry_max = "400ms", lease = "30s" }"#;
    let env = [("SLACK_API_TIMEOUT", "1".to_string())];
    let r = EgressRig::start(kind, "retry", "", delivery, &env).await;
    // Late past the client's 1 s timeout, but not so late that its retry (after a 1 s backoff)
    // would wait for it as long as its own timeout: then whether the retry's answer counts as
    // delivered would be a race with the client giving up.
    r.slack.push(Behaviour::Late(Duration::from_millis(2200)));
    r.mention("EvEgRetry1", "1700000300.000100").await;
    assert!(
        eventually(Duration::from_secs(20), || r.rig.app.handled("replied") == 1).await,
        "the bot's say() came back ok\n{}",
        r.logs()
    );
    assert_eq!(r.slack.posts().len(), 1, "one visible post\n{}", r.logs());
    assert_eq!(r.slack.posts()[0]["thread_ts"], "1700000300.000100");
    let replayed = r#"slackgate_egress_calls_total{class="write",outcome="replayed_retry"}"#;
    assert_eq!(metric(r.rig.gw.admin_port, replayed).await, 1.0, "the client did retry\n{}", r.logs());
    r.rig.assert_all_delivered().await;
}

/// The first run is slower than the delivery timeout, so the gateway delivers the mention again
/// and the bot runs twice; with `rerun = "replay"` its second reply returns the first's result.
async fn reply_posts_once_across_a_redelivery_with_rerun_replay(kind: Bolt) {
    let delivery = r#"{ timeout = "2s", retry_initial = "100ms", retry_max = "400ms", lease = "5s" }"#;
    let env = [("SLOW_ONCE", "3".to_string())];
    let r = EgressRig::start(kind, "rerun", "rerun = \"replay\"", delivery, &env).await;
    r.mention("EvEgRerun1", "1700000400.000100").await;
    assert!(
        eventually(Duration::from_secs(20), || r.rig.app.handled("replied") >= 2).await,
        "the bot ran twice\n{}",
        r.logs()
    );
    r.rig.assert_all_delivered().await;
    assert_eq!(r.slack.posts().len(), 1, "one visible post\n{}", r.logs());
    let replayed = r#"slackgate_egress_calls_total{class="write",outcome="replayed_rerun"}"#;
    assert!(metric(r.rig.gw.admin_port, replayed).await >= 1.0, "{}", r.logs());
}

/// The bot's Web API client sees Slack's answer headers through the egress: `@slack/web-api`
/// reads the token's scopes from them (`response_metadata.scopes`), `slack_sdk` keeps them.
async fn the_client_sees_slacks_answer_headers(kind: Bolt) {
    let delivery = r#"{ timeout = "5s", retry_initial = "100ms", retry_max = "400ms", lease = "10s" }"#;
    let r = EgressRig::start(kind, "scopes", "", delivery, &[]).await;
    r.mention("EvEgScopes1", "1700000500.000100").await;
    assert!(eventually(Duration::from_secs(20), || r.rig.app.handled("scopes") == 1).await, "{}", r.logs());
    assert_eq!(r.rig.app.handled_lines("scopes"), ["HANDLED scopes chat:write,channels:history"], "{}", r.logs());
}

/// One `#[tokio::test]` per framework for a scenario.
macro_rules! for_both {
    ($scenario:ident => $python:ident, $js:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $python() {
            $scenario(Bolt::Python).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $js() {
            $scenario(Bolt::Js).await
        }
    };
}

for_both!(app_mention_is_handled_once_with_a_valid_signature
    => python_app_mention_is_handled_once_with_a_valid_signature,
       js_app_mention_is_handled_once_with_a_valid_signature);
for_both!(slow_handler_runs_once_despite_slack_retries
    => python_slow_handler_runs_once_despite_slack_retries,
       js_slow_handler_runs_once_despite_slack_retries);
for_both!(slash_command_reply_is_returned_synchronously
    => python_slash_command_reply_is_returned_synchronously,
       js_slash_command_reply_is_returned_synchronously);
for_both!(view_submission_errors_are_returned_synchronously
    => python_view_submission_errors_are_returned_synchronously,
       js_view_submission_errors_are_returned_synchronously);
for_both!(block_suggestion_options_are_returned_synchronously
    => python_block_suggestion_options_are_returned_synchronously,
       js_block_suggestion_options_are_returned_synchronously);
for_both!(block_action_is_acked_and_handled_once
    => python_block_action_is_acked_and_handled_once,
       js_block_action_is_acked_and_handled_once);
for_both!(reply_posts_once_across_a_client_retry
    => python_reply_posts_once_across_a_client_retry,
       js_reply_posts_once_across_a_client_retry);
for_both!(reply_posts_once_across_a_redelivery_with_rerun_replay
    => python_reply_posts_once_across_a_redelivery_with_rerun_replay,
       js_reply_posts_once_across_a_redelivery_with_rerun_replay);
for_both!(the_client_sees_slacks_answer_headers
    => python_the_client_sees_slacks_answer_headers,
       js_the_client_sees_slacks_answer_headers);
