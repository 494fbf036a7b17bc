//! The embedded Redis for laptops and demos: a private `redis-server` child on a Unix socket
//! under the data directory (no TCP port, so nothing else can reach it), AOF on, stopped with
//! `SHUTDOWN` (which flushes the AOF) when the gateway exits. Production points `[redis] url`
//! at a real Redis instead.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("cannot create data dir {0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    #[error("cannot start redis-server ({0}); install it (apt-get install redis-server) or set [redis] url")]
    Spawn(std::io::Error),
    #[error("redis-server did not come up within 10s; see {0}")]
    NotReady(PathBuf),
    #[error("the gateway (pid {0}) that uses data dir {1} is still running; stop it first")]
    InUse(u32, PathBuf),
}

/// The pid file of a gateway with the embedded Redis, under its data dir.
pub const PID_FILE: &str = "slackgate.pid";
/// How long a start waits for a gateway still stopping (draining) with the same data dir.
const PREDECESSOR_WAIT: Duration = Duration::from_secs(30);

pub struct EmbeddedRedis {
    /// `None` when adopted from the process this one took over from (`run --upgrade`).
    child: Option<Child>,
    socket: PathBuf,
}

impl EmbeddedRedis {
    /// Start the private server. With `adopt` (a zero-downtime upgrade) a server that is
    /// already running under `data_dir` is taken over instead: the old process leaves it up.
    pub fn start(data_dir: &Path, adopt: bool) -> Result<Self, EmbeddedError> {
        std::fs::create_dir_all(data_dir).map_err(|e| EmbeddedError::DataDir(data_dir.into(), e))?;
        let dir = data_dir.canonicalize().map_err(|e| EmbeddedError::DataDir(data_dir.into(), e))?;
        let socket = dir.join("redis.sock");
        if ping(&socket) {
            if adopt {
                return Ok(EmbeddedRedis { child: None, socket });
            }
            // A gateway stopped a moment ago may still be draining into this server: wait for
            // it rather than take the server away from it (it stops the server as it exits).
            wait_for_predecessor(&dir)?;
        }
        if ping(&socket) {
            // A server left behind by a gateway that was killed still owns the AOF: stop it.
            shutdown(&socket);
        }
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocketperm", "700", "--appendonly", "yes", "--save", ""])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(EmbeddedError::Spawn)?;
        let mut child = child;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(&socket) {
            if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                return Err(EmbeddedError::NotReady(dir.join("redis.log")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(EmbeddedRedis { child: Some(child), socket })
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// Flush and stop the server; kill it if it does not go within 5 s. A server under the
    /// socket that is not this process's child (another gateway's, started after this one's
    /// was stopped) is left alone.
    pub fn stop(mut self) {
        if let Some(c) = &self.child {
            if server_pid(&self.socket).is_some_and(|pid| pid != c.id()) {
                return;
            }
        }
        shutdown(&self.socket);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let gone = match self.child.as_mut() {
                Some(c) => matches!(c.try_wait(), Ok(Some(_))),
                None => !ping(&self.socket),
            };
            if gone {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn client(socket: &Path) -> Option<redis::Connection> {
    let url = format!("redis+unix://{}", socket.display());
    redis::Client::open(url).ok()?.get_connection_with_timeout(Duration::from_millis(200)).ok()
}

fn ping(socket: &Path) -> bool {
    client(socket).is_some_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
}

/// The process id of the server answering on `socket`.
fn server_pid(socket: &Path) -> Option<u32> {
    let mut c = client(socket)?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut c).ok()?;
    info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|p| p.trim().parse().ok())
}

/// Wait while the pid file under `dir` names another gateway that is still running (stopping,
/// draining its work); `InUse` when it is still there after [`PREDECESSOR_WAIT`].
fn wait_for_predecessor(dir: &Path) -> Result<(), EmbeddedError> {
    let pid_file = dir.join(PID_FILE);
    let running = || -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        (pid != std::process::id() && String::from_utf8_lossy(&cmdline).contains("slackgate")).then_some(pid)
    };
    let deadline = Instant::now() + PREDECESSOR_WAIT;
    let mut said = false;
    while let Some(pid) = running() {
        if Instant::now() > deadline {
            return Err(EmbeddedError::InUse(pid, dir.to_path_buf()));
        }
        if !said {
            tracing::info!(pid, "waiting for the gateway that is stopping with this data dir to finish");
            said = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn shutdown(socket: &Path) {
    if let Some(mut c) = client(socket) {
        // The server closes the connection as it exits, so the reply is an error by design.
        let _ = redis::cmd("SHUTDOWN").query::<()>(&mut c);
    }
}
