//! One pooled HTTP client toward the bots (Pingora's connector: keep-alive pool, rustls with the
//! system's roots and SNI). It re-signs each delivery with a fresh timestamp, so a late delivery
//! still passes the bot's own five-minute check, and sends exactly the bytes Slack sent.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::upstreams::peer::HttpPeer;

use crate::config::{Secret, Upstream};
use crate::slack;

/// Bodies the bot answers with are read up to this size (Slack's own reply limits are smaller).
const MAX_RESPONSE_BODY: usize = 1 << 20;
const POOL_IDLE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot resolve {0}")]
    Resolve(String),
    #[error("connect: {0}")]
    Connect(String),
    #[error("timed out")]
    Timeout,
    #[error("i/o: {0}")]
    Io(String),
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
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
    /// `Retry-After` in seconds, when the bot sent one.
    pub retry_after: Option<Duration>,
}

pub struct UpstreamClient {
    connector: Connector,
}

impl Default for UpstreamClient {
    fn default() -> Self {
        Self::new()
    }
}

impl UpstreamClient {
    pub fn new() -> Self {
        UpstreamClient { connector: Connector::new(None) }
    }

    /// Send one attempt; the whole exchange is bounded by `timeout`.
    pub async fn send(&self, req: Outgoing<'_>, timeout: Duration) -> Result<Response, SendError> {
        match tokio::time::timeout(timeout, self.attempt(req, timeout)).await {
            Ok(r) => r,
            Err(_) => Err(SendError::Timeout),
        }
    }

    /// POST a JSON reply to a Slack `response_url` (no Slack signature: that is for bots).
    pub async fn post_json(&self, url: &str, json: Bytes, timeout: Duration) -> Result<Response, SendError> {
        let upstream = Upstream::parse(url).map_err(|e| SendError::Connect(format!("response_url {e}")))?;
        let path = upstream.path.clone().unwrap_or_else(|| "/".into());
        let bad = |e: Box<pingora::Error>| SendError::Io(e.to_string());
        let mut h = RequestHeader::build("POST", path.as_bytes(), Some(4)).map_err(bad)?;
        for (name, value) in [
            ("Host", upstream.authority()),
            ("Content-Type", "application/json".to_string()),
            ("Content-Length", json.len().to_string()),
        ] {
            h.insert_header(name, value).map_err(bad)?;
        }
        let call = self.exchange(&upstream, h, json, timeout);
        tokio::time::timeout(timeout, call).await.unwrap_or(Err(SendError::Timeout))
    }

    /// Post a bot's late answer to a slash command or block action to its `response_url`,
    /// once; a failure is counted, not retried (the URL is valid 5 times in 30 minutes).
    pub async fn post_late_reply(&self, app: &str, url: &str, content_type: Option<&str>, body: &[u8]) {
        let Some(json) = crate::slack::late_reply(content_type, body) else { return };
        let outcome = match self.post_json(url, Bytes::from(json), Duration::from_secs(5)).await {
            Ok(r) if (200..300).contains(&r.status) => "posted",
            Ok(r) => {
                tracing::warn!(status = r.status, "response_url refused the late reply");
                "failed"
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot post the late reply to response_url");
                "failed"
            }
        };
        crate::metrics::METRICS.response_url_posts.with_label_values(&[app, outcome]).inc();
    }

    async fn attempt(&self, req: Outgoing<'_>, timeout: Duration) -> Result<Response, SendError> {
        let header = request_header(&req)?;
        self.exchange(req.upstream, header, req.body, timeout).await
    }

    async fn exchange(
        &self,
        upstream: &Upstream,
        header: RequestHeader,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response, SendError> {
        let peer = peer_for(upstream, timeout).await?;
        let (mut session, _reused) =
            self.connector.get_http_session(&peer).await.map_err(|e| SendError::Connect(e.to_string()))?;
        let io = |e: Box<pingora::Error>| SendError::Io(e.to_string());
        session.write_request_header(Box::new(header)).await.map_err(io)?;
        session.write_request_body(body, true).await.map_err(io)?;
        session.finish_request_body().await.map_err(io)?;
        session.read_response_header().await.map_err(io)?;
        let head = session.response_header().ok_or_else(|| SendError::Io("no response header".into()))?;
        let status = head.status.as_u16();
        let content_type = head.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(String::from);
        let retry_after = head
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut body = BytesMut::new();
        while let Some(chunk) = session.read_response_body().await.map_err(io)? {
            if body.len() + chunk.len() > MAX_RESPONSE_BODY {
                return Err(SendError::Io("response body too large".into()));
            }
            body.extend_from_slice(&chunk);
        }
        self.connector.release_http_session(session, &peer, Some(POOL_IDLE)).await;
        Ok(Response { status, content_type, body: body.freeze(), retry_after })
    }
}

async fn peer_for(up: &Upstream, timeout: Duration) -> Result<HttpPeer, SendError> {
    let addr: SocketAddr = match up.host.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, up.port),
        Err(_) => tokio::net::lookup_host((up.host.as_str(), up.port))
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| SendError::Resolve(up.host.clone()))?,
    };
    let mut peer = HttpPeer::new(addr, up.tls, up.host.clone());
    peer.options.connection_timeout = Some(timeout.min(Duration::from_secs(5)));
    peer.options.read_timeout = Some(timeout);
    peer.options.write_timeout = Some(timeout);
    peer.options.idle_timeout = Some(POOL_IDLE);
    Ok(peer)
}

fn request_header(req: &Outgoing<'_>) -> Result<RequestHeader, SendError> {
    let path = req.upstream.path.as_deref().unwrap_or(req.path);
    let bad = |e: Box<pingora::Error>| SendError::Io(e.to_string());
    let mut h = RequestHeader::build("POST", path.as_bytes(), Some(8)).map_err(bad)?;
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs().to_string();
    let signature = slack::sign(req.secret.expose(), &ts, &req.body);
    let headers: [(&str, String); 8] = [
        ("Host", req.upstream.authority()),
        ("Content-Type", req.content_type.to_string()),
        ("Content-Length", req.body.len().to_string()),
        ("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)".into()),
        ("X-Slack-Request-Timestamp", ts),
        ("X-Slack-Signature", signature),
        ("X-Slackgate-Delivery", req.delivery_id.to_string()),
        ("X-Slackgate-Attempt", req.attempt.to_string()),
    ];
    for (name, value) in headers {
        h.insert_header(name, value).map_err(bad)?;
    }
    Ok(h)
}
