//! `slackgate sim`: Slack's side and a bot's, end to end through a real gateway.

use std::process::{Command, Stdio};

use crate::utils::*;

fn sim(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slackgate"));
    c.arg("sim").args(args).env("SLACK_SIGNING_SECRET", SECRET);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_send_and_receive_account_for_every_event() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.txt");
    let receiver_log = dir.path().join("receive.log");
    let receiver = KillOnDrop::new(
        sim(&["receive", "--json", "--idle", "2", "--listen", "127.0.0.1:0", "--manifest"])
            .arg(&manifest)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&receiver_log).unwrap())
            .spawn()
            .unwrap(),
    );
    // It binds any free port and says which.
    let mut bot_addr = String::new();
    let said = eventually(std::time::Duration::from_secs(10), || {
        let log = std::fs::read_to_string(&receiver_log).unwrap_or_default();
        bot_addr = log.lines().find_map(|l| l.strip_prefix("sim receive: listening on ")).unwrap_or_default().into();
        !bot_addr.is_empty()
    })
    .await;
    assert!(said, "sim receive says where it listens");
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("sim"), &format!("http://{bot_addr}"));
    cfg.app = "dedupe = { message = true }".into();
    let gw = Gateway::start(&cfg).await;
    let url = format!("http://127.0.0.1:{}/slack/events", gw.port);
    let args = ["send", "--json", "--url", &url, "--rate", "200", "--duration", "2"];
    let extras = ["--dup-ratio", "0.3", "--pair-ratio", "0.2", "--edit-ratio", "0.1", "--manifest"];
    let out = sim(&args).args(extras).arg(&manifest).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sent["events"], 400);
    assert_eq!(sent["acked"], 400);
    assert_eq!(sent["failed"], 0);
    assert!(sent["requests"].as_u64().unwrap() > 400, "duplicates, pairs and edits were sent too");
    assert!(sent["ack_latency"]["p99_ms"].as_f64().unwrap() > 0.0);

    let out = tokio::task::spawn_blocking(move || receiver.into_inner().wait_with_output().unwrap()).await.unwrap();
    assert!(out.status.success(), "the receiver found nothing lost: {}", String::from_utf8_lossy(&out.stdout));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["lost"], 0, "{got}");
    assert_eq!(got["duplicated"], 0, "{got}");
    assert_eq!(got["bad_signatures"], 0);
    assert_eq!(got["events"], got["expected"], "one delivery per expected line: pairs collapsed, copies absorbed");
    // The send took 2 s after the receiver started, so its last delivery came no sooner.
    let last = got["last_delivery_s"].as_f64().expect("the time of the last delivery");
    assert!(last >= 1.5, "{got}");
}

#[test]
fn sim_send_retries_on_slacks_schedule_when_nobody_acks() {
    let nobody = Reserved::new(); // bound, not listening: every connection is refused
    let url = format!("http://127.0.0.1:{}/slack/events", nobody.port);
    let out = sim(&["send", "--json", "--url", &url, "--rate", "20", "--duration", "1", "--time-scale", "600"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sent["events"], 20);
    assert_eq!(sent["acked"], 0);
    assert_eq!(sent["failed"], 20, "given up after Slack's three retries");
    assert_eq!(sent["retries"], 60);
    assert_eq!(sent["connection_errors"], 80);
}
