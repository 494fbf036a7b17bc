//! One pooled HTTP client toward the bots and Slack's `response_url`s (hyper's pooled client,
//! rustls with the system's roots and SNI, names resolved on the blocking pool). It re-signs
//! each delivery with a fresh timestamp, so a late delivery still passes the bot's own
//! five-minute check, and sends exactly the bytes Slack sent.
//!
//! Not Pingora's connector: its pool hands a kept-alive connection from one runtime's idle
//! watcher to another thread racily and logs `failed to acquire reusable stream` at ERROR for
//! ordinary traffic (pingora-core 0.9 `connectors/mod.rs`).

use std::error::Error as StdError;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::{Secret, Upstream};
use crate::slack;

mod direct;
mod transport;
use direct::Direct;
pub use transport::{SocketBots, Transport};

/// Bodies the bot answers with are read up to this size (Slack's own reply limits are smaller).
const MAX_RESPONSE_BODY: usize = 1 << 20;
/// The longest `Retry-After` believed: a day. A peer asking for more (or sending more digits
/// than any duration has) is taken to mean a day, so no arithmetic ever sees its number.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);
const POOL_IDLE: Duration = Duration::from_secs(60);
/// A peer that has not accepted a connection by then is unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type BoxError = Box<dyn StdError + Send + Sync>;

/// Why an attempt got no answer. The message is short (it goes into logs and the dead-letter
/// record); the source chain keeps the details.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot resolve the host")]
    Resolve(#[source] BoxError),
    #[error("connection refused")]
    Refused(#[source] BoxError),
    #[error("connect timed out")]
    ConnectTimeout(#[source] BoxError),
    #[error("cannot connect")]
    Connect(#[source] BoxError),
    #[error("timed out")]
    Timeout,
    #[error("connection failed during the exchange")]
    Io(#[source] BoxError),
    #[error("response body over its size limit")]
    TooLarge,
    #[error("bad request: {0}")]
    Request(String),
}

impl SendError {
    /// Whether the request may have reached the server: no answer came, but the connection was
    /// made (a timeout, or a drop after the request was written). Such a call must not simply
    /// be sent again when it is not idempotent.
    pub fn maybe_sent(&self) -> bool {
        matches!(self, SendError::Timeout | SendError::Io(_) | SendError::TooLarge)
    }

    /// A small fixed label for metrics and state-change logs.
    pub fn as_label(&self) -> &'static str {
        match self {
            SendError::Resolve(_) => "resolve",
            SendError::Refused(_) => "refused",
            SendError::ConnectTimeout(_) => "connect_timeout",
            SendError::Connect(_) => "connect",
            SendError::Timeout => "timeout",
            SendError::Io(_) => "io",
            SendError::TooLarge => "too_large",
            SendError::Request(_) => "request",
        }
    }

    /// Sort a client error by what went wrong, keeping it as the source.
    fn from_client(e: hyper_util::client::legacy::Error) -> SendError {
        if !e.is_connect() {
            return SendError::Io(e.into());
        }
        let mut source: Option<&(dyn StdError + 'static)> = e.source();
        while let Some(s) = source {
            if let Some(io) = s.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    std::io::ErrorKind::ConnectionRefused => return SendError::Refused(e.into()),
                    std::io::ErrorKind::TimedOut => return SendError::ConnectTimeout(e.into()),
                    _ => {}
                }
            }
            if s.to_string().contains("dns error") {
                return SendError::Resolve(e.into());
            }
            source = s.source();
        }
        SendError::Connect(e.into())
    }
}

/// One delivery attempt toward the bot.
pub struct Outgoing<'a> {
    pub upstream: &'a Upstream,
    /// The path (and query) Slack used; replaced by the upstream URL's path when it has one.
    pub path: &'a str,
    pub content_type: &'a str,
    pub body: Bytes,
    pub secret: &'a Secret,
    pub delivery_id: &'a str,
    pub attempt: u64,
    /// The run it belongs to (1 the first; more when a run lost with the bot runs again).
    pub run: u64,
    /// W3C `traceparent` of the attempt's span (`[telemetry]` on); no `tracestate`: the
    /// gateway keeps none.
    pub traceparent: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
    /// `Retry-After` in seconds, when the bot sent one (at most [`MAX_RETRY_AFTER`]).
    pub retry_after: Option<Duration>,
    /// All of them (the egress passes Slack's on).
    pub headers: http::HeaderMap,
    /// The Socket Mode bot socket that carried it (its id in this process).
    pub socket: Option<u64>,
}

/// `Retry-After` as delay-seconds (RFC 9110 §10.2.3), at most [`MAX_RETRY_AFTER`]; an
/// HTTP-date, a negative or any other value is no hint at all.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Only digits: a parse error is an overflow, which is past the bound anyway.
    let secs = v.parse::<u64>().unwrap_or(u64::MAX).min(MAX_RETRY_AFTER.as_secs());
    Some(Duration::from_secs(secs))
}

pub struct UpstreamClient {
    http: Client<hyper_rustls::HttpsConnector<Direct>, Full<Bytes>>,
    /// Bots (by upstream URL) whose last attempt got no answer at all: a bot going down or
    /// coming back is logged once, not once per attempt.
    unreachable: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Default for UpstreamClient {
    fn default() -> Self {
        Self::new()
    }
}

impl UpstreamClient {
    pub fn new() -> Self {
        pingora::tls::install_default_crypto_provider();
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        http.enforce_http(false);
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = builder.with_native_roots().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "no system root certificates: https upstreams will fail");
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            )
        });
        let https = builder.https_or_http().enable_http1().wrap_connector(Direct(http));
        let http = Client::builder(TokioExecutor::new()).pool_idle_timeout(POOL_IDLE).build(https);
        UpstreamClient { http, unreachable: Default::default() }
    }

    /// Send one attempt; the whole exchange is bounded by `timeout`.
    pub async fn send(&self, req: Outgoing<'_>, timeout: Duration) -> Result<Response, SendError> {
        let request = signed_request(&req)?;
        let result = self.exchange(request, timeout).await;
        self.note_reachability(&req.upstream.url, &result);
        result
    }

    /// Log a bot's state change: no answer at all (it is down, or not listening) or answering
    /// again. Each attempt is counted in the metrics and audited on its own.
    fn note_reachability(&self, url: &str, result: &Result<Response, SendError>) {
        let mut down = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Err(e) if !down.contains(url) => {
                down.insert(url.to_string());
                tracing::warn!(upstream = %url, error = %e, "bot unreachable; deliveries wait and are retried");
            }
            Ok(_) if down.remove(url) => tracing::info!(upstream = %url, "bot reachable again"),
            _ => {}
        }
    }

    /// POST a JSON reply to a Slack `response_url` (no Slack signature: that is for bots).
    /// The URL must have passed [`slack::check_response_url`].
    pub async fn post_json(&self, url: &url::Url, json: Bytes, timeout: Duration) -> Result<Response, SendError> {
        let request = http::Request::post(url.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(json))
            .map_err(|e| SendError::Request(e.to_string()))?;
        self.exchange(request, timeout).await
    }

    /// One request, its answer read whole up to `limit` bytes (else [`SendError::TooLarge`]),
    /// all within `timeout`; with the answer's headers.
    pub async fn call(
        &self,
        request: http::Request<Full<Bytes>>,
        timeout: Duration,
        limit: usize,
    ) -> Result<Response, SendError> {
        let call = async {
            let resp = self.http.request(request).await.map_err(SendError::from_client)?;
            read_whole(resp, limit).await
        };
        tokio::time::timeout(timeout, call).await.unwrap_or(Err(SendError::Timeout))
    }

    /// One request whose answer is streamed by the caller: its head within `timeout`.
    pub async fn open(
        &self,
        request: http::Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<http::Response<hyper::body::Incoming>, SendError> {
        let call = self.http.request(request);
        match tokio::time::timeout(timeout, call).await {
            Ok(r) => r.map_err(SendError::from_client),
            Err(_) => Err(SendError::Timeout),
        }
    }

    async fn exchange(&self, request: http::Request<Full<Bytes>>, timeout: Duration) -> Result<Response, SendError> {
        self.call(request, timeout, MAX_RESPONSE_BODY).await
    }
}

/// An answer's body read whole, up to `limit` bytes.
async fn read_whole(resp: http::Response<hyper::body::Incoming>, limit: usize) -> Result<Response, SendError> {
    let (head, body) = resp.into_parts();
    let body = Limited::new(body, limit).collect().await.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            SendError::TooLarge
        } else {
            SendError::Io(e)
        }
    })?;
    let header = |name: http::header::HeaderName| head.headers.get(name).and_then(|v| v.to_str().ok());
    Ok(Response {
        status: head.status.as_u16(),
        content_type: header(http::header::CONTENT_TYPE).map(String::from),
        body: body.to_bytes(),
        retry_after: header(http::header::RETRY_AFTER).and_then(parse_retry_after),
        headers: head.headers,
        socket: None,
    })
}

// The headers of a delivery, named once (names given as text are parsed on every request).
const TIMESTAMP: http::HeaderName = http::HeaderName::from_static("x-slack-request-timestamp");
const SIGNATURE: http::HeaderName = http::HeaderName::from_static("x-slack-signature");
const DELIVERY: http::HeaderName = http::HeaderName::from_static("x-slackgate-delivery");
const ATTEMPT: http::HeaderName = http::HeaderName::from_static("x-slackgate-attempt");
const RUN: http::HeaderName = http::HeaderName::from_static("x-slackgate-run");
const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

/// The request Slack would have sent the bot, signed now.
fn signed_request(req: &Outgoing<'_>) -> Result<http::Request<Full<Bytes>>, SendError> {
    let path = req.upstream.path.as_deref().unwrap_or(req.path);
    let scheme = if req.upstream.tls { "https" } else { "http" };
    let uri = format!("{scheme}://{}{path}", req.upstream.authority());
    let ts = crate::clock::now_secs().to_string();
    let signature = slack::sign(req.secret.expose(), &ts, &req.body);
    let request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, req.content_type)
        .header(http::header::USER_AGENT, "Slackbot 1.0 (+https://api.slack.com/robots)")
        .header(TIMESTAMP, ts)
        .header(SIGNATURE, signature)
        .header(DELIVERY, req.delivery_id)
        .header(ATTEMPT, req.attempt.to_string())
        .header(RUN, req.run.to_string());
    let request = match &req.traceparent {
        Some(tp) => request.header(TRACEPARENT, tp.as_str()),
        None => request,
    };
    request.body(Full::new(req.body.clone())).map_err(|e| SendError::Request(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_bounded_when_parsed() {
        assert_eq!(parse_retry_after("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("86401"), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("18446744073709551615"), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after(&"9".repeat(400)), Some(MAX_RETRY_AFTER), "no overflow");
        for bad in ["", "-1", "1.5", "+3", "Wed, 21 Oct 2015 07:28:00 GMT", "3 s", "٣"] {
            assert_eq!(parse_retry_after(bad), None, "{bad:?}");
        }
    }
}
