//! The real `slackgate` binary, run with a generated `gateway.toml` on port 0: the gateway binds
//! free ports itself and its startup line says which (no port is picked here and released).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One gateway's config: app `bot` (secret [`super::SECRET`]) plus whatever the test adds.
#[derive(Clone)]
pub struct GatewayConfig {
    pub redis_url: String,
    pub prefix: String,
    pub upstream: String,
    /// The inline `delivery = { … }` table of app `bot`.
    pub delivery: String,
    /// Extra lines for `[server]`.
    pub server: String,
    /// Extra lines for `[redis]`.
    pub redis: String,
    /// Extra lines for app `bot`.
    pub app: String,
    /// Raw TOML appended at the end (more `[[app]]` sections).
    pub tail: String,
    /// The `[egress]` section's lines (its `listen` is port 0); empty: no egress.
    pub egress: String,
    /// App `bot`'s `passthrough` list.
    pub passthrough: String,
}

impl GatewayConfig {
    pub fn new(redis_url: &str, prefix: &str, upstream: &str) -> Self {
        GatewayConfig {
            redis_url: redis_url.into(),
            prefix: prefix.into(),
            upstream: upstream.into(),
            delivery: r#"{ timeout = "2s", retry_initial = "100ms", retry_max = "400ms", lease = "5s" }"#.into(),
            server: String::new(),
            redis: String::new(),
            app: String::new(),
            tail: String::new(),
            egress: String::new(),
            passthrough: r#"["/slack/install"]"#.into(),
        }
    }

    fn render(&self, port: u16, admin: u16) -> String {
        format!(
            r#"[server]
listen = "127.0.0.1:{port}"
admin_listen = "127.0.0.1:{admin}"
shutdown_grace = "1s"
{server}
[redis]
{redis}
key_prefix = "{prefix}"
{redis_extra}

[[app]]
name = "bot"
signing_secret = "${{SG_TEST_SECRET}}"
upstream = "{upstream}"
passthrough = {passthrough}
delivery = {delivery}
{app}
{egress}
{tail}
"#,
            server = self.server,
            // Empty: the test names its Redis in `redis` (`cluster = [...]`, `sentinel = [...]`).
            redis = if self.redis_url.is_empty() { String::new() } else { format!("url = \"{}\"", self.redis_url) },
            redis_extra = self.redis,
            prefix = self.prefix,
            upstream = self.upstream,
            delivery = self.delivery,
            passthrough = self.passthrough,
            app = self.app,
            egress = if self.egress.is_empty() {
                String::new()
            } else {
                format!("[egress]\nlisten = \"127.0.0.1:0\"\n{}\n", self.egress)
            },
            tail = self.tail,
        )
    }
}

pub struct Gateway {
    child: Option<Child>,
    pub port: u16,
    pub admin_port: u16,
    /// The Web API egress, when the config has one.
    pub egress_port: u16,
    pub config_path: PathBuf,
    log_path: PathBuf,
    env: Vec<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Gateway {
    pub async fn start(cfg: &GatewayConfig) -> Gateway {
        Self::start_with_env(cfg, &[]).await
    }

    pub async fn start_with_env(cfg: &GatewayConfig, env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("gateway.toml");
        std::fs::File::create(&config_path).unwrap().write_all(cfg.render(0, 0).as_bytes()).unwrap();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut gw = Gateway {
            child: None,
            port: 0,
            admin_port: 0,
            egress_port: 0,
            config_path,
            log_path: dir.path().join("gateway.log"),
            env,
            _dir: dir,
        };
        gw.spawn().await;
        gw
    }

    async fn spawn(&mut self) {
        // The gateway binds a port-0 address to pick a port, then Pingora binds that port
        // again: in between, on a busy machine, another socket can take it and that listener
        // never comes up. Then start it again (it picks other ports).
        for attempt in 1..=3 {
            self.spawn_once().await;
            if self.all_listening(Duration::from_secs(10)).await {
                return;
            }
            assert!(attempt < 3, "a listener of the gateway never came up:\n{}", self.log());
            if let Some(mut c) = self.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Every listener accepts (the startup line is written just before Pingora binds).
    async fn all_listening(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        for port in [self.port, self.admin_port, self.egress_port].into_iter().filter(|p| *p != 0) {
            while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
                if Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        true
    }

    async fn spawn_once(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log_path).unwrap();
        let starts = self.log().matches("slackgate started").count();
        let child = self.command(&[]).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some((port, admin)) = started_on(&self.log(), starts) {
                (self.port, self.admin_port) = (port, admin);
                self.egress_port = egress_port(&self.log(), starts).unwrap_or(0);
                break;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("gateway exited with {status}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "gateway did not start:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// `slackgate <args> --json` against this gateway's config, with the environment it runs
    /// with (its secrets; no `SLACKGATE_REDIS_URL`): the answer, which must be a success, as JSON.
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
            .args(args)
            .args(["--json", "--config"])
            .arg(&self.config_path)
            .env("SG_TEST_SECRET", super::SECRET)
            .env("SG_OTHER_SECRET", "the-other-apps-secret")
            .env_remove("SLACKGATE_REDIS_URL")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
    }

    /// Write this gateway's config with the ports it has now, rather than port 0: what an
    /// upgrade (which takes the sockets over by address) needs.
    pub fn pin_ports(&self, cfg: &GatewayConfig) {
        std::fs::write(&self.config_path, cfg.render(self.port, self.admin_port)).unwrap();
    }

    /// `slackgate run` for this gateway's config and data dir, plus `extra` arguments.
    pub fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_slackgate"));
        c.arg("run")
            .arg("--config")
            .arg(&self.config_path)
            .arg("--data-dir")
            .arg(self._dir.path().join("data"))
            .arg("--pid-file")
            .arg(self.pid_file())
            .args(extra)
            .env("SG_TEST_SECRET", super::SECRET)
            .env("SG_OTHER_SECRET", "the-other-apps-secret")
            .env("RUST_LOG", std::env::var("SG_TEST_GW_LOG").unwrap_or("info".into()))
            .env_remove("SLACKGATE_REDIS_URL")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null());
        c
    }

    /// Write a new config (then `slackgate reload` or SIGHUP); port 0 as at the start, which the
    /// running gateway maps to the ports it bound.
    pub fn rewrite(&self, cfg: &GatewayConfig) {
        std::fs::write(&self.config_path, cfg.render(0, 0)).unwrap();
    }

    /// `slackgate reload` of this gateway (after [`Gateway::rewrite`]); panics when it fails.
    pub fn reload(&self) {
        let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
            .arg("reload")
            .arg("--pid-file")
            .arg(self.pid_file())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn data_dir(&self) -> PathBuf {
        self._dir.path().join("data")
    }

    /// `run --pid-file`: what `slackgate reload --pid-file` reads.
    pub fn pid_file(&self) -> PathBuf {
        self._dir.path().join("slackgate.pid")
    }

    /// A path in this gateway's own temporary directory (removed with it).
    pub fn file(&self, name: &str) -> PathBuf {
        self._dir.path().join(name)
    }

    /// The process id of the running gateway.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Wait for the gateway process to exit by itself.
    pub async fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    /// `kill -9`: no shutdown code runs.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the same config again (on new free ports: read `port` afterwards).
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    /// Wait until this gateway's outbox [is idle](super::is_idle): every delivery accepted so
    /// far is finished. Panics with the log when it is not within 15 s.
    pub async fn wait_idle(&self) {
        self.wait_idle_with(None).await
    }

    /// [`Gateway::wait_idle`] for a gateway with an admin token.
    pub async fn wait_idle_with(&self, token: Option<&str>) {
        let idle = super::outbox_idle_with(self.admin_port, token, Duration::from_secs(15)).await;
        assert!(
            idle,
            "the outbox never went idle: {}\n{}",
            super::outbox_stats(self.admin_port, token).await,
            self.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The Slack and admin ports from the `starts`-th (0-based) startup line of a gateway's log
/// (`pretty` or `json`).
pub fn started_on(log: &str, starts: usize) -> Option<(u16, u16)> {
    let line = log.lines().filter(|l| l.contains("slackgate started")).nth(starts)?;
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
        let port = |k: &str| json["fields"][k].as_str()?.rsplit(':').next()?.parse().ok();
        return Some((port("listen")?, port("admin")?));
    }
    let port_after = |key: &str| -> Option<u16> {
        let rest = &line[line.find(key)? + key.len()..];
        let addr: String =
            rest.trim_start_matches('"').chars().take_while(|c| !c.is_whitespace() && *c != '"').collect();
        addr.rsplit(':').next()?.parse().ok()
    };
    Some((port_after("listen=")?, port_after("admin=")?))
}

/// The egress port from the `starts`-th startup line, when there is an egress.
fn egress_port(log: &str, starts: usize) -> Option<u16> {
    let line = log.lines().filter(|l| l.contains("slackgate started")).nth(starts)?;
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
        return json["fields"]["egress"].as_str()?.rsplit(':').next()?.parse().ok();
    }
    let rest = &line[line.find("egress=")? + "egress=".len()..];
    let addr: String = rest.trim_start_matches('"').chars().take_while(|c| !c.is_whitespace() && *c != '"').collect();
    addr.rsplit(':').next()?.parse().ok()
}
