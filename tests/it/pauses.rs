//! Issue 35: pause and resume. A paused channel gets nothing while the others flow and Slack
//! is acked as ever; on resume each held delivery arrives once, in the order Slack sent it —
//! also with two gateways, and with a restart between the pause and the resume. Inline
//! payloads of a paused channel get `pause_answer`; paused time is not counted toward
//! `give_up_after`.

use std::process::Command;
use std::time::Duration;

use crate::utils::*;

const TOKEN: &str = "admin-token-for-pauses-0123456789";

fn cli(gw: &Gateway, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(args)
        .arg("--config")
        .arg(&gw.config_path)
        .env("SG_TEST_SECRET", SECRET)
        .env("SG_ADMIN_TOKEN", TOKEN)
        .env_remove("SLACKGATE_REDIS_URL")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

async fn admin_post(gw: &Gateway, path: &str) -> (u16, serde_json::Value) {
    let mut req = Req::signed(path, Vec::new(), SECRET);
    req.method = "POST";
    req.headers.clear();
    let (status, body) = send(gw.admin_port, req.header("Authorization", &format!("Bearer {TOKEN}"))).await;
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

/// An app that takes turns: one delivery of a conversation at a time, in order.
fn config(redis: &RedisServer, name: &str, bot: &Receiver) -> GatewayConfig {
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.server = r#"admin_token = "${SG_ADMIN_TOKEN}""#.into();
    cfg.app = r#"turns = { order = "queue", end = "answer" }"#.into();
    cfg
}

/// The `n`th mention of the bot in `channel`, in thread `1700000000.000100`: all of them are
/// one conversation, which takes its turns in the order of their `ts`.
fn in_thread(event_id: &str, channel: &str, n: usize) -> Vec<u8> {
    serde_json::json!({
        "token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": 1700000000,
        "event": {"type": "app_mention", "user": "U1", "text": "<@B1> and?", "channel": channel,
                  "ts": format!("1700000001.{:06}", n + 1), "thread_ts": "1700000000.000100"}
    })
    .to_string()
    .into_bytes()
}

async fn get_pauses(gw: &Gateway) -> (u16, String) {
    let mut req = Req::signed("/pauses", Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    let (status, body) = send(gw.admin_port, req.header("Authorization", &format!("Bearer {TOKEN}"))).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn start(cfg: &GatewayConfig) -> Gateway {
    Gateway::start_with_env(cfg, &[("SG_ADMIN_TOKEN", TOKEN)]).await
}

/// Wait until `gw` holds `n` pauses of app `bot` (each process reads them every 500 ms).
async fn sees_pauses(gw: &Gateway, n: f64) {
    let series = r#"slackgate_pauses{app="bot"}"#;
    assert!(until(Duration::from_secs(5), async || metric(gw.admin_port, series).await == n).await, "{}", gw.log());
}

async fn paused_waiting(gw: &Gateway) -> u64 {
    outbox_stats(gw.admin_port, Some(TOKEN)).await[0]["paused"].as_u64().unwrap_or(0)
}

/// Send `ids` to one thread of `channel` through `ports` in turn, each acked 200, each
/// recorded a millisecond after the last (so that "the order Slack sent them" is one order).
async fn send_all(ports: &[u16], ids: &[String], channel: &str) {
    for (i, id) in ids.iter().enumerate() {
        let before = std::time::SystemTime::now();
        let port = ports[i % ports.len()];
        assert_eq!(send(port, Req::signed("/slack/events", in_thread(id, channel, i), SECRET)).await.0, 200);
        assert!(eventually(Duration::from_secs(1), || before.elapsed().unwrap() >= Duration::from_millis(2)).await);
    }
}

/// The event ids the bot got, in the order it got them.
fn got(bot: &Receiver) -> Vec<String> {
    let event_id = |body: &[u8]| {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        v["event_id"].as_str().unwrap_or_default().to_string()
    };
    bot.received().iter().map(|r| event_id(&r.body)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_channel_gets_nothing_while_others_flow_and_gets_each_once_in_order_on_resume() {
    let (redis, bot) = (RedisServer::start(), Receiver::start(SECRET).await);
    let gw = start(&config(&redis, "pausech", &bot)).await;
    let (status, answer) = admin_post(&gw, "/pauses/bot/pause?channel=C9&by=alice").await;
    assert_eq!((status, answer["new"].as_bool()), (200, Some(true)), "{answer}");
    assert_eq!(admin_post(&gw, "/pauses/bot/pause?channel=C9&by=bob").await.1["new"], false, "twice acts once");
    sees_pauses(&gw, 1.0).await;
    let audited = || gw.log().lines().any(|l| l.contains(" pause app=bot team=* channel=C9 by=alice"));
    assert!(eventually(Duration::from_secs(5), audited).await, "the audit line: {}", gw.log());
    let held: Vec<String> = (0..5).map(|i| format!("EvHeld{i}")).collect();
    send_all(&[gw.port], &held, "C9").await;
    send_all(&[gw.port], &["EvFlow1".into(), "EvFlow2".into()], "C1").await;
    assert!(eventually(Duration::from_secs(5), || bot.count() == 2).await, "{}", gw.log());
    assert!(until(Duration::from_secs(10), async || paused_waiting(&gw).await == 5).await, "{}", gw.log());
    assert_eq!(got(&bot), ["EvFlow1", "EvFlow2"], "the paused channel got nothing");
    let (status, pauses) = get_pauses(&gw).await;
    assert!(status == 200 && pauses.contains("alice") && !pauses.contains("bob"), "{pauses}");
    assert_eq!(metric(gw.admin_port, r#"slackgate_paused_total{app="bot"}"#).await, 5.0);

    let (status, answer) = admin_post(&gw, "/pauses/bot/resume?channel=C9").await;
    assert_eq!((status, &answer["resumed"]["by"]), (200, &serde_json::json!("alice")), "{answer}");
    assert!(eventually(Duration::from_secs(10), || bot.count() == 7).await, "{}", gw.log());
    assert_eq!(got(&bot)[2..], held[..], "each once, in the order Slack sent them");
    assert!(outbox_idle_with(gw.admin_port, Some(TOKEN), Duration::from_secs(5)).await);
    assert_eq!(got(&bot).len(), 7, "none twice");
    assert_eq!(admin_post(&gw, "/pauses/bot/resume?channel=C9").await.1["resumed"], serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_on_two_gateways_and_across_a_restart() {
    let (redis, bot) = (RedisServer::start(), Receiver::start(SECRET).await);
    let cfg = config(&redis, "pausetwo", &bot);
    let (mut one, two) = (start(&cfg).await, start(&cfg).await);
    let (ok, out, err) = cli(&one, &["pause", "--app", "bot", "--team", "T1", "--by", "carol"]);
    assert!(ok && out.contains("paused app bot team T1"), "{out}{err}");
    sees_pauses(&one, 1.0).await;
    sees_pauses(&two, 1.0).await;
    let held: Vec<String> = (0..6).map(|i| format!("EvTwo{i}")).collect();
    send_all(&[one.port, two.port], &held, "C1").await;
    assert!(until(Duration::from_secs(10), async || paused_waiting(&two).await == 6).await, "{}", two.log());
    assert_eq!(bot.count(), 0, "a team's pause holds every channel of it");
    let (ok, out, _) = cli(&two, &["pauses"]);
    assert!(ok && out.contains("app bot team T1") && out.contains("carol") && out.contains("6 deliveries"), "{out}");
    // A restart between the pause and the resume: the pause is in Redis.
    one.kill9();
    one.restart().await;
    sees_pauses(&one, 1.0).await;
    assert_eq!(bot.count(), 0);
    let (ok, out, err) = cli(&one, &["resume", "--app", "bot", "--team", "T1"]);
    assert!(ok && out.contains("resumed app bot team T1 (paused by carol"), "{out}{err}");
    assert!(eventually(Duration::from_secs(15), || bot.count() >= 6).await, "{}{}", one.log(), two.log());
    assert!(outbox_idle_with(two.admin_port, Some(TOKEN), Duration::from_secs(10)).await);
    assert_eq!(got(&bot), held, "each once, in order, whichever gateway took it");
    let (ok, _, err) = cli(&one, &["resume", "--app", "bot", "--team", "T1"]);
    assert!(!ok && err.contains("no such pause"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_command_gets_the_pause_answer_now_and_reaches_the_bot_on_resume() {
    let (redis, bot) = (RedisServer::start(), Receiver::start(SECRET).await);
    let mut cfg = config(&redis, "pausecmd", &bot);
    cfg.app = r#"pause_answer = '{"text": "The bot is being updated; it will answer shortly."}'"#.into();
    let gw = start(&cfg).await;
    assert_eq!(admin_post(&gw, "/pauses/bot/pause").await.0, 200);
    sees_pauses(&gw, 1.0).await;
    let form = b"token=x&team_id=T1&channel_id=C1&user_id=U1&command=%2Fdeploy&text=prod&trigger_id=7.7.p".to_vec();
    let (status, ct, body) = exchange(gw.port, Req::signed("/slack/events", form, SECRET)).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(ct.as_deref(), Some("application/json"));
    assert_eq!(&body[..], br#"{"text": "The bot is being updated; it will answer shortly."}"#);
    assert!(until(Duration::from_secs(10), async || paused_waiting(&gw).await == 1).await, "{}", gw.log());
    assert_eq!(bot.count(), 0, "the bot is not asked while paused");
    // A pause of the whole app holds events too; a malformed scope changes nothing.
    let (status, _) = admin_post(&gw, "/pauses/bot/pause?channel=C%0A1").await;
    assert_eq!(status, 400);
    let (status, _) = admin_post(&gw, "/pauses/nobot/pause").await;
    assert_eq!(status, 404);
    assert_eq!(admin_post(&gw, "/pauses/bot/resume").await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await, "{}", gw.log());
    assert!(String::from_utf8_lossy(&bot.received()[0].body).contains("command=%2Fdeploy"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_time_does_not_count_toward_give_up_after() {
    let (redis, bot) = (RedisServer::start(), Receiver::start(SECRET).await);
    let mut cfg = config(&redis, "pausegive", &bot);
    cfg.delivery =
        r#"{ timeout = "2s", retry_initial = "100ms", retry_max = "200ms", lease = "5s", give_up_after = "1500ms" }"#
            .into();
    let gw = start(&cfg).await;
    assert_eq!(admin_post(&gw, "/pauses/bot/pause?channel=C9").await.0, 200);
    sees_pauses(&gw, 1.0).await;
    send_all(&[gw.port], &["EvLong".into()], "C9").await;
    // Held longer than give_up_after.
    let age = r#"slackgate_pause_oldest_age_seconds{app="bot"}"#;
    assert!(until(Duration::from_secs(10), async || metric(gw.admin_port, age).await >= 2.0).await);
    bot.push(Reply::status(500));
    assert_eq!(admin_post(&gw, "/pauses/bot/resume?channel=C9").await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 2).await, "retried, not given up: {}", gw.log());
    let dead = r#"slackgate_deliveries_total{app="bot",outcome="dead"}"#;
    assert_eq!(metric(gw.admin_port, dead).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_held_past_its_response_urls_life_is_parked_as_expired_not_sent() {
    let (redis, bot) = (RedisServer::start(), Receiver::start(SECRET).await);
    let cfg = config(&redis, "pauseold", &bot);
    let gw = start(&cfg).await;
    assert_eq!(admin_post(&gw, "/pauses/bot/pause").await.0, 200);
    sees_pauses(&gw, 1.0).await;
    let form = b"team_id=T1&channel_id=C1&user_id=U1&command=%2Fdeploy&text=prod&trigger_id=8.8.p".to_vec();
    assert_eq!(send(gw.port, Req::signed("/slack/events", form, SECRET)).await.0, 200);
    assert!(until(Duration::from_secs(10), async || paused_waiting(&gw).await == 1).await, "{}", gw.log());
    // Received 31 minutes ago, as if the pause had lasted that long.
    let records: Vec<String> = redis.keys(&format!("{{{}:bot:*}}:d:*", cfg.prefix));
    assert_eq!(records.len(), 1, "{records:?}");
    let long_ago =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 - 31 * 60_000;
    let _: () = redis::cmd("HSET").arg(&records[0]).arg("rcv").arg(long_ago).query(&mut redis.conn()).unwrap();
    assert_eq!(admin_post(&gw, "/pauses/bot/resume").await.0, 200);
    let dead = |st: &serde_json::Value| st[0]["dead"].as_u64() == Some(1);
    assert!(
        until(Duration::from_secs(10), async || dead(&outbox_stats(gw.admin_port, Some(TOKEN)).await)).await,
        "{}",
        gw.log()
    );
    assert_eq!(bot.count(), 0, "never sent: its response_url is dead");
    assert!(gw.log().contains("expired while paused"), "{}", gw.log());
}
