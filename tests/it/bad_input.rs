//! Invariant 6: bad input gets a clear status and changes nothing — nothing in Redis, nothing
//! sent to the bot.

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
    gw.wait_idle().await;
    assert_eq!(bot.count(), 0, "nothing reaches the bot");
    // The streams and the shard register exist from the workers' start; they stay empty.
    let streams = |k: &String| k.ends_with(":outbox") || k.ends_with(":stream");
    let stored: Vec<String> = redis.keys("*").into_iter().filter(|k| !streams(k) && !k.ends_with(":shards")).collect();
    assert!(stored.is_empty(), "nothing stored, found {stored:?}");
    for k in redis.keys("*").into_iter().filter(streams) {
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
    assert_eq!(send(gw.port, unsigned).await.0, 401, "{}", gw.log());
    let (status, _) = send(gw.port, Req::signed("/slack/events", b"ssl_check=1&token=x".to_vec(), SECRET)).await;
    assert_eq!(status, 200);
    let (status, _) = send(
        gw.port,
        Req::signed("/slack/events", br#"{"type":"app_rate_limited","minute_rate_limited":1}"#.to_vec(), SECRET),
    )
    .await;
    assert_eq!(status, 200);
    gw.wait_idle().await;
    assert_eq!(bot.count(), 0);
    assert!(redis.keys("*:r:*").is_empty());
}

/// A small deterministic generator, so a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One generated bad request and the status class it must get.
fn generated(rng: &mut XorShift, i: usize) -> (Req, u16) {
    let len = (rng.next() % 600) as usize;
    let junk = rng.bytes(len);
    let now = unix_now();
    match i % 8 {
        // Signed garbage: the signature passes, the payload cannot be parsed.
        0 => {
            let mut body = junk;
            body.insert(0, b'{');
            let mut r = Req::signed("/slack/events", body, SECRET);
            r.content_type = "application/json";
            (r, 400)
        }
        1 => {
            let mut r = Req::signed("/slack/events", junk, SECRET);
            r.headers.clear();
            (r, 401)
        }
        2 => {
            let mut r = Req::signed("/slack/events", junk, SECRET);
            r.headers[1].1 = format!("v0={}", hex::encode(rng.bytes(32)));
            (r, 401)
        }
        3 => {
            let skew = 302 + (rng.next() % 100_000) as i64;
            let ts = if rng.next() % 2 == 0 { now - skew } else { now + skew };
            (Req::signed_at("/slack/events", event(&format!("EvStale{i}")), SECRET, ts), 401)
        }
        4 => (Req::signed("/slack/events", vec![b'x'; 8193 + len], SECRET), 413),
        5 => {
            let mut r = Req::signed("/slack/events", junk, SECRET);
            r.method = ["PUT", "DELETE", "PATCH", "GET"][i % 4];
            if r.method == "GET" {
                r.body.clear();
            }
            (r, 405)
        }
        6 => (Req::signed(&format!("/slack/{}", hex::encode(rng.bytes(6))), event("EvPath"), SECRET), 404),
        // A form that is neither a command nor an interaction, signed.
        _ => {
            let body = format!("a={}&b={}", hex::encode(rng.bytes(8)), rng.next()).into_bytes();
            (Req::signed("/slack/events", body, SECRET), 400)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_bad_requests_get_4xx_store_nothing_and_forward_nothing() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("volume"), &bot.url());
    cfg.server = r#"max_body = "8KiB""#.into();
    let gw = Gateway::start(&cfg).await;
    let mut rng = XorShift(0x5eed_1234_abcd_0042);
    let requests: Vec<(Req, u16)> = (0..10_000).map(|i| generated(&mut rng, i)).collect();
    let port = gw.port;
    let mut wrong = Vec::new();
    let mut chunks = requests.into_iter().enumerate().collect::<Vec<_>>();
    while !chunks.is_empty() {
        let batch: Vec<_> = chunks.drain(..chunks.len().min(32)).collect();
        let tasks: Vec<_> = batch
            .into_iter()
            .map(|(i, (req, want))| tokio::spawn(async move { (i, want, try_send(port, req).await.map(|(s, _)| s)) }))
            .collect();
        for t in tasks {
            let (i, want, got) = t.await.unwrap();
            if got != Ok(want) {
                wrong.push((i, want, got));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} requests got the wrong answer, e.g. {:?}\n{}",
        wrong.len(),
        &wrong[..wrong.len().min(5)],
        gw.log()
    );
    gw.wait_idle().await;
    assert_eq!(bot.count(), 0, "nothing forwarded");
    // The streams and the shard register exist from the workers' start; they stay empty.
    let streams = |k: &String| k.ends_with(":outbox") || k.ends_with(":stream");
    let stored: Vec<String> = redis.keys("*").into_iter().filter(|k| !streams(k) && !k.ends_with(":shards")).collect();
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
    for stream in redis.keys("*").into_iter().filter(streams) {
        assert_eq!(redis.xlen(&stream), 0, "nothing on {stream}");
    }
    assert_eq!(
        send(gw.port, Req::signed("/slack/events", event("EvAfterVolume"), SECRET)).await.0,
        200,
        "still serving"
    );
}
