//! The egress for the Slack Web API, against a fake Slack Web API: reads untouched, every
//! `Idempotency-Key` case, a client's retry after a lost answer, the uncertain post, stale
//! replies withheld, pacing shared by replicas, 429s absorbed, no token anywhere.

use std::time::Duration;

use crate::egress_common::*;
use crate::utils::*;

/// One Web API call through the egress: status, headers, body.
async fn api(port: u16, method: &str, body: &str, headers: &[(&str, &str)]) -> (u16, hyper::HeaderMap, String) {
    let a = call(port, method, body, headers).await;
    (a.status, a.headers, a.body)
}

fn ok(body: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(body).is_ok_and(|v| v["ok"] == true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_pass_through_untouched_and_touch_no_redis() {
    let s = setup("ereads", "").await;
    let body = "user=U123&include_locale=true&odd=%F0%9F%98%80";
    let (status, headers, answer) = api(s.gw.egress_port, "users.info", body, &[("x-custom", "1")]).await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("content-type").unwrap(), "application/json; charset=utf-8");
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!((v["method"].as_str(), v["echo"].as_str()), (Some("users.info"), Some(body)), "bytes unchanged");
    let call = &s.slack.calls_of("users.info")[0];
    assert_eq!(call.headers.get("authorization").unwrap(), &format!("Bearer {TOKEN}"), "Authorization unchanged");
    assert_eq!(call.body, body.as_bytes());
    // The workers make their outbox group and register their shards at start; a read adds nothing.
    let touched: Vec<String> = s
        .redis
        .keys("*")
        .into_iter()
        .filter(|k| !k.ends_with(":outbox") && !k.ends_with(":stream") && !k.ends_with(":shards"))
        .collect();
    assert!(touched.is_empty(), "no Redis on a read's path: {touched:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_posts_once_and_replays() {
    let s = setup("ekey", "").await;
    let post = "channel=C1&text=hello";
    let key = [("idempotency-key", "k-1")];
    let (st, h, first) = api(s.gw.egress_port, "chat.postMessage", post, &key).await;
    assert!(st == 200 && ok(&first) && h.get("idempotent-replayed").is_none(), "{first}");
    let (st, h, again) = api(s.gw.egress_port, "chat.postMessage", post, &key).await;
    assert_eq!((st, again.as_str()), (200, first.as_str()), "the winner's answer");
    assert_eq!(h.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(s.slack.posts().len(), 1, "not sent again");
    // Scoped by method and token: the same key elsewhere is another call.
    let (_, _, other) = api(s.gw.egress_port, "chat.update", "channel=C1&ts=1.2&text=x", &key).await;
    assert!(ok(&other));
    assert_eq!(s.slack.calls_of("chat.update").len(), 1);
    let other_token = [("idempotency-key", "k-1"), ("authorization", "Bearer xoxb-another-workspace")];
    api(s.gw.egress_port, "chat.postMessage", post, &other_token).await;
    assert_eq!(s.slack.posts().len(), 2, "another token's key does not collide");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_key_gets_409_and_failures_are_not_cached() {
    let s = setup("ekey409", "").await;
    s.slack.push(Behaviour::Late(Duration::from_millis(800)));
    let port = s.gw.egress_port;
    let first =
        tokio::spawn(
            async move { api(port, "chat.postMessage", "channel=C1&text=a", &[("idempotency-key", "k-2")]).await },
        );
    assert!(eventually(Duration::from_secs(5), || s.slack.posts().len() == 1).await);
    let (status, _, body) = api(port, "chat.postMessage", "channel=C1&text=a", &[("idempotency-key", "k-2")]).await;
    assert_eq!(status, 409, "{body}");
    assert!(ok(&first.await.unwrap().2));
    // A failure drops the claim: a 5xx, then ok:false, then the retry runs again and succeeds.
    s.slack.push(Behaviour::Status(500));
    s.slack.push(Behaviour::NotOk("channel_not_found"));
    let key = [("idempotency-key", "k-3")];
    let (st, _, _) = api(port, "chat.postMessage", "channel=C2&text=b", &key).await;
    assert_eq!(st, 500);
    let (_, _, b) = api(port, "chat.postMessage", "channel=C2&text=b", &key).await;
    assert!(b.contains("channel_not_found"));
    let (_, h, b) = api(port, "chat.postMessage", "channel=C2&text=b", &key).await;
    assert!(ok(&b) && h.get("idempotent-replayed").is_none(), "sent again after failures: {b}");
    assert_eq!(s.slack.calls_of("chat.postMessage").len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_keyed_call_fails_closed_and_others_go_through() {
    let mut s = setup("eclosed", "").await;
    s.redis.stop();
    let (status, _, body) =
        api(s.gw.egress_port, "chat.postMessage", "channel=C1&text=k", &[("idempotency-key", "k")]).await;
    assert_eq!(status, 503, "{body}");
    let (status, _, body) = api(s.gw.egress_port, "chat.postMessage", "channel=C1&text=n", &[]).await;
    assert!(status == 200 && ok(&body), "{body}");
    let (status, _, _) = api(s.gw.egress_port, "users.info", "user=U1", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(s.slack.posts().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_answer_gets_the_first_result_and_only_a_retry_does() {
    let s = setup("eretry", "").await;
    s.slack.push(Behaviour::Late(Duration::from_millis(1200)));
    let port = s.gw.egress_port;
    // The client gives up before the answer comes (its own timeout), then retries.
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), api(port, "chat.postMessage", "channel=C1&text=once", &[]))
            .await;
    assert!(gave_up.is_err(), "the first call was abandoned by its client");
    let (status, _, retry) = api(port, "chat.postMessage", "channel=C1&text=once", &[]).await;
    assert!(status == 200 && ok(&retry), "{retry}");
    assert_eq!(s.slack.posts().len(), 1, "the retry got the first call's result\n{}", s.gw.log());
    let ts = s.slack.posts()[0]["ts"].as_str().unwrap().to_string();
    assert!(retry.contains(&ts));
    // Its answer arrived this time: the same text again is a new message.
    let (_, _, again) = api(port, "chat.postMessage", "channel=C1&text=once", &[]).await;
    assert!(ok(&again));
    assert_eq!(s.slack.posts().len(), 2, "a bot may say the same thing twice");
    // An identical call while the first still waits for its answer is a new write too.
    s.slack.push(Behaviour::Late(Duration::from_millis(600)));
    let a = tokio::spawn(async move { api(port, "chat.postMessage", "channel=C9&text=twin", &[]).await });
    assert!(eventually(Duration::from_secs(5), || s.slack.posts().len() == 3).await);
    let (_, _, b) = api(port, "chat.postMessage", "channel=C9&text=twin", &[]).await;
    assert!(ok(&b) && ok(&a.await.unwrap().2));
    assert_eq!(s.slack.posts().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_post_is_looked_for_before_it_is_posted_again() {
    let s = setup("euncertain", "timeout = \"500ms\"\nevidence_window = \"600ms\"").await;
    let port = s.gw.egress_port;
    // Slack took it but the answer never came: found in the channel, not posted again.
    s.slack.push(Behaviour::Drop);
    let (status, _, body) = api(port, "chat.postMessage", "channel=C1&text=did+it+land", &[]).await;
    assert!(status == 200 && ok(&body), "{body}");
    assert_eq!(s.slack.posts().len(), 1);
    assert!(body.contains(s.slack.posts()[0]["ts"].as_str().unwrap()), "{body}");
    // Slack never got it: not found after the evidence window, posted once.
    s.slack.push(Behaviour::DropBefore);
    let (_, _, body) = api(port, "chat.postMessage", "channel=C1&text=lost+on+the+way", &[]).await;
    assert!(ok(&body), "{body}");
    let posts: Vec<_> = s.slack.posts().into_iter().filter(|p| p["text"] == "lost on the way").collect();
    assert_eq!(posts.len(), 1);
    // A late answer past the egress's timeout, in a thread: found with conversations.replies.
    s.slack.push(Behaviour::Late(Duration::from_secs(2)));
    let (_, _, body) =
        api(port, "chat.postMessage", "channel=C1&thread_ts=1700000000.000100&text=in+thread", &[]).await;
    assert!(ok(&body), "{body}");
    assert_eq!(s.slack.posts().iter().filter(|p| p["text"] == "in thread").count(), 1);
    assert!(!s.slack.calls_of("conversations.replies").is_empty());
    let m = metric(s.gw.admin_port, r#"slackgate_egress_calls_total{class="write",outcome="reconciled"}"#).await;
    assert_eq!(m, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_cannot_be_looked_for_is_kept_as_unknown() {
    let s = setup("eunknown", "timeout = \"400ms\"").await;
    s.slack.push(Behaviour::Drop);
    let (status, headers, body) = api(s.gw.egress_port, "chat.postEphemeral", "channel=C1&user=U1&text=x", &[]).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("slackgate_uncertain") && headers.get("retry-after").is_some());
    let m = metric(s.gw.admin_port, r#"slackgate_egress_calls_total{class="write",outcome="unknown"}"#).await;
    assert_eq!(m, 1.0);
}

async fn delete_message(s: &Setup, event_id: &str, ts: &str) {
    let body = serde_json::json!({
        "type": "event_callback", "event_id": event_id, "team_id": "T1",
        "event": {"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "1800000001.000001",
                  "deleted_ts": ts, "previous_message": {"ts": ts, "user": "U1", "text": "<@UBOT> help"}}
    });
    assert_eq!(send(s.gw.port, Req::signed("/slack/events", body.to_string().into_bytes(), SECRET)).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_a_deleted_question_is_withheld() {
    let s = setup("estale", "").await;
    deliver_mention(&s, "EvStale1", "1700000100.000100").await;
    deliver_mention(&s, "EvStale2", "1700000200.000100").await;
    delete_message(&s, "EvStale3", "1700000100.000100").await;
    let port = s.gw.egress_port;
    // The deletion is marked in the background: ask until it shows.
    let mut withheld = String::new();
    until(Duration::from_secs(3), async || {
        withheld =
            api(port, "chat.postMessage", "channel=C1&thread_ts=1700000100.000100&text=late+answer", &[]).await.2;
        withheld.contains("source_deleted")
    })
    .await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&withheld).unwrap(),
        serde_json::json!({"ok": false, "error": "source_deleted"})
    );
    assert!(s.slack.posts().iter().all(|p| p["text"] != "late answer"), "withheld, not posted");
    let (_, _, kept) = api(port, "chat.postMessage", "channel=C1&thread_ts=1700000200.000100&text=fine", &[]).await;
    assert!(ok(&kept), "the other question's reply is posted: {kept}");
    let m = metric(s.gw.admin_port, r#"slackgate_egress_calls_total{class="write",outcome="withheld_deleted"}"#).await;
    assert!(m >= 1.0);
    // Kept for a day, where operators look.
    let notes = egress_cli(&s.gw);
    assert_eq!(notes["withheld"][0]["reason"], "source_deleted", "{notes}");
    assert_eq!(notes["withheld"][0]["source_ts"], "1700000100.000100");
    let mut req = Req::signed("/egress", Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    let listed = String::from_utf8_lossy(&send(s.gw.admin_port, req).await.1).into_owned();
    assert!(listed.contains("source_deleted"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_reply_to_an_edited_question_is_withheld_but_an_update_of_the_bots_own_goes() {
    let s = setup("eedit", "on_edited = \"withhold\"").await;
    let port = s.gw.egress_port;
    deliver_mention(&s, "EvEdit1", "1700000500.000100").await;
    let (_, _, posted) =
        api(port, "chat.postMessage", "channel=C1&thread_ts=1700000500.000100&text=thinking", &[]).await;
    let reply_ts = serde_json::from_str::<serde_json::Value>(&posted).unwrap()["ts"].as_str().unwrap().to_string();
    let edit = serde_json::json!({
        "type": "event_callback", "event_id": "EvEdit2", "team_id": "T1",
        "event": {"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1800000002.000001",
                  "message": {"type": "message", "user": "U1", "text": "<@UBOT> never mind", "ts": "1700000500.000100"},
                  "previous_message": {"type": "message", "user": "U1", "text": "<@UBOT> help", "ts": "1700000500.000100"}}
    });
    assert_eq!(send(s.gw.port, Req::signed("/slack/events", edit.to_string().into_bytes(), SECRET)).await.0, 200);
    // The edit is noted in the background: once it is, a new reply to the question is withheld.
    let mut answer = String::new();
    let mut n = 0;
    until(Duration::from_secs(3), async || {
        n += 1;
        let post = format!("channel=C1&thread_ts=1700000500.000100&text=another+{n}");
        answer = api(port, "chat.postMessage", &post, &[]).await.2;
        answer.contains("source_edited")
    })
    .await;
    assert!(answer.contains("source_edited"), "{answer}");
    // The bot's update of the reply it already posted goes: it can always fix its own answer.
    let before = s.slack.calls_of("chat.update").len();
    let update = format!("channel=C1&ts={reply_ts}&text=the+answer");
    let (_, _, updated) = api(port, "chat.update", &update, &[]).await;
    assert!(ok(&updated), "{updated}");
    assert_eq!(s.slack.calls_of("chat.update").len(), before + 1, "sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_from_slack_is_absorbed_up_to_max_wait() {
    let s = setup("e429", "max_wait = \"5s\"").await;
    s.slack.push(Behaviour::RateLimited(1));
    let (status, _, body) = api(s.gw.egress_port, "chat.postMessage", "channel=C1&text=patience", &[]).await;
    assert!(status == 200 && ok(&body), "{body}");
    assert_eq!(s.slack.calls_of("chat.postMessage").len(), 2);
    // Past max_wait, the 429 and its Retry-After go back to the bot.
    let s = setup("e429b", "max_wait = \"500ms\"").await;
    s.slack.push(Behaviour::RateLimited(3));
    let (status, headers, _) = api(s.gw.egress_port, "chat.postMessage", "channel=C1&text=too+long", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(headers.get("retry-after").unwrap(), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_to_one_channel_is_paced_across_replicas() {
    let redis = RedisServer::start();
    let slack = FakeSlack::start().await;
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("epace"), &bot.url());
    cfg.egress =
        format!("slack_api_url = \"{}\"\npace_per_second = 10.0\npace_burst = 3\nmax_wait = \"10s\"", slack.api_url());
    let (a, b) = (Gateway::start(&cfg).await, Gateway::start(&cfg).await);
    let mut calls = Vec::new();
    for i in 0..20 {
        let port = if i % 2 == 0 { a.egress_port } else { b.egress_port };
        calls.push(tokio::spawn(async move {
            api(port, "chat.postMessage", &format!("channel=CPACE&text=n{i}"), &[]).await
        }));
    }
    for c in calls {
        assert!(ok(&c.await.unwrap().2));
    }
    let mut at: Vec<_> = slack.calls_of("chat.postMessage").iter().map(|c| c.at).collect();
    at.sort();
    let span = at[19].duration_since(at[0]);
    // Three at once, then one every 100 ms: the last of 20 comes at least 1.7 s after the first.
    assert!(span >= Duration::from_millis(1500), "20 posts in {span:?}");
    let waited = metric(a.admin_port, "slackgate_egress_pacing_seconds_count").await
        + metric(b.admin_port, "slackgate_egress_pacing_seconds_count").await;
    assert_eq!(waited, 20.0);
    drop(bot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_reaches_the_logs_or_redis() {
    let s = setup("esecret", "").await;
    api(s.gw.egress_port, "chat.postMessage", "channel=C1&text=t1", &[("idempotency-key", "kk")]).await;
    api(s.gw.egress_port, "chat.postMessage", "channel=C1&text=t2", &[]).await;
    api(s.gw.egress_port, "users.info", &format!("user=U1&token={TOKEN}"), &[]).await;
    let log = s.gw.log();
    assert!(!log.contains(TOKEN) && !log.contains("7f3a9c"), "token in the log");
    assert!(log.contains("egress write"), "writes are audited: {log}");
    let mut c = s.redis.conn();
    for key in s.redis.keys("*") {
        assert!(!key.contains(TOKEN), "{key}");
        let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut c).unwrap();
        assert!(!String::from_utf8_lossy(&dump).contains("7f3a9c"), "token stored under {key}");
    }
}
