//! Slash commands and interactive payloads: recorded first, then answered inline with the
//! bot's own answer when it comes in time; otherwise acked empty and finished in the background
//! (late replies to `response_url`, late options expire). The inline attempt and the workers
//! never both deliver one entry.

use std::time::{Duration, Instant};

use crate::utils::*;

fn command(trigger: &str, response_url: &str) -> Vec<u8> {
    let ru: String = url_encode(response_url);
    format!("token=x&team_id=T1&team_domain=t&channel_id=C1&channel_name=general&user_id=U1&user_name=u&command=%2Fdeploy&text=prod&api_app_id=A1&response_url={ru}&trigger_id={trigger}").into_bytes()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn interaction(payload: serde_json::Value) -> Vec<u8> {
    format!("payload={}", url_encode(&payload.to_string())).into_bytes()
}

fn view_submission(trigger: &str) -> Vec<u8> {
    interaction(serde_json::json!({
        "type": "view_submission", "team": {"id": "T1"}, "user": {"id": "U1"}, "api_app_id": "A1",
        "trigger_id": trigger, "view": {"id": "V1", "callback_id": "form", "state": {"values": {}}}
    }))
}

fn block_suggestion() -> Vec<u8> {
    interaction(serde_json::json!({
        "type": "block_suggestion", "team": {"id": "T1"}, "user": {"id": "U1"}, "api_app_id": "A1",
        "action_id": "picker", "block_id": "b1", "value": "al"
    }))
}

async fn setup(name: &str, app: &str) -> (RedisServer, Receiver, Gateway, String) {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.app = app.into();
    let gw = Gateway::start(&cfg).await;
    (redis, bot, gw, cfg.prefix)
}

/// A gateway whose late replies may go to `hook`, a local https listener standing in for
/// Slack's hooks host: allowed by `response_url_hosts`, trusted through `SSL_CERT_FILE`.
async fn setup_with_hook(name: &str, app: &str) -> (RedisServer, Receiver, Receiver, Gateway, TestCa) {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let ca = TestCa::new();
    let hook = Receiver::start_tls(&ca).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    cfg.app = app.into();
    cfg.server = format!("response_url_hosts = [\"localhost:{}\"]", hook.port);
    let (k, v) = ca.env();
    let gw = Gateway::start_with_env(&cfg, &[(k, &v)]).await;
    (redis, bot, hook, gw, ca)
}

fn nothing_left(redis: &RedisServer) -> bool {
    redis.keys("*:d:*").is_empty()
        && redis.keys("*:sched").iter().all(|k| {
            let n: usize = redis::cmd("ZCARD").arg(k).query(&mut redis.conn()).unwrap();
            n == 0
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_command_reply_in_time_goes_back_to_slack_unchanged() {
    let (redis, bot, gw, _) = setup("cmd", "").await;
    bot.push(Reply::status(200).body("text/plain; charset=utf-8", "deploying prod"));
    let (status, body) =
        send(gw.port, Req::signed("/slack/events", command("1.1.a", "https://hooks.slack.com/x"), SECRET)).await;
    assert_eq!((status, &body[..]), (200, &b"deploying prod"[..]));
    assert_eq!(bot.count(), 1);
    assert!(bot.received()[0].signature_ok);
    // Had the inline finish failed, the hold would run out and the workers deliver it again.
    gw.wait_idle().await;
    assert_eq!(bot.count(), 1, "delivered once: the workers never got it");
    assert!(nothing_left(&redis), "the delivery is complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_submission_errors_are_returned_and_a_double_submit_is_absorbed() {
    let (_redis, bot, gw, _) = setup("view", "").await;
    let errors = r#"{"response_action":"errors","errors":{"field":"too short"}}"#;
    bot.set_default(Reply::status(200).body("application/json;charset=utf-8", errors));
    let (status, body) = send(gw.port, Req::signed("/slack/events", view_submission("2.2.b"), SECRET)).await;
    assert_eq!(status, 200);
    assert_eq!(std::str::from_utf8(&body).unwrap(), errors);
    let (status, body) = send(gw.port, Req::signed("/slack/events", view_submission("2.2.b"), SECRET)).await;
    assert_eq!((status, body.len()), (200, 0), "the double submit is acked empty");
    gw.wait_idle().await;
    assert_eq!(bot.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_command_reply_is_posted_once_to_response_url() {
    let (redis, bot, hook, gw, _ca) = setup_with_hook("late", r#"inline = { command = "400ms" }"#).await;
    bot.push(Reply::status(200).body("text/plain", "late answer").delay(Duration::from_millis(1200)));
    let started = Instant::now();
    let req =
        Req::signed("/slack/events", command("3.3.c", &format!("{}/commands/T1/1/abc", hook.https_url())), SECRET);
    let (status, body) = send(gw.port, req).await;
    assert_eq!((status, body.len()), (200, 0), "Slack gets an empty 200 inside its window");
    assert!(started.elapsed() < Duration::from_millis(1000), "{:?}", started.elapsed());
    assert!(eventually(Duration::from_secs(5), || hook.count() == 1).await, "{}", gw.log());
    let posted = &hook.received()[0];
    assert_eq!(posted.path, "/commands/T1/1/abc");
    assert_eq!(posted.header("content-type").as_deref(), Some("application/json"));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&posted.body).unwrap(),
        serde_json::json!({"text": "late answer"})
    );
    gw.wait_idle().await;
    assert_eq!((bot.count(), hook.count()), (1, 1), "one attempt, one post");
    assert!(nothing_left(&redis));
}

/// With traces on, a command's trace holds its inline attempt and its late `response_url`
/// reply, whose span names the hook's host and the path's kind only (the rest of the URL lets
/// anyone post).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_command_replys_trace_has_its_inline_attempt_and_the_response_url_by_host_and_kind_only() {
    let receiver = OtlpReceiver::start().await;
    let app = format!("inline = {{ command = \"400ms\" }}\n[telemetry]\notlp_endpoint = \"{}\"", receiver.endpoint());
    let (_redis, bot, hook, gw, _ca) = setup_with_hook("latetrace", &app).await;
    bot.push(Reply::status(200).body("text/plain", "late answer").delay(Duration::from_millis(1200)));
    let url = format!("{}/commands/T1/1/s3cr3tpart", hook.https_url());
    let (status, _) = send(gw.port, Req::signed("/slack/events", command("3.3.t", &url), SECRET)).await;
    assert_eq!(status, 200);
    assert!(eventually(Duration::from_secs(5), || hook.count() == 1).await, "{}", gw.log());
    let (ok, spans) =
        receiver.spans_until(Duration::from_secs(10), |s| s.iter().any(|x| x["name"] == "slack response_url")).await;
    assert!(ok, "{spans:#?}\n{}", gw.log());
    let find = |name: &str| spans.iter().find(|x| x["name"] == name).unwrap_or_else(|| panic!("{name}: {spans:#?}"));
    let (root, attempt, reply) = (find("POST /slack/events"), find("deliver to bot"), find("slack response_url"));
    for child in [attempt, reply] {
        assert_eq!((&child["trace_id"], &child["parent_span_id"]), (&root["trace_id"], &root["span_id"]), "{child}");
    }
    assert_eq!(root["attributes"]["slack.kind"], "command");
    assert_eq!(reply["attributes"]["server.address"], "localhost");
    assert_eq!(reply["attributes"]["url.path"], "/commands/…");
    assert_eq!(reply["attributes"]["slackgate.outcome"], "posted");
    let all = serde_json::to_string(&spans).unwrap();
    assert!(!all.contains("s3cr3tpart") && !all.contains("late answer"), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_block_suggestion_expires_instead_of_being_retried() {
    let (redis, bot, gw, prefix) = setup("opts", r#"inline = { interactivity = "300ms" }"#).await;
    bot.set_default(Reply::status(200).body("application/json", r#"{"options":[]}"#).delay(Duration::from_millis(800)));
    let (status, body) = send(gw.port, Req::signed("/slack/events", block_suggestion(), SECRET)).await;
    assert_eq!((status, body.len()), (200, 0));
    let expired = r#"slackgate_inline_total{app="bot",kind="interactivity",outcome="expired"}"#;
    assert!(metric_reaches(gw.admin_port, expired, 1.0, Duration::from_secs(5)).await, "expired, counted");
    assert_eq!(metric(gw.admin_port, expired).await, 1.0);
    assert_eq!(bot.count(), 1);
    assert!(nothing_left(&redis));
    assert_eq!(redis.xlen(&format!("{{{prefix}:bot:0}}:dead")), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_in_time_are_returned() {
    let (_redis, bot, gw, _) = setup("opts2", "").await;
    let options = r#"{"options":[{"text":{"type":"plain_text","text":"Alpha"},"value":"a"}]}"#;
    bot.set_default(Reply::status(200).body("application/json", options));
    let (status, body) = send(gw.port, Req::signed("/slack/events", block_suggestion(), SECRET)).await;
    assert_eq!((status, std::str::from_utf8(&body).unwrap()), (200, options));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_inline_attempt_is_retried_by_the_workers_and_its_answer_posted() {
    let (redis, bot, hook, gw, _ca) = setup_with_hook("retry", "").await;
    bot.push(Reply::status(503));
    bot.set_default(Reply::status(200).body("text/plain", "done later"));
    let req = Req::signed("/slack/events", command("4.4.d", &format!("{}/hook", hook.https_url())), SECRET);
    let (status, body) = send(gw.port, req).await;
    assert_eq!((status, body.len()), (200, 0), "a 503 is not shown to Slack: it is retried");
    // The retry is scheduled with backoff and taken by the workers.
    assert!(eventually(Duration::from_secs(10), || bot.count() == 2).await, "{}", gw.log());
    assert!(eventually(Duration::from_secs(5), || hook.count() == 1).await);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&hook.received()[0].body).unwrap()["text"], "done later");
    assert_eq!(bot.received()[1].header("x-slackgate-attempt").as_deref(), Some("2"));
    assert!(eventually(Duration::from_secs(2), || nothing_left(&redis)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_delivery_whose_gateway_died_is_delivered_by_another() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("died"), &bot.url());
    cfg.delivery = r#"{ timeout = "2s", retry_initial = "100ms", retry_max = "300ms", lease = "3s" }"#.into();
    let mut a = Gateway::start(&cfg).await;
    let b = Gateway::start(&cfg).await;
    bot.push(Reply::status(200).delay(Duration::from_secs(5)));
    let port = a.port;
    let pending = tokio::spawn(async move {
        send(port, Req::signed("/slack/events", command("5.5.e", "https://hooks.slack.com/x"), SECRET)).await
    });
    assert!(eventually(Duration::from_secs(3), || bot.count() == 1).await);
    a.kill9();
    let _ = pending.await;
    assert!(
        eventually(Duration::from_secs(10), || bot.count() == 2).await,
        "re-delivered after the hold ran out\n{}",
        b.log()
    );
    assert!(eventually(Duration::from_secs(3), || nothing_left(&redis)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_url_that_is_not_slacks_is_never_requested() {
    let (_redis, bot, hook, gw, _ca) = setup_with_hook("ssrf", r#"inline = { command = "300ms" }"#).await;
    let plain = Receiver::start("unused").await;
    bot.set_default(Reply::status(200).body("text/plain", "late answer").delay(Duration::from_millis(600)));
    let targets = [
        format!("http://localhost:{}/hook", hook.port),               // not https
        format!("{}/hook", plain.url()),                              // http, loopback
        format!("https://127.0.0.1:{}/hook", hook.port),              // an IP, not an allowed host
        format!("https://localhost:{}/dlq/bot/purge", gw.admin_port), // the admin port
        "https://hooks.slack.com.evil.example/x".to_string(),
        "https://metadata.internal/latest".to_string(),
    ];
    for (i, url) in targets.iter().enumerate() {
        let req = Req::signed("/slack/events", command(&format!("6.6.{i}"), url), SECRET);
        assert_eq!(send(gw.port, req).await.0, 200);
    }
    let refused = |m: &str| m.contains(r#"slackgate_response_url_posts_total{app="bot",outcome="refused"} 6"#);
    let mut metrics = String::new();
    let all_refused = until(Duration::from_secs(5), async || {
        metrics = reqwest_metrics(gw.admin_port).await;
        refused(&metrics)
    })
    .await;
    assert!(all_refused, "{metrics}");
    assert_eq!((hook.count(), plain.count()), (0, 0), "nothing requested");
    let audits = gw.log().lines().filter(|l| l.contains("late reply") && l.contains("refused")).count();
    assert_eq!(audits, 6, "each refusal audited:\n{}", gw.log());
    // The allowed host still gets its reply.
    let req = Req::signed("/slack/events", command("6.6.ok", &format!("{}/hook", hook.https_url())), SECRET);
    assert_eq!(send(gw.port, req).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || hook.count() == 1).await, "{}", gw.log());
}

async fn reqwest_metrics(port: u16) -> String {
    let mut req = Req::signed("/metrics", Vec::new(), SECRET);
    req.method = "GET";
    let (_, body) = send(port, req).await;
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_query_typed_twice_gets_its_options_twice() {
    // block_suggestion carries no trigger_id: two identical bodies are two keystrokes, never a
    // retry (Slack does not retry interactions).
    let (redis, bot, gw, _) = setup("opts3", "").await;
    let options = r#"{"options":[{"text":{"type":"plain_text","text":"Alpha"},"value":"a"}]}"#;
    bot.set_default(Reply::status(200).body("application/json", options));
    for _ in 0..2 {
        let (status, body) = send(gw.port, Req::signed("/slack/events", block_suggestion(), SECRET)).await;
        assert_eq!((status, std::str::from_utf8(&body).unwrap()), (200, options));
    }
    assert_eq!(bot.count(), 2);
    assert!(redis.keys("*:r:*").is_empty(), "no receipt taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_inline_forwards_write_no_error_line() {
    let (_redis, bot, gw, _) = setup("noerr", "").await;
    bot.set_default(Reply::status(200).body("text/plain", "ok"));
    let mut tasks = Vec::new();
    // Load shaping: bursts of four, so inline attempts overlap in varied ways.
    let mut bursts = pace(Duration::from_millis(20));
    for i in 0..40 {
        if i % 4 == 0 {
            bursts.tick().await;
        }
        let port = gw.port;
        tasks.push(tokio::spawn(async move {
            send(port, Req::signed("/slack/events", command(&format!("9.9.{i}"), "https://hooks.slack.com/x"), SECRET))
                .await
                .0
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    // Attempts finish in the background after their answers: read the log once they all have.
    gw.wait_idle().await;
    let log = gw.log();
    assert!(!log.contains("ERROR"), "no ERROR line in normal operation:\n{log}");
    assert!(!log.contains('\u{1b}'), "no colour codes in a log file");
}
