//! Socket Mode, Slack → gateway: the gateway holds the app's sockets to a fake Slack Socket
//! Mode server (`utils::fake_socket`), acks each envelope only once Redis has it, and delivers
//! it to an unmodified Bolt app over HTTP, signed, as the request Slack would have made.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bolt::payloads;
use crate::utils::fake_socket::ClosedBy;
use crate::utils::*;

const XAPP: &str = "xapp-1-A1-test-token";
const WAIT: Duration = Duration::from_secs(20);

/// A form body as the object Socket Mode carries for a slash command.
fn form_object(body: &[u8]) -> Value {
    Value::Object(form_urlencoded::parse(body).into_owned().map(|(k, v)| (k, Value::String(v))).collect())
}

/// The JSON of an interactive form body's `payload=` field.
fn form_payload(body: &[u8]) -> Value {
    let (_, p) = form_urlencoded::parse(body).find(|(k, _)| k == "payload").unwrap();
    serde_json::from_str(&p).unwrap()
}

struct Rig {
    slack: FakeSocket,
    gw: Gateway,
    redis: RedisServer,
    cfg: GatewayConfig,
}

impl Rig {
    /// Redis, the fake Slack, and a gateway with `connections` sockets in front of `upstream`.
    async fn start(name: &str, upstream: &str, connections: u16) -> Rig {
        let redis = RedisServer::start();
        let slack = FakeSocket::start(XAPP).await;
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), upstream);
        cfg.app = format!(
            "socket_mode = {{ app_token = \"${{SG_XAPP}}\", connections = {connections}, api_url = \"{}\" }}",
            slack.api_url()
        );
        let gw = Gateway::start_with_env(&cfg, &[("SG_XAPP", XAPP)]).await;
        assert!(slack.wait_open(usize::from(connections), WAIT).await, "the gateway's sockets:\n{}", gw.log());
        Rig { slack, gw, redis, cfg }
    }
}

fn event_payload(id: &str) -> Value {
    serde_json::from_slice(&payloads::app_mention(id, &event_ts(id), "<@UBOT> hello")).unwrap()
}

async fn an_event_over_the_socket_reaches_the_http_bot_once(kind: Bolt) {
    let app = BoltProcess::start(kind, "app", &[]).await;
    let rig = Rig::start(&format!("sockbolt{kind:?}"), &app.url(), 2).await;
    let envelope = rig.slack.send("events_api", event_payload("EvSock1"), false);
    let ack = rig.slack.wait_ack(&envelope, WAIT).await.unwrap_or_else(|| panic!("no ack:\n{}", rig.gw.log()));
    assert!(ack.payload.is_none(), "an event's ack carries nothing: {:?}", ack.payload);
    let ts = event_ts("EvSock1");
    let handled = eventually(WAIT, || !app.handled_lines(&format!("app_mention {ts}")).is_empty()).await;
    assert!(handled, "the bot never got it:\n{}\n{}", app.logs(), rig.gw.log());
    // Bolt verified the signature itself: the bot cannot tell the event came over a socket.
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await);
    assert_eq!(app.handled_lines(&format!("app_mention {ts}")).len(), 1, "{}", app.stdout());
    assert_eq!(rig.slack.acked_count(), 1);
    let acked = metric(
        rig.gw.admin_port,
        "slackgate_socket_envelopes_total{app=\"bot\",direction=\"slack\",outcome=\"accepted\",type=\"events_api\"}",
    )
    .await;
    assert_eq!(acked, 1.0);
    let open = metric(rig.gw.admin_port, "slackgate_socket_connections{app=\"bot\",direction=\"slack\"}").await;
    assert_eq!(open, 2.0);
    // The app token and the socket's ticket are secrets: never in the log.
    let log = rig.gw.log();
    assert!(!log.contains(XAPP) && !log.contains("ticket="), "a secret in the log:\n{log}");
}

/// With traces on, an envelope from Slack's socket begins its delivery's trace
/// (`slack socket envelope`), and the attempt toward the HTTP bot is its child, its
/// `traceparent` on the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelopes_trace_begins_at_the_socket_and_reaches_the_http_bot() {
    let (redis, slack, bot) = (RedisServer::start(), FakeSocket::start(XAPP).await, Receiver::start(SECRET).await);
    let receiver = OtlpReceiver::start().await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("socktrace"), &bot.url());
    cfg.app =
        format!("socket_mode = {{ app_token = \"${{SG_XAPP}}\", connections = 1, api_url = \"{}\" }}", slack.api_url());
    cfg.tail = format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.endpoint());
    let gw = Gateway::start_with_env(&cfg, &[("SG_XAPP", XAPP)]).await;
    assert!(slack.wait_open(1, WAIT).await, "{}", gw.log());
    let envelope = slack.send("events_api", event_payload("EvSockTrace"), false);
    assert!(slack.wait_ack(&envelope, WAIT).await.is_some(), "{}", gw.log());
    assert!(eventually(WAIT, || bot.count() == 1).await, "{}", gw.log());
    let (ok, spans) = receiver.spans_until(WAIT, |s| s.iter().any(|x| x["name"] == "deliver to bot")).await;
    assert!(ok, "{spans:#?}\n{}", gw.log());
    let root = spans.iter().find(|x| x["name"] == "slack socket envelope").expect("the envelope's span");
    let attempt = spans.iter().find(|x| x["name"] == "deliver to bot").unwrap();
    assert_eq!((&attempt["trace_id"], &attempt["parent_span_id"]), (&root["trace_id"], &root["span_id"]));
    assert_eq!(root["attributes"]["slack.event_id"], "EvSockTrace");
    let tp = bot.received()[0].header("traceparent").expect("a traceparent");
    assert!(tp.contains(root["trace_id"].as_str().unwrap()), "{tp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_over_the_socket_reaches_bolt_python_over_http_once() {
    an_event_over_the_socket_reaches_the_http_bot_once(Bolt::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_over_the_socket_reaches_bolt_js_over_http_once() {
    an_event_over_the_socket_reaches_the_http_bot_once(Bolt::Js).await;
}

/// Redis down: the envelope is not recorded, so it is not acked, and Slack's redelivery (with
/// `retry_attempt`) is recorded, acked and delivered once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_is_acked_only_once_redis_has_it() {
    let bot = Receiver::start(SECRET).await;
    let mut rig = Rig::start("sockredis", &bot.url(), 1).await;
    rig.slack.set_redeliver_after(Duration::from_secs(3));
    rig.redis.stop();
    let envelope = rig.slack.send("events_api", event_payload("EvSockDown"), false);
    let retried =
        eventually(WAIT, || rig.slack.sends().iter().any(|s| s.envelope_id == envelope && s.retry_attempt >= 1)).await;
    assert!(retried, "Slack's redelivery was never sent");
    assert!(rig.slack.ack_for(&envelope).is_none(), "acked while Redis was down:\n{}", rig.gw.log());
    assert_eq!(bot.count(), 0);
    rig.redis.restart();
    let ack = rig.slack.wait_ack(&envelope, Duration::from_secs(30)).await;
    assert!(ack.is_some(), "never acked after Redis came back:\n{}", rig.gw.log());
    assert!(eventually(WAIT, || bot.count() >= 1).await, "never delivered");
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await);
    assert_eq!(bot.count(), 1, "delivered more than once");
    let log = rig.gw.log();
    let refused = log.lines().any(|l| l.contains("via=\"socket\"") && l.contains("store_unavailable"));
    assert!(refused, "the unrecorded envelope is audited:\n{log}");
    assert!(log.lines().any(|l| l.contains("via=\"socket\"") && l.contains("retry_num=1")), "{log}");
}

/// Slack asks for a new socket mid-stream: the gateway opens the new one before the old one
/// closes, and every envelope is acked and delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_requested_mid_stream_loses_and_doubles_nothing() {
    let bot = Receiver::start(SECRET).await;
    let rig = Rig::start("sockrefresh", &bot.url(), 1).await;
    rig.slack.set_grace(Duration::from_secs(10));
    // 20 envelopes, the refresh while they are in flight, then 40 more: the fake sends none of
    // those on the socket told to go, so they wait for the new one.
    let mut envelopes = Vec::new();
    for i in 0..60 {
        if i == 20 {
            rig.slack.disconnect("refresh_requested");
        }
        envelopes.push(rig.slack.send("events_api", event_payload(&format!("EvRefresh{i:02}")), false));
    }
    for e in &envelopes {
        assert!(rig.slack.wait_ack(e, WAIT).await.is_some(), "{e} never acked:\n{}", rig.gw.log());
    }
    assert!(eventually(WAIT, || bot.count() >= 60).await, "delivered {}", bot.count());
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await);
    assert_eq!(bot.count(), 60, "a delivery doubled");
    let conns = rig.slack.connections();
    assert!(conns.len() >= 2, "no new socket: {conns:?}");
    let (old, new) = (&conns[0], &conns[1]);
    let closed = eventually(WAIT, || rig.slack.connections()[0].closed_at.is_some()).await;
    assert!(closed, "the old socket was never closed");
    let old_closed = rig.slack.connections()[0].clone();
    assert!(new.opened_at < old_closed.closed_at.unwrap(), "the new socket came after the old one closed");
    assert_eq!(old_closed.closed_by, Some(ClosedBy::Client), "the gateway closes the old socket itself: {old:?}");
    let refreshed = "slackgate_socket_reconnects_total{app=\"bot\",reason=\"refresh_requested\"}";
    assert_eq!(metric(rig.gw.admin_port, refreshed).await, 1.0);
}

/// Inline answers come back as the ack's payload within Slack's 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_and_a_view_submission_answer_in_their_acks() {
    let app = BoltProcess::start(Bolt::Python, "app", &[]).await;
    let rig = Rig::start("sockinline", &app.url(), 1).await;
    let command = form_object(&payloads::slash_command("/deploy", "prod", "TrSock1"));
    let sent = Instant::now();
    let id = rig.slack.send("slash_commands", command, true);
    let ack = rig.slack.wait_ack(&id, WAIT).await.expect("the command's ack");
    assert!(ack.at.duration_since(sent) < Duration::from_secs(3), "acked after {:?}", ack.at.duration_since(sent));
    let payload = ack.payload.unwrap_or_else(|| panic!("no payload:\n{}", rig.gw.log()));
    assert!(payload.to_string().contains("deploying prod"), "{payload}");
    let view = form_payload(&payloads::view_submission("TrSock2"));
    let id = rig.slack.send("interactive", view, true);
    let ack = rig.slack.wait_ack(&id, WAIT).await.expect("the view's ack");
    assert_eq!(ack.payload.as_ref().map(|p| p["response_action"].clone()), Some("errors".into()), "{ack:?}");
    assert_eq!(app.handled_lines("command /deploy").len(), 1);
    assert_eq!(app.handled_lines("view_submission form").len(), 1);
}

/// One event that arrives both ways (its HTTP route is kept) is one delivery: receipts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_over_http_and_the_socket_is_delivered_once() {
    let bot = Receiver::start(SECRET).await;
    let rig = Rig::start("sockboth", &bot.url(), 1).await;
    let body = payloads::app_mention("EvBoth", &event_ts("EvBoth"), "<@UBOT> hi");
    let (http, socket) = tokio::join!(send(rig.gw.port, Req::signed("/slack/events", body.clone(), SECRET)), async {
        let id = rig.slack.send("events_api", serde_json::from_slice(&body).unwrap(), false);
        rig.slack.wait_ack(&id, WAIT).await
    });
    assert_eq!(http.0, 200);
    assert!(socket.is_some(), "the socket's copy was not acked");
    assert!(eventually(WAIT, || bot.count() >= 1).await);
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await);
    assert_eq!(bot.count(), 1, "delivered once per copy");
}

/// `link_disabled`: an error in the log, `/readyz` not ready, the metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_disabled_makes_the_gateway_not_ready() {
    let bot = Receiver::start(SECRET).await;
    let rig = Rig::start("socklink", &bot.url(), 1).await;
    let ready = until(WAIT, async || admin_get(rig.gw.admin_port, "/readyz").await.0 == 200).await;
    assert!(ready, "never ready:\n{}", rig.gw.log());
    rig.slack.disconnect("link_disabled");
    let not_ready = until(WAIT, async || admin_get(rig.gw.admin_port, "/readyz").await.0 == 503).await;
    assert!(not_ready, "still ready:\n{}", rig.gw.log());
    let (_, body) = admin_get(rig.gw.admin_port, "/readyz").await;
    assert!(body.contains("link_disabled"), "{body}");
    assert_eq!(metric(rig.gw.admin_port, "slackgate_socket_link_disabled{app=\"bot\"}").await, 1.0);
    assert!(rig.gw.log().contains("Slack disabled Socket Mode for this app"), "{}", rig.gw.log());
}

/// A socket dropped without a word is opened again (backoff), and envelopes flow on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_socket_is_opened_again() {
    let bot = Receiver::start(SECRET).await;
    let rig = Rig::start("sockdrop", &bot.url(), 1).await;
    rig.slack.drop_connections();
    let reopened = eventually(WAIT, || rig.slack.total_connections() >= 2 && rig.slack.open_connections() >= 1).await;
    assert!(reopened, "never reopened:\n{}", rig.gw.log());
    let id = rig.slack.send("events_api", event_payload("EvAfterDrop"), false);
    assert!(rig.slack.wait_ack(&id, WAIT).await.is_some());
    assert!(eventually(WAIT, || bot.count() == 1).await);
    assert!(rig.slack.opened() >= 2, "each socket is opened with apps.connections.open");
}

/// Not a test: `bench/socket.sh` runs it (release build) and prints envelopes/s through the
/// socket against signed HTTP deliveries on the same box, 32 at a time each, a fast bot behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_envelopes_through_the_socket_against_http() {
    let n: usize = std::env::var("BENCH_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(4000);
    let bot = Receiver::start(SECRET).await;
    let rig = Rig::start("sockbench", &bot.url(), 2).await;
    rig.slack.set_redeliver_after(Duration::from_secs(60));
    let started = Instant::now();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(rig.slack.send("events_api", event_payload(&format!("EvBenchS{i}")), false));
        // 32 unacked at most, as Slack's own pace is bounded by the acks.
        while ids.len() - rig.slack.acked_count() >= 32 {
            tokio::task::yield_now().await;
        }
    }
    assert!(eventually(Duration::from_secs(120), || rig.slack.acked_count() >= n).await);
    let socket = n as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let port = rig.gw.port;
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await.unwrap();
        let body = event(&format!("EvBenchH{i}"));
        tasks.push(tokio::spawn(async move {
            let status = send(port, Req::signed("/slack/events", body, SECRET)).await.0;
            drop(permit);
            status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let http = n as f64 / started.elapsed().as_secs_f64();
    println!("socket mode: {n} envelopes acked at {socket:.0}/s; HTTP: {n} deliveries acked at {http:.0}/s; socket/HTTP {:.2}", socket / http);
}

/// Bad input over the socket changes nothing: frames that are not envelopes are ignored, an
/// envelope that cannot be read or is over `server.max_body` is acked (a redelivery would be the
/// same) and never delivered, and the socket goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_over_the_socket_change_nothing() {
    let bot = Receiver::start(SECRET).await;
    let rig = Rig::start("sockbad", &bot.url(), 1).await;
    for raw in ["", "not json", "[]", "{\"type\":7}", r#"{"type":"events_api","payload":{}}"#, "\u{1}\u{2}"] {
        assert!(rig.slack.send_raw(raw).is_some());
    }
    let not_an_object = rig.slack.send("slash_commands", serde_json::json!([1, 2]), true);
    let mut big = event_payload("EvTooBig");
    big["event"]["text"] = "x".repeat(1 << 21).into();
    let too_big = rig.slack.send("events_api", big, false);
    for id in [&not_an_object, &too_big] {
        assert!(rig.slack.wait_ack(id, WAIT).await.is_some(), "{id} not acked:\n{}", rig.gw.log());
    }
    let good = rig.slack.send("events_api", event_payload("EvAfterBad"), false);
    assert!(rig.slack.wait_ack(&good, WAIT).await.is_some());
    assert!(eventually(WAIT, || bot.count() >= 1).await);
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await);
    assert_eq!(bot.count(), 1, "only the good event is delivered");
    assert!(bot.received()[0].body.windows(10).any(|w| w == b"EvAfterBad"));
    assert_eq!(rig.slack.total_connections(), 1, "the socket went on");
    assert!(rig.gw.log().contains("over server.max_body"), "{}", rig.gw.log());
}

/// A reload that leaves an app's Socket Mode as it was keeps its sockets (and the envelopes
/// follow the reloaded filters); one that changes `connections` opens the new count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_sockets_it_does_not_change() {
    let bot = Receiver::start(SECRET).await;
    let mut rig = Rig::start("sockreload", &bot.url(), 1).await;
    let reloads = |gw: &Gateway| gw.log().matches("config reloaded").count();
    rig.cfg.app = format!("{}\nignore = {{ channels_deny = [\"C1\"] }}", rig.cfg.app);
    rig.gw.rewrite(&rig.cfg);
    rig.gw.reload();
    assert!(eventually(WAIT, || reloads(&rig.gw) == 1).await, "{}", rig.gw.log());
    let id = rig.slack.send("events_api", event_payload("EvDenied"), false);
    assert!(rig.slack.wait_ack(&id, WAIT).await.is_some());
    assert_eq!(rig.slack.total_connections(), 1, "the reload reopened the socket");
    assert_eq!(metric(rig.gw.admin_port, "slackgate_ignored_total{app=\"bot\",reason=\"channel_denied\"}").await, 1.0);
    rig.cfg.app = rig.cfg.app.replace("connections = 1", "connections = 2");
    rig.gw.rewrite(&rig.cfg);
    rig.gw.reload();
    assert!(rig.slack.wait_open(2, WAIT).await, "the new count was not opened:\n{}", rig.gw.log());
    assert_eq!(bot.count(), 0);
}

/// Issue 35: `upstreams` hold for what arrives over the socket too — a command's ack carries
/// the answer of the bot its entry names, an event goes to the app's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_by_kind_hold_over_the_socket_too() {
    let (events_bot, commands_bot) = (Receiver::start(SECRET).await, Receiver::start(SECRET).await);
    commands_bot.set_default(Reply::status(200).body("application/json", r#"{"text":"from the commands bot"}"#));
    let redis = RedisServer::start();
    let slack = FakeSocket::start(XAPP).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("sockroutes"), &events_bot.url());
    cfg.app = format!(
        "socket_mode = {{ app_token = \"${{SG_XAPP}}\", connections = 1, api_url = \"{}\" }}\nupstreams = [{{ match = {{ kinds = [\"command\"] }}, upstream = \"{}\" }}]",
        slack.api_url(),
        commands_bot.url()
    );
    let gw = Gateway::start_with_env(&cfg, &[("SG_XAPP", XAPP)]).await;
    assert!(slack.wait_open(1, WAIT).await, "the gateway's socket:\n{}", gw.log());
    let command = form_object(&payloads::slash_command("/deploy", "prod", "TrSockRoute"));
    let id = slack.send("slash_commands", command, true);
    let ack = slack.wait_ack(&id, WAIT).await.expect("the command's ack");
    assert_eq!(ack.payload.as_ref().map(|p| p["text"].clone()), Some("from the commands bot".into()), "{ack:?}");
    let id = slack.send("events_api", event_payload("EvSockRoute"), false);
    assert!(slack.wait_ack(&id, WAIT).await.is_some());
    assert!(eventually(WAIT, || events_bot.count() == 1).await, "{}", gw.log());
    assert!(outbox_idle(gw.admin_port, WAIT).await);
    assert_eq!((events_bot.count(), commands_bot.count()), (1, 1));
    assert!(String::from_utf8_lossy(&events_bot.received()[0].body).contains("EvSockRoute"));
}
