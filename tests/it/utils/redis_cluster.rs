//! A Redis Cluster on loopback, made by the test: `masters` primaries with `replicas` replicas
//! each (`redis-server --cluster-enabled`, `redis-cli --cluster create`), AOF on, a short node
//! timeout so that a killed primary's replica takes over within seconds. Every node is killed
//! when the value is dropped.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{KillOnDrop, RedisSecurity};

pub struct RedisCluster {
    pub ports: Vec<u16>,
    nodes: Vec<Option<KillOnDrop>>,
    /// Mutual TLS and an ACL login on every node (and the bus), when set.
    security: Option<Arc<RedisSecurity>>,
    dir: tempfile::TempDir,
}

/// A port with its cluster bus port (+10000) free too, both below the ephemeral range (32768
/// and up): the ports the OS hands out for port 0 — to gateways, receivers and clients of
/// other tests running at the same time — are never probed or taken here.
pub fn free_port_pair() -> u16 {
    loop {
        let p = 10_000 + (rand_u16() % 12_000);
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok()
        {
            return p;
        }
    }
}

/// A free port below the ephemeral range, for a server the test starts itself.
pub fn free_low_port() -> u16 {
    loop {
        let p = 10_000 + (rand_u16() % 22_000);
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

fn rand_u16() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let mixed = nanos ^ (std::process::id() << 8) ^ SEQ.fetch_add(0x9E37, Ordering::Relaxed).wrapping_mul(2654435761);
    (mixed >> 7) as u16
}

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        Self::start_with(masters, replicas, None)
    }

    /// A cluster that speaks only TLS (clients, replication, bus) and wants a login.
    pub fn start_secured(masters: usize, replicas: usize, security: Arc<RedisSecurity>) -> RedisCluster {
        Self::start_with(masters, replicas, Some(security))
    }

    fn start_with(masters: usize, replicas: usize, security: Option<Arc<RedisSecurity>>) -> RedisCluster {
        let dir = tempfile::tempdir().unwrap();
        let n = masters * (1 + replicas);
        let mut me = RedisCluster { ports: Vec::new(), nodes: Vec::new(), security, dir };
        while me.ports.len() < n {
            let p = free_port_pair();
            if !me.ports.contains(&p) {
                me.ports.push(p);
            }
        }
        for i in 0..n {
            let node = me.spawn(i);
            me.nodes.push(Some(node));
        }
        let mut create = Command::new("redis-cli");
        if let Some(sec) = &me.security {
            create.args(sec.cli_args());
        }
        create.arg("--cluster").arg("create");
        for p in &me.ports {
            create.arg(format!("127.0.0.1:{p}"));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli on PATH");
        assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
        assert!(me.wait_ok(Duration::from_secs(30)), "the cluster did not reach state ok");
        me
    }

    fn spawn(&self, i: usize) -> KillOnDrop {
        let p = self.ports[i];
        let data = self.dir.path().join(p.to_string());
        std::fs::create_dir_all(&data).unwrap();
        let mut server = Command::new("redis-server");
        match &self.security {
            Some(sec) => server.args(sec.node_args(p, true)),
            None => server.args(["--port", &p.to_string()]),
        };
        let child = server
            .args(["--bind", "127.0.0.1", "--cluster-enabled", "yes"])
            .args(["--cluster-node-timeout", "2000", "--appendonly", "yes", "--save", ""])
            // A replica takes over however long it was cut off (the test decides what is lost).
            .args(["--cluster-replica-validity-factor", "0"])
            .args(["--cluster-config-file", "nodes.conf"])
            .arg("--dir")
            .arg(&data)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        // Owned at once: a server that never answers is killed when the assert below panics.
        let child = KillOnDrop::new(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.node(p).is_none() {
            assert!(Instant::now() < deadline, "redis-server on {p} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// A plain connection to one node.
    pub fn node(&self, port: u16) -> Option<redis::Connection> {
        let mut c = match &self.security {
            Some(sec) => sec.connect(port, false)?,
            None => redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .ok()?
                .get_connection_with_timeout(Duration::from_millis(300))
                .ok()?,
        };
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }

    /// The TOML lines that point a gateway at this cluster (and log it in).
    pub fn toml(&self) -> String {
        let scheme = if self.security.is_some() { "rediss" } else { "redis" };
        let nodes: Vec<String> = self.ports.iter().map(|p| format!("\"{scheme}://127.0.0.1:{p}/\"")).collect();
        let login = self.security.as_ref().map(|s| s.toml(false)).unwrap_or_default();
        format!("cluster = [{}]\n{login}", nodes.join(", "))
    }

    /// Every live node reports `cluster_state:ok`.
    pub fn wait_ok(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            // Every node sees the cluster ok, and every replica is in sync with its primary.
            let ok = self.live_ports().iter().all(|p| {
                let Some(mut c) = self.node(*p) else { return false };
                let cluster: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap_or_default();
                let repl: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap_or_default();
                cluster.contains("cluster_state:ok")
                    && (repl.contains("role:master") || repl.contains("master_link_status:up"))
            });
            if ok {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Every live primary has `n` replicas that answer its `WAIT` (their link is up and they
    /// acknowledge), as `durability = "replicated"` needs before its first ack.
    pub fn wait_replicas_confirm(&self, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let confirmed = self.masters().iter().all(|p| {
                let Some(mut c) = self.node(*p) else { return false };
                redis::cmd("WAIT").arg(n).arg(500).query::<usize>(&mut c).is_ok_and(|acked| acked >= n)
            });
            if confirmed {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn live_ports(&self) -> Vec<u16> {
        self.ports.iter().zip(&self.nodes).filter(|(_, n)| n.is_some()).map(|(p, _)| *p).collect()
    }

    /// The ports of the live primaries.
    pub fn masters(&self) -> Vec<u16> {
        self.live_ports()
            .into_iter()
            .filter(|p| {
                self.node(*p)
                    .and_then(|mut c| redis::cmd("ROLE").query::<redis::Value>(&mut c).ok())
                    .is_some_and(|v| format!("{v:?}").contains("master"))
            })
            .collect()
    }

    /// Keys matching `pattern` on one node (its own slots only).
    pub fn keys_on(&self, port: u16, pattern: &str) -> Vec<String> {
        self.node(port).map(|mut c| redis::cmd("KEYS").arg(pattern).query(&mut c).unwrap()).unwrap_or_default()
    }

    /// Start a killed node again on its port and data: it rejoins, as a replica of whoever
    /// took over its slots.
    pub fn restart(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        let node = self.spawn(i);
        self.nodes[i] = Some(node);
    }

    /// Wait until `port` is a primary (a replica promoted by a failover).
    pub fn wait_primary(&self, port: u16, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.masters().contains(&port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// The primary that serves `key`'s slot (the others answer MOVED).
    pub fn owner_of(&self, key: &str) -> u16 {
        self.masters()
            .into_iter()
            .find(|m| redis::cmd("EXISTS").arg(key).query::<i64>(&mut self.node(*m).unwrap()).is_ok())
            .unwrap_or_else(|| panic!("no primary serves {key}"))
    }

    /// The port of a primary's (first) replica.
    pub fn replica_of(&self, master: u16) -> u16 {
        let role: redis::Value = redis::cmd("ROLE").query(&mut self.node(master).unwrap()).unwrap();
        let text = format!("{role:?}");
        self.ports
            .iter()
            .copied()
            .find(|p| *p != master && text.contains(&p.to_string()))
            .unwrap_or_else(|| panic!("no replica of {master} in {text}"))
    }

    /// Freeze a node (SIGSTOP) or let it go on (SIGCONT): a frozen replica acknowledges nothing.
    pub fn signal(&self, port: u16, signal: &str) {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        let pid = self.nodes[i].as_ref().expect("node is running").id();
        let ok = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap().success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// `CONFIG SET name value` on every live node.
    pub fn config_set(&self, name: &str, value: &str) {
        for p in self.live_ports() {
            let mut c = self.node(p).expect("node answers");
            let _: () = redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(&mut c).unwrap();
        }
    }

    /// SIGKILL one node.
    pub fn kill(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        self.nodes[i] = None;
    }
}
