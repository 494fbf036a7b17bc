//! Raw TCP toward a listener, for the tests of what a connection may cost: slow, idle and
//! broken clients.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

pub async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port)).await.unwrap()
}

/// Read until the peer closes (or `limit` passes); `true` if it closed.
pub async fn closed_within(conn: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}
