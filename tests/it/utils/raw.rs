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

/// One HTTP/1.1 request (`head` without its last blank line, then `body`) to 127.0.0.1:`port`
/// from the local address `from` (any of 127.0.0.0/8): the status and the answer's head.
pub async fn request_from(from: &str, port: u16, head: &str, body: &str) -> (u16, String) {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(from.parse().unwrap(), 0)).unwrap();
    let mut conn = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let request = format!("{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer)).await.expect("an answer").unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{answer}"));
    let head = answer.split("\r\n\r\n").next().unwrap_or_default().to_string();
    (status, head)
}
