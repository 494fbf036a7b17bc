//! The fake Socket Mode server ([`FakeSocket`]) against a plain tokio-tungstenite client: what
//! the gateway's tests rely on it for.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

use crate::utils::fake_socket::ClosedBy;
use crate::utils::{eventually, send, FakeSocket, Req};

const TOKEN: &str = "xapp-1-A1-test";
const LIMIT: Duration = Duration::from_secs(5);

type Ws = WebSocketStream<TcpStream>;

/// `apps.connections.open` with `token` (a JSON body, as some clients send); the answer.
async fn open(fake: &FakeSocket, token: Option<&str>) -> Value {
    let mut req = Req {
        method: "POST",
        path: "/api/apps.connections.open".into(),
        body: b"{}".to_vec(),
        content_type: "application/json",
        headers: Vec::new(),
    };
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let (status, body) = send(fake.port, req).await;
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

async fn connect(url: &str) -> Result<Ws, tungstenite::Error> {
    let addr = url.trim_start_matches("ws://").split('/').next().unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_tungstenite::client_async(url, tcp).await.map(|(ws, _)| ws)
}

/// A new connection past its `hello`, which must say `n` connections.
async fn connected(fake: &FakeSocket, n: u64) -> Ws {
    let url = open(fake, Some(TOKEN)).await["url"].as_str().unwrap().to_string();
    let mut ws = connect(&url).await.unwrap();
    let hello = next_json(&mut ws).await.unwrap();
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["num_connections"], n, "{hello}");
    assert_eq!(hello["connection_info"]["app_id"], "A1");
    ws
}

/// The next text frame as JSON, other frames skipped; `None` once the socket is closed (read to
/// its end, so that the answer to a close frame goes out).
async fn next_json(ws: &mut Ws) -> Option<Value> {
    loop {
        match tokio::time::timeout(LIMIT, ws.next()).await.expect("a frame within 5 s") {
            Some(Ok(Message::Text(t))) => return Some(serde_json::from_str(&t).unwrap()),
            Some(Err(_)) | None => return None,
            Some(Ok(_)) => {}
        }
    }
}

async fn ack(ws: &mut Ws, ack: Value) {
    ws.send(Message::text(ack.to_string())).await.unwrap();
}

fn refused_401(got: Result<Ws, tungstenite::Error>) -> bool {
    matches!(got, Err(tungstenite::Error::Http(r)) if r.status() == 401)
}

#[tokio::test]
async fn fake_socket_refuses_a_wrong_token_and_a_used_ticket_says_hello_and_answers_pings() {
    let fake = FakeSocket::start(TOKEN).await;
    assert_eq!(open(&fake, None).await, json!({"ok": false, "error": "invalid_auth"}));
    assert_eq!(open(&fake, Some("xapp-wrong")).await, json!({"ok": false, "error": "invalid_auth"}));
    fake.fail_opens(1);
    assert_eq!(open(&fake, Some(TOKEN)).await, json!({"ok": false, "error": "internal_error"}));
    let answer = open(&fake, Some(TOKEN)).await;
    assert_eq!(answer["ok"], true);
    let url = answer["url"].as_str().unwrap();
    assert!(url.contains("/link/?ticket=") && url.ends_with("&app_id=A1"), "{url}");
    assert_eq!((fake.opened(), fake.open_calls().len()), (1, 4));

    let mut ws = connect(url).await.unwrap();
    let hello = next_json(&mut ws).await.unwrap();
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["num_connections"], 1);
    assert_eq!(hello["debug_info"]["host"], "fake-1");
    assert!(fake.wait_open(1, LIMIT).await);
    assert!(refused_401(connect(url).await), "a used ticket is refused");
    let no_ticket = format!("ws://127.0.0.1:{}/link/?app_id=A1", fake.ws_port);
    assert!(refused_401(connect(&no_ticket).await), "no ticket is refused");
    assert_eq!((fake.refused(), fake.total_connections()), (2, 1));

    ws.send(Message::Ping("p1".into())).await.unwrap();
    let pong = tokio::time::timeout(LIMIT, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(pong, Message::Pong("p1".into()));
    assert_eq!(fake.pings(), 1);
    ws.send(Message::text("not json {")).await.unwrap();
    ack(&mut ws, json!({"no": "envelope_id"})).await;
    assert!(eventually(LIMIT, || fake.bad_frames().len() == 2).await, "{:?}", fake.bad_frames());
}

#[tokio::test]
async fn fake_socket_sends_an_unacked_envelope_again_and_records_an_ack_with_its_payload() {
    let fake = FakeSocket::start(TOKEN).await;
    fake.set_redeliver_after(Duration::from_millis(300));
    let mut ws = connected(&fake, 1).await;
    let id = fake.send("slash_commands", json!({"command": "/deploy", "text": "now"}), true);
    let first = next_json(&mut ws).await.unwrap();
    assert_eq!(first["envelope_id"], id.as_str());
    assert_eq!(first["type"], "slash_commands");
    assert_eq!(first["payload"]["command"], "/deploy");
    assert_eq!(first["accepts_response_payload"], true);
    assert_eq!((first["retry_attempt"].as_u64(), first["retry_reason"].as_str()), (Some(0), Some("")));

    let again = next_json(&mut ws).await.unwrap();
    assert_eq!(again["envelope_id"], id.as_str());
    assert_eq!((again["retry_attempt"].as_u64(), again["retry_reason"].as_str()), (Some(1), Some("timeout")));

    ack(&mut ws, json!({"envelope_id": id, "payload": {"text": "deploying"}})).await;
    let got = fake.wait_ack(&id, LIMIT).await.expect("the ack is recorded");
    assert_eq!(got.payload, Some(json!({"text": "deploying"})));
    assert_eq!(got.conn, 0);
    assert_eq!(fake.acked_count(), 1);
    let attempts: Vec<u32> = fake.sends().iter().map(|s| s.retry_attempt).collect();
    assert_eq!(attempts, [0, 1]);

    // An ack without a payload.
    let id2 = fake.send("events_api", json!({"type": "event_callback"}), false);
    assert_eq!(next_json(&mut ws).await.unwrap()["envelope_id"], id2.as_str());
    ack(&mut ws, json!({"envelope_id": id2})).await;
    assert_eq!(fake.wait_ack(&id2, LIMIT).await.unwrap().payload, None);
}

#[tokio::test]
async fn fake_socket_sends_no_new_envelope_on_a_connection_told_to_refresh() {
    let fake = FakeSocket::start(TOKEN).await;
    fake.set_grace(Duration::from_millis(300));
    let mut a = connected(&fake, 1).await;
    let mut b = connected(&fake, 2).await;
    assert!(fake.wait_open(2, LIMIT).await);

    fake.disconnect_one(0, "refresh_requested");
    let told = next_json(&mut a).await.unwrap();
    assert_eq!((told["type"].as_str(), told["reason"].as_str()), (Some("disconnect"), Some("refresh_requested")));
    assert_eq!(fake.open_connections(), 1);
    let ids: Vec<String> =
        (0..3).map(|i| fake.send("events_api", json!({"event_id": format!("Ev{i}")}), false)).collect();
    for id in &ids {
        let env = next_json(&mut b).await.unwrap();
        assert_eq!(env["envelope_id"], id.as_str());
        ack(&mut b, json!({"envelope_id": id})).await;
    }
    assert_eq!(next_json(&mut a).await, None, "nothing more on the old connection; the fake closes it");
    assert!(eventually(LIMIT, || fake.acked_count() == 3).await);
    assert!(fake.sends().iter().all(|s| s.conn == 1));
    assert!(eventually(LIMIT, || fake.connections()[0].closed_by == Some(ClosedBy::Fake)).await);

    // With no connection to take it, an envelope waits for the next one.
    fake.disconnect("refresh_requested");
    assert_eq!(next_json(&mut b).await.unwrap()["reason"], "refresh_requested");
    let waiting = fake.send("interactive", json!({"type": "block_actions"}), false);
    b.close(None).await.unwrap();
    assert!(fake.sends().iter().all(|s| s.envelope_id != waiting));
    let mut c = connected(&fake, 1).await;
    assert_eq!(next_json(&mut c).await.unwrap()["envelope_id"], waiting.as_str());
    assert!(eventually(LIMIT, || fake.connections()[1].closed_by == Some(ClosedBy::Client)).await);
    assert_eq!(fake.sends().last().unwrap().conn, 2);

    fake.disconnect("link_disabled");
    assert_eq!(next_json(&mut c).await.unwrap()["reason"], "link_disabled");
    assert_eq!(next_json(&mut c).await, None, "closed at once");
}

#[tokio::test]
async fn fake_socket_drops_connections_without_a_close_frame() {
    let fake = FakeSocket::start(TOKEN).await;
    let mut ws = connected(&fake, 1).await;
    fake.drop_connections();
    let end = tokio::time::timeout(LIMIT, ws.next()).await.unwrap();
    assert!(matches!(end, None | Some(Err(_))), "no close frame: {end:?}");
    assert_eq!(fake.open_connections(), 0);
    assert_eq!(fake.connections()[0].closed_by, Some(ClosedBy::Dropped), "recorded when dropped");
}
