//! What one Slack-facing connection may cost. Pingora bounds each *read* of a request, not the
//! whole of it, puts no timeout on reading the next request of a kept-alive connection, and no
//! cap on open connections (cloudflare/pingora#447, still open in 0.9; #540 for the keep-alive
//! timer reset between requests), so a client sending one header byte a minute, or a thousand
//! idle sockets, would hold the gateway's memory and file descriptors for as long as it likes.
//! This guard works around that until Pingora has a whole-request deadline of its own.
//! [`Guarded`] wraps Pingora's HTTP app and gives each connection:
//!
//! - `header_timeout` to send its complete request headers (from the connection's start, or
//!   from the first byte of a later request line on a kept-alive connection);
//! - `idle_timeout` between the end of one answer and the first byte of the next request line
//!   (empty lines before it are skipped, as the parser skips them, and start nothing);
//! - a place among at most `max_connections`: the excess is closed at once, unanswered.
//!
//! The egress and admin listeners stand behind the same guard, each with its own count.
//!
//! The body has its own deadline, `body_timeout`, enforced where the body is read (the
//! ingress, the egress, and Pingora's per-read timeout on passthrough). A connection past a
//! deadline is dropped by cancelling its task: nothing is half-recorded (a request in its header phase has
//! done nothing yet) and no error line is written per slow client; they are counted in
//! `slackgate_connections_closed_total{reason}`.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, Ssl, Stream, UniqueID, UniqueIDType,
};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::ListenerLimits;
use crate::shared::Shared;

/// Why the gateway closed a connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    HeaderTimeout,
    IdleTimeout,
    OverLimit,
}

impl Closed {
    pub const ALL: [Closed; 3] = [Closed::HeaderTimeout, Closed::IdleTimeout, Closed::OverLimit];

    pub fn as_label(self) -> &'static str {
        match self {
            Closed::HeaderTimeout => "header_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::OverLimit => "over_limit",
        }
    }
}

/// Pingora's HTTP app (`A`), with the limits above around every connection.
pub struct Guarded<A> {
    inner: Arc<A>,
    limits: ListenerLimits,
    /// Where the connections are counted: the `connections_*` series are the Slack listener's
    /// (they carry no listener label), so the egress and admin guards count nowhere.
    metered: Option<Arc<Shared>>,
    open: AtomicUsize,
}

impl<A> Guarded<A> {
    /// The Slack listener's guard, counted in `slackgate_connections_*`.
    pub fn new(inner: A, limits: ListenerLimits, shared: Arc<Shared>) -> Self {
        Guarded { inner: Arc::new(inner), limits, metered: Some(shared), open: AtomicUsize::new(0) }
    }

    /// The guard of another listener (egress, admin): the same limits, not counted.
    pub fn uncounted(inner: A, limits: ListenerLimits) -> Self {
        Guarded { inner: Arc::new(inner), limits, metered: None, open: AtomicUsize::new(0) }
    }

    fn closed(&self, reason: Closed) {
        if let Some(shared) = &self.metered {
            shared.metrics.connections_closed.with_label_values(&[reason.as_label()]).inc();
        }
    }
}

/// One open connection, counted until dropped.
struct Slot<'a>(&'a AtomicUsize, Option<&'a Shared>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        if let Some(shared) = self.1 {
            shared.metrics.connections_open.dec();
        }
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Guarded<A> {
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        if self.open.fetch_add(1, Ordering::Relaxed) >= self.limits.max_connections {
            self.open.fetch_sub(1, Ordering::Relaxed);
            self.closed(Closed::OverLimit);
            return None;
        }
        let metered = self.metered.as_deref();
        if let Some(shared) = metered {
            shared.metrics.connections_open.inc();
        }
        let _slot = Slot(&self.open, metered);
        let clock = Arc::new(Clock::new(self.limits.header_timeout));
        let guarded = GuardedStream { inner: stream, clock: clock.clone(), limits: self.limits };
        let watchdog = async {
            let reason = clock.expired().await;
            // Counted before the connection is dropped, so the count is there when it closes.
            self.closed(reason);
        };
        tokio::select! {
            // The inner app loops over the connection's kept-alive requests itself and only
            // returns when the connection is done.
            _ = self.inner.process_new(Box::new(guarded), shutdown) => {}
            _ = watchdog => {}
        }
        None
    }

    /// Not passed on. Pingora's HTTP app aborts, when its listener stops, every connection
    /// still waiting for a request, and that includes one accepted a moment before whose
    /// request has not been read yet: its client gets a closed connection, unanswered. Here a
    /// connection accepted before the stop is served within the grace period (a request on a
    /// kept-alive one too, told to close); idle ones end at `idle_timeout` or with the runtime.
    async fn cleanup(&self) {}
}

/// Where a connection is in its request cycle, as seen from its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    /// Waiting for the first byte of the next request (`idle_timeout`).
    Idle = 0,
    /// Inside the request headers (`header_timeout`).
    Headers = 1,
    /// Headers complete: the body and the answer are the app's to bound.
    Open = 2,
    /// An answer was written; the next read starts the next request's wait.
    Answered = 3,
}

/// The deadline of one connection, shared by its stream (which moves it as bytes flow) and
/// its watchdog (which closes the connection when it passes).
struct Clock {
    start: Instant,
    phase: AtomicU8,
    /// Milliseconds after `start`; `u64::MAX` when no deadline is armed.
    deadline_ms: AtomicU64,
    changed: Notify,
    /// Where the head scan is (a [`Scan`]).
    scan: AtomicU8,
}

/// The scan of a request head for its end, one byte at a time.
///
/// Empty lines before the request line are skipped, as the HTTP parser skips them (RFC 9112
/// §2.2): they neither begin a request nor end one, so a client sending only CRLFs stays under
/// the deadline it was under (`idle_timeout` between requests, `header_timeout` on a new
/// connection) instead of passing for a complete head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Scan {
    /// No byte of the request line yet (only empty lines, if anything).
    BeforeRequest = 0,
    /// Inside a line of the head.
    InLine = 1,
    /// Just after a line's `\n`: another `\n` (bare LF, which the parser accepts) ends the head.
    LineEnd = 2,
    /// `\n` `\r`: a `\n` now ends the head.
    LineEndCr = 3,
}

impl Scan {
    fn from_u8(v: u8) -> Scan {
        match v {
            0 => Scan::BeforeRequest,
            1 => Scan::InLine,
            2 => Scan::LineEnd,
            _ => Scan::LineEndCr,
        }
    }

    /// The next state, or `None` when `b` ends the head.
    fn next(self, b: u8) -> Option<Scan> {
        Some(match (self, b) {
            (Scan::BeforeRequest, b'\r' | b'\n') => Scan::BeforeRequest,
            (Scan::LineEnd | Scan::LineEndCr, b'\n') => return None,
            (Scan::LineEnd, b'\r') => Scan::LineEndCr,
            (_, b'\n') => Scan::LineEnd,
            _ => Scan::InLine,
        })
    }
}

/// What one read did to the request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Nothing of a request yet: no bytes, or only empty lines.
    NotBegun,
    /// The request line has begun; the head is not complete.
    Begun,
    Complete,
}

const NO_DEADLINE: u64 = u64::MAX;

impl Clock {
    fn new(header_timeout: Duration) -> Self {
        Clock {
            start: Instant::now(),
            phase: AtomicU8::new(Phase::Headers as u8),
            deadline_ms: AtomicU64::new(header_timeout.as_millis() as u64),
            changed: Notify::new(),
            scan: AtomicU8::new(0),
        }
    }

    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Idle,
            1 => Phase::Headers,
            2 => Phase::Open,
            _ => Phase::Answered,
        }
    }

    /// Enter `phase` with a deadline `after` from now (or none).
    fn enter(&self, phase: Phase, after: Option<Duration>) {
        self.phase.store(phase as u8, Ordering::Relaxed);
        let deadline = after.map_or(NO_DEADLINE, |d| (self.start.elapsed() + d).as_millis() as u64);
        self.deadline_ms.store(deadline, Ordering::Relaxed);
        if after.is_some() {
            self.changed.notify_one();
        }
    }

    /// Resolves when the armed deadline passes, with the reason.
    async fn expired(&self) -> Closed {
        loop {
            let deadline = self.deadline_ms.load(Ordering::Relaxed);
            if deadline == NO_DEADLINE {
                self.changed.notified().await;
                continue;
            }
            let at = self.start + Duration::from_millis(deadline);
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = self.changed.notified() => continue,
            }
            // Still the same deadline: nothing moved the connection on in time.
            if self.deadline_ms.load(Ordering::Relaxed) == deadline {
                return match self.phase() {
                    Phase::Idle | Phase::Answered => Closed::IdleTimeout,
                    Phase::Headers | Phase::Open => Closed::HeaderTimeout,
                };
            }
        }
    }

    /// Feed request bytes to the head scan. A complete head ends at an empty line after the
    /// request line (`\r\n\r\n`, or bare `\n\n`, which the HTTP parser also accepts); the scan
    /// then starts over for the next request.
    fn scan_head(&self, bytes: &[u8]) -> Head {
        let mut state = Scan::from_u8(self.scan.load(Ordering::Relaxed));
        for &b in bytes {
            match state.next(b) {
                Some(next) => state = next,
                None => {
                    self.scan.store(Scan::BeforeRequest as u8, Ordering::Relaxed);
                    return Head::Complete;
                }
            }
        }
        self.scan.store(state as u8, Ordering::Relaxed);
        if state == Scan::BeforeRequest {
            Head::NotBegun
        } else {
            Head::Begun
        }
    }
}

/// The connection's stream, reporting its progress to its [`Clock`].
struct GuardedStream {
    inner: Stream,
    clock: Arc<Clock>,
    limits: ListenerLimits,
}

impl std::fmt::Debug for GuardedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedStream").field("inner", &self.inner).finish()
    }
}

impl GuardedStream {
    fn on_read(&self, bytes: &[u8]) {
        let clock = &self.clock;
        let phase = clock.phase();
        if !matches!(phase, Phase::Idle | Phase::Headers) {
            return;
        }
        match clock.scan_head(bytes) {
            Head::NotBegun => {}
            Head::Begun if phase == Phase::Idle => clock.enter(Phase::Headers, Some(self.limits.header_timeout)),
            Head::Begun => {}
            Head::Complete => clock.enter(Phase::Open, None),
        }
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if self.clock.phase() == Phase::Answered {
            // Reading again after an answer: the next request's wait has begun.
            self.clock.enter(Phase::Idle, Some(self.limits.idle_timeout));
        }
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            self.on_read(&buf.filled()[before..]);
        }
        poll
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) && self.clock.phase() == Phase::Open {
            self.clock.enter(Phase::Answered, None);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) && self.clock.phase() == Phase::Open {
            self.clock.enter(Phase::Answered, None);
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

// Everything else is the wrapped stream's.

#[async_trait]
impl Shutdown for GuardedStream {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for GuardedStream {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for GuardedStream {
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }
    fn get_ssl_digest(&self) -> Option<Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }
    fn selected_alpn_proto(&self) -> Option<pingora::protocols::ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for GuardedStream {
    fn get_timing_digest(&self) -> Vec<Option<pingora::protocols::TimingDigest>> {
        self.inner.get_timing_digest()
    }
    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }
    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for GuardedStream {
    fn get_proxy_digest(&self) -> Option<Arc<pingora::protocols::raw_connect::ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
    fn set_proxy_digest(&mut self, digest: pingora::protocols::raw_connect::ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for GuardedStream {
    fn get_socket_digest(&self) -> Option<Arc<pingora::protocols::SocketDigest>> {
        self.inner.get_socket_digest()
    }
    fn set_socket_digest(&mut self, digest: pingora::protocols::SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for GuardedStream {
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_headers_is_found_across_reads() {
        let c = Clock::new(Duration::from_secs(1));
        assert_eq!(c.scan_head(b"POST / HTTP/1.1\r\nHost: a\r\n"), Head::Begun);
        assert_eq!(c.scan_head(b"\r"), Head::Begun);
        assert_eq!(c.scan_head(b"\nbody"), Head::Complete);
        assert_eq!(c.scan_head(b"GET / HTTP/1.1\nHost: a\n\n"), Head::Complete, "bare LF");
        assert_eq!(c.scan_head(b"GET / HTTP/1.1\r\nA: \rb\r\n"), Head::Begun);
        assert_eq!(c.scan_head(b"\r\n"), Head::Complete);
    }

    #[test]
    fn empty_lines_before_the_request_line_are_no_head() {
        let c = Clock::new(Duration::from_secs(1));
        assert_eq!(c.scan_head(b""), Head::NotBegun);
        for _ in 0..3 {
            assert_eq!(c.scan_head(b"\r\n\r\n\n\n\r\n"), Head::NotBegun);
        }
        assert_eq!(c.scan_head(b"\r\nGET / HTTP/1.1\r\n"), Head::Begun);
        assert_eq!(c.scan_head(b"Host: a\r\n\r\n"), Head::Complete);
        // The next request on the connection may have its own leading empty lines.
        assert_eq!(c.scan_head(b"\r\n\r\n"), Head::NotBegun);
        assert_eq!(c.scan_head(b"\r\nGET / HTTP/1.1\r\n\r\n"), Head::Complete);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_only_when_nothing_moved_it() {
        let c = Arc::new(Clock::new(Duration::from_secs(10)));
        let watch = tokio::spawn({
            let c = c.clone();
            async move { c.expired().await }
        });
        tokio::time::sleep(Duration::from_secs(9)).await;
        c.enter(Phase::Open, None);
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert!(!watch.is_finished(), "no deadline while the app owns the request");
        c.enter(Phase::Idle, Some(Duration::from_secs(60)));
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert!(!watch.is_finished());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(watch.await.unwrap(), Closed::IdleTimeout);
    }
}
