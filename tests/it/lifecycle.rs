//! Shutdown and restarts: SIGTERM lets in-flight attempts finish; `run --upgrade` takes over the
//! listening socket of a running gateway without refusing a single connection.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::utils::*;

fn signal(pid: u32, sig: &str) {
    Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_attempt_in_flight_finish_then_exits() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut gw = Gateway::start(&GatewayConfig::new(&redis.url(), &prefix("term"), &bot.url())).await;
    bot.set_default(Reply::status(200).delay(Duration::from_millis(500)));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvTerm"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    signal(gw.pid(), "TERM");
    assert!(gw.wait_exit(Duration::from_secs(5)).await, "exits within the grace period");
    assert!(redis.keys("*:d:*").is_empty(), "the attempt finished and was recorded before exit\n{}", gw.log());
    assert!(redis.keys("*:stream").iter().chain(&redis.keys("*:outbox")).all(|k| redis.xlen(k) == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_takes_over_the_port_without_refusing_a_connection() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let cfg = GatewayConfig::new(&redis.url(), &prefix("upgrade"), &bot.url());
    let mut old = Gateway::start(&cfg).await;
    let port = old.port;
    // The successor takes the listening sockets over by their address: name the ports.
    old.pin_ports(&cfg);
    // Four senders, one event every 5 ms each, for as long as the hand-over takes (and 150
    // events each at least): dense enough that requests are in flight, or just accepted and not
    // yet read, at the moment the old process stops accepting.
    let traffic: Vec<_> =
        (0..4).map(|s| Traffic::start(port, &format!("EvUp{s}-"), Duration::from_millis(5), 150)).collect();
    let accepted = r#"slackgate_requests_total{app="bot",kind="event",outcome="accepted"}"#;
    assert!(metric_reaches(old.admin_port, accepted, 10.0, Duration::from_secs(5)).await, "traffic flows");
    let sock = old.data_dir().join("upgrade.sock");
    assert!(!sock.exists(), "only a successor makes the upgrade socket");
    let log = std::fs::File::create(old.file("upgraded.log")).unwrap();
    let mut new = KillOnDrop::new(
        old.command(&["--upgrade"]).stdout(log.try_clone().unwrap()).stderr(log).stdin(Stdio::null()).spawn().unwrap(),
    );
    // The successor waits for the sockets on `upgrade.sock` in the data dir (Pingora's sender
    // retries a socket that is bound but not yet listening).
    let waiting = eventually(Duration::from_secs(10), || sock.exists()).await;
    assert!(
        waiting,
        "the successor never asked for the sockets:\n{}",
        std::fs::read_to_string(old.file("upgraded.log")).unwrap_or_default()
    );
    signal(old.pid(), "QUIT");
    assert!(old.wait_exit(Duration::from_secs(10)).await, "the old process hands over and exits");
    let mut answers = Vec::new();
    for t in traffic {
        answers.extend(t.stop().await);
    }
    let failed: Vec<_> = answers.iter().enumerate().filter(|(_, a)| *a != &Ok(200)).collect();
    assert!(failed.is_empty(), "every request answered 200 across the hand-over: {failed:?}\n{}", old.log());
    assert!(matches!(new.try_wait(), Ok(None)), "the new process serves on");
    assert_eq!(send(port, Req::signed("/slack/events", event("EvUpAfter"), SECRET)).await.0, 200);
    let all = answers.len() + 1;
    assert!(eventually(Duration::from_secs(10), || bot.count() == all).await, "delivered {} of {all}", bot.count());
    let _ = new.kill();
    let _ = new.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_an_app_without_dropping_a_request_and_refuses_a_bad_file() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let other = Receiver::start("the-other-apps-secret").await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("reload"), &bot.url());
    let gw = Gateway::start(&cfg).await;
    let second = || Req::signed("/second/events", event("EvSecond"), "the-other-apps-secret");
    assert_eq!(send(gw.port, second()).await.0, 404, "not configured yet");

    let port = gw.port;
    // Slack's pace, until the new app is served (and 60 events at least).
    let traffic = Traffic::start(port, "EvReload", Duration::from_millis(10), 60);
    cfg.tail = format!(
        "[[app]]\nname = \"second\"\nsigning_secret = \"${{SG_OTHER_SECRET}}\"\nupstream = \"{}\"\nevents_path = \"/second/events\"\ncommands_path = \"/second/events\"\ninteractivity_path = \"/second/events\"\n",
        other.url()
    );
    gw.rewrite(&cfg);
    gw.reload();
    let mut status = 0;
    until(Duration::from_secs(10), async || {
        status = send(gw.port, second()).await.0;
        status == 200
    })
    .await;
    assert_eq!(status, 200, "the new app is served\n{}", gw.log());
    let answers = traffic.stop().await;
    assert!(answers.iter().all(|a| a == &Ok(200)), "no request dropped across the reload: {answers:?}");
    assert!(eventually(Duration::from_secs(5), || other.count() == 1).await, "and its workers deliver");
    let all = answers.len();
    assert!(eventually(Duration::from_secs(10), || bot.count() == all).await, "delivered {} of {all}", bot.count());

    // A bad file is refused with its error; the running config stays.
    std::fs::write(&gw.config_path, "[server]\nbogus = 1\n").unwrap();
    signal(gw.pid(), "HUP");
    assert!(eventually(Duration::from_secs(5), || gw.log().contains("reload refused")).await);
    assert!(gw.log().contains("unknown field `bogus`"));
    assert_eq!(send(gw.port, Req::signed("/second/events", event("EvSecond2"), "the-other-apps-secret")).await.0, 200);
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvStill"), SECRET)).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_redis_is_refused_whole_with_the_keys_named() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let other = Receiver::start("the-other-apps-secret").await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("reloadredis"), &bot.url());
    let gw = Gateway::start(&cfg).await;
    // A second app and `replicated` acks (this Redis has no replica, so they would be 503s):
    // half of that taking effect would be the silent half-reload.
    cfg.redis = "durability = \"replicated\"\nwait_replicas = 1\n".into();
    cfg.tail = format!(
        "[[app]]\nname = \"second\"\nsigning_secret = \"${{SG_OTHER_SECRET}}\"\nupstream = \"{}\"\nevents_path = \"/second/events\"\ncommands_path = \"/second/events\"\ninteractivity_path = \"/second/events\"\n",
        other.url()
    );
    gw.rewrite(&cfg);
    signal(gw.pid(), "HUP");
    assert!(eventually(Duration::from_secs(5), || gw.log().contains("reload refused")).await, "{}", gw.log());
    let log = gw.log();
    assert!(log.contains("redis.durability") && log.contains("redis.wait_replicas"), "keys named: {log}");
    assert!(!log.contains("config reloaded"), "{log}");
    let second = Req::signed("/second/events", event("EvSecondRedis"), "the-other-apps-secret");
    assert_eq!(send(gw.port, second).await.0, 404, "nothing of the file was applied");
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvLocalStill"), SECRET)).await.0, 200, "still local");
}
