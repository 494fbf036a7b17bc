//! The command line as an operator meets it: `check` on the shipped config, errors that name the
//! file and the key, and `run` with the embedded Redis.

use std::process::Command;
use std::time::Duration;

use crate::utils::*;

fn slackgate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slackgate"));
    c.env_remove("SLACKGATE_REDIS_URL").env_remove("SLACKGATE_LISTEN").env_remove("SLACKGATE_ADMIN_LISTEN");
    c
}

#[test]
fn check_accepts_the_shipped_gateway_toml() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.toml");
    let out = slackgate().args(["check", "--config", shipped]).env("SLACK_SIGNING_SECRET", "x").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("app bot -> http://127.0.0.1:8000"), "{stdout}");
    assert!(stdout.contains("/slack/install"), "{stdout}");
    assert!(!stdout.contains("x\n"), "secrets are never printed");
}

#[test]
fn config_errors_name_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[server]\nlisten = \"0.0.0.0:3000\"\nbogus = 1\n[[app]]\nname=\"a\"\n", "unknown field `bogus`"),
        ("[[app]]\nname = \"a\"\nsigning_secret = \"literal\"\nupstream = \"http://x\"\n", "app[0].signing_secret"),
        ("[[app]]\nname = \"a\"\nsigning_secret = \"${SG_UNSET_VAR_FOR_TEST}\"\nupstream = \"http://x\"\n", "SG_UNSET_VAR_FOR_TEST is not set"),
        ("[[app]]\nname = \"a\"\nsigning_secret = \"${HOME}\"\nupstream = \"ftp://x\"\n", "app[0].upstream"),
        ("[[app]]\nname = \"a\"\nsigning_secret = \"${HOME}\"\nupstream = \"http://x\"\ndelivery = { timeout = \"10\" }\n", "app[0].delivery.timeout"),
    ];
    for (i, (toml, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, toml).unwrap();
        let out = slackgate().args(["check", "--config"]).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} must fail");
        assert!(stderr.contains(&path.display().to_string()), "case {i} names the file: {stderr}");
        assert!(stderr.contains(want), "case {i} says `{want}`: {stderr}");
    }
    let out = slackgate().args(["check", "--config", "/nonexistent/gateway.toml"]).output().unwrap();
    assert!(!out.status.success());
}

/// A config under `dir` with no Redis URL (the embedded one) in front of `upstream`, and the
/// data dir it runs with.
fn embedded_config(dir: &std::path::Path, upstream: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let config = dir.join("gateway.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n[[app]]\nname = \"bot\"\n\
         signing_secret = \"${{SG_TEST_SECRET}}\"\nupstream = \"{upstream}\"\n"
    );
    std::fs::write(&config, text).unwrap();
    (config, dir.join("data"))
}

/// `slackgate run` of `config` with `data` as its data dir, its log in `log`.
fn run_embedded(config: &std::path::Path, data: &std::path::Path, log: &std::path::Path) -> KillOnDrop {
    KillOnDrop::new(
        slackgate()
            .args(["run", "--config"])
            .arg(config)
            .arg("--data-dir")
            .arg(data)
            .env("SG_TEST_SECRET", SECRET)
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_no_redis_url_starts_and_stops_its_own_redis() {
    let dir = tempfile::tempdir().unwrap();
    let bot = Receiver::start(SECRET).await;
    let (config, data) = embedded_config(dir.path(), &bot.url());
    let log = dir.path().join("gateway.log");
    let mut child = run_embedded(&config, &data, &log);
    let port = wait_started(&log, &mut child).await;
    assert_eq!(send(port, Req::signed("/slack/events", event("EvEmbedded"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    let socket = data.join("redis.sock");
    assert!(socket.exists() && data.join("appendonlydir").exists(), "AOF under --data-dir");

    Command::new("kill").arg("-INT").arg(child.id().to_string()).status().unwrap();
    let exited = eventually(Duration::from_secs(10), || matches!(child.try_wait(), Ok(Some(_)))).await;
    assert!(exited, "gateway exits on SIGINT");
    let gone = eventually(Duration::from_secs(5), || std::os::unix::net::UnixStream::connect(&socket).is_err()).await;
    assert!(gone, "the embedded redis-server stopped with the gateway");
}

/// `run` again while the last gateway with the same data dir still drains (SIGTERM, an attempt in
/// flight): the new one waits for it instead of taking its Redis away, and the old one, exiting,
/// leaves the new one's server alone — both the old delivery and a new one are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_while_the_last_one_drains_waits_for_it_and_both_keep_their_redis() {
    let dir = tempfile::tempdir().unwrap();
    let bot = Receiver::start(SECRET).await;
    bot.push(Reply::status(200).delay(Duration::from_secs(2)));
    let (config, data) = embedded_config(dir.path(), &bot.url());
    let run = |log: &std::path::Path| run_embedded(&config, &data, log);
    let (log_a, log_b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let mut a = run(&log_a);
    let port = wait_started(&log_a, &mut a).await;
    assert_eq!(send(port, Req::signed("/slack/events", event("EvDrainA"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await, "the slow attempt is in flight");
    Command::new("kill").arg("-TERM").arg(a.id().to_string()).status().unwrap();
    let mut b = run(&log_b);
    let port_b = wait_started(&log_b, &mut b).await;
    assert!(matches!(a.try_wait(), Ok(Some(_))), "the new one started only once the old one was gone");
    let text_b = std::fs::read_to_string(&log_b).unwrap();
    assert!(text_b.contains("waiting for the gateway that is stopping"), "{text_b}");
    assert_eq!(send(port_b, Req::signed("/slack/events", event("EvDrainB"), SECRET)).await.0, 200);
    assert!(
        eventually(Duration::from_secs(10), || bot.count_body("EvDrainB") == 1).await,
        "{}",
        std::fs::read_to_string(&log_b).unwrap()
    );
    // The old one recorded its delivery before it let its Redis go: nothing is sent again.
    let admin_b = started_on(&text_b, 0).unwrap().1;
    assert!(outbox_idle(admin_b, Duration::from_secs(10)).await);
    assert_eq!(bot.count_body("EvDrainA"), 1, "{}", std::fs::read_to_string(&log_a).unwrap());
    Command::new("kill").arg("-INT").arg(b.id().to_string()).status().unwrap();
    assert!(eventually(Duration::from_secs(10), || matches!(b.try_wait(), Ok(Some(_)))).await);
}

#[test]
fn apps_can_live_in_included_files_and_clashes_name_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let apps = dir.path().join("apps.d");
    std::fs::create_dir(&apps).unwrap();
    let main = dir.path().join("gateway.toml");
    std::fs::write(&main, "include = [\"apps.d/*.toml\"]\n[redis]\nurl = \"redis://127.0.0.1:6379/\"\n").unwrap();
    let app = |name: &str, path: &str| {
        format!("name = \"{name}\"\nsigning_secret = \"${{HOME}}\"\nupstream = \"http://127.0.0.1:8000\"\nevents_path = \"{path}\"\ncommands_path = \"{path}\"\ninteractivity_path = \"{path}\"\n")
    };
    std::fs::write(apps.join("helpdesk.toml"), app("helpdesk", "/helpdesk/events")).unwrap();
    std::fs::write(apps.join("ops.toml"), app("ops", "/ops/events")).unwrap();
    std::fs::write(apps.join("README.md"), "not an app").unwrap();
    let check = || slackgate().args(["check", "--config"]).arg(&main).output().unwrap();
    let out = check();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("app helpdesk") && stdout.contains("app ops") && stdout.contains("/ops/events"),
        "{stdout}"
    );

    std::fs::write(apps.join("ops.toml"), app("helpdesk", "/ops/events")).unwrap();
    let out = check();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("helpdesk.toml") && stderr.contains("ops.toml"), "names both files: {stderr}");

    std::fs::write(apps.join("ops.toml"), app("ops", "/helpdesk/events")).unwrap();
    let stderr = String::from_utf8_lossy(&check().stderr).into_owned();
    assert!(
        stderr.contains("helpdesk.toml") && stderr.contains("ops.toml") && stderr.contains("/helpdesk/events"),
        "{stderr}"
    );

    std::fs::write(apps.join("ops.toml"), app("ops", "/ops/events") + "colour = \"blue\"\n").unwrap();
    let stderr = String::from_utf8_lossy(&check().stderr).into_owned();
    assert!(stderr.contains("ops.toml") && stderr.contains("unknown field `colour`"), "{stderr}");
}

/// Wait for a gateway started with port 0 to say where it listens (its startup line in `log`)
/// and to accept there; its Slack port.
async fn wait_started(log: &std::path::Path, child: &mut std::process::Child) -> u16 {
    let mut port = None;
    let started = eventually(Duration::from_secs(15), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("gateway exited with {status}:\n{text}");
        }
        port = started_on(&text, 0).map(|(p, _)| p).filter(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok());
        port.is_some()
    })
    .await;
    assert!(started, "gateway did not start:\n{}", std::fs::read_to_string(log).unwrap_or_default());
    port.unwrap()
}

/// A config with a Redis URL and the given `[server]` lines.
fn config_with(dir: &std::path::Path, redis: &str, server: &str, upstream: &str) -> std::path::PathBuf {
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\n{server}\n[redis]\nurl = \"{redis}\"\n[[app]]\nname = \"bot\"\nsigning_secret = \"${{SG_TEST_SECRET}}\"\nupstream = \"{upstream}\"\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn run_refuses_an_open_admin_listener_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = "listen = \"127.0.0.1:0\"\nadmin_listen = \"0.0.0.0:0\"";
    let config = config_with(dir.path(), "redis://127.0.0.1:1/", server, "http://127.0.0.1:8000");
    let out = slackgate().args(["run", "--config"]).arg(&config).env("SG_TEST_SECRET", SECRET).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("server.admin_listen") && stderr.contains("admin_token"), "{stderr}");
}

#[test]
fn run_fails_at_once_when_the_slack_port_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let server = format!("listen = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:0\"");
    let config = config_with(dir.path(), "redis://127.0.0.1:1/", &server, "http://127.0.0.1:8000");
    let started = std::time::Instant::now();
    let out = slackgate().args(["run", "--config"]).arg(&config).env("SG_TEST_SECRET", SECRET).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")) && stderr.contains("server.listen"),
        "{stderr}"
    );
    assert!(!stderr.contains("will try again"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10), "it does not retry for half a minute");
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_redis_url_run_writes_nothing_to_disk() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let dir = tempfile::tempdir().unwrap();
    let server = "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"";
    let config = config_with(dir.path(), &redis.url(), server, &bot.url());
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("gateway.log");
    // /proc takes no new files, even from root: a working directory (and default data dir)
    // where any write fails, as on a read-only root filesystem.
    let mut child = KillOnDrop::new(
        slackgate()
            .args(["run", "--config"])
            .arg(&config)
            .current_dir("/proc")
            .env("SG_TEST_SECRET", SECRET)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let port = wait_started(&log, &mut child).await;
    assert!(matches!(child.try_wait(), Ok(None)), "serves from a read-only place");
    assert_eq!(send(port, Req::signed("/slack/events", event("EvReadOnly"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "only the config is there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_line_says_where_everything_is_and_redacts_the_redis_password() {
    let redis = RedisServer::start();
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("hunter2-pass").query(&mut redis.conn()).unwrap();
    let bot = Receiver::start(SECRET).await;
    // The password from the environment, as the TOML must have it; the log shows the URL it made.
    let url = format!("{}?pass=${{SG_STARTLINE_REDIS_PW}}", redis.url());
    let cfg = GatewayConfig::new(&url, &prefix("startline"), &bot.url());
    let gw = Gateway::start_with_env(&cfg, &[("SG_STARTLINE_REDIS_PW", "hunter2-pass")]).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvLine"), SECRET)).await.0, 200, "{}", gw.log());
    let log = gw.log();
    let line = log.lines().find(|l| l.contains("slackgate started")).unwrap_or_else(|| panic!("{log}"));
    for want in [
        format!("listen=127.0.0.1:{}", gw.port),
        format!("admin=\"127.0.0.1:{}\"", gw.admin_port),
        format!("redis={}?pass=***", redis.url()),
        format!("bot [/slack/events passthrough /slack/install] -> {}", bot.url()),
    ] {
        assert!(line.contains(&want), "`{want}` in {line}");
    }
    assert!(!log.contains("hunter2"), "the password never reaches the log");
}
