//! Slack's Web API as the egress itself calls it: forwarding a bot's call byte for byte, learning
//! who a token is (`auth.test`, cached); `look` uses its own calls to look for a post whose
//! answer was lost.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::Value;

use super::identities::Identities;
use super::model::{Call, Identity, Verb};
use crate::config::Upstream;
use crate::secret::Secret;
use crate::upstream::{Response, SendError, UpstreamClient};

/// Which `Accept-Encoding` goes to Slack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// The bot's own: the answer is streamed to it untouched.
    AsAsked,
    /// `identity`: the egress reads the answer.
    Identity,
}

/// What the egress buffers of an answer of Slack's: a write's (kept for its replays) and its
/// own calls' (`auth.test`, the history it reconciles against). Reads are streamed, unbounded.
const MAX_KEPT_ANSWER: usize = 8 << 20;

pub struct SlackApi {
    base: Upstream,
    client: UpstreamClient,
    identities: Mutex<Identities>,
}

impl SlackApi {
    pub fn new(base: Upstream) -> Self {
        SlackApi { base, client: UpstreamClient::new(), identities: Mutex::default() }
    }

    fn url(&self, path_and_query: &str) -> String {
        // The bot's path is `/api/<method>?…`; the base ends in `/`.
        self.base.join(path_and_query.strip_prefix("/api/").unwrap_or(path_and_query))
    }

    /// The bot's call as it sent it: its method, target, end-to-end headers and body; the
    /// length is the body's (an empty POST says `Content-Length: 0`, as Slack wants it).
    fn request(&self, call: &Call, encoding: Encoding) -> Result<http::Request<Full<Bytes>>, SendError> {
        let uri = self.url(&call.path_and_query).parse::<http::Uri>().map_err(|e| SendError::Request(e.to_string()))?;
        let mut req = http::Request::new(Full::new(call.body.clone()));
        *req.method_mut() = call.verb.as_http();
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        *headers = call.headers.clone();
        if encoding == Encoding::Identity {
            headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
        }
        if call.verb == Verb::Post || !call.body.is_empty() {
            headers.insert(http::header::CONTENT_LENGTH, call.body.len().into());
        }
        Ok(req)
    }

    /// A write: its answer read whole (the egress parses and keeps it), so in plain bytes.
    pub async fn forward(&self, call: &Call, timeout: Duration) -> Result<Response, SendError> {
        let req = self.request(call, Encoding::Identity)?;
        self.client.call(req, timeout, MAX_KEPT_ANSWER).await
    }

    /// A read: its answer's head within `timeout`; the body is the caller's to stream, in
    /// whatever encoding the bot asked for.
    pub async fn open(&self, call: &Call, timeout: Duration) -> Result<http::Response<Incoming>, SendError> {
        let req = self.request(call, Encoding::AsAsked)?;
        self.client.open(req, timeout).await
    }

    /// A call of the egress's own, with the bot's token, form-encoded.
    async fn own_call(&self, method: &str, token: &Secret, form: &[(&str, &str)]) -> Result<Value, SendError> {
        let resp = self.own_response(method, token, form).await?;
        serde_json::from_slice(&resp.body).map_err(|e| SendError::Request(format!("{method}: {e}")))
    }

    /// The same, with Slack's whole answer (status, `Retry-After`).
    pub(super) async fn own_response(
        &self,
        method: &str,
        token: &Secret,
        form: &[(&str, &str)],
    ) -> Result<Response, SendError> {
        let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let req = http::Request::post(self.url(method))
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(http::header::AUTHORIZATION, format!("Bearer {}", String::from_utf8_lossy(token.expose())))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| SendError::Request(e.to_string()))?;
        self.client.call(req, Duration::from_secs(5), MAX_KEPT_ANSWER).await
    }

    /// Who `token` is (team, bot user and bot id), from a cached `auth.test`.
    pub async fn identity(&self, token_hash: &str, token: &Secret) -> Option<Identity> {
        let known = self.identities.lock().unwrap_or_else(|e| e.into_inner()).get(token_hash, Instant::now());
        if known.is_some() {
            return known;
        }
        let v = self.own_call("auth.test", token, &[]).await.ok()?;
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        if v.get("ok").and_then(Value::as_bool) != Some(true) || text("team_id").is_empty() {
            return None;
        }
        let id = Identity { team: text("team_id"), user_id: text("user_id"), bot_id: text("bot_id") };
        let mut cache = self.identities.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(token_hash, id.clone(), Instant::now());
        Some(id)
    }
}
