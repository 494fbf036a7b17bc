//! Issue 35: upstreams by kind. The first entry of `upstreams` that matches a delivery decides
//! its bot, on every path: the inline answer of a command, its retry by the workers, and events
//! delivered in the background (their channel read from the body when an entry asks for it).

use std::time::Duration;

use crate::utils::*;

fn command(trigger: &str) -> Vec<u8> {
    format!(
        "token=x&team_id=T1&channel_id=C1&user_id=U1&command=%2Fdeploy&text=prod&api_app_id=A1&trigger_id={trigger}"
    )
    .into_bytes()
}

fn bodies(bot: &Receiver) -> Vec<String> {
    bot.received().iter().map(|r| String::from_utf8_lossy(&r.body).into_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_sends_commands_to_one_bot_and_events_to_another() {
    let redis = RedisServer::start();
    let (events_bot, commands_bot) = (Receiver::start(SECRET).await, Receiver::start(SECRET).await);
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("upkinds"), &events_bot.url());
    let to = commands_bot.url();
    cfg.app = format!(
        r#"upstreams = [
  {{ match = {{ kinds = ["command"] }}, upstream = "{to}" }},
  {{ match = {{ types = ["app_mention"], channels = ["C9"] }}, upstream = "{to}", delivery = {{ max_in_flight = 1 }} }},
]"#
    );
    let gw = Gateway::start(&cfg).await;
    // Inline: the command's bot answers Slack.
    commands_bot.push(Reply::status(200).body("text/plain", "deploying"));
    let (status, body) = send(gw.port, Req::signed("/slack/events", command("1.1.a"), SECRET)).await;
    assert_eq!((status, &body[..]), (200, &b"deploying"[..]), "{}", gw.log());
    // Background: a command the bot refused inline is retried by the workers, to the same bot.
    commands_bot.push(Reply::status(503));
    assert_eq!(send(gw.port, Req::signed("/slack/events", command("2.2.b"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || commands_bot.count() == 3).await, "{}", gw.log());
    assert_eq!(commands_bot.received()[2].header("x-slackgate-attempt").as_deref(), Some("2"));
    // Events: a mention in C9 goes to the commands' bot, one in C1 to the app's own.
    assert_eq!(send(gw.port, Req::signed("/slack/events", event_in("EvUp1", "C1"), SECRET)).await.0, 200);
    assert_eq!(send(gw.port, Req::signed("/slack/events", event_in("EvUp9", "C9"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || commands_bot.count() == 4 && events_bot.count() == 1).await);
    assert!(outbox_idle(gw.admin_port, Duration::from_secs(5)).await);
    let (to_events, to_commands) = (bodies(&events_bot), bodies(&commands_bot));
    assert!(to_events.len() == 1 && to_events[0].contains("EvUp1"), "{to_events:?}");
    assert!(to_commands[3].contains("EvUp9"), "{to_commands:?}");
    assert!(to_commands[..3].iter().all(|b| b.contains("command=%2Fdeploy")));
    for r in events_bot.received().iter().chain(commands_bot.received().iter()) {
        assert!(r.signature_ok, "each bot's own signature check passes");
    }
    let series = |entry: &str| {
        format!(r#"slackgate_upstream_deliveries_total{{app="bot",outcome="delivered",upstream="{entry}"}}"#)
    };
    let counted = (
        metric(gw.admin_port, &series("default")).await,
        metric(gw.admin_port, &series("upstreams[0]")).await,
        metric(gw.admin_port, &series("upstreams[1]")).await,
    );
    assert_eq!(counted, (1.0, 2.0, 1.0));
    let retried = r#"slackgate_upstream_deliveries_total{app="bot",outcome="retried",upstream="upstreams[0]"}"#;
    assert_eq!(metric(gw.admin_port, retried).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entrys_delivery_policy_is_its_own() {
    let redis = RedisServer::start();
    let (events_bot, slow_bot) = (Receiver::start(SECRET).await, Receiver::start(SECRET).await);
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("uppolicy"), &events_bot.url());
    // The app gives up after 30 s; the entry after its first failed attempt (1 ms).
    cfg.app = format!(
        r#"upstreams = [{{ match = {{ channels = ["C9"] }}, upstream = "{}", delivery = {{ give_up_after = "1ms" }} }}]"#,
        slow_bot.url()
    );
    let gw = Gateway::start(&cfg).await;
    slow_bot.set_default(Reply::status(500));
    events_bot.push(Reply::status(500));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event_in("EvPol9", "C9"), SECRET)).await.0, 200);
    assert_eq!(send(gw.port, Req::signed("/slack/events", event_in("EvPol1", "C1"), SECRET)).await.0, 200);
    let dead = r#"slackgate_upstream_deliveries_total{app="bot",outcome="dead",upstream="upstreams[0]"}"#;
    assert!(metric_reaches(gw.admin_port, dead, 1.0, Duration::from_secs(10)).await, "{}", gw.log());
    assert!(eventually(Duration::from_secs(10), || events_bot.count() == 2).await, "the app's own is retried");
    assert_eq!(slow_bot.count(), 1, "the entry's gave up after one attempt");
}
