//! Message-level dedupe, edits, cancel-on-delete and filters (issue 3, points 4–6).

use std::sync::Arc;
use std::time::Duration;

use crate::utils::*;

fn envelope(event_id: &str, event: serde_json::Value) -> Vec<u8> {
    serde_json::json!({
        "token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": 1700000000,
        "authorizations": [{"enterprise_id": null, "team_id": "T1", "user_id": "UBOT", "is_bot": true}],
        "event": event
    })
    .to_string()
    .into_bytes()
}

fn mention(event_id: &str, ts: &str) -> Vec<u8> {
    envelope(
        event_id,
        serde_json::json!({"type": "app_mention", "user": "U1", "text": "<@UBOT> help", "channel": "C1", "ts": ts, "event_ts": ts}),
    )
}

fn message(event_id: &str, ts: &str) -> Vec<u8> {
    envelope(
        event_id,
        serde_json::json!({"type": "message", "channel_type": "channel", "user": "U1", "text": "<@UBOT> help", "channel": "C1", "ts": ts, "event_ts": ts}),
    )
}

fn edit(event_id: &str, ts: &str, edit_ts: &str, before: &str, after: &str) -> Vec<u8> {
    envelope(
        event_id,
        serde_json::json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": edit_ts, "event_ts": edit_ts,
            "message": {"type": "message", "user": "U1", "text": after, "ts": ts, "edited": {"user": "U1", "ts": edit_ts}},
            "previous_message": {"type": "message", "user": "U1", "text": before, "ts": ts}}),
    )
}

fn deleted(event_id: &str, ts: &str) -> Vec<u8> {
    envelope(
        event_id,
        serde_json::json!({"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "1800000000.000900", "deleted_ts": ts, "hidden": true,
            "previous_message": {"type": "message", "user": "U1", "text": "<@UBOT> help", "ts": ts}}),
    )
}

async fn post(gw: &Gateway, body: Vec<u8>) -> u16 {
    send(gw.port, Req::signed("/slack/events", body, SECRET)).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mention_and_message_of_one_post_are_forwarded_once() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("msg"), &bot.url());
    cfg.app = "dedupe = { message = true }".into();
    let gw = Gateway::start(&cfg).await;
    assert_eq!(post(&gw, mention("EvM1", "1700000001.000100")).await, 200);
    assert_eq!(post(&gw, message("EvM2", "1700000001.000100")).await, 200);
    // Slack's retry of the absorbed `message` is absorbed too.
    assert_eq!(post(&gw, message("EvM2", "1700000001.000100")).await, 200);
    // Another post is its own message.
    assert_eq!(post(&gw, message("EvM3", "1700000002.000100")).await, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 2).await);
    gw.wait_idle().await;
    assert_eq!(bot.count_body("EvM1"), 1, "the first to arrive is forwarded");
    assert_eq!(bot.count_body("EvM2"), 0);
    assert_eq!(bot.count_body("EvM3"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mention_and_message_at_the_same_moment_on_two_gateways_are_forwarded_once() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("msgrace"), &bot.url());
    cfg.app = "dedupe = { message = true }".into();
    let (a, b) = (Gateway::start(&cfg).await, Gateway::start(&cfg).await);
    const N: usize = 30;
    for i in 0..N {
        let ts = format!("1700000100.{i:06}");
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let bodies = [mention(&format!("EvA{i:03}"), &ts), message(&format!("EvB{i:03}"), &ts)];
        let tasks: Vec<_> = bodies
            .into_iter()
            .zip([a.port, b.port])
            .map(|(body, port)| {
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    let req = Req::signed("/slack/events", body, SECRET);
                    barrier.wait().await;
                    send(port, req).await.0
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
    }
    assert!(eventually(Duration::from_secs(10), || bot.count() >= N).await);
    a.wait_idle().await; // one Redis, one outbox: either gateway reads it
    assert_eq!(bot.count(), N, "one forward per human message");
    for i in 0..N {
        let n = bot.count_body(&format!("EvA{i:03}")) + bot.count_body(&format!("EvB{i:03}"));
        assert_eq!(n, 1, "post {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_collapse_without_being_taken_for_the_original() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("edit"), &bot.url());
    cfg.app = "dedupe = { message = true }".into();
    let gw = Gateway::start(&cfg).await;
    let ts = "1700000200.000100";
    assert_eq!(post(&gw, message("EvE1", ts)).await, 200);
    assert_eq!(post(&gw, edit("EvE2", ts, "1700000210.000100", "<@UBOT> hlep", "<@UBOT> help")).await, 200);
    // The same edit under another event id (Slack fans edits out too) collapses.
    assert_eq!(post(&gw, edit("EvE3", ts, "1700000210.000100", "<@UBOT> hlep", "<@UBOT> help")).await, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 2).await);
    gw.wait_idle().await;
    assert_eq!((bot.count_body("EvE1"), bot.count_body("EvE2"), bot.count_body("EvE3")), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mention_added_only_edits_that_add_the_mention_are_forwarded() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("edit2"), &bot.url());
    cfg.app = r#"dedupe = { message = true, edits = "mention-added" }"#.into();
    let gw = Gateway::start(&cfg).await;
    let ts = "1700000300.000100";
    assert_eq!(post(&gw, edit("EvF1", ts, "1700000301.000100", "<@UBOT> hlep", "<@UBOT> help")).await, 200);
    assert_eq!(post(&gw, edit("EvF2", ts, "1700000302.000100", "hello", "hello <@UBOT>")).await, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    gw.wait_idle().await;
    assert_eq!((bot.count_body("EvF1"), bot.count_body("EvF2")), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_message_cancels_its_waiting_delivery() {
    let redis = RedisServer::start();
    let down = Reserved::new(); // the bot is down: deliveries wait for retry
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("cancel"), &down.url());
    cfg.app = r#"dedupe = { message = true, cancel_on_delete = true }
ignore = { subtypes = ["message_deleted"] }"#
        .into();
    cfg.delivery = r#"{ timeout = "1s", retry_initial = "1s", retry_max = "1s", lease = "5s" }"#.into();
    let gw = Gateway::start(&cfg).await;
    assert_eq!(post(&gw, mention("EvC1", "1700000400.000100")).await, 200);
    assert_eq!(post(&gw, mention("EvC2", "1700000401.000100")).await, 200);
    let retried = r#"slackgate_deliveries_total{app="bot",outcome="retried"}"#;
    assert!(metric_reaches(gw.admin_port, retried, 2.0, Duration::from_secs(5)).await, "both wait for a retry");
    assert_eq!(post(&gw, deleted("EvC3", "1700000400.000100")).await, 200);
    let bot = down.start(SECRET).await;
    assert!(eventually(Duration::from_secs(8), || bot.count() >= 1).await, "{}", gw.log());
    assert!(eventually(Duration::from_secs(5), || redis.keys("*:d:*").is_empty()).await, "nothing else waits");
    assert_eq!(bot.count_body("EvC1"), 0, "cancelled");
    assert_eq!(bot.count_body("EvC2"), 1, "the other message is untouched");
    assert_eq!(bot.count_body("EvC3"), 0, "the deletion itself is filtered out");
    assert!(redis.keys("*:d:*").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_deliveries_are_acked_counted_and_never_stored() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("filter"), &bot.url());
    cfg.app = r#"ignore = { bot_messages = true, allow_bots = ["BFRIEND"], subtypes = ["channel_join"], channels_deny = ["CNOISY"] }"#.into();
    let gw = Gateway::start(&cfg).await;
    let own = envelope(
        "EvG1",
        serde_json::json!({"type": "message", "user": "UBOT", "bot_id": "BME", "text": "my own reply", "channel": "C1", "ts": "1.1"}),
    );
    let other_bot = envelope(
        "EvG2",
        serde_json::json!({"type": "message", "subtype": "bot_message", "bot_id": "BOTHER", "text": "beep", "channel": "C1", "ts": "1.2"}),
    );
    let friend = envelope(
        "EvG3",
        serde_json::json!({"type": "message", "subtype": "bot_message", "bot_id": "BFRIEND", "text": "beep", "channel": "C1", "ts": "1.3"}),
    );
    let join = envelope(
        "EvG4",
        serde_json::json!({"type": "message", "subtype": "channel_join", "user": "U2", "channel": "C1", "ts": "1.4"}),
    );
    let noisy = envelope(
        "EvG5",
        serde_json::json!({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "channel": "CNOISY", "ts": "1.5"}),
    );
    let human = envelope(
        "EvG6",
        serde_json::json!({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "channel": "C1", "ts": "1.6"}),
    );
    for body in [own, other_bot, friend, join, noisy, human] {
        assert_eq!(post(&gw, body).await, 200, "filtered deliveries are acked, never an error");
    }
    assert!(eventually(Duration::from_secs(5), || bot.count() == 2).await);
    gw.wait_idle().await;
    assert_eq!((bot.count_body("EvG3"), bot.count_body("EvG6")), (1, 1));
    assert_eq!(redis.keys("*:r:*").len(), 2, "only forwarded deliveries leave a receipt");
    let mut req = Req::signed("/metrics", Vec::new(), SECRET);
    req.method = "GET";
    let metrics = String::from_utf8_lossy(&send(gw.admin_port, req).await.1).into_owned();
    for reason in ["own_message", "bot_message", "subtype", "channel_denied"] {
        let line = format!(r#"slackgate_ignored_total{{app="bot",reason="{reason}"}} 1"#);
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
}

async fn dedupe_gateway(name: &str) -> (RedisServer, Receiver, Gateway) {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.app = "dedupe = { message = true }".into();
    let gw = Gateway::start(&cfg).await;
    (redis, bot, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_bot_refuses_the_copy_that_won_the_next_copy_is_delivered() {
    // A bot with no listener for app_mention (Bolt answers 404) but one for message.
    let (redis, bot, gw) = dedupe_gateway("altpromote").await;
    bot.push(Reply::status(404).delay(Duration::from_millis(300)));
    assert_eq!(post(&gw, mention("EvAlt1", "1700000200.000100")).await, 200);
    assert_eq!(post(&gw, message("EvAlt2", "1700000200.000100")).await, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count_body("EvAlt2") == 1).await, "{}", gw.log());
    gw.wait_idle().await;
    assert_eq!((bot.count_body("EvAlt1"), bot.count_body("EvAlt2")), (1, 1));
    assert!(redis.keys("*:alt").is_empty(), "no copy left once one is delivered");
    assert_eq!(redis.keys("*:d:*").len(), 1, "only the refused copy, as a dead letter");
    // A copy arriving after the refusal is delivered too (it takes the claim over) — here the
    // message event of another post whose mention was refused first.
    bot.push(Reply::status(404));
    assert_eq!(post(&gw, mention("EvAlt3", "1700000201.000100")).await, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count_body("EvAlt3") == 1).await);
    gw.wait_idle().await; // the refusal is recorded before the other copy comes
    assert_eq!(post(&gw, message("EvAlt4", "1700000201.000100")).await, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count_body("EvAlt4") == 1).await, "{}", gw.log());
    // And the retry of an absorbed copy stays absorbed.
    assert_eq!(post(&gw, message("EvAlt4", "1700000201.000100")).await, 200);
    gw.wait_idle().await;
    assert_eq!(bot.count_body("EvAlt4"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_copies_are_dropped_when_the_winner_is_delivered() {
    let (redis, bot, gw) = dedupe_gateway("altdrop").await;
    bot.push(Reply::status(200).delay(Duration::from_millis(500)));
    assert_eq!(post(&gw, mention("EvKeep1", "1700000300.000100")).await, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    assert_eq!(post(&gw, message("EvKeep2", "1700000300.000100")).await, 200);
    assert_eq!(redis.keys("*:alt").len(), 1, "kept while the winner's attempt runs");
    assert!(eventually(Duration::from_secs(5), || redis.keys("*:alt").is_empty()).await);
    assert!(eventually(Duration::from_secs(2), || redis.keys("*:d:*").is_empty()).await, "and its body");
    gw.wait_idle().await;
    assert_eq!((bot.count_body("EvKeep1"), bot.count_body("EvKeep2")), (1, 0));
}
