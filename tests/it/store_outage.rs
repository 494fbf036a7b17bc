//! Invariant 1: durable before ack. With Redis gone Slack gets 503 inside the budget, never a
//! 200; when Redis is back deliveries are accepted again.

use std::time::{Duration, Instant};

use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_means_503_never_200_and_back_means_accepted() {
    let mut redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("outage"), &bot.url());
    cfg.server = r#"ack_budget = "500ms""#.into();
    let gw = Gateway::start(&cfg).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvBefore"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);

    redis.stop();
    for i in 0..5 {
        let started = Instant::now();
        let (status, _) = send(gw.port, Req::signed("/slack/events", event(&format!("EvDown{i}")), SECRET)).await;
        assert_eq!(status, 503, "not recorded, so not acked");
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "answered within the budget ({:?})",
            started.elapsed()
        );
    }

    redis.restart();
    let (mut accepted, mut i) = (None, 0);
    until(Duration::from_secs(30), async || {
        let (status, _) = send(gw.port, Req::signed("/slack/events", event(&format!("EvBack{i}")), SECRET)).await;
        assert!(status == 200 || status == 503, "{status}");
        accepted = (status == 200).then_some(i);
        i += 1;
        accepted.is_some()
    })
    .await;
    let i = accepted.expect("accepted again once Redis is back");
    assert!(eventually(Duration::from_secs(10), || bot.count_body(&format!("EvBack{i}")) == 1).await, "{}", gw.log());
    for i in 0..5 {
        assert_eq!(bot.count_body(&format!("EvDown{i}")), 0, "a 503'd delivery is Slack's to retry");
    }
}

/// An ACL login from `[redis] username` and `password = "${VAR}"`: a gateway with the right
/// password records and delivers; one without is refused by Redis and answers 503, never 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_login_from_the_environment_records_and_no_login_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("redis.sock");
    let password = "pw-from-the-environment-0123";
    let redis = KillOnDrop::new(
        std::process::Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--unixsocketperm", "700"])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(dir.path())
            .args(["--user", "default", "off"])
            .args(["--user", "slackgate", "on", &format!(">{password}"), "~*", "&*", "+@all"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("redis+unix://{}", socket.display());
    let login = |c: &mut redis::Connection| {
        redis::cmd("AUTH")
            .arg("slackgate")
            .arg(password)
            .query::<String>(c)
            .and_then(|_| redis::cmd("PING").query::<String>(c))
    };
    assert!(
        eventually(Duration::from_secs(10), || redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .and_then(|mut c| login(&mut c))
            .is_ok())
        .await,
        "redis-server with ACL users started"
    );
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&url, &prefix("acl"), &bot.url());
    cfg.redis = "username = \"slackgate\"\npassword = \"${SG_TEST_REDIS_PASSWORD}\"".into();
    let gw = Gateway::start_with_env(&cfg, &[("SG_TEST_REDIS_PASSWORD", password)]).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvAcl1"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count_body("EvAcl1") == 1).await);
    assert!(!gw.log().contains(password), "the password is never logged");
    // Without the login, Redis refuses every command: 503, nothing acked.
    let mut anon = cfg.clone();
    anon.redis = String::new();
    let gw = Gateway::start(&anon).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvAcl2"), SECRET)).await.0, 503);
    drop(redis);
}

/// `rediss://`: the gateway talks TLS to Redis and trusts its certificate through the system's
/// roots (`SSL_CERT_FILE` here, the suite's test authority); records and delivers as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_redis_is_reached_through_rediss() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let port = free_low_port();
    let redis = KillOnDrop::new(
        std::process::Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--bind", "127.0.0.1", "--tls-auth-clients", "no"])
            .args(["--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(&ca.cert_file)
            .arg("--tls-key-file")
            .arg(&ca.key_file)
            .arg("--tls-ca-cert-file")
            .arg(&ca.ca_file)
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        eventually(Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await,
        "redis-server listens for TLS"
    );
    let bot = Receiver::start(SECRET).await;
    let cfg = GatewayConfig::new(&format!("rediss://localhost:{port}/"), &prefix("tls"), &bot.url());
    let (k, v) = ca.env();
    let gw = Gateway::start_with_env(&cfg, &[(k, &v)]).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvTls1"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count_body("EvTls1") == 1).await, "{}", gw.log());
    // Without the authority, the certificate is not trusted: no ack.
    let gw = Gateway::start(&cfg).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvTls2"), SECRET)).await.0, 503);
    drop(redis);
}
