//! Invariant 6: bad input gets a clear status and changes nothing — nothing in Redis, nothing
//! sent to the bot.

use std::time::Duration;

use crate::utils::*;

const OTHER: &str = "the-other-apps-secret";

fn cases() -> Vec<(&'static str, Req, u16)> {
    let ev = || event("EvBad1");
    let now = unix_now();
    let mut unsigned = Req::signed("/slack/events", ev(), SECRET);
    unsigned.headers.clear();
    let mut bad_ts = Req::signed("/slack/events", ev(), SECRET);
    bad_ts.headers[0].1 = "yesterday".into();
    let mut tampered = Req::signed("/slack/events", ev(), SECRET);
    tampered.body[10] ^= 1;
    let mut get = Req::signed("/slack/events", ev(), SECRET);
    get.method = "GET";
    get.body.clear();
    let mut put = Req::signed("/slack/events", ev(), SECRET);
    put.method = "PUT";
    let mut binary = Req::signed("/slack/events", vec![0xff, 0xfe, 0x00, b'{', 0x80], SECRET);
    binary.content_type = "application/json";
    vec![
        ("no signature headers", unsigned, 401),
        ("timestamp not a number", bad_ts, 401),
        ("body changed after signing", tampered, 401),
        ("stale by 302 s", Req::signed_at("/slack/events", ev(), SECRET, now - 302), 401),
        (
            "future by 302 s (clocks tick between here and there)",
            Req::signed_at("/slack/events", ev(), SECRET, now + 302),
            401,
        ),
        ("other app's secret on this route", Req::signed("/slack/events", ev(), OTHER), 401),
        ("this app's secret on the other route", Req::signed("/other/events", ev(), SECRET), 401),
        (
            "wrong signature version",
            {
                let mut r = Req::signed("/slack/events", ev(), SECRET);
                r.headers[1].1 = "v1=00".into();
                r
            },
            401,
        ),
        (
            "a second signature header",
            Req::signed("/slack/events", ev(), SECRET).header("X-Slack-Signature", "v0=00"),
            401,
        ),
        ("truncated JSON", Req::signed("/slack/events", b"{\"type\":".to_vec(), SECRET), 400),
        (
            "JSON array",
            {
                let mut r = Req::signed("/slack/events", b"[1,2,3]".to_vec(), SECRET);
                r.content_type = "application/json";
                r
            },
            400,
        ),
        (
            "JSON string",
            {
                let mut r = Req::signed("/slack/events", b"\"hi\"".to_vec(), SECRET);
                r.content_type = "application/json";
                r
            },
            400,
        ),
        ("binary body", binary, 400),
        ("form without command or payload", Req::signed("/slack/events", b"foo=bar&x=1".to_vec(), SECRET), 400),
        ("payload not JSON", Req::signed("/slack/events", b"payload=%7Bnope".to_vec(), SECRET), 400),
        ("payload not an object", Req::signed("/slack/events", b"payload=%5B1%5D".to_vec(), SECRET), 400),
        ("GET on a Slack route", get, 405),
        ("PUT on a Slack route", put, 405),
        ("unknown path", Req::signed("/slack/nope", ev(), SECRET), 404),
        ("root path", Req::signed("/", ev(), SECRET), 404),
        ("too large", Req::signed("/slack/events", vec![b'a'; 9000], SECRET), 413),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_status_and_changes_nothing() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("bad"), &bot.url());
    cfg.server = r#"max_body = "8KiB""#.into();
    cfg.tail = format!(
        "[[app]]\nname = \"other\"\nsigning_secret = \"${{SG_OTHER_SECRET}}\"\nupstream = \"{}\"\nevents_path = \"/other/events\"\ncommands_path = \"/other/events\"\ninteractivity_path = \"/other/events\"\n",
        bot.url()
    );
    let gw = Gateway::start(&cfg).await;
    for (name, req, want) in cases() {
        let (status, _) = send(gw.port, req).await;
        assert_eq!(status, want, "{name}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(bot.count(), 0, "nothing reaches the bot");
    let stored: Vec<String> = redis.keys("*").into_iter().filter(|k| !k.ends_with(":outbox")).collect();
    assert!(stored.is_empty(), "nothing stored, found {stored:?}");
    for k in redis.keys("*:outbox") {
        assert_eq!(redis.xlen(&k), 0, "{k} is empty");
    }
    // The gateway is still alive and serving after all of it.
    let (status, _) = send(gw.port, Req::signed("/slack/events", event("EvGood"), SECRET)).await;
    assert_eq!(status, 200, "{}", gw.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_are_answered_by_the_gateway_and_not_stored() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let gw = Gateway::start(&GatewayConfig::new(&redis.url(), &prefix("hs"), &bot.url())).await;
    let challenge = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let (status, body) = send(gw.port, Req::signed("/slack/events", challenge.to_vec(), SECRET)).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["challenge"], "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P");
    // An unsigned challenge is refused: the signature check comes first.
    let mut unsigned = Req::signed("/slack/events", challenge.to_vec(), SECRET);
    unsigned.headers.clear();
    assert_eq!(send(gw.port, unsigned).await.0, 401);
    let (status, _) = send(gw.port, Req::signed("/slack/events", b"ssl_check=1&token=x".to_vec(), SECRET)).await;
    assert_eq!(status, 200);
    let (status, _) = send(
        gw.port,
        Req::signed("/slack/events", br#"{"type":"app_rate_limited","minute_rate_limited":1}"#.to_vec(), SECRET),
    )
    .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(bot.count(), 0);
    assert!(redis.keys("*:r:*").is_empty());
}
