//! Conversations: a message's place in one (its thread), as the gateway keeps it with a
//! delivery. Which messages are turns of a conversation is Slack's rule, so it lives here.

use super::classify::{Delivery, Kind, Message};

/// Where a message stands in a conversation: its workspace, channel, own `ts` and thread.
/// Derived once, when its delivery is recorded, and kept with it as text ([`encode`]), so that
/// nothing after the record reads the body for it.
///
/// [`encode`]: Conversation::encode
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    pub team: String,
    pub channel: String,
    /// The message's own `ts`.
    pub ts: String,
    /// Its thread (the root's `ts`), its own `ts` for a top-level message, or [`WHOLE_CHANNEL`]
    /// for a DM's message outside a thread.
    pub thread: String,
}

/// The thread of a DM's (or group DM's) messages outside any thread: there the conversation is
/// the channel itself, and the bot answers in it without a `thread_ts`.
pub const WHOLE_CHANNEL: &str = "-";

impl Conversation {
    /// As kept in the hash: the four fields joined by tabs (no Slack id or ts holds one).
    pub fn encode(&self) -> String {
        [&self.team, &self.channel, &self.ts, &self.thread].map(String::as_str).join("\t")
    }

    /// The conversation it is a turn of, as a key: `team:channel:thread` (see [`thread_key`]).
    pub fn key(&self) -> String {
        thread_key(&self.team, &self.channel, &self.thread)
    }

    /// `None` for anything but four non-empty, tab-free fields.
    pub fn decode(text: &str) -> Option<Conversation> {
        let mut f = text.split('\t').map(str::to_string);
        let c = Conversation { team: f.next()?, channel: f.next()?, ts: f.next()?, thread: f.next()? };
        let whole = f.next().is_none() && [&c.team, &c.channel, &c.ts, &c.thread].iter().all(|v| !v.is_empty());
        whole.then_some(c)
    }
}

/// A conversation's key, `team:channel:thread`.
pub fn thread_key(team: &str, channel: &str, thread: &str) -> String {
    format!("{team}:{channel}:{thread}")
}

/// The thread a message belongs to: its `thread_ts`; else, in a DM, the whole channel; else its
/// own `ts` (a top-level message starts its thread).
fn thread_of(m: &Message) -> String {
    match (&m.thread_ts, m.direct) {
        (Some(t), _) => t.clone(),
        (None, true) => WHOLE_CHANNEL.to_string(),
        (None, false) => m.ts.clone(),
    }
}

/// The conversation of an event's message: a post or a thread broadcast (edits, deletions and
/// other subtypes are about a message, not a turn of a conversation); `None` for the rest.
pub fn conversation_of(d: &Delivery) -> Option<Conversation> {
    let m = d.message.as_ref().filter(|_| d.kind == Kind::Event)?;
    if !matches!(m.subtype.as_deref(), None | Some("thread_broadcast")) || m.team.is_empty() || m.channel.is_empty() {
        return None;
    }
    Some(Conversation { team: m.team.clone(), channel: m.channel.clone(), ts: m.ts.clone(), thread: thread_of(m) })
}

/// The key of the conversation an event's message belongs to, posts, edits and deletions alike
/// (an edit or a deletion belongs to the thread of the message it changes): every delivery of
/// one conversation lives on one shard, with its turn.
pub fn conversation_key(d: &Delivery) -> Option<String> {
    let m = d.message.as_ref().filter(|_| d.kind == Kind::Event)?;
    let changes =
        matches!(m.subtype.as_deref(), None | Some("thread_broadcast" | "message_changed" | "message_deleted"));
    if !changes || m.team.is_empty() || m.channel.is_empty() || m.ts.is_empty() {
        return None;
    }
    Some(thread_key(&m.team, &m.channel, &thread_of(m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_round_trips_and_junk_is_none() {
        let c = Conversation { team: "T1".into(), channel: "C1".into(), ts: "2.5".into(), thread: "1.5".into() };
        assert_eq!(Conversation::decode(&c.encode()), Some(c));
        for junk in ["", "T1\tC1\t2.5", "T1\tC1\t2.5\t1.5\tx", "T1\t\t2.5\t1.5"] {
            assert_eq!(Conversation::decode(junk), None, "{junk:?}");
        }
    }

    fn event(inner: &str) -> Delivery {
        let body = format!(r#"{{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{inner}}}"#);
        match crate::slack::classify(b"application/json", body.as_bytes()).unwrap() {
            crate::slack::Request::Delivery(d) => d,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn edits_and_deletions_belong_to_the_thread_of_the_message_they_change() {
        let cases = [
            (r#"{"type":"message","user":"U1","text":"q","channel":"C1","ts":"1.5"}"#, Some("T1:C1:1.5")),
            (r#"{"type":"message","user":"U1","text":"q","channel":"D1","ts":"2.5"}"#, Some("T1:D1:-")),
            (
                r#"{"type":"message","user":"U1","text":"q","channel":"G1","channel_type":"mpim","ts":"2.5"}"#,
                Some("T1:G1:-"),
            ),
            (
                r#"{"type":"message","subtype":"message_changed","channel":"D1","channel_type":"im","ts":"3.0","message":{"user":"U1","text":"b","ts":"2.5"}}"#,
                Some("T1:D1:-"),
            ),
            (
                r#"{"type":"message","subtype":"message_deleted","channel":"C1","ts":"4.0","deleted_ts":"1.5"}"#,
                Some("T1:C1:1.5"),
            ),
            (r#"{"type":"message","subtype":"channel_join","user":"U1","channel":"C1","ts":"5.5"}"#, None),
            (r#"{"type":"reaction_added","user":"U1","item":{"channel":"C1","ts":"1.5"}}"#, None),
        ];
        for (inner, key) in cases {
            assert_eq!(conversation_key(&event(inner)).as_deref(), key, "{inner}");
        }
        let edit = event(
            r#"{"type":"message","subtype":"message_changed","channel":"C1","ts":"3.0","message":{"user":"U1","text":"b","ts":"2.5","thread_ts":"1.5"}}"#,
        );
        assert_eq!(conversation_of(&edit), None, "an edit is no turn");
    }
}
