//! Slack's Web API as the egress itself calls it: forwarding a bot's call byte for byte, learning
//! who a token is (`auth.test`, cached); `look` uses its own calls to look for a post whose
//! answer was lost.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;

use super::call::Call;
use crate::config::Upstream;
use crate::secret::Secret;
use crate::upstream::{Response, SendError, UpstreamClient};

/// Who a token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub team: String,
    pub user_id: String,
    pub bot_id: String,
}

/// How long a token's identity is trusted.
const IDENTITY_TTL: Duration = Duration::from_secs(3600);

pub struct SlackApi {
    base: Upstream,
    client: UpstreamClient,
    identities: Mutex<HashMap<String, (Identity, Instant)>>,
}

impl SlackApi {
    pub fn new(base: Upstream) -> Self {
        SlackApi { base, client: UpstreamClient::new(), identities: Mutex::default() }
    }

    fn url(&self, path_and_query: &str) -> String {
        // The bot's path is `/api/<method>?…`; the base ends in `/`.
        let tail = path_and_query.strip_prefix("/api/").unwrap_or(path_and_query);
        let scheme = if self.base.tls { "https" } else { "http" };
        format!("{scheme}://{}{}{tail}", self.base.authority(), self.base.path.as_deref().unwrap_or("/"))
    }

    /// The bot's call, as it sent it: body, content type and `Authorization` unchanged.
    pub async fn forward(&self, call: &Call, timeout: Duration) -> Result<Response, SendError> {
        let mut req = http::Request::post(self.url(&call.path_and_query));
        if let Some(ct) = &call.content_type {
            req = req.header(http::header::CONTENT_TYPE, ct);
        }
        if let Some(auth) = &call.authorization {
            req = req.header(http::header::AUTHORIZATION, auth);
        }
        let req = req.body(Full::new(call.body.clone())).map_err(|e| SendError::Request(e.to_string()))?;
        self.client.call(req, timeout).await
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
        self.client.call(req, Duration::from_secs(5)).await
    }

    /// Who `token` is (team, bot user and bot id), from a cached `auth.test`.
    pub async fn identity(&self, token_hash: &str, token: &Secret) -> Option<Identity> {
        if let Some((id, at)) = self.identities.lock().unwrap_or_else(|e| e.into_inner()).get(token_hash) {
            if at.elapsed() < IDENTITY_TTL {
                return Some(id.clone());
            }
        }
        let v = self.own_call("auth.test", token, &[]).await.ok()?;
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        if v.get("ok").and_then(Value::as_bool) != Some(true) || text("team_id").is_empty() {
            return None;
        }
        let id = Identity { team: text("team_id"), user_id: text("user_id"), bot_id: text("bot_id") };
        let mut cache = self.identities.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(token_hash.to_string(), (id.clone(), Instant::now()));
        Some(id)
    }
}
