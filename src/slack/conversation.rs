//! Conversations: a message's place in one (its thread), as the gateway keeps it with a
//! delivery. Which messages are turns of a conversation is Slack's rule, so it lives here.
//!
//! Slack's agent threads follow it. In the assistant container (`assistant_view`) each chat is
//! a thread of the user's DM with the app: the user's messages there carry its `thread_ts`, so
//! the thread is their conversation, and `assistant_thread_started` and
//! `assistant_thread_context_changed` name it in `assistant_thread` — they live with it, but
//! are no question of their own (Bolt's `Assistant` answers them with suggested prompts, not
//! an answer). A DM without threads (`agent_view`, opened by `app_home_opened` with `tab =
//! "messages"`) is the channel, as any DM's messages outside a thread; opening it is no turn.

use super::classify::{AssistantThread, Delivery, Kind, Message};

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
/// other subtypes are about a message, not a turn of a conversation); `None` for the rest,
/// the events of an assistant thread among them.
pub fn conversation_of(d: &Delivery) -> Option<Conversation> {
    let m = d.message.as_ref().filter(|_| d.kind == Kind::Event)?;
    if !matches!(m.subtype.as_deref(), None | Some("thread_broadcast")) || m.team.is_empty() || m.channel.is_empty() {
        return None;
    }
    Some(Conversation { team: m.team.clone(), channel: m.channel.clone(), ts: m.ts.clone(), thread: thread_of(m) })
}

/// Whether an event's message is addressed to the bot: a mention of it (`app_mention`), or a
/// message of a DM with it (`im`: a DM's channel id starts with `D`), which is where assistant
/// and agent threads live. A message in a channel or a group DM that does not mention the bot
/// is one it may only read.
pub fn addressed(d: &Delivery) -> bool {
    d.kind == Kind::Event
        && (d.detail == "app_mention" || d.message.as_ref().is_some_and(|m| m.direct && m.channel.starts_with('D')))
}

/// The key of the conversation an event belongs to: its message's, posts, edits and deletions
/// alike (an edit or a deletion belongs to the thread of the message it changes), or the
/// assistant thread it names. Every delivery of one conversation lives on one shard, with its
/// turn.
pub fn conversation_key(d: &Delivery) -> Option<String> {
    if d.kind != Kind::Event {
        return None;
    }
    let Some(m) = d.message.as_ref() else {
        return d.assistant_thread.as_ref().and_then(|a| assistant_thread_key(d.team.as_deref()?, a));
    };
    let changes =
        matches!(m.subtype.as_deref(), None | Some("thread_broadcast" | "message_changed" | "message_deleted"));
    if !changes || m.team.is_empty() || m.channel.is_empty() || m.ts.is_empty() {
        return None;
    }
    Some(thread_key(&m.team, &m.channel, &thread_of(m)))
}

/// An assistant thread's key: the thread of the DM it is (the envelope's workspace, as its
/// messages' `team` is outside Enterprise Grid).
fn assistant_thread_key(team: &str, a: &AssistantThread) -> Option<String> {
    let named = ![team, &a.channel, &a.thread_ts].iter().any(|v| v.is_empty());
    named.then(|| thread_key(team, &a.channel, &a.thread_ts))
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
        envelope(&format!(r#"{{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{inner}}}"#))
    }

    fn envelope(body: &str) -> Delivery {
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

    // Slack's documented examples (docs.slack.dev/reference/events/…), as Slack sends them; no
    // workspace is reachable from here to record real ones.
    const THREAD_STARTED: &str = r#"{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456",
        "event":{"type":"assistant_thread_started","assistant_thread":{"user_id":"U123ABC456",
            "context":{"channel_id":"C123ABC456","team_id":"T07XY8FPJ5C","enterprise_id":"E480293PS82"},
            "channel_id":"D123ABC456","thread_ts":"1729999327.187299"},"event_ts":"1715873754.429808"},
        "type":"event_callback","authed_users":["U123ABC456","U222222222"],"event_id":"Ev123ABC456","event_time":123456789}"#;
    const CONTEXT_CHANGED: &str = r#"{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456",
        "event":{"type":"assistant_thread_context_changed","assistant_thread":{"user_id":"U123ABC456",
            "context":{"channel_id":"C123ABC456","team_id":"T07XY8FPJ5C","enterprise_id":"E480293PS82"},
            "channel_id":"D123ABC456","thread_ts":"1729999327.187299"},"event_ts":"17298244.022142"},
        "type":"event_callback","authed_users":["U123ABC456","U222222222"],"event_id":"Ev123ABC457","event_time":123456789}"#;
    /// `message.im`'s example, sent in the assistant thread above (its `thread_ts`).
    const THREAD_MESSAGE: &str = r#"{"token":"one-long-verification-token","team_id":"T123ABC456","api_app_id":"A123ABC456",
        "event":{"type":"message","channel":"D123ABC456","user":"U123ABC456","text":"Hello hello can you hear me?",
            "ts":"1729999340.000005","thread_ts":"1729999327.187299","event_ts":"1729999340.000005","channel_type":"im"},
        "type":"event_callback","authed_teams":["T123ABC456"],"event_id":"Ev0PV52K21","event_time":1729999340}"#;
    /// `assistant_app_thread`'s example: the thread's root retitled (`assistant.threads.setTitle`).
    const ROOT_RETITLED: &str = r#"{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456",
        "event":{"type":"message","subtype":"message_changed",
            "message":{"text":"Chats from 2024-09-28T00:41:31.923Z","subtype":"assistant_app_thread","user":"U123456ABCD",
                "type":"message","edited":{"user":"U123456ABCD","ts":"1727484103.000000"},"team":"T123456ABCD",
                "thread_ts":"1727484091.821349","ts":"1727484091.821349"},
            "previous_message":{"text":"Chats from 2024-09-28T00:41:31.923Z","subtype":"assistant_app_thread",
                "user":"U123456ABCD","type":"message","ts":"1727484091.821349","team":"T123456ABCD",
                "thread_ts":"1727484091.821349"},
            "channel":"D987654ABCD","hidden":true,"ts":"1727484103.018100","event_ts":"1727484103.018100","channel_type":"im"},
        "type":"event_callback","event_id":"Ev123ABC458","event_time":123456789}"#;
    /// `app_home_opened`'s example with the `tab` an agent's DM (`agent_view`) opens with.
    const MESSAGES_TAB_OPENED: &str = r#"{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456",
        "event":{"type":"app_home_opened","user":"U123ABC456","channel":"D123ABC456","event_ts":"1515449522000016","tab":"messages"},
        "type":"event_callback","event_id":"Ev123ABC459","event_time":1515449522}"#;
    /// `message.im`'s example as it is: a DM's message outside any thread.
    const DM_MESSAGE: &str = r#"{"token":"one-long-verification-token","team_id":"T061EG9R6","api_app_id":"A0PNCHHK2",
        "event":{"type":"message","channel":"D024BE91L","user":"U2147483697","text":"Hello hello can you hear me?",
            "ts":"1355517523.000005","event_ts":"1355517523.000005","channel_type":"im"},
        "type":"event_callback","authed_teams":["T061EG9R6"],"event_id":"Ev0PV52K21","event_time":1355517523}"#;

    #[test]
    fn an_assistant_threads_events_live_with_its_messages_but_take_no_turn() {
        let thread = "T123ABC456:D123ABC456:1729999327.187299";
        for body in [THREAD_STARTED, CONTEXT_CHANGED] {
            let d = envelope(body);
            assert_eq!(conversation_key(&d).as_deref(), Some(thread), "{}", d.detail);
            assert_eq!(conversation_of(&d), None, "{} is no question", d.detail);
            assert_eq!((d.channel.as_deref(), d.user.as_deref()), (Some("D123ABC456"), Some("U123ABC456")));
        }
        let question = envelope(THREAD_MESSAGE);
        assert_eq!(conversation_key(&question).as_deref(), Some(thread));
        let c = conversation_of(&question).expect("the user's message is a turn");
        assert_eq!((c.key(), c.ts.as_str()), (thread.to_string(), "1729999340.000005"));
    }

    #[test]
    fn an_assistant_threads_root_retitled_belongs_to_its_thread_and_is_no_turn() {
        let d = envelope(ROOT_RETITLED);
        assert_eq!(conversation_key(&d).as_deref(), Some("T123ABC456:D987654ABCD:1727484091.821349"));
        assert_eq!(conversation_of(&d), None);
    }

    #[test]
    fn an_agents_dm_without_threads_is_the_channel_and_opening_it_is_no_turn() {
        let opened = envelope(MESSAGES_TAB_OPENED);
        assert_eq!((conversation_key(&opened), conversation_of(&opened)), (None, None));
        assert_eq!(opened.channel.as_deref(), Some("D123ABC456"));
        let c = conversation_of(&envelope(DM_MESSAGE)).expect("a DM's message is a turn");
        assert_eq!((c.key(), c.thread.as_str()), ("T061EG9R6:D024BE91L:-".to_string(), WHOLE_CHANNEL));
    }

    #[test]
    fn an_assistant_thread_that_names_no_thread_or_workspace_is_keyed_by_nothing() {
        let started = |team: &str, thread: &str| {
            envelope(&format!(
                r#"{{"type":"event_callback","event_id":"Ev1"{team},"event":{{"type":"assistant_thread_started",
                    "assistant_thread":{{"user_id":"U1","channel_id":"D1"{thread}}}}}}}"#
            ))
        };
        assert_eq!(conversation_key(&started("", r#","thread_ts":"1.5""#)), None, "no workspace");
        assert_eq!(conversation_key(&started(r#","team_id":"T1""#, "")), None, "no thread");
        assert_eq!(conversation_key(&started(r#","team_id":"T1""#, r#","thread_ts":"""#)), None, "an empty one");
        let d = started(r#","team_id":"T1""#, r#","thread_ts":"1.5""#);
        assert_eq!(conversation_key(&d).as_deref(), Some("T1:D1:1.5"));
    }
}
