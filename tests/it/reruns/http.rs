//! Lost in silence (`rerun_lost = "addressed"`): an ack-first HTTP bot killed mid-answer has a
//! message addressed to it run again once `pass_after` passes without a write; a message it
//! only reads, or answers, never.

use super::{TURNS, WAIT};
use crate::utils::*;

/// The ack-first Bolt for Python HTTP bot (`turns_app`, Bolt's default: 200 before the
/// listener runs) behind a gateway with `rerun_lost = "addressed"`, no `order`.
struct HttpRig {
    slack: FakeSlack,
    gw: Gateway,
    bot: Option<BoltProcess>,
    port: u16,
    /// The bot's Web API calls reach the egress through it.
    relay: Relay,
    _redis: RedisServer,
}

impl HttpRig {
    async fn start(name: &str, delay: &str) -> HttpRig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let relay = Relay::start().await;
        let bot = Self::bot_on(&relay.api_url(), 0, delay).await;
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
        cfg.app = format!("rerun_lost = \"addressed\"\n{TURNS}");
        cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
        let gw = Gateway::start(&cfg).await;
        relay.point_at(&[gw.egress_port]);
        let port = bot.port;
        HttpRig { slack, gw, bot: Some(bot), port, relay, _redis: redis }
    }

    async fn bot_on(api_url: &str, port: u16, delay: &str) -> BoltProcess {
        let env = [
            ("SLACK_API_URL", api_url.to_string()),
            ("ANSWER_DELAY", delay.to_string()),
            ("ACK_FIRST", "1".to_string()),
            ("PORT", port.to_string()),
        ];
        BoltProcess::start(Bolt::Python, "turns_app", &env).await
    }

    /// Kill the bot (SIGKILL) and start it again on the same port, answering after `delay`.
    async fn restart_bot(&mut self, delay: &str) {
        drop(self.bot.take());
        self.bot = Some(Self::bot_on(&self.relay.api_url(), self.port, delay).await);
    }

    fn bot(&self) -> &BoltProcess {
        self.bot.as_ref().expect("a bot runs")
    }

    async fn send(&self, channel: &str, ts: &str, text: &str) {
        let channel_type = if channel.starts_with('D') { "im" } else { "channel" };
        let body = serde_json::json!({
            "token": "verification-token", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
            "event_id": format!("Ev{channel}{}", ts.replace('.', "")), "event_time": unix_now(),
            "authorizations": [{ "team_id": "T1", "user_id": "UBOT", "is_bot": true }],
            "event": { "type": "message", "user": "U1", "text": text, "ts": ts, "team": "T1",
                "channel": channel, "channel_type": channel_type, "event_ts": ts },
        });
        let req = Req::signed("/slack/events", body.to_string().into_bytes(), SECRET);
        assert_eq!(send(self.gw.port, req).await.0, 200);
    }

    async fn reruns(&self, reason: &str) -> f64 {
        metric(self.gw.admin_port, &format!("slackgate_reruns_total{{app=\"bot\",reason=\"{reason}\"}}")).await
    }
}

/// An ack-first HTTP bot killed while it answers a DM (addressed to it): with `"addressed"`
/// the question is run again once `pass_after` passes without a write, as run 2 and without
/// Slack's retry headers, and answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_first_http_bot_killed_mid_answer_is_run_again_when_addressed() {
    let mut rig = HttpRig::start("rerunhttp", "600").await;
    assert_eq!(rig.reruns("silent").await, 0.0, "exported at 0 from the start");
    let ts = format!("{}.000100", unix_now());
    rig.send("D1", &ts, "what is the answer?").await;
    let started = eventually(WAIT, || !rig.bot().handled_lines(&format!("start {ts}")).is_empty()).await;
    assert!(started, "never delivered:\n{}\n{}", rig.bot().logs(), rig.gw.log());
    rig.restart_bot("0.2").await;
    let answered = eventually(WAIT, || !rig.bot().handled_lines(&format!("answered {ts}")).is_empty()).await;
    assert!(answered, "the question was never answered:\n{}\n{}", rig.bot().logs(), rig.gw.log());
    let runs = rig.bot().handled_lines(&format!("run {ts}"));
    assert_eq!(runs, [format!("HANDLED run {ts} 2 -")], "run 2, no Slack retry header");
    assert_eq!(rig.slack.calls_of("chat.postMessage").len(), 1, "answered once");
    assert_eq!(rig.reruns("silent").await, 1.0);
    assert_eq!(rig.reruns("socket_closed").await, 0.0);
}

/// Never run again: a message the bot only reads (a channel message that does not mention it,
/// which it lets pass), and a DM it answers within `pass_after`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_bot_only_reads_or_answers_is_never_run_again() {
    let rig = HttpRig::start("rerunhttpnever", "0.2").await;
    let read = format!("{}.000200", unix_now());
    rig.send("C1", &read, "ignore this, just chatting").await;
    let asked = format!("{}.000300", unix_now());
    rig.send("D1", &asked, "what is the answer?").await;
    let ended =
        until(WAIT, async || rig_ended(&rig, "passed").await >= 1.0 && rig_ended(&rig, "reply").await >= 1.0).await;
    assert!(ended, "the runs never ended:\n{}\n{}", rig.bot().logs(), rig.gw.log());
    assert_eq!(rig.reruns("silent").await, 0.0);
    assert_eq!(rig.bot().handled_lines(&format!("run {read}")).len(), 1, "delivered once");
    assert_eq!(rig.bot().handled_lines(&format!("run {asked}")).len(), 1, "delivered once");
    assert_eq!(rig.slack.calls_of("chat.postMessage").len(), 1);
}

async fn rig_ended(rig: &HttpRig, how: &str) -> f64 {
    metric(rig.gw.admin_port, &format!("slackgate_turns_total{{app=\"bot\",ended=\"{how}\"}}")).await
}
