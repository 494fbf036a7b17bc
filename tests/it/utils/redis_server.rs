//! A private `redis-server` per test, on a Unix socket in its own temporary directory (no TCP
//! port to race for), AOF on.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let dir = tempfile::tempdir().unwrap();
        let mut me = RedisServer { child: None, dir };
        me.spawn();
        me
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "yes", "--unixsocketperm", "700"])
            .arg("--unixsocket")
            .arg(self.socket())
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.conn_checked().is_none() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    fn conn_checked(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut c = client.get_connection_with_timeout(Duration::from_millis(200)).ok()?;
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }

    pub fn conn(&self) -> redis::Connection {
        self.conn_checked().expect("redis is up")
    }

    /// Kill the server (SIGKILL: nothing flushed beyond what the AOF already has).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the server keeps its socket but answers nothing (a frozen Redis).
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args([sig, &pid]).status().expect("kill on PATH");
        assert!(status.success(), "kill {sig} {pid}");
    }

    /// Start again on the same socket and data directory.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// An operator's restart: SIGTERM (Redis writes out its AOF and exits), then start again on
    /// the same socket and data directory. Unlike [`restart`](Self::restart) it loses nothing
    /// Redis acknowledged: with `appendfsync everysec` a busy disk can postpone Redis's write of
    /// its AOF buffer by up to 2 s, which a SIGKILL then loses.
    pub fn restart_graceful(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let _ = c.wait();
        }
        self.spawn();
    }

    /// Keys matching a pattern.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        redis::cmd("KEYS").arg(pattern).query(&mut self.conn()).unwrap()
    }

    /// Entries in a stream (0 when it does not exist).
    pub fn xlen(&self, key: &str) -> usize {
        redis::cmd("XLEN").arg(key).query(&mut self.conn()).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
