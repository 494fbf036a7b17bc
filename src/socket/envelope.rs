//! Socket Mode's messages, both ways, and the HTTP request each envelope stands for.
//!
//! Slack wraps what it would POST in an envelope: `events_api` carries the Events API body as
//! its `payload`, `interactive` the object Slack would send as the form field `payload=`, and
//! `slash_commands` the command's form fields as an object. [`to_http`] gives back the body
//! Slack would have POSTed (the event's bytes exactly as received), so the HTTP bot cannot
//! tell; [`from_http`] is the way back, for a bot that is itself in Socket Mode.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::SocketError;
use crate::slack::RetryReason;

/// What an envelope carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeType {
    Events,
    Interactive,
    SlashCommands,
}

impl EnvelopeType {
    pub const ALL: [EnvelopeType; 3] = [EnvelopeType::Events, EnvelopeType::Interactive, EnvelopeType::SlashCommands];

    pub fn as_label(self) -> &'static str {
        match self {
            EnvelopeType::Events => "events_api",
            EnvelopeType::Interactive => "interactive",
            EnvelopeType::SlashCommands => "slash_commands",
        }
    }

    fn parse(s: &str) -> Option<EnvelopeType> {
        EnvelopeType::ALL.into_iter().find(|t| t.as_label() == s)
    }
}

/// One envelope from Slack.
#[derive(Debug)]
pub struct Envelope {
    pub id: String,
    pub kind: EnvelopeType,
    pub payload: Box<RawValue>,
    pub accepts_response_payload: bool,
    /// 0 on the first send; Slack's redeliveries count up.
    pub retry_attempt: u32,
    pub retry_reason: String,
}

/// Why Slack asks a socket to go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disconnect {
    /// The connection is about to be closed (Slack sends it ~10 s before).
    Warning,
    /// Slack refreshes its connections: open another, then close this one.
    RefreshRequested,
    /// Socket Mode was turned off for the app: no new connection will work.
    LinkDisabled,
    Other,
}

impl Disconnect {
    pub const ALL: [Disconnect; 4] =
        [Disconnect::Warning, Disconnect::RefreshRequested, Disconnect::LinkDisabled, Disconnect::Other];

    pub fn as_label(self) -> &'static str {
        match self {
            Disconnect::Warning => "warning",
            Disconnect::RefreshRequested => "refresh_requested",
            Disconnect::LinkDisabled => "link_disabled",
            Disconnect::Other => "other",
        }
    }
}

/// A text frame from Slack.
#[derive(Debug)]
pub enum Incoming {
    Hello,
    Disconnect(Disconnect),
    Envelope(Envelope),
    /// Anything else (a type this version does not know): ignored, never acked.
    Unknown(String),
}

#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
    envelope_id: Option<String>,
    payload: Option<Box<RawValue>>,
    #[serde(default)]
    accepts_response_payload: bool,
    #[serde(default)]
    retry_attempt: u32,
    #[serde(default)]
    retry_reason: Option<String>,
    reason: Option<String>,
}

/// Read one text frame; an error is a frame that is not JSON or an envelope without its id
/// or payload (it cannot be acked, so Slack redelivers it).
pub fn parse(text: &str) -> Result<Incoming, SocketError> {
    let f: Frame = serde_json::from_str(text).map_err(SocketError::NotAMessage)?;
    let kind = f.kind.unwrap_or_default();
    match kind {
        "hello" => return Ok(Incoming::Hello),
        "disconnect" => {
            let reason = match f.reason.as_deref() {
                Some("warning") => Disconnect::Warning,
                Some("refresh_requested") => Disconnect::RefreshRequested,
                Some("link_disabled") => Disconnect::LinkDisabled,
                _ => Disconnect::Other,
            };
            return Ok(Incoming::Disconnect(reason));
        }
        _ => {}
    }
    let Some(t) = EnvelopeType::parse(kind) else { return Ok(Incoming::Unknown(kind.chars().take(40).collect())) };
    let id = f.envelope_id.filter(|id| !id.is_empty() && id.len() <= 200).ok_or(SocketError::NoEnvelopeId)?;
    let payload = f.payload.ok_or(SocketError::NoPayload)?;
    Ok(Incoming::Envelope(Envelope {
        id,
        kind: t,
        payload,
        accepts_response_payload: f.accepts_response_payload,
        retry_attempt: f.retry_attempt,
        retry_reason: f.retry_reason.unwrap_or_default(),
    }))
}

impl Envelope {
    /// Slack's retry reason as the HTTP path counts it (`timeout`: the ack came too late).
    pub fn retry_reason(&self) -> RetryReason {
        match self.retry_reason.as_str() {
            "timeout" => RetryReason::HttpTimeout,
            other => RetryReason::parse(other.as_bytes()),
        }
    }
}

/// The HTTP request an envelope stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpForm {
    pub content_type: &'static str,
    pub body: Bytes,
}

pub const JSON: &str = "application/json";
pub const FORM: &str = "application/x-www-form-urlencoded";

/// The body Slack would have POSTed for `e`.
pub fn to_http(e: &Envelope) -> Result<HttpForm, SocketError> {
    let raw = e.payload.get();
    Ok(match e.kind {
        EnvelopeType::Events => HttpForm { content_type: JSON, body: Bytes::copy_from_slice(raw.as_bytes()) },
        EnvelopeType::Interactive => {
            let body = form_urlencoded::Serializer::new(String::new()).append_pair("payload", raw).finish();
            HttpForm { content_type: FORM, body: body.into() }
        }
        EnvelopeType::SlashCommands => {
            let fields: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(raw).map_err(|_| SocketError::CommandNotObject)?;
            let mut form = form_urlencoded::Serializer::new(String::new());
            for (k, v) in &fields {
                match v {
                    serde_json::Value::String(s) => form.append_pair(k, s),
                    serde_json::Value::Null => form.append_pair(k, ""),
                    other => form.append_pair(k, &other.to_string()),
                };
            }
            HttpForm { content_type: FORM, body: form.finish().into() }
        }
    })
}

/// The envelope a recorded HTTP delivery makes for a bot in Socket Mode: the way back of
/// [`to_http`]. `None` for a body that is none of Slack's three.
pub fn from_http(content_type: &str, body: &[u8]) -> Option<(EnvelopeType, String)> {
    if content_type.to_ascii_lowercase().starts_with(JSON) || body.first() == Some(&b'{') {
        let text = std::str::from_utf8(body).ok()?;
        let _: &RawValue = serde_json::from_str(text).ok()?;
        return Some((EnvelopeType::Events, text.to_string()));
    }
    let pairs: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    if let [(k, v)] = pairs.as_slice() {
        if k == "payload" {
            let _: &RawValue = serde_json::from_str(v).ok()?;
            return Some((EnvelopeType::Interactive, v.clone()));
        }
    }
    if pairs.iter().any(|(k, _)| k == "command") {
        let map: serde_json::Map<String, serde_json::Value> =
            pairs.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
        return Some((EnvelopeType::SlashCommands, serde_json::Value::Object(map).to_string()));
    }
    None
}

/// The envelope text for a bot: `payload` is JSON text.
pub fn envelope_text(
    id: &str,
    kind: EnvelopeType,
    payload: &str,
    accepts_response_payload: bool,
    retry: u32,
) -> String {
    let id = serde_json::Value::String(id.to_string());
    let reason = if retry > 0 { "\"timeout\"" } else { "null" };
    format!(
        "{{\"envelope_id\":{id},\"type\":\"{}\",\"payload\":{payload},\"accepts_response_payload\":{accepts_response_payload},\"retry_attempt\":{retry},\"retry_reason\":{reason}}}",
        kind.as_label()
    )
}

/// Whether Slack takes an answer in the ack for this kind (commands, interactions).
pub fn accepts_response_payload(kind: EnvelopeType) -> bool {
    !matches!(kind, EnvelopeType::Events)
}

/// The ack for Slack: the envelope id, and the bot's inline answer as its `payload` (a JSON
/// object; plain text becomes `{"text": …}`, as Slack reads a plain-text HTTP answer).
pub fn ack_text(id: &str, answer: Option<(&str, &[u8])>) -> String {
    let id = serde_json::Value::String(id.to_string());
    match answer.and_then(|(ct, body)| answer_payload(ct, body)) {
        Some(payload) => format!("{{\"envelope_id\":{id},\"payload\":{payload}}}"),
        None => format!("{{\"envelope_id\":{id}}}"),
    }
}

fn answer_payload(content_type: &str, body: &[u8]) -> Option<String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    if content_type.to_ascii_lowercase().starts_with(JSON) || text.trim_start().starts_with('{') {
        if let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(text) {
            return Some(serde_json::Value::Object(o).to_string());
        }
    }
    Some(serde_json::json!({ "text": text }).to_string())
}

/// A bot's ack: `{"envelope_id": …, "payload": …}`; the payload's JSON text when it has one.
pub fn parse_ack(text: &str) -> Option<(String, Option<String>)> {
    #[derive(Deserialize)]
    struct Ack {
        envelope_id: String,
        payload: Option<Box<RawValue>>,
    }
    let a: Ack = serde_json::from_str(text).ok()?;
    let payload = a.payload.map(|p| p.get().to_string()).filter(|p| p != "null" && p != "{}");
    Some((a.envelope_id, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(text: &str) -> Envelope {
        match parse(text).unwrap() {
            Incoming::Envelope(e) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_event_is_the_bytes_slack_sent() {
        let raw = r#"{"type":"event_callback", "event_id":"Ev1","event":{"type":"app_mention","text":"é \u00e9"}}"#;
        let e = envelope(&format!(
            r#"{{"envelope_id":"e1","type":"events_api","payload":{raw},"accepts_response_payload":false,"retry_attempt":2,"retry_reason":"timeout"}}"#
        ));
        let http = to_http(&e).unwrap();
        assert_eq!((http.content_type, &http.body[..]), (JSON, raw.as_bytes()));
        assert_eq!((e.retry_attempt, e.retry_reason()), (2, RetryReason::HttpTimeout));
        assert_eq!(from_http(JSON, raw.as_bytes()), Some((EnvelopeType::Events, raw.to_string())));
    }

    #[test]
    fn an_interaction_is_a_payload_form_and_a_command_its_fields() {
        let p = r#"{"type":"view_submission","trigger_id":"t 1&2"}"#;
        let e = envelope(&format!(
            r#"{{"envelope_id":"e2","type":"interactive","payload":{p},"accepts_response_payload":true}}"#
        ));
        let http = to_http(&e).unwrap();
        assert_eq!(http.content_type, FORM);
        let back: Vec<(String, String)> = form_urlencoded::parse(&http.body).into_owned().collect();
        assert_eq!(back, vec![("payload".to_string(), p.to_string())]);
        assert_eq!(from_http(FORM, &http.body), Some((EnvelopeType::Interactive, p.to_string())));

        let c = r#"{"command":"/ask","text":"a b&c","trigger_id":"t2","is_enterprise_install":false}"#;
        let e = envelope(&format!(r#"{{"envelope_id":"e3","type":"slash_commands","payload":{c}}}"#));
        let http = to_http(&e).unwrap();
        let fields: Vec<(String, String)> = form_urlencoded::parse(&http.body).into_owned().collect();
        assert!(fields.contains(&("text".into(), "a b&c".into())), "{fields:?}");
        assert!(fields.contains(&("is_enterprise_install".into(), "false".into())), "{fields:?}");
        let (kind, json) = from_http(FORM, &http.body).unwrap();
        assert_eq!(kind, EnvelopeType::SlashCommands);
        assert!(json.contains(r#""text":"a b&c""#), "{json}");
    }

    #[test]
    fn hello_disconnect_and_bad_frames() {
        assert!(matches!(parse(r#"{"type":"hello","num_connections":1}"#), Ok(Incoming::Hello)));
        let d = parse(r#"{"type":"disconnect","reason":"refresh_requested"}"#).unwrap();
        assert!(matches!(d, Incoming::Disconnect(Disconnect::RefreshRequested)));
        assert!(matches!(parse(r#"{"type":"what"}"#), Ok(Incoming::Unknown(_))));
        for bad in
            ["", "[]", "{", r#"{"type":"events_api","payload":{}}"#, r#"{"type":"events_api","envelope_id":"x"}"#]
        {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let c = r#"{"envelope_id":"e","type":"slash_commands","payload":[1]}"#;
        assert!(to_http(&envelope(c)).is_err());
    }

    #[test]
    fn acks_carry_the_inline_answer_as_an_object() {
        assert_eq!(ack_text("e1", None), r#"{"envelope_id":"e1"}"#);
        assert_eq!(ack_text("e1", Some(("text/plain", b""))), r#"{"envelope_id":"e1"}"#);
        assert_eq!(ack_text("e1", Some(("text/plain", b"hi"))), r#"{"envelope_id":"e1","payload":{"text":"hi"}}"#);
        assert_eq!(
            ack_text("e1", Some((JSON, br#"{"response_action":"clear"}"#))),
            r#"{"envelope_id":"e1","payload":{"response_action":"clear"}}"#
        );
        assert_eq!(
            parse_ack(r#"{"envelope_id":"e1","payload":{"text":"x"}}"#),
            Some(("e1".into(), Some(r#"{"text":"x"}"#.into())))
        );
        assert_eq!(parse_ack(r#"{"envelope_id":"e1"}"#), Some(("e1".into(), None)));
        assert_eq!(parse_ack("nope"), None);
        let text = envelope_text("e\"1", EnvelopeType::Events, r#"{"a":1}"#, false, 1);
        let back = envelope(&text);
        assert_eq!((back.id.as_str(), back.retry_attempt, back.payload.get()), ("e\"1", 1, r#"{"a":1}"#));
    }
}
