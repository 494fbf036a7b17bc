//! One Web API call as the bot sent it: the method from the path, the token (bearer header, or
//! a `token` field as some clients send it), and the few fields the egress reads from a write —
//! channel, thread, message ts, text — out of a form or JSON body, which is forwarded untouched;
//! a write's arguments sent in the query, and the digest that identifies its request. The
//! call's types are the model's (`model::Call`); this reads them.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use super::model::{Call, Fields, Verb};
use crate::secret::Secret;
use crate::slack::digest;

/// How a call's HTTP method is read, and sent on.
impl Verb {
    /// `None` for any other method: the egress answers it 405 and sends nothing.
    pub fn of(method: &http::Method) -> Option<Verb> {
        match *method {
            http::Method::GET => Some(Verb::Get),
            http::Method::POST => Some(Verb::Post),
            _ => None,
        }
    }

    pub fn as_http(self) -> http::Method {
        match self {
            Verb::Get => http::Method::GET,
            Verb::Post => http::Method::POST,
        }
    }
}

/// The method named by `/api/<method>`; `None` for any other path.
pub fn method_of(path: &str) -> Option<&str> {
    let m = path.strip_prefix("/api/")?;
    (!m.is_empty() && m.len() <= 64 && m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_'))
        .then_some(m)
}

/// The fields of a body, form or JSON by its content type (JSON when it starts with `{`).
pub fn fields(content_type: Option<&str>, body: &[u8]) -> (Fields, Option<String>) {
    let json = content_type.is_some_and(|c| c.to_ascii_lowercase().starts_with("application/json"))
        || body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let mut f = Fields::default();
    let mut token = None;
    if json {
        let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) else { return (f, None) };
        let text = |k: &str| match o.get(k) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        // `assistant.threads.setStatus` names its channel `channel_id`.
        let channel = text("channel").or_else(|| text("channel_id"));
        let appended = appended(text("markdown_text"), o.get("chunks"));
        f = Fields {
            channel,
            thread_ts: text("thread_ts"),
            ts: text("ts"),
            text: text("text"),
            appended,
            status: text("status"),
        };
        token = text("token");
    } else {
        let (mut markdown, mut chunks) = (None, None);
        for (k, v) in form_urlencoded::parse(body) {
            let v = Some(v.into_owned());
            match &*k {
                "channel" => f.channel = v,
                "channel_id" if f.channel.is_none() => f.channel = v,
                "thread_ts" => f.thread_ts = v,
                "ts" => f.ts = v,
                "text" => f.text = v,
                "token" => token = v,
                "status" => f.status = v,
                "markdown_text" => markdown = v,
                "chunks" => chunks = v.map(Value::String),
                _ => {}
            }
        }
        f.appended = appended(markdown, chunks.as_ref());
    }
    (f, token)
}

/// The text a stream's call adds: `markdown_text`, then each `markdown_text` chunk's text.
/// `chunks` is an array in a JSON body and the array's JSON as a string in a form (as
/// `@slack/web-api` sends it); chunks of other types (plans, tasks) add no text.
fn appended(markdown: Option<String>, chunks: Option<&Value>) -> Option<String> {
    let parsed;
    let chunks = match chunks {
        Some(Value::String(s)) => {
            parsed = serde_json::from_str::<Value>(s).ok();
            parsed.as_ref()
        }
        other => other,
    };
    let texts = chunks.and_then(Value::as_array).into_iter().flatten().filter_map(|c| {
        (c.get("type").and_then(Value::as_str) == Some("markdown_text")).then(|| c.get("text")?.as_str())?
    });
    let mut out: Option<String> = markdown;
    for t in texts {
        out.get_or_insert_with(String::new).push_str(t);
    }
    out
}

/// The token of a call: `Authorization: Bearer …`, else a `token` field of the body.
pub fn token(authorization: Option<&str>, body_token: Option<String>) -> Option<Secret> {
    let bearer = authorization.and_then(|a| a.strip_prefix("Bearer ").map(str::trim)).filter(|t| !t.is_empty());
    bearer.map(Secret::new).or_else(|| body_token.filter(|t| !t.is_empty()).map(|t| Secret::new(&t)))
}

/// A keyed hash of a token (HMAC-SHA256 with the deployment's key, 16 bytes hex): what scopes
/// keys in Redis, so the token itself is never stored.
pub fn token_hash(key: &[u8], token: &Secret) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(token.expose());
    hex::encode(&mac.finalize().into_bytes()[..16])
}

/// The query of a call's path ("" without one).
fn query(call: &Call) -> &str {
    call.path_and_query.split_once('?').map_or("", |(_, q)| q)
}

/// Arguments sent in the query (an empty body, as curl examples do) are the write's too: its
/// fields and token come from there when the body does not say them.
pub fn with_query_args(call: &mut Call) {
    let q = query(call);
    if q.is_empty() {
        return;
    }
    let (from_query, query_token) = fields(Some("application/x-www-form-urlencoded"), q.as_bytes());
    let f = &mut call.fields;
    f.channel = f.channel.take().or(from_query.channel);
    f.thread_ts = f.thread_ts.take().or(from_query.thread_ts);
    f.ts = f.ts.take().or(from_query.ts);
    f.text = f.text.take().or(from_query.text);
    if call.token.is_none() {
        call.token = token(None, query_token);
    }
}

/// The digest of a request's query and body, length-prefixed so that no argument can move
/// between them unseen.
pub fn request_digest(call: &Call) -> String {
    let q = query(call);
    let mut bytes = Vec::with_capacity(8 + q.len() + call.body.len());
    bytes.extend_from_slice(&(q.len() as u64).to_be_bytes());
    bytes.extend_from_slice(q.as_bytes());
    bytes.extend_from_slice(&call.body);
    digest(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_come_from_the_path() {
        assert_eq!(method_of("/api/chat.postMessage"), Some("chat.postMessage"));
        assert_eq!(method_of("/api/"), None);
        assert_eq!(method_of("/slack/events"), None);
        assert_eq!(method_of("/api/chat.postMessage/../x"), None);
    }

    #[test]
    fn only_get_and_post_are_calls() {
        assert_eq!(Verb::of(&http::Method::GET), Some(Verb::Get));
        assert_eq!(Verb::of(&http::Method::POST).map(Verb::as_http), Some(http::Method::POST));
        for m in [http::Method::DELETE, http::Method::PUT, http::Method::HEAD, http::Method::PATCH] {
            assert_eq!(Verb::of(&m), None, "{m}");
        }
    }

    #[test]
    fn fields_from_forms_and_json() {
        let (f, t) =
            fields(Some("application/x-www-form-urlencoded"), b"channel=C1&thread_ts=1.5&text=hi+there&token=xoxb-1");
        assert_eq!(
            f,
            Fields {
                channel: Some("C1".into()),
                thread_ts: Some("1.5".into()),
                ts: None,
                text: Some("hi there".into()),
                ..Fields::default()
            }
        );
        assert_eq!(t.as_deref(), Some("xoxb-1"));
        let (f, t) = fields(Some("application/json; charset=utf-8"), br#"{"channel":"C2","ts":"2.5","text":"x"}"#);
        assert_eq!((f.channel.as_deref(), f.thread(), t), (Some("C2"), Some("2.5"), None));
        let (f, _) = fields(None, b"not json {");
        assert_eq!(f, Fields::default());
    }

    #[test]
    fn a_streams_text_from_json_chunks_form_chunks_and_markdown() {
        let json = br#"{"channel":"C1","ts":"1.5","markdown_text":"a","chunks":[{"type":"markdown_text","text":"b"},{"type":"plan","title":"x"},{"type":"markdown_text","text":"c"}]}"#;
        assert_eq!(fields(Some("application/json"), json).0.appended.as_deref(), Some("abc"));
        let form = "channel=C1&ts=1.5&chunks=%5B%7B%22type%22%3A%22markdown_text%22%2C%22text%22%3A%22hi%22%7D%5D";
        let (f, _) = fields(Some("application/x-www-form-urlencoded"), form.as_bytes());
        assert_eq!((f.appended.as_deref(), f.message_text()), (Some("hi"), Some("hi")));
        let (f, _) = fields(Some("application/json"), br#"{"channel_id":"D1","thread_ts":"1.5","status":""}"#);
        assert_eq!((f.appended, f.status.as_deref()), (None, Some("")));
        let (f, _) = fields(Some("application/json"), br#"{"channel":"C1","chunks":"not json"}"#);
        assert_eq!(f.appended, None);
    }

    #[test]
    fn tokens_and_their_hashes() {
        let t = token(Some("Bearer xoxb-abc"), None).unwrap();
        assert_eq!(t.expose(), b"xoxb-abc");
        assert_eq!(token(None, Some("xoxb-body".into())).unwrap().expose(), b"xoxb-body");
        assert!(token(Some("Basic x"), None).is_none());
        let (a, b) = (token_hash(b"k1", &t), token_hash(b"k2", &t));
        assert_ne!(a, b, "keyed");
        assert_eq!(a.len(), 32);
        assert!(!a.contains("xoxb"));
    }

    fn call(path_and_query: &str, body: &str) -> Call {
        let (fields, body_token) = fields(None, body.as_bytes());
        Call {
            method: "chat.postMessage".into(),
            verb: Verb::Post,
            path_and_query: path_and_query.into(),
            headers: http::HeaderMap::new(),
            idempotency_key: None,
            body: body.to_string().into(),
            token: token(None, body_token),
            fields,
            trace: None,
        }
    }

    #[test]
    fn query_arguments_are_the_writes_too_and_the_body_wins() {
        let mut c = call("/api/chat.postMessage?channel=CQ&text=from+query&token=xoxb-q", "");
        with_query_args(&mut c);
        assert_eq!((c.fields.channel.as_deref(), c.fields.text.as_deref()), (Some("CQ"), Some("from query")));
        assert_eq!(c.token.unwrap().expose(), b"xoxb-q");
        let mut c = call("/api/chat.postMessage?channel=CQ&thread_ts=1.5", "channel=CB&text=t&token=xoxb-b");
        with_query_args(&mut c);
        assert_eq!((c.fields.channel.as_deref(), c.fields.thread_ts.as_deref()), (Some("CB"), Some("1.5")));
        assert_eq!(c.token.unwrap().expose(), b"xoxb-b");
    }

    #[test]
    fn every_argument_counts_in_the_digest_wherever_it_was_sent() {
        let d = |pq: &str, body: &str| request_digest(&call(pq, body));
        let (a, b) = (d("/api/m?text=one", ""), d("/api/m?text=two", ""));
        assert_ne!(a, b, "the query counts");
        assert_ne!(d("/api/m?a", "b"), d("/api/m?ab", ""), "nothing moves between query and body unseen");
        assert_eq!(d("/api/m", "x=1"), d("/api/m?", "x=1"), "an empty query is no query");
        assert_ne!(d("/api/m", "x=1"), d("/api/m", "x=2"));
    }
}
