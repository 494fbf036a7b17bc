//! Issue 36 with an unmodified Bolt app: Bolt for Python traced by the OpenTelemetry Python SDK
//! through its standard instrumentation only (`tests/bolt/python/traced_app.py`: WSGI, threading,
//! urllib) continues the trace the gateway started for the delivery, and its reply through the
//! egress lands in that same trace, under the bot's own spans. Both export to one real OTLP/HTTP
//! receiver.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::payloads::*;
use crate::utils::*;

/// The gateway's `service.name` (the `[telemetry]` default) and the bot's.
const GATEWAY: &str = "slackgate";
const BOT: &str = "bolt-bot";
/// The mention's text: no exported span may hold it.
const TEXT: &str = "<@UBOT> the secret plan";

/// OTLP span kinds (`opentelemetry.proto.trace.v1.Span.SpanKind`).
const SERVER: i64 = 2;
const CLIENT: i64 = 3;

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The spans of one delivery's trace, from Slack's request to the bot's reply.
struct Chain<'a> {
    root: &'a Value,
    deliver: &'a Value,
    server: &'a Value,
    answer: &'a Value,
    client: &'a Value,
    write: &'a Value,
}

/// The one span of `service` named `name` in `trace` satisfying `pick`, if exactly one.
fn one<'a>(spans: &'a [Value], trace: &str, service: &str, pick: impl Fn(&Value) -> bool) -> Option<&'a Value> {
    let found: Vec<&Value> =
        spans.iter().filter(|s| s["trace_id"] == trace && s["service_name"] == service && pick(s)).collect();
    (found.len() == 1).then(|| found[0])
}

/// Whether `span`'s parent chain (through `by_id`) reaches `ancestor`.
fn descends_from(by_id: &HashMap<&str, &Value>, span: &Value, ancestor: &Value) -> bool {
    let mut parent = text(&span["parent_span_id"]);
    while let Some(p) = by_id.get(parent) {
        if p["span_id"] == ancestor["span_id"] {
            return true;
        }
        parent = text(&p["parent_span_id"]);
    }
    false
}

/// The delivery's trace, once every span of it reached the receiver: the gateway's request and
/// attempt, the bot's WSGI server span somewhere under the attempt, its "answer" and urllib client
/// spans under that, and the gateway's egress write under the bot's spans.
fn chain(spans: &[Value]) -> Option<Chain<'_>> {
    let root = spans.iter().find(|s| s["service_name"] == GATEWAY && s["name"] == "POST /slack/events")?;
    let trace = text(&root["trace_id"]);
    let by_id: HashMap<&str, &Value> =
        spans.iter().filter(|s| s["trace_id"] == trace).map(|s| (text(&s["span_id"]), s)).collect();
    let deliver = one(spans, trace, GATEWAY, |s| s["name"] == "deliver to bot")?;
    let server = one(spans, trace, BOT, |s| s["kind"] == SERVER && descends_from(&by_id, s, deliver))?;
    let answer = one(spans, trace, BOT, |s| s["name"] == "answer" && descends_from(&by_id, s, server))?;
    let client = one(spans, trace, BOT, |s| s["kind"] == CLIENT && descends_from(&by_id, s, server))?;
    let write =
        one(spans, trace, GATEWAY, |s| s["name"] == "slack chat.postMessage" && descends_from(&by_id, s, client))?;
    Some(Chain { root, deliver, server, answer, client, write })
}

/// Every exported span as a tree (by parent links), one line each: service, name, kind, ids.
fn render(spans: &[Value]) -> String {
    let ids: Vec<&str> = spans.iter().map(|s| text(&s["span_id"])).collect();
    let mut out = String::new();
    fn walk(spans: &[Value], span: &Value, depth: usize, out: &mut String) {
        out.push_str(&format!(
            "{:indent$}[{}] {:?} kind={} trace={} span={} parent={}\n",
            "",
            text(&span["service_name"]),
            text(&span["name"]),
            span["kind"],
            text(&span["trace_id"]),
            text(&span["span_id"]),
            match text(&span["parent_span_id"]) {
                "" => "-",
                p => p,
            },
            indent = depth * 2
        ));
        for child in spans.iter().filter(|c| c["parent_span_id"] == span["span_id"]) {
            walk(spans, child, depth + 1, out);
        }
    }
    for top in spans.iter().filter(|s| !ids.contains(&text(&s["parent_span_id"]))) {
        walk(spans, top, 0, &mut out);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instrumented_bolt_bot_continues_the_deliverys_trace_through_its_reply() {
    let (redis, slack, receiver) = (RedisServer::start(), FakeSlack::start().await, OtlpReceiver::start().await);
    // The gateway first (the bot needs the egress's address), then the bot, then the gateway
    // reloaded with the bot as its upstream.
    let placeholder = Reserved::new();
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("bolttrace"), &placeholder.url());
    cfg.delivery = r#"{ timeout = "5s", retry_initial = "100ms", retry_max = "400ms", lease = "10s" }"#.into();
    cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
    cfg.tail = format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.endpoint());
    let gw = Gateway::start(&cfg).await;
    let env = [
        ("SLACK_API_URL", format!("http://127.0.0.1:{}/api/", gw.egress_port)),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
    ];
    let bot = BoltProcess::start(Bolt::Python, "traced_app", &env).await;
    cfg.upstream = bot.url();
    gw.rewrite(&cfg);
    Command::new("kill").arg("-HUP").arg(gw.pid().to_string()).status().unwrap();
    assert!(eventually(Duration::from_secs(5), || gw.log().contains("config reloaded")).await, "{}", gw.log());

    let ts = "1700000700.000100";
    let req = Req::signed("/slack/events", app_mention("EvBoltTrace1", ts, TEXT), SECRET);
    assert_eq!(send(gw.port, req).await.0, 200, "{}", gw.log());
    let logs = |spans: &[Value]| {
        format!("--- gateway ---\n{}{}{}\n--- spans ---\n{}", gw.log(), bot.logs(), receiver.logs(), render(spans))
    };
    assert!(
        eventually(Duration::from_secs(20), || bot.handled_lines("app_mention").len() == 1).await,
        "the bot handled the mention\n{}",
        logs(&[])
    );
    let (ok, spans) = receiver.spans_until(Duration::from_secs(20), |s| chain(s).is_some()).await;
    assert!(ok, "one trace from Slack's request to the bot's reply\n{}", logs(&spans));
    println!("--- the trace as the receiver saw it ---\n{}", render(&spans));
    let c = chain(&spans).unwrap();

    // Parent → child, exactly: the request begins the trace; the attempt is its child; the bot's
    // WSGI server span continues the attempt's `traceparent`; Bolt's worker thread runs the
    // listener in the server span's context ("answer", and the WebClient's urllib call); the
    // egress write is the child of the `traceparent` that call carried.
    let trace = text(&c.root["trace_id"]);
    let link = |child: &Value, parent: &Value| {
        assert_eq!(
            (text(&child["trace_id"]), text(&child["parent_span_id"])),
            (trace, text(&parent["span_id"])),
            "{:?} under {:?}\n{}",
            child["name"],
            parent["name"],
            logs(&spans)
        )
    };
    assert_eq!(c.root["parent_span_id"], "", "the trace begins at Slack's request\n{}", logs(&spans));
    link(c.deliver, c.root);
    link(c.server, c.deliver);
    link(c.answer, c.server);
    link(c.client, c.server);
    link(c.write, c.client);
    assert_eq!(c.write["attributes"]["slackgate.outcome"], "forwarded", "{}", logs(&spans));
    assert_eq!(c.write["attributes"]["url.path"], "/api/chat.postMessage");
    assert_eq!(bot.handled_lines("context"), [format!("HANDLED context {trace} {}", text(&c.server["span_id"]))]);

    // The reply reached Slack, in the mention's thread, without the bot's trace context.
    let posts = slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 1, "{}", logs(&spans));
    assert_eq!(slack.posts()[0]["thread_ts"], ts);
    assert!(posts[0].headers.get("traceparent").is_none(), "Slack never sees a traceparent");
    assert!(posts[0].headers.get("tracestate").is_none());

    // No exported span, of either service, holds the message's text.
    for s in &spans {
        let all = s.to_string();
        assert!(!all.contains("the secret plan"), "the message's text in an exported span: {all}");
    }
}
