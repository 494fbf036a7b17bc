//! Socket Mode, gateway → bot (`upstream = "socket"`): an unmodified Bolt app in Socket Mode
//! points its Web API client at the egress; its `apps.connections.open` gets the gateway's own
//! socket with a one-time ticket, deliveries reach it as envelopes, its ack is the 2xx, and its
//! replies go through the egress to (a fake) Slack.

use std::time::Duration;

use futures_util::StreamExt;

use crate::bolt::payloads;
use crate::utils::*;

const XAPP: &str = "xapp-1-A1-bot-token";
const WAIT: Duration = Duration::from_secs(20);

struct Rig {
    slack: FakeSlack,
    gw: Gateway,
    cfg: GatewayConfig,
    _redis: RedisServer,
}

impl Rig {
    async fn start(name: &str) -> Rig {
        Self::start_with(name, "").await
    }

    /// With extra `[server]` lines.
    async fn start_with(name: &str, server: &str) -> Rig {
        let redis = RedisServer::start();
        let slack = FakeSlack::start().await;
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), "socket");
        cfg.passthrough = "[]".into();
        cfg.server = format!("socket_listen = \"127.0.0.1:0\"\n{server}");
        cfg.app = "socket_mode = { app_token = \"${SG_XAPP}\", connections = 0 }".into();
        cfg.egress = format!("slack_api_url = \"{}\"", slack.api_url());
        cfg.delivery = r#"{ timeout = "10s", retry_initial = "100ms", retry_max = "400ms", lease = "20s" }"#.into();
        let gw = Gateway::start_with_env(&cfg, &[("SG_XAPP", XAPP)]).await;
        Rig { slack, gw, cfg, _redis: redis }
    }

    fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/", self.gw.egress_port)
    }

    async fn bot(&self, kind: Bolt, env: &[(&str, String)]) -> BoltProcess {
        let mut all = vec![("SLACK_APP_TOKEN", XAPP.to_string()), ("SLACK_API_URL", self.api_url())];
        all.extend(env.iter().cloned());
        BoltProcess::start_connected(kind, "socket_app", &all).await
    }

    /// `apps.connections.open` through the egress with `token`.
    async fn open(&self, token: &str) -> serde_json::Value {
        let req = Req {
            method: "POST",
            path: "/api/apps.connections.open".into(),
            body: Vec::new(),
            content_type: "application/x-www-form-urlencoded",
            headers: vec![("Authorization".into(), format!("Bearer {token}"))],
        };
        let (status, body) = send(self.gw.egress_port, req).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

/// A WebSocket to a `ws://` URL on loopback.
async fn connect(url: &str) -> Result<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>, String> {
    let u = url::Url::parse(url).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", u.port().unwrap())).await.map_err(|e| e.to_string())?;
    let (socket, _) = tokio_tungstenite::client_async(url, tcp).await.map_err(|e| e.to_string())?;
    Ok(socket)
}

async fn a_socket_mode_bot_gets_deliveries_and_replies_through_the_egress(kind: Bolt) {
    let rig = Rig::start(&format!("sockbot{kind:?}")).await;
    let bot = rig.bot(kind, &[]).await;
    let id = format!("EvBot{kind:?}");
    let ts = event_ts(&id);
    let body = payloads::app_mention(&id, &ts, "<@UBOT> status?");
    assert_eq!(send(rig.gw.port, Req::signed("/slack/events", body, SECRET)).await.0, 200);
    let replied = eventually(WAIT, || !bot.handled_lines(&format!("replied {ts}")).is_empty()).await;
    assert!(replied, "no reply:\n{}\n{}", bot.logs(), rig.gw.log());
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await, "the delivery was never acked:\n{}", rig.gw.log());
    assert_eq!(bot.handled_lines("app_mention").len(), 1, "{}", bot.stdout());
    let posts = rig.slack.posts();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0]["thread_ts"], ts.as_str(), "{posts:?}");
    let open = metric(rig.gw.admin_port, "slackgate_socket_connections{app=\"bot\",direction=\"bot\"}").await;
    assert_eq!(open, 1.0);
    let delivered = metric(rig.gw.admin_port, "slackgate_deliveries_total{app=\"bot\",outcome=\"delivered\"}").await;
    assert_eq!(delivered, 1.0);
    assert!(rig.slack.calls_of("apps.connections.open").is_empty(), "the bot's open went to Slack");
    let log = rig.gw.log();
    assert!(!log.contains(XAPP) && !log.contains("ticket="), "a secret in the log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bolt_python_in_socket_mode_gets_deliveries_and_replies_through_the_egress() {
    a_socket_mode_bot_gets_deliveries_and_replies_through_the_egress(Bolt::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bolt_js_in_socket_mode_gets_deliveries_and_replies_through_the_egress() {
    a_socket_mode_bot_gets_deliveries_and_replies_through_the_egress(Bolt::Js).await;
}

/// A slash command over HTTP is answered inline by the Socket Mode bot's ack payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_mode_bots_ack_payload_is_the_inline_answer() {
    let rig = Rig::start("sockbotinline").await;
    let bot = rig.bot(Bolt::Python, &[]).await;
    let body = payloads::slash_command("/ask", "life", "TrBot1");
    let (status, answer) = send(rig.gw.port, Req::signed("/slack/events", body, SECRET)).await;
    assert_eq!(status, 200);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.contains("answer to life"), "{answer}\n{}", rig.gw.log());
    assert_eq!(bot.handled_lines("command /ask").len(), 1);
}

/// The bot dies while it holds a delivery (before its ack): the delivery is not lost, the next
/// bot gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_that_drops_its_socket_mid_delivery_gets_the_delivery_again() {
    let rig = Rig::start("sockbotdrop").await;
    let first = rig.bot(Bolt::Python, &[("SLOW_ONCE", "30".into()), ("ANSWER", "0".into())]).await;
    let ts = event_ts("EvBotDrop");
    let body = payloads::app_mention("EvBotDrop", &ts, "<@UBOT> hi");
    assert_eq!(send(rig.gw.port, Req::signed("/slack/events", body, SECRET)).await.0, 200);
    let held =
        until(WAIT, async || metric(rig.gw.admin_port, "slackgate_outbox_in_flight{app=\"bot\"}").await >= 1.0).await;
    assert!(held, "never sent to the bot:\n{}", rig.gw.log());
    drop(first);
    let second = rig.bot(Bolt::Python, &[("ANSWER", "0".into())]).await;
    let got = eventually(WAIT, || !second.handled_lines("app_mention EvBotDrop").is_empty()).await;
    assert!(got, "the delivery never came again:\n{}\n{}", second.logs(), rig.gw.log());
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await);
    let line = &second.handled_lines("app_mention EvBotDrop")[0];
    assert!(line.ends_with("retry=1") || line.contains("retry=2") || line.contains("retry=3"), "a redelivery: {line}");
}

/// A socket needs a ticket from the egress, valid and unused; a wrong app token gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_without_a_valid_unused_ticket_is_refused() {
    let rig = Rig::start("sockbotticket").await;
    let opened = rig.open(XAPP).await;
    let url = opened["url"].as_str().expect("a URL").to_string();
    assert!(url.starts_with("ws://127.0.0.1:") && url.contains("ticket="), "{url}");
    let mut socket = connect(&url).await.expect("the first use");
    let hello = socket.next().await.unwrap().unwrap();
    assert!(hello.to_text().unwrap().contains("\"hello\""), "{hello:?}");
    let again = connect(&url).await;
    assert!(again.is_err(), "a ticket opened two sockets");
    let forged = url.split("ticket=").next().unwrap().to_string() + "ticket=00000000000000000000000000000000";
    assert!(connect(&forged).await.is_err(), "a forged ticket opened one");
    // Another token is not the bot's: the call goes on to Slack (the fake answers it).
    let other = rig.open("xapp-someone-else").await;
    assert!(!other["url"].as_str().unwrap_or("").contains("ticket="), "{other}");
    assert_eq!(rig.slack.calls_of("apps.connections.open").len(), 1);
}

/// A ticket is spent only by the path it was issued for: a request to another path with it is
/// refused, and the same ticket then opens the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_the_wrong_path_does_not_spend_the_ticket() {
    let rig = Rig::start("sockbotpath").await;
    let url = rig.open(XAPP).await["url"].as_str().expect("a URL").to_string();
    assert!(url.contains("/socket?ticket="), "{url}");
    let wrong = url.replacen("/socket?", "/elsewhere?", 1);
    let refused = connect(&wrong).await;
    assert!(refused.as_ref().is_err_and(|e| e.contains("401")), "the wrong path: {:?}", refused.map(|_| ()));
    let mut socket = connect(&url).await.expect("the ticket still opens the right path");
    let hello = socket.next().await.unwrap().unwrap();
    assert!(hello.to_text().unwrap().contains("\"hello\""), "{hello:?}");
}

/// Two gateway processes, the bot connected through one: the other takes none of its
/// deliveries (its attempts could only fail), and every event sent to it arrives at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_process_holding_the_bots_socket_takes_its_deliveries() {
    let rig = Rig::start("sockbottwo").await;
    let other = Gateway::start_with_env(&rig.cfg, &[("SG_XAPP", XAPP)]).await;
    let bot = rig.bot(Bolt::Python, &[("ANSWER", "0".into())]).await;
    for i in 0..20 {
        let id = format!("EvTwo{i:02}");
        let body = payloads::app_mention(&id, &event_ts(&id), "<@UBOT> hi");
        assert_eq!(send(other.port, Req::signed("/slack/events", body, SECRET)).await.0, 200);
    }
    let all = eventually(WAIT, || bot.handled_lines("app_mention").len() >= 20).await;
    assert!(all, "delivered {}:\n{}", bot.handled_lines("app_mention").len(), other.log());
    assert!(outbox_idle(rig.gw.admin_port, WAIT).await);
    let failed =
        metric(other.admin_port, "slackgate_upstream_responses_total{app=\"bot\",status_class=\"error\"}").await;
    assert_eq!(failed, 0.0, "the process without the bot's socket tried its deliveries");
    let retried = metric(rig.gw.admin_port, "slackgate_deliveries_total{app=\"bot\",outcome=\"retried\"}").await;
    assert_eq!(retried, 0.0);
    assert_eq!(bot.handled_lines("app_mention").len(), 20, "{}", bot.stdout());
}

/// The socket listener keeps the connection guard's upgrade deadline: a connection that never
/// sends its upgrade is closed at `header_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_upgrades_is_closed_at_the_header_deadline() {
    use tokio::io::AsyncReadExt;
    let rig = Rig::start_with("sockbotdeadline", "header_timeout = \"1s\"").await;
    let url = rig.open(XAPP).await["url"].as_str().unwrap().to_string();
    let port = url::Url::parse(&url).unwrap().port().unwrap();
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(15), tcp.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "still open after 15 s: {read:?}");
    // The ticket was not used up by the silent connection: the bot's socket opens with it.
    assert!(connect(&url).await.is_ok());
}
