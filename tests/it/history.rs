//! The delivery history (issue 20): each delivery's life as `slackgate deliveries` and
//! `slackgate show` tell it — Slack's retry absorbed, each attempt, the reply the bot wrote
//! through the egress — with its token never shown and its text hidden by default, and the
//! history held to `history_max`.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::egress_common::*;
use crate::utils::*;

fn mention(event_id: &str, ts: &str, channel: &str) -> Vec<u8> {
    serde_json::json!({
        "token": "legacy-verification-token", "type": "event_callback", "event_id": event_id, "team_id": "T1",
        "api_app_id": "A1", "event_time": 1_700_000_000, "authorizations": [{"user_id": "UBOT", "is_bot": true}],
        "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> the secret question", "channel": channel, "ts": ts}
    })
    .to_string()
    .into_bytes()
}

/// The delivery the history lists for `search`, once it is there.
async fn delivery_of(gw: &Gateway, search: &str) -> String {
    let mut id = String::new();
    until(Duration::from_secs(10), async || {
        let page = gw.cli_json(&["deliveries", "--search", search]);
        id = page["rows"][0]["id"].as_str().unwrap_or_default().to_string();
        !id.is_empty()
    })
    .await;
    assert!(!id.is_empty(), "{search} never reached the history");
    id
}

/// `show` until `done` holds of its timeline's entries.
async fn shown_when(gw: &Gateway, id: &str, done: impl Fn(&[Value]) -> bool) -> Value {
    let mut shown = Value::Null;
    until(Duration::from_secs(10), async || {
        shown = gw.cli_json(&["show", id]);
        done(shown["timeline"].as_array().map_or(&[][..], Vec::as_slice))
    })
    .await;
    shown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliverys_whole_life_is_kept_and_shown_without_its_token_or_text() {
    let s = setup("hlife", "").await;
    s.bot.push(Reply::status(503));
    let ts = "1700000300.000100";
    let body = mention("EvLife", ts, "C1");
    assert_eq!(send(s.gw.port, Req::signed("/slack/events", body.clone(), SECRET)).await.0, 200);
    let retry = Req::signed("/slack/events", body, SECRET)
        .header("X-Slack-Retry-Num", "1")
        .header("X-Slack-Retry-Reason", "http_timeout");
    assert_eq!(send(s.gw.port, retry).await.0, 200, "Slack's retry, absorbed");
    assert!(eventually(Duration::from_secs(10), || s.bot.count_body("EvLife") == 2).await, "503, then delivered");
    let reply =
        call(s.gw.egress_port, "chat.postMessage", &format!("channel=C1&thread_ts={ts}&text=the+answer"), &[]).await;
    assert!(reply.ok(), "{}", reply.body);

    let id = delivery_of(&s.gw, "EvLife").await;
    let what = |e: &Value| e["what"].as_str().unwrap_or_default().to_string();
    let shown = shown_when(&s.gw, &id, |t| {
        t.iter().any(|e| what(e) == "wrote") && t.iter().filter(|e| what(e) == "attempt").count() == 2
    })
    .await;
    let t = shown["timeline"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<String> = t.iter().map(what).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "arrived").count(), 1, "{shown:#}");
    let absorbed = t.iter().find(|e| what(e) == "absorbed").unwrap_or_else(|| panic!("{shown:#}"));
    assert_eq!((absorbed["retry_num"].as_str(), absorbed["retry_reason"].as_str()), (Some("1"), Some("http_timeout")));
    let attempts: Vec<&Value> = t.iter().filter(|e| what(e) == "attempt").collect();
    assert_eq!((attempts[0]["status"].as_u64(), attempts[0]["outcome"].as_str()), (Some(503), Some("retried")));
    assert_eq!((attempts[1]["status"].as_u64(), attempts[1]["outcome"].as_str()), (Some(200), Some("delivered")));
    assert!(attempts[1]["by"].as_str().is_some_and(|b| !b.is_empty()), "which gateway made it");
    let wrote = t.iter().find(|e| what(e) == "wrote").unwrap();
    assert_eq!((wrote["method"].as_str(), wrote["outcome"].as_str()), (Some("chat.postMessage"), Some("forwarded")));
    assert!(wrote["ts"].as_str().is_some_and(|ts| !ts.is_empty()), "the posted reply's ts: {wrote}");
    let summary = &shown["summary"]["fields"];
    assert_eq!((summary["status"].as_str(), summary["replies"].as_str()), (Some("delivered"), Some("1")), "{summary}");
    assert_eq!(
        (summary["channel"].as_str(), summary["team"].as_str(), summary["user"].as_str()),
        (Some("C1"), Some("T1"), Some("U1"))
    );
    let body = shown["body"].as_str().unwrap_or_default();
    assert!(body.contains("app_mention") && body.contains("EvLife"), "{body}");
    assert!(!body.contains("legacy-verification-token") && !body.contains("secret question"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_filters_by_channel_status_and_never_answered() {
    let s = setup("hfilter", "").await;
    s.bot.set_default(Reply::status(200));
    for (ev, ts, ch) in [("EvAns", "1700000400.000100", "C1"), ("EvIgnored", "1700000500.000100", "C2")] {
        assert_eq!(send(s.gw.port, Req::signed("/slack/events", mention(ev, ts, ch), SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(10), || s.bot.count() == 2).await);
    let reply = call(s.gw.egress_port, "chat.postMessage", "channel=C1&thread_ts=1700000400.000100&text=hi", &[]).await;
    assert!(reply.ok());
    let answered = delivery_of(&s.gw, "EvAns").await;
    let unanswered = delivery_of(&s.gw, "EvIgnored").await;
    shown_when(&s.gw, &answered, |t| t.iter().any(|e| e["what"] == "wrote")).await;
    shown_when(&s.gw, &unanswered, |t| t.iter().any(|e| e["what"] == "attempt")).await;
    let ids = |page: Value| -> Vec<String> {
        page["rows"].as_array().into_iter().flatten().filter_map(|r| r["id"].as_str().map(String::from)).collect()
    };
    assert_eq!(ids(s.gw.cli_json(&["deliveries", "--channel", "C2"])), vec![unanswered.clone()]);
    assert_eq!(ids(s.gw.cli_json(&["deliveries", "--never-answered", "0s"])), vec![unanswered.clone()]);
    assert!(ids(s.gw.cli_json(&["deliveries", "--status", "dead"])).is_empty());
    assert_eq!(ids(s.gw.cli_json(&["deliveries", "--status", "delivered"])).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_keeps_at_most_history_max_deliveries_per_app() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("hmax"), &bot.url());
    cfg.tail = "[ui]\nhistory_max = 100\nhistory_rate = 100000\n".into();
    let gw = Gateway::start(&cfg).await;
    for i in 0..130 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvMax{i:03}")), SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(10), || bot.count() == 130).await);
    let tag = format!("{{{}:h:bot}}", cfg.prefix);
    let kept = || redis.keys(&format!("{tag}:t:*")).len();
    assert!(eventually(Duration::from_secs(20), || kept() == 100).await, "{} kept", kept());
    let page = gw.cli_json(&["deliveries", "--limit", "200"]);
    let rows = page["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 100, "the list and the index agree");
    assert!(rows.iter().all(|r| r["fields"]["receipt"] != "e:EvMax000"), "the oldest went first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_history_rate_a_second_deliveries_are_counted_but_not_recorded() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("hrate"), &bot.url());
    cfg.tail = "[ui]\nhistory_rate = 5\n".into();
    let gw = Gateway::start(&cfg).await;
    for i in 0..20 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvRate{i:02}")), SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(10), || bot.count() == 20).await, "every delivery reaches the bot");
    let tag = format!("{{{}:h:bot}}", cfg.prefix);
    let minutes = || -> u64 {
        redis
            .keys(&format!("{tag}:m:*"))
            .iter()
            .map(|k| {
                let n: Option<u64> = redis::cmd("HGET").arg(k).arg("ok").query(&mut redis.conn()).unwrap();
                n.unwrap_or(0)
            })
            .sum()
    };
    assert!(eventually(Duration::from_secs(10), || minutes() == 20).await, "the overview counts all 20: {}", minutes());
    let kept = redis.keys(&format!("{tag}:t:*")).len();
    // Five a second: the 20 sends span a few seconds at most.
    assert!((5..20).contains(&kept), "{kept} recorded in full");
    let page = gw.cli_json(&["deliveries", "--limit", "100"]);
    assert_eq!(page["rows"].as_array().unwrap().len(), kept);
}

/// Every key under the history's hash tags (`{<prefix>:h:<app>}…` and the registry
/// `{<prefix>:h}:apps`) with its PTTL.
fn history_keys(redis: &RedisServer, prefix: &str) -> Vec<(String, i64)> {
    let mut keys = redis.keys(&format!("{{{prefix}:h:*"));
    keys.extend(redis.keys(&format!("{{{prefix}:h}}*")));
    keys.into_iter()
        .map(|k| {
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut redis.conn()).unwrap();
            (k, ttl)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_history_key_expires_with_the_history_and_a_body_is_kept_apart() {
    let s = setup("hexpire", "").await;
    s.bot.set_default(Reply::status(200));
    let ts = "1700000600.000100";
    assert_eq!(send(s.gw.port, Req::signed("/slack/events", mention("EvTtl", ts, "C1"), SECRET)).await.0, 200);
    let reply = call(s.gw.egress_port, "chat.postMessage", &format!("channel=C1&thread_ts={ts}&text=hi"), &[]).await;
    assert!(reply.ok(), "{}", reply.body);
    let id = delivery_of(&s.gw, "EvTtl").await;
    shown_when(&s.gw, &id, |t| t.iter().any(|e| e["what"] == "wrote") && t.iter().any(|e| e["what"] == "attempt"))
        .await;
    // `setup` names the prefix: `thexpire<n>`.
    let prefix = s.redis.keys("{thexpire*:h:*").first().map(|k| k[1..].split(':').next().unwrap().to_string()).unwrap();
    let keys = history_keys(&s.redis, &prefix);
    let day = 24 * 3600 * 1000;
    for kind in [":idx", ":t:", ":b:", ":m:", "}:apps"] {
        assert!(keys.iter().any(|(k, _)| k.contains(kind)), "a {kind} key: {keys:?}");
    }
    // The shipped default: `history = "24h"` (the minutes of the overview: two hours).
    assert!(keys.iter().all(|(_, ttl)| *ttl > 0 && *ttl <= day), "every key expires within the history: {keys:?}");
    let tag = format!("{{{prefix}:h:bot}}");
    let record: String = redis::cmd("GET").arg(format!("{tag}:t:{id}")).query(&mut s.redis.conn()).unwrap();
    assert!(
        !record.contains("api_app_id") && !record.contains("secret question"),
        "the timeline holds no body: {record}"
    );
    let body: String = redis::cmd("GET").arg(format!("{tag}:b:{id}")).query(&mut s.redis.conn()).unwrap();
    assert!(body.contains("EvTtl"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_off_deletes_what_was_kept_and_shows_nothing() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let prefix = prefix("hoff");
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix, &bot.url());
    let gw = Gateway::start(&cfg).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", mention("EvOff", "1.1", "C1"), SECRET)).await.0, 200);
    delivery_of(&gw, "EvOff").await;
    assert!(!history_keys(&redis, &prefix).is_empty());

    cfg.tail = "[ui]\nhistory = \"off\"\n".into();
    gw.rewrite(&cfg);
    // Before the gateway reloads, what was kept is still there; the CLI, reading the file that
    // says "off", shows none of it.
    assert!(!history_keys(&redis, &prefix).is_empty());
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(["deliveries", "--config"])
        .arg(&gw.config_path)
        .env("SG_TEST_SECRET", SECRET)
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("history is off"));
    gw.reload();
    assert!(
        eventually(Duration::from_secs(60), || history_keys(&redis, &prefix).is_empty()).await,
        "deleted within a minute: {:?}",
        history_keys(&redis, &prefix)
    );
    // And nothing more is written while it is off.
    assert_eq!(send(gw.port, Req::signed("/slack/events", mention("EvOff2", "1.2", "C1"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count_body("EvOff2") == 1).await);
    let page = crate::ui::page(gw.admin_port, "/ui/deliveries", "", None).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("/ui/d/bot/"), "the pages show nothing kept: {}", page.body);
    assert!(history_keys(&redis, &prefix).is_empty(), "{:?}", history_keys(&redis, &prefix));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_removed_from_the_config_has_its_history_trimmed_to_nothing() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let other = Receiver::start("the-other-apps-secret").await;
    let prefix = prefix("hgone");
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix, &bot.url());
    let second = format!(
        "[[app]]\nname = \"second\"\nsigning_secret = \"${{SG_OTHER_SECRET}}\"\nupstream = \"{}\"\nevents_path = \"/second/events\"\ncommands_path = \"/second/events\"\ninteractivity_path = \"/second/events\"\n",
        other.url()
    );
    cfg.tail = format!("[ui]\nhistory = \"4s\"\n{second}");
    let gw = Gateway::start(&cfg).await;
    let sent = Req::signed("/second/events", mention("EvGone", "2.1", "C1"), "the-other-apps-secret");
    assert_eq!(send(gw.port, sent).await.0, 200);
    let tag = format!("{{{prefix}:h:second}}");
    assert!(eventually(Duration::from_secs(10), || !redis.keys(&format!("{tag}:t:*")).is_empty()).await);

    cfg.tail = "[ui]\nhistory = \"4s\"\n".into();
    gw.rewrite(&cfg);
    gw.reload();
    let left = || redis.keys(&format!("{tag}:*")).into_iter().filter(|k| !k.contains(":m:")).collect::<Vec<_>>();
    assert!(eventually(Duration::from_secs(30), || left().is_empty()).await, "{:?}", left());
    let registry = format!("{{{prefix}:h}}:apps");
    let apps: Vec<String> = redis::cmd("SMEMBERS").arg(&registry).query(&mut redis.conn()).unwrap();
    assert!(
        eventually(Duration::from_secs(15), || {
            let apps: Vec<String> = redis::cmd("SMEMBERS").arg(&registry).query(&mut redis.conn()).unwrap();
            !apps.contains(&"second".to_string())
        })
        .await,
        "the registry forgets it: {apps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_versions_before_kept_without_an_expiry_gets_one() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let prefix = prefix("hold");
    let tag = format!("{{{prefix}:h:bot}}");
    let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 - 1000;
    let old = format!("{}\n", serde_json::json!({"what": "arrived", "at": at, "outcome": "accepted", "body": "{}"}));
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(format!("{tag}:t:0-8000000000000001"))
        .arg(&old)
        .cmd("ZADD")
        .arg(format!("{tag}:idx"))
        .arg(at)
        .arg("0-8000000000000001")
        .query(&mut redis.conn())
        .unwrap();
    let cfg = GatewayConfig::new(&redis.url(), &prefix, &bot.url());
    let _gw = Gateway::start(&cfg).await;
    let ttls = || history_keys(&redis, &prefix);
    assert!(
        eventually(Duration::from_secs(20), || ttls().iter().all(|(_, ttl)| *ttl > 0)).await,
        "every key kept before gets an expiry: {:?}",
        ttls()
    );
}

/// `cmdstat_<command>`'s calls since the last `CONFIG RESETSTAT`.
fn calls(redis: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut redis.conn()).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_list_reads_the_arrivals_fields_and_the_matches_timelines_alone() {
    let s = setup("hsift", "").await;
    s.bot.set_default(Reply::status(200));
    for i in 0..40 {
        let channel = if i % 10 == 0 { "CWANTED" } else { "COTHER" };
        let body = mention(&format!("EvSift{i:02}"), &format!("1700000700.{i:06}"), channel);
        assert_eq!(send(s.gw.port, Req::signed("/slack/events", body, SECRET)).await.0, 200);
    }
    assert!(eventually(Duration::from_secs(10), || s.bot.count() == 40).await);
    until(Duration::from_secs(10), async || {
        s.gw.cli_json(&["deliveries", "--limit", "100"])["rows"].as_array().map_or(0, Vec::len) == 40
    })
    .await;
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut s.redis.conn()).unwrap();
    let page = s.gw.cli_json(&["deliveries", "--channel", "CWANTED", "--limit", "100"]);
    let rows = page["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{page:#}");
    assert!(rows.iter().all(|r| r["fields"]["channel"] == "CWANTED" && r["fields"]["status"] == "delivered"));
    assert!(calls(&s.redis, "get") <= 4, "the 4 matches' timelines, no other: {} GETs", calls(&s.redis, "get"));
    assert!(calls(&s.redis, "hmget") >= 40, "every arrival's fields");
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut s.redis.conn()).unwrap();
    let none = s.gw.cli_json(&["deliveries", "--search", "EvNoSuch"]);
    assert!(none["rows"].as_array().unwrap().is_empty());
    assert_eq!(calls(&s.redis, "get"), 0, "a filter that matches nothing reads no timeline");
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut s.redis.conn()).unwrap();
    let newest = s.gw.cli_json(&["deliveries", "--limit", "5"]);
    assert_eq!(newest["rows"].as_array().unwrap().len(), 5);
    assert!(calls(&s.redis, "get") <= 6, "an unfiltered page reads its rows (and one to know of more), not a chunk");
}
