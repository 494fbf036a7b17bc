//! Issue 35 with unmodified Bolt apps: one as the live bot, another (of the other framework) as
//! its shadow, each replying through the egress — the live one at `/api/`, the shadow at
//! `/shadow/api/`. Both answer every mention; the suite's fake Web API sees only the live
//! bot's posts; the delivery's history holds both answers; a command is answered to Slack by
//! the live bot alone.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::payloads::*;
use super::BoltApp;
use crate::utils::*;

struct ShadowRig {
    gw: Gateway,
    live: BoltApp,
    shadow: BoltApp,
    slack: FakeSlack,
    _redis: RedisServer,
}

impl ShadowRig {
    /// The gateway first (the apps need the egress's address), then the apps, then the gateway
    /// reloaded with them as its upstream and its shadow.
    async fn start(live: Bolt, shadow: Bolt) -> ShadowRig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let placeholder = Reserved::new();
        let mut cfg =
            GatewayConfig::new(&redis.url(), &prefix(&format!("boltsh{live:?}{shadow:?}")), &placeholder.url());
        cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
        let gw = Gateway::start(&cfg).await;
        let base = |path: &str| vec![("SLACK_API_URL", format!("http://127.0.0.1:{}{path}", gw.egress_port))];
        let live = BoltApp::start_with(live, 0, &base("/api/")).await;
        let shadow = BoltApp::start_with(shadow, 0, &base("/shadow/api/")).await;
        cfg.upstream = live.url();
        cfg.app = format!("shadow = {{ upstream = \"{}\" }}", shadow.url());
        gw.rewrite(&cfg);
        Command::new("kill").arg("-HUP").arg(gw.pid().to_string()).status().unwrap();
        assert!(eventually(Duration::from_secs(5), || gw.log().contains("config reloaded")).await, "{}", gw.log());
        ShadowRig { gw, live, shadow, slack, _redis: redis }
    }

    fn logs(&self) -> String {
        let calls: Vec<String> = self.slack.calls().iter().map(|c| c.method.clone()).collect();
        format!(
            "{}--- live ---\n{}--- shadow ---\n{}--- Slack API calls ---\n{calls:?}\n",
            self.gw.log(),
            self.live.logs(),
            self.shadow.logs()
        )
    }

    fn show(&self, id: &str) -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
            .args(["show", id, "--json", "--config"])
            .arg(&self.gw.config_path)
            .env("SG_TEST_SECRET", SECRET)
            .env_remove("SLACKGATE_REDIS_URL")
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    }
}

async fn both_answer_and_only_the_live_bots_posts_reach_slack(live: Bolt, shadow: Bolt) {
    let r = ShadowRig::start(live, shadow).await;
    let ts = "1700000600.000100";
    let req = Req::signed("/slack/events", app_mention("EvBoltShadow1", ts, "<@UBOT> status?"), SECRET);
    assert_eq!(send(r.gw.port, req).await.0, 200);
    let both = || r.live.handled("replied") == 1 && r.shadow.handled("replied") == 1;
    assert!(eventually(Duration::from_secs(20), both).await, "both bots replied\n{}", r.logs());
    let posts = r.slack.posts();
    assert_eq!(posts.len(), 1, "only the live bot's post reached Slack\n{}", r.logs());
    assert_eq!(posts[0]["thread_ts"], ts);
    let kept = r#"slackgate_shadow_calls_total{app="bot",outcome="kept"}"#;
    assert_eq!(metric(r.gw.admin_port, kept).await, 1.0, "{}", r.logs());
    // `slackgate show --json` has both answers on the delivery.
    let id =
        r.gw.log()
            .split("delivery=")
            .find_map(|s| s.split_whitespace().next().filter(|d| d.starts_with("0-")))
            .map(String::from);
    let id = id.expect("a delivery id in the log");
    let mut shown = Value::Null;
    until(Duration::from_secs(10), async || {
        shown = r.show(&id);
        shown["summary"]["fields"]["shadow_replies"] == "1" && shown["summary"]["fields"]["replies"] == "1"
    })
    .await;
    assert_eq!(shown["summary"]["fields"]["shadow_replies"], "1", "{shown}");
    assert_eq!(shown["summary"]["fields"]["replies"], "1", "{shown}");
    // A command: Slack gets the live bot's answer; the shadow handles it in the background.
    let req = Req::signed("/slack/events", slash_command("/deploy", "prod", "9.9.9"), SECRET);
    let (status, body) = send(r.gw.port, req).await;
    assert_eq!((status, String::from_utf8_lossy(&body).contains("deploying prod")), (200, true), "{}", r.logs());
    assert!(eventually(Duration::from_secs(20), || r.shadow.handled("command") == 1).await, "{}", r.logs());
    assert_eq!(r.slack.posts().len(), 1, "still only the live bot's post\n{}", r.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_live_bot_and_a_js_shadow_both_answer_and_only_the_live_posts() {
    both_answer_and_only_the_live_bots_posts_reach_slack(Bolt::Python, Bolt::Js).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_js_live_bot_and_a_python_shadow_both_answer_and_only_the_live_posts() {
    both_answer_and_only_the_live_bots_posts_reach_slack(Bolt::Js, Bolt::Python).await
}
