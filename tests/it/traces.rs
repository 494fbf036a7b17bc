//! Issue 36: one trace from Slack's delivery to the bot's reply, exported over OTLP/HTTP to a real
//! receiver (Python's `opentelemetry-proto` decoding what the gateway posted).

use std::time::Duration;

use serde_json::Value;

use crate::egress_common::*;
use crate::utils::*;

fn mention(event_id: &str, ts: &str) -> Vec<u8> {
    serde_json::json!({
        "token": "verification-token-x", "type": "event_callback", "event_id": event_id, "team_id": "T1",
        "api_app_id": "A1", "event_time": 1_700_000_000,
        "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": true}],
        "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> the secret plan", "channel": "C1", "ts": ts}
    })
    .to_string()
    .into_bytes()
}

fn telemetry(receiver: &OtlpReceiver, extra: &str) -> String {
    format!("[telemetry]\notlp_endpoint = \"{}\"\n{extra}", receiver.endpoint())
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// No exported attribute, event or status holds the message's text, a token or a signature.
fn assert_nothing_secret(spans: &[Value]) {
    for s in spans {
        let all = s.to_string();
        for secret in ["the secret plan", "verification-token-x", "xoxb-", "v0=", SECRET] {
            assert!(!all.contains(secret), "{secret:?} in an exported span: {all}");
        }
    }
}

/// A delivery the bot refuses once: its trace holds the Slack request (the root, with its
/// signature check and record as children) and both attempts under it; each attempt's
/// `traceparent` names its own span, and the signature still verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliverys_trace_holds_its_request_record_and_each_attempt_and_the_bot_gets_their_traceparent() {
    let (redis, bot, receiver) = (RedisServer::start(), Receiver::start(SECRET).await, OtlpReceiver::start().await);
    bot.push(Reply::status(500));
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("trace1"), &bot.url());
    cfg.tail =
        telemetry(&receiver, "service_name = \"gw-test\"\ntrace_url = \"https://tempo.example/trace/{trace_id}\"\n");
    // The collector's auth header, from the standard variable.
    let gw = Gateway::start_with_env(&cfg, &[("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k%201")]).await;
    let event = Req::signed("/slack/events?x=1", mention("EvTrace1", "1700000800.000100"), SECRET);
    assert_eq!(send(gw.port, event).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 2).await, "{}", gw.log());
    let (ok, spans) = receiver.spans_until(Duration::from_secs(10), |s| named(s, "deliver to bot").len() == 2).await;
    assert!(ok, "{spans:#?}\n{}", gw.log());
    let root = named(&spans, "POST /slack/events");
    assert_eq!(root.len(), 1, "{spans:#?}");
    let root = root[0];
    let trace = text(&root["trace_id"]);
    assert_eq!(root["parent_span_id"], "", "the trace begins at Slack's request");
    assert_eq!(root["service_name"], "gw-test");
    assert_eq!(root["attributes"]["url.path"], "/slack/events", "no query");
    assert_eq!(root["attributes"]["slack.event_id"], "EvTrace1");
    assert_eq!(root["attributes"]["slack.team_id"], "T1");
    assert_eq!(root["attributes"]["slack.channel_id"], "C1");
    assert_eq!(root["attributes"]["http.response.status_code"], 200);
    for child in ["verify signature", "record", "deliver to bot"] {
        for s in named(&spans, child) {
            assert_eq!((text(&s["trace_id"]), text(&s["parent_span_id"])), (trace, text(&root["span_id"])), "{s}");
        }
    }
    let attempts = named(&spans, "deliver to bot");
    let mut numbers: Vec<i64> =
        attempts.iter().map(|s| s["attributes"]["slackgate.attempt"].as_i64().unwrap()).collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2]);
    // Each request to the bot carried its attempt's span, sampled.
    for got in bot.received() {
        assert!(got.signature_ok, "a traceparent disturbs no signature");
        let tp = got.header("traceparent").expect("a traceparent");
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!((parts[0], parts[1], parts[3]), ("00", trace, "01"), "{tp}");
        assert!(attempts.iter().any(|s| s["span_id"] == parts[2]), "{tp} names an exported attempt span");
    }
    let failed = attempts.iter().find(|s| s["attributes"]["slackgate.attempt"] == 1).unwrap();
    assert_eq!(failed["attributes"]["http.response.status_code"], 500);
    assert_eq!(failed["status"]["code"], 2, "an error status: {failed}");
    assert_eq!(failed["attributes"]["slackgate.outcome"], "retried");
    assert!(
        failed["attributes"]["slackgate.next_retry_ms"].as_i64().is_some_and(|ms| ms > 0),
        "the next try: {failed}"
    );
    let ok = attempts.iter().find(|s| s["attributes"]["slackgate.attempt"] == 2).unwrap();
    assert_eq!(ok["attributes"]["slackgate.outcome"], "delivered");
    assert_nothing_secret(&spans);
    let requests = receiver.requests().await;
    assert!(requests.iter().all(|r| r["headers"]["x-collector-key"] == "k 1"), "{requests:#?}");
    let exported = r#"slackgate_trace_spans_total{outcome="exported"}"#;
    assert!(metric(gw.admin_port, exported).await >= 5.0);
    // The audit line, the delivery's page and `slackgate show` name the trace.
    assert!(gw.log().contains(&format!("trace_id=\"{trace}\"")), "{}", gw.log());
    let id = bot.received()[0].header("x-slackgate-delivery").unwrap();
    let mut page = crate::ui::page(gw.admin_port, &format!("/ui/d/bot/{id}"), "", None).await;
    until(Duration::from_secs(10), async || {
        page = crate::ui::page(gw.admin_port, &format!("/ui/d/bot/{id}"), "", None).await;
        page.body.contains(trace)
    })
    .await;
    assert!(page.body.contains(&format!("https://tempo.example/trace/{trace}")), "{}", page.body);
    // Slack's redelivery of it is absorbed, on the same trace.
    let mut again = Req::signed("/slack/events", mention("EvTrace1", "1700000800.000100"), SECRET);
    again.headers.push(("X-Slack-Retry-Num".into(), "1".into()));
    assert_eq!(send(gw.port, again).await.0, 200);
    let (ok, spans) =
        receiver.spans_until(Duration::from_secs(10), |s| !named(s, "slack redelivery absorbed").is_empty()).await;
    assert!(ok, "{spans:#?}");
    let absorbed = named(&spans, "slack redelivery absorbed")[0];
    assert_eq!((text(&absorbed["trace_id"]), absorbed["attributes"]["slack.retry_num"].as_str()), (trace, Some("1")));
}

/// A retry made by another gateway process continues the same trace: the context is the
/// delivery's, read from its id, wherever it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_by_another_gateway_process_continues_the_same_trace() {
    let (redis, bot, receiver) = (RedisServer::start(), Receiver::start(SECRET).await, OtlpReceiver::start().await);
    bot.set_default(Reply::status(500));
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("trace2"), &bot.url());
    cfg.delivery = r#"{ timeout = "2s", retry_initial = "2s", retry_max = "2s", lease = "5s" }"#.into();
    cfg.tail = telemetry(&receiver, "");
    let mut gw = Gateway::start(&cfg).await;
    assert_eq!(
        send(gw.port, Req::signed("/slack/events", mention("EvTrace2", "1700000800.000200"), SECRET)).await.0,
        200
    );
    let (ok, _) = receiver.spans_until(Duration::from_secs(10), |s| named(s, "deliver to bot").len() == 1).await;
    assert!(ok, "{}", gw.log());
    // The first process dies with the retry scheduled; a second one makes it.
    let first = gw.log().matches("vm-").count();
    gw.restart().await;
    bot.set_default(Reply::status(200));
    let (ok, spans) = receiver.spans_until(Duration::from_secs(15), |s| named(s, "deliver to bot").len() >= 2).await;
    assert!(ok, "{}", gw.log());
    let attempts = named(&spans, "deliver to bot");
    assert_eq!(attempts[0]["trace_id"], attempts[1]["trace_id"], "one trace");
    assert_eq!(attempts[0]["parent_span_id"], attempts[1]["parent_span_id"], "under the same Slack request");
    let services: Vec<&Value> = attempts.iter().map(|s| &s["attributes"]["slackgate.attempt"]).collect();
    assert_eq!(services.len(), 2, "{services:?} (log had {first} consumer mentions)");
}

/// `sample_ratio = 0`: the bot is told its delivery is not sampled (flags 00), and nothing of
/// the delivery is exported — while a reply whose client sends a sampled `traceparent` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_delivery_exports_nothing_and_a_bots_own_trace_gets_the_egress_span_as_its_child() {
    let (redis, bot, receiver, slack) =
        (RedisServer::start(), Receiver::start(SECRET).await, OtlpReceiver::start().await, FakeSlack::start().await);
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("trace3"), &bot.url());
    cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
    cfg.tail = telemetry(&receiver, "sample_ratio = 0.0\n");
    let gw = Gateway::start(&cfg).await;
    let ts = "1700000800.000300";
    assert_eq!(send(gw.port, Req::signed("/slack/events", mention("EvTrace3", ts), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await, "{}", gw.log());
    let tp = bot.received()[0].header("traceparent").expect("a traceparent even unsampled");
    assert!(tp.ends_with("-00"), "not sampled: {tp}");
    // The bot's instrumented client replies under a sampled span of its own.
    let bot_trace = "0af7651916cd43dd8448eb211c80319c";
    let bot_span = "b7ad6b7169203331";
    let headers = [("traceparent", format!("00-{bot_trace}-{bot_span}-01")), ("tracestate", "v=1".to_string())];
    let body = format!("channel=C1&thread_ts={ts}&text=the+answer");
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert!(call(gw.egress_port, "chat.postMessage", &body, &headers).await.ok());
    let (ok, spans) =
        receiver.spans_until(Duration::from_secs(10), |s| !named(s, "slack chat.postMessage").is_empty()).await;
    assert!(ok, "{}", gw.log());
    let write = named(&spans, "slack chat.postMessage")[0];
    assert_eq!((text(&write["trace_id"]), text(&write["parent_span_id"])), (bot_trace, bot_span), "{write}");
    assert_eq!(write["attributes"]["slackgate.outcome"], "forwarded");
    assert_eq!(write["attributes"]["slack.team_id"], "T1", "the token's workspace");
    assert_eq!(write["attributes"]["url.path"], "/api/chat.postMessage");
    let delivery_trace = tp.split('-').nth(1).unwrap();
    assert!(
        spans.iter().all(|s| s["trace_id"] != delivery_trace),
        "the unsampled delivery exported nothing: {spans:#?}"
    );
    assert_eq!(spans.len(), 1, "{spans:#?}");
    // Slack never sees the bot's trace context.
    let sent = &slack.calls_of("chat.postMessage")[0];
    assert!(sent.headers.get("traceparent").is_none() && sent.headers.get("tracestate").is_none());
    assert_nothing_secret(&spans);
}

/// A collector that accepts and never answers: every event is still acked at once, and the
/// spans it cannot take are dropped and counted, never waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_slows_no_ack_and_its_spans_are_dropped_and_counted() {
    let (redis, bot, receiver) = (RedisServer::start(), Receiver::start(SECRET).await, OtlpReceiver::start().await);
    receiver.set_mode("hang").await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("trace4"), &bot.url());
    cfg.tail = telemetry(&receiver, "max_queue = 64\nexport_timeout = \"30s\"\n");
    let gw = Gateway::start(&cfg).await;
    let n = 200;
    for i in 0..n {
        let event = Req::signed("/slack/events", mention(&format!("EvHang{i}"), &format!("1700000900.{i:06}")), SECRET);
        assert_eq!(send(gw.port, event).await.0, 200, "acked while the collector hangs");
    }
    assert!(eventually(Duration::from_secs(20), || bot.count() == n).await, "{}", gw.log());
    let dropped = r#"slackgate_trace_spans_total{outcome="dropped"}"#;
    assert!(metric_reaches(gw.admin_port, dropped, 1.0, Duration::from_secs(10)).await, "{}", gw.log());
    assert!(!receiver.requests().await.is_empty(), "the exporter did post (and was never answered)");
}

/// A shadow's kept write is a span too, in its client's trace, `kept`, with no server address:
/// it went nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadows_kept_write_is_a_span_of_its_clients_trace() {
    let (redis, bot, shadow, receiver) = (
        RedisServer::start(),
        Receiver::start(SECRET).await,
        Receiver::start(SECRET).await,
        OtlpReceiver::start().await,
    );
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("trace5"), &bot.url());
    cfg.egress = "slack_api_url = \"http://127.0.0.1:9/api/\"".into();
    cfg.app = format!("shadow = {{ upstream = \"{}\" }}", shadow.url());
    cfg.tail = telemetry(&receiver, "");
    let gw = Gateway::start(&cfg).await;
    let ts = "1700000800.000500";
    assert_eq!(send(gw.port, Req::signed("/slack/events", mention("EvTrace5", ts), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || shadow.count() == 1).await, "{}", gw.log());
    let tp = shadow.received()[0].header("traceparent").expect("the shadow's attempt carries one too");
    let (trace, attempt) = (tp.split('-').nth(1).unwrap().to_string(), tp.split('-').nth(2).unwrap().to_string());
    let headers = [("traceparent", tp.as_str())];
    let body = format!("channel=C1&thread_ts={ts}&text=the+shadow+answer");
    assert!(call(gw.egress_port, "/shadow/api/chat.postMessage", &body, &headers).await.ok());
    let both =
        |s: &[Value]| !named(s, "slack chat.postMessage").is_empty() && !named(s, "deliver to bot.shadow").is_empty();
    let (ok, spans) = receiver.spans_until(Duration::from_secs(10), both).await;
    assert!(ok, "{}", gw.log());
    let kept = named(&spans, "slack chat.postMessage")[0];
    assert_eq!((text(&kept["trace_id"]), text(&kept["parent_span_id"])), (trace.as_str(), attempt.as_str()));
    assert_eq!(kept["attributes"]["slackgate.outcome"], "kept");
    assert!(kept["attributes"].get("server.address").is_none(), "{kept}");
    assert!(named(&spans, "deliver to bot.shadow").iter().any(|s| s["span_id"] == attempt.as_str()));
    assert_nothing_secret(&spans);
}

/// A stream's life (start to stop) is a span of its delivery's trace, under Slack's request,
/// with its appends and how it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_life_is_a_span_of_its_deliverys_trace() {
    let (redis, bot, receiver, slack) =
        (RedisServer::start(), Receiver::start(SECRET).await, OtlpReceiver::start().await, FakeSlack::start().await);
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("trace6"), &bot.url());
    cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
    cfg.tail = telemetry(&receiver, "");
    let gw = Gateway::start(&cfg).await;
    let ts = "1700000800.000600";
    assert_eq!(send(gw.port, Req::signed("/slack/events", mention("EvTrace6", ts), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 1).await, "{}", gw.log());
    let trace = bot.received()[0].header("traceparent").unwrap().split('-').nth(1).unwrap().to_string();
    let started = call(gw.egress_port, "chat.startStream", &format!("channel=C1&thread_ts={ts}"), &[]).await;
    assert!(started.ok(), "{}", started.body);
    let stream_ts = started.json()["ts"].as_str().unwrap().to_string();
    for (method, text) in
        [("chat.appendStream", "part+one"), ("chat.appendStream", "part+two"), ("chat.stopStream", "")]
    {
        let body = format!("channel=C1&ts={stream_ts}&markdown_text={text}");
        assert!(call(gw.egress_port, method, &body, &[]).await.ok(), "{method}");
    }
    let (ok, spans) = receiver.spans_until(Duration::from_secs(10), |s| !named(s, "slack stream").is_empty()).await;
    assert!(ok, "{spans:#?}\n{}", gw.log());
    let root = named(&spans, "POST /slack/events")[0];
    let stream = named(&spans, "slack stream")[0];
    assert_eq!((text(&stream["trace_id"]), &stream["parent_span_id"]), (trace.as_str(), &root["span_id"]));
    assert_eq!(stream["attributes"]["slackgate.stream.ending"], "stopped");
    assert!(stream["attributes"]["slackgate.stream.appends"].as_i64().is_some_and(|n| n >= 2), "{stream}");
    assert!(stream["end_time_unix_nano"].as_u64() > stream["start_time_unix_nano"].as_u64(), "{stream}");
    assert_nothing_secret(&spans);
}
