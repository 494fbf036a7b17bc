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
    assert!(redis.keys("*:outbox").iter().all(|k| redis.xlen(k) == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_takes_over_the_port_without_refusing_a_connection() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut old = Gateway::start(&GatewayConfig::new(&redis.url(), &prefix("upgrade"), &bot.url())).await;
    let port = old.port;
    let traffic = tokio::spawn(async move {
        let mut answers = Vec::new();
        for i in 0..150 {
            let req = Req::signed("/slack/events", event(&format!("EvUp{i:03}")), SECRET);
            answers.push(try_send(port, req).await.map(|(status, _)| status));
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        answers
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let log = std::fs::File::create(std::env::temp_dir().join(format!("slackgate-upgrade-{port}.log"))).unwrap();
    let mut new =
        old.command(&["--upgrade"]).stdout(log.try_clone().unwrap()).stderr(log).stdin(Stdio::null()).spawn().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    signal(old.pid(), "QUIT");
    assert!(old.wait_exit(Duration::from_secs(10)).await, "the old process hands over and exits");
    let answers = traffic.await.unwrap();
    let failed: Vec<_> = answers.iter().enumerate().filter(|(_, a)| *a != &Ok(200)).collect();
    assert!(failed.is_empty(), "every request answered 200 across the hand-over: {failed:?}\n{}", old.log());
    assert!(matches!(new.try_wait(), Ok(None)), "the new process serves on");
    assert_eq!(send(port, Req::signed("/slack/events", event("EvUpAfter"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 151).await, "all delivered: {}", bot.count());
    let _ = new.kill();
    let _ = new.wait();
}
