//! A TCP relay on a fixed loopback port in front of one or more gateways' ports (a load balancer
//! with a stable address): a client configured once keeps reaching the gateways across restarts
//! (which bind new free ports) and replicas. Each new connection goes to the next target in
//! turn; while no target accepts, the relay keeps trying for up to 20 s before it gives up on
//! the client's connection, as a load balancer holds a request while a backend comes back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Relay {
    pub port: u16,
    targets: Arc<Mutex<Vec<u16>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// A relay with no target yet (connections wait until [`point_at`](Self::point_at)).
    pub async fn start() -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let targets: Arc<Mutex<Vec<u16>>> = Arc::default();
        let next = Arc::new(AtomicUsize::new(0));
        let t = targets.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                let (targets, next) = (t.clone(), next.clone());
                tokio::spawn(async move {
                    let Some(mut upstream) = connect(&targets, &next).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        Relay { port, targets, task }
    }

    /// Send new connections to these ports, in turn.
    pub fn point_at(&self, ports: &[u16]) {
        *self.targets.lock().unwrap() = ports.to_vec();
    }

    /// The Slack Web API base URL through the relay: `http://127.0.0.1:<port>/api/`.
    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/", self.port)
    }
}

async fn connect(targets: &Mutex<Vec<u16>>, next: &AtomicUsize) -> Option<tokio::net::TcpStream> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        let target = {
            let targets = targets.lock().unwrap();
            (!targets.is_empty()).then(|| targets[next.fetch_add(1, Ordering::Relaxed) % targets.len()])
        };
        if let Some(port) = target {
            if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                return Some(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}
