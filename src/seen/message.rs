//! From a `message` event (or a post the egress made) to what the writer keeps: an own post's
//! evidence, and the thread record's change. Pure, so the shapes Slack sends are tested here.

use serde_json::{Map, Value};

/// A message whose JSON is larger than this is not kept in a thread record (the record then
/// misses it, and a thread it belongs to is no longer held whole: see [`Op::Lost`]).
const MAX_MESSAGE: usize = 64 << 10;

/// An own post as evidence: never its text, only the text's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnPost {
    pub ts: String,
    pub thread_ts: Option<String>,
    pub user: String,
    pub bot_id: String,
    pub digest: String,
}

/// What one event changes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// An own post, kept as evidence.
    Own(OwnPost),
    /// A top-level message: its thread's root.
    Root { ts: String, message: String },
    /// A reply in the thread `thread`.
    Reply { thread: String, ts: String, message: String },
    /// An edit of the message `ts` (in the thread `thread`, its own `ts` for a root).
    Edit { thread: String, ts: String, message: String },
    /// A deletion.
    Delete { thread: String, ts: String },
    /// A message of `thread` the record cannot keep: that thread is no longer held whole.
    Lost { thread: String },
}

fn text<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

/// What an event body (the Events API envelope) changes: the own post's evidence when `own`
/// and `evidence`, the thread record's change when `threads`.
pub fn ops(body: &[u8], own: bool, evidence: bool, threads: bool) -> Vec<Op> {
    let Ok(Value::Object(mut env)) = serde_json::from_slice::<Value>(body) else { return Vec::new() };
    let Some(Value::Object(event)) = env.remove("event") else { return Vec::new() };
    if text(&event, "type") != Some("message") {
        return Vec::new();
    }
    let mut out = Vec::new();
    if own && evidence {
        out.extend(own_post(&event).map(Op::Own));
    }
    if threads {
        out.extend(thread_op(event));
    }
    out
}

/// What a post of the egress's (Slack's answer's `message`) changes in its thread's record.
pub fn posted(message: &Value) -> Vec<Op> {
    match message {
        Value::Object(m) if text(m, "ts").is_some() => thread_op(m.clone()).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// The evidence of a message by a bot (a plain post, a bot message or a broadcast reply).
fn own_post(event: &Map<String, Value>) -> Option<OwnPost> {
    if !matches!(text(event, "subtype"), None | Some("bot_message" | "thread_broadcast")) {
        return None;
    }
    Some(OwnPost {
        ts: text(event, "ts")?.to_string(),
        thread_ts: text(event, "thread_ts").map(String::from),
        user: text(event, "user").unwrap_or_default().to_string(),
        bot_id: text(event, "bot_id").unwrap_or_default().to_string(),
        digest: super::digest(text(event, "text").unwrap_or_default().as_bytes()),
    })
}

/// A message as `conversations.replies` shows it: the event's fields without those only an
/// event carries.
fn as_history(mut m: Map<String, Value>) -> Option<String> {
    for k in ["channel", "event_ts", "channel_type"] {
        m.remove(k);
    }
    m.retain(|_, v| !v.is_null());
    m.entry("type").or_insert_with(|| Value::String("message".into()));
    let json = Value::Object(m).to_string();
    (json.len() <= MAX_MESSAGE).then_some(json)
}

fn thread_op(event: Map<String, Value>) -> Option<Op> {
    match text(&event, "subtype") {
        Some("message_changed") => {
            let Some(Value::Object(m)) = event.get("message") else { return None };
            let ts = text(m, "ts")?.to_string();
            let thread = text(m, "thread_ts").unwrap_or(&ts).to_string();
            match as_history(m.clone()) {
                Some(message) => Some(Op::Edit { thread, ts, message }),
                None => Some(Op::Lost { thread }),
            }
        }
        Some("message_deleted") => {
            let previous = event.get("previous_message").and_then(Value::as_object);
            let ts = text(&event, "deleted_ts").or(previous.and_then(|p| text(p, "ts")))?.to_string();
            let thread = previous.and_then(|p| text(p, "thread_ts")).unwrap_or(&ts).to_string();
            Some(Op::Delete { thread, ts })
        }
        // Slack's old notice on a root that got a reply: the reply comes as its own event.
        Some("message_replied") => None,
        _ => {
            let ts = text(&event, "ts")?.to_string();
            let thread = text(&event, "thread_ts").filter(|t| *t != ts).map(String::from);
            match (thread, as_history(event)) {
                (None, Some(message)) => Some(Op::Root { ts, message }),
                (Some(thread), Some(message)) => Some(Op::Reply { thread, ts, message }),
                (thread, None) => Some(Op::Lost { thread: thread.unwrap_or(ts) }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(event: Value) -> Vec<u8> {
        json!({"type": "event_callback", "team_id": "T1", "event": event}).to_string().into_bytes()
    }

    #[test]
    fn a_root_a_reply_an_edit_and_a_deletion() {
        let root = envelope(json!({"type": "message", "channel": "C1", "user": "U1", "text": "q", "ts": "1.1",
            "event_ts": "1.1", "channel_type": "channel"}));
        let Op::Root { ts, message } = &ops(&root, false, true, true)[0] else { panic!() };
        assert_eq!(ts, "1.1");
        let m: Value = serde_json::from_str(message).unwrap();
        assert!(m.get("channel").is_none() && m.get("event_ts").is_none() && m["text"] == "q");
        let reply = envelope(
            json!({"type": "message", "channel": "C1", "user": "U2", "text": "a", "ts": "1.2", "thread_ts": "1.1"}),
        );
        assert!(
            matches!(&ops(&reply, false, true, true)[0], Op::Reply { thread, ts, .. } if thread == "1.1" && ts == "1.2")
        );
        let edit = envelope(json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1.3",
            "message": {"type": "message", "user": "U2", "text": "b", "ts": "1.2", "thread_ts": "1.1", "edited": {"user": "U2", "ts": "1.3"}}}));
        assert!(
            matches!(&ops(&edit, false, true, true)[0], Op::Edit { thread, ts, message } if thread == "1.1" && ts == "1.2" && message.contains("\"b\""))
        );
        let gone = envelope(json!({"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "1.4",
            "deleted_ts": "1.2", "previous_message": {"ts": "1.2", "thread_ts": "1.1"}}));
        assert_eq!(ops(&gone, false, true, true), vec![Op::Delete { thread: "1.1".into(), ts: "1.2".into() }]);
        // A root that has replies carries its own ts as thread_ts: still a root.
        let root_again =
            envelope(json!({"type": "message", "channel": "C1", "text": "q", "ts": "1.1", "thread_ts": "1.1"}));
        assert!(matches!(&ops(&root_again, false, true, true)[0], Op::Root { .. }));
    }

    #[test]
    fn an_own_post_is_evidence_without_its_text() {
        let own = envelope(json!({"type": "message", "channel": "C1", "user": "UBOT", "bot_id": "BBOT", "text": "hi",
            "ts": "2.1", "thread_ts": "1.1"}));
        let got = ops(&own, true, true, false);
        let Op::Own(p) = &got[0] else { panic!("{got:?}") };
        assert_eq!(
            (p.ts.as_str(), p.thread_ts.as_deref(), p.user.as_str(), p.bot_id.as_str()),
            ("2.1", Some("1.1"), "UBOT", "BBOT")
        );
        assert_eq!(p.digest, super::super::digest(b"hi"));
        assert_eq!(got.len(), 1, "threads are off");
        assert!(ops(&own, false, true, false).is_empty(), "not own");
        assert!(ops(b"not json", true, true, true).is_empty());
        assert!(ops(&envelope(json!({"type": "app_mention", "ts": "1"})), true, true, true).is_empty());
    }

    #[test]
    fn an_oversized_message_loses_its_thread() {
        let big = envelope(
            json!({"type": "message", "channel": "C1", "text": "x".repeat(70_000), "ts": "1.2", "thread_ts": "1.1"}),
        );
        assert_eq!(ops(&big, false, true, true), vec![Op::Lost { thread: "1.1".into() }]);
    }
}
