//! A Sentinel set on loopback, made by the test: one primary, two replicas, three sentinels
//! (`redis-server --sentinel`) watching it under the name `main`, with a one-second down-after
//! so that a killed primary is replaced within seconds. Everything is killed when dropped.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{KillOnDrop, RedisSecurity};

pub const MASTER_NAME: &str = "main";

pub struct RedisSentinel {
    /// Data nodes: the first starts as the primary.
    pub nodes: Vec<u16>,
    pub sentinels: Vec<u16>,
    procs: Vec<Option<KillOnDrop>>,
    /// Mutual TLS and logins on the data nodes and the sentinels, when set.
    security: Option<Arc<RedisSecurity>>,
    dir: tempfile::TempDir,
}

use super::redis_cluster::free_low_port as free_port;

impl RedisSentinel {
    pub fn start() -> RedisSentinel {
        Self::start_with(None)
    }

    /// A set that speaks only TLS (clients, replication, sentinels) and wants logins.
    pub fn start_secured(security: Arc<RedisSecurity>) -> RedisSentinel {
        Self::start_with(Some(security))
    }

    fn start_with(security: Option<Arc<RedisSecurity>>) -> RedisSentinel {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let sentinels: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut me =
            RedisSentinel { nodes: nodes.clone(), sentinels: sentinels.clone(), procs: Vec::new(), security, dir };
        for (i, p) in nodes.iter().enumerate() {
            let mut args = vec!["--appendonly".to_string(), "yes".into(), "--save".into(), String::new()];
            if i > 0 {
                args.extend(["--replicaof".into(), "127.0.0.1".into(), nodes[0].to_string()]);
            }
            let proc = me.spawn(*p, &args, None);
            me.procs.push(Some(proc));
        }
        for p in &sentinels {
            let conf = me.dir.path().join(format!("sentinel-{p}.conf"));
            let monitor = format!(
                "bind 127.0.0.1\nsentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\nsentinel failover-timeout {MASTER_NAME} 5000\n",
                nodes[0]
            );
            let text = match &me.security {
                Some(sec) => sec.sentinel_conf(*p, MASTER_NAME, &monitor),
                None => format!("port {p}\n{monitor}"),
            };
            std::fs::write(&conf, text).unwrap();
            let proc = me.spawn(*p, &[], Some(&conf));
            me.procs.push(Some(proc));
        }
        assert!(me.wait_replicas(nodes[0], 2, Duration::from_secs(20)), "replicas in sync");
        me
    }

    fn spawn(&self, port: u16, args: &[String], sentinel_conf: Option<&std::path::Path>) -> KillOnDrop {
        let data = self.dir.path().join(port.to_string());
        std::fs::create_dir_all(&data).unwrap();
        let mut cmd = Command::new("redis-server");
        match sentinel_conf {
            Some(conf) => cmd.arg(conf).arg("--sentinel"),
            None => {
                match &self.security {
                    Some(sec) => cmd.args(sec.node_args(port, false)),
                    None => cmd.args(["--port", &port.to_string()]),
                };
                cmd.args(["--bind", "127.0.0.1"]).args(args)
            }
        };
        let child = cmd.arg("--dir").arg(&data).stdout(Stdio::null()).spawn().expect("redis-server on PATH");
        // Owned at once: a server that never answers is killed when the assert below panics.
        let child = KillOnDrop::new(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.conn(port).is_none() {
            assert!(Instant::now() < deadline, "redis on {port} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    pub fn conn(&self, port: u16) -> Option<redis::Connection> {
        if let Some(sec) = &self.security {
            let mut c = sec.connect(port, self.sentinels.contains(&port))?;
            redis::cmd("PING").query::<String>(&mut c).ok()?;
            return Some(c);
        }
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
        let mut c = client.get_connection_with_timeout(Duration::from_millis(300)).ok()?;
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }

    /// The TOML lines that point a gateway at these sentinels.
    pub fn toml(&self) -> String {
        let scheme = if self.security.is_some() { "rediss" } else { "redis" };
        let s: Vec<String> = self.sentinels.iter().map(|p| format!("\"{scheme}://127.0.0.1:{p}/\"")).collect();
        let login = self.security.as_ref().map(|s| s.toml(true)).unwrap_or_default();
        format!("sentinel = [{}]\nmaster_name = \"{MASTER_NAME}\"\n{login}", s.join(", "))
    }

    /// The primary's port, as the sentinels name it now.
    pub fn primary(&self) -> Option<u16> {
        let mut c = self.conn(self.sentinels[0])?;
        let addr: Vec<String> =
            redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(MASTER_NAME).query(&mut c).ok()?;
        addr.get(1)?.parse().ok()
    }

    /// Wait until `port` has `n` replicas online.
    pub fn wait_replicas(&self, port: u16, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let info: String = self
                .conn(port)
                .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c).ok())
                .unwrap_or_default();
            if info.contains("role:master") && info.matches("state=online").count() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Freeze a data node (SIGSTOP) or let it go on (SIGCONT).
    pub fn signal(&self, port: u16, signal: &str) {
        let i = self.nodes.iter().position(|p| *p == port).unwrap();
        let pid = self.procs[i].as_ref().expect("node is running").id();
        let ok = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap().success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// Wait until the sentinels name a primary other than `old`.
    pub fn wait_new_primary(&self, old: u16, limit: Duration) -> Option<u16> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(p) = self.primary().filter(|p| *p != old) {
                return Some(p);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// SIGKILL one data node.
    pub fn kill(&mut self, port: u16) {
        let i = self.nodes.iter().position(|p| *p == port).unwrap();
        self.procs[i] = None;
    }
}
