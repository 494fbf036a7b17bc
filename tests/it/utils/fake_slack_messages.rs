//! The messages the fake Slack keeps, and what Slack's message methods do to them: plain
//! functions of a [`Store`], the call's arguments and the time.
//!
//! - `chat.postMessage` keeps a message of the bot's.
//! - `chat.startStream` keeps one too, *streaming*. Its text is the call's `markdown_text`
//!   followed by the text of its `chunks`; only `{"type": "markdown_text", "text": …}` chunks
//!   carry text (task and plan chunks are ignored). slack_sdk sends a JSON body, where `chunks`
//!   is an array; @slack/web-api sends a form, where `chunks` is a JSON *string*: both are read.
//! - `chat.appendStream` appends its text to a streaming message; `chat.stopStream` appends its
//!   text and stops it. A message no longer streams once stopped, or once it is older than the
//!   stream lifetime (counted from its start; 5 min by default, as Slack's) — and its text
//!   stays what it had. Either call on a message that does not stream answers
//!   `message_not_in_streaming_state`; on a ts the fake does not keep in that channel (never
//!   kept, or deleted) `message_not_found`.
//! - `chat.update` replaces the text of a bot message (`text`, else `markdown_text`; neither
//!   leaves it). A message still streaming cannot be updated: `cant_update_message` (our
//!   choice; Slack's reference does not say). A stopped or expired stream can, which is how a
//!   bot finishes an answer whose stream expired. Someone else's message: `cant_update_message`.
//!   A ts the fake never kept answers ok with what it was given, as the fake always did, so
//!   that egress tests may edit made-up messages.
//! - `chat.delete` removes a bot message; `message_not_found` when there is none,
//!   `cant_delete_message` for someone else's.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{BOT_ID, BOT_USER};

/// A call's arguments (its JSON or form body, then its query).
pub(super) type Args = serde_json::Map<String, Value>;

/// What a call answers: the body of an ok answer, or Slack's error code.
pub(super) type Reply = Result<Value, &'static str>;

/// Slack's stream lifetime, the default of [`Store::expiry`].
const SLACK_STREAM_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// A message of the bot's as the fake keeps it (a post or a stream), for the tests to read.
#[derive(Clone, Debug, PartialEq)]
pub struct BotMessage {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// Begun by `chat.startStream` (not a post).
    pub streamed: bool,
    /// Still takes appends: started, neither stopped nor expired.
    pub streaming: bool,
    /// Ended by `chat.stopStream`.
    pub stopped: bool,
}

/// Where a message stands as a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamState {
    /// A post, or someone else's message.
    NotAStream,
    Streaming,
    Stopped,
    /// Older than the stream lifetime and never stopped.
    Expired,
}

/// When `chat.startStream` began a message, and whether `chat.stopStream` ended it.
#[derive(Clone, Copy, Debug)]
struct Stream {
    started: Instant,
    stopped: bool,
}

#[derive(Clone, Debug)]
struct Kept {
    /// The message as history shows it, with its `channel`.
    shown: Value,
    stream: Option<Stream>,
}

impl Kept {
    fn is_bot(&self) -> bool {
        self.shown["user"] == BOT_USER
    }

    fn state(&self, now: Instant, expiry: Duration) -> StreamState {
        match self.stream {
            None => StreamState::NotAStream,
            Some(s) if s.stopped => StreamState::Stopped,
            Some(s) if now.saturating_duration_since(s.started) >= expiry => StreamState::Expired,
            Some(_) => StreamState::Streaming,
        }
    }

    fn text(&self) -> &str {
        self.shown["text"].as_str().unwrap_or_default()
    }

    /// The message without its `channel`, as Slack's answers carry it.
    fn message(&self) -> Value {
        let mut m = self.shown.clone();
        if let Some(o) = m.as_object_mut() {
            o.remove("channel");
        }
        m
    }
}

/// Every message the fake keeps, in the order it kept them.
pub(super) struct Store {
    kept: Vec<Kept>,
    /// How long after its start a stream still takes appends.
    pub(super) expiry: Duration,
}

impl Default for Store {
    fn default() -> Store {
        Store { kept: Vec::new(), expiry: SLACK_STREAM_LIFETIME }
    }
}

/// A string argument, empty when absent.
fn arg(f: &Args, k: &str) -> String {
    f.get(k).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// The text a stream call carries: its `markdown_text`, then the text of its markdown chunks
/// (`chunks` an array, or an array in a JSON string as form bodies carry it).
pub(super) fn stream_text(f: &Args) -> String {
    let mut text = arg(f, "markdown_text");
    let chunks = match f.get("chunks") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
        Some(v) => v.clone(),
        None => Value::Null,
    };
    for chunk in chunks.as_array().into_iter().flatten() {
        if chunk["type"] == "markdown_text" {
            text.push_str(chunk["text"].as_str().unwrap_or_default());
        }
    }
    text
}

impl Store {
    /// Keep `shown` as it is (someone else's message, with its `channel`).
    pub(super) fn keep(&mut self, shown: Value) {
        self.kept.push(Kept { shown, stream: None });
    }

    /// Keep a new message of the bot's at `ts` with `text`, a stream from `started` if given.
    fn keep_bot(&mut self, f: &Args, ts: &str, text: String, started: Option<Instant>) -> &Kept {
        let shown = json!({"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "text": text, "ts": ts,
            "thread_ts": f.get("thread_ts").cloned().unwrap_or(Value::Null), "channel": arg(f, "channel")});
        self.kept.push(Kept { shown, stream: started.map(|started| Stream { started, stopped: false }) });
        self.kept.last().unwrap()
    }

    fn find(&mut self, channel: &str, ts: &str) -> Option<&mut Kept> {
        self.kept.iter_mut().find(|k| k.shown["channel"] == channel && k.shown["ts"] == ts)
    }

    /// `chat.postMessage`: a new message at `ts`.
    pub(super) fn post(&mut self, f: &Args, ts: &str) -> Value {
        let kept = self.keep_bot(f, ts, arg(f, "text"), None);
        json!({"ok": true, "channel": arg(f, "channel"), "ts": ts, "message": kept.message()})
    }

    /// `chat.startStream`: a new message at `ts`, streaming from `now`.
    pub(super) fn start_stream(&mut self, f: &Args, ts: &str, now: Instant) -> Value {
        self.keep_bot(f, ts, stream_text(f), Some(now));
        json!({"ok": true, "channel": arg(f, "channel"), "ts": ts})
    }

    /// `chat.appendStream`, or `chat.stopStream` when `stop`.
    pub(super) fn append_stream(&mut self, f: &Args, now: Instant, stop: bool) -> Reply {
        let (channel, ts, expiry) = (arg(f, "channel"), arg(f, "ts"), self.expiry);
        let kept = self.find(&channel, &ts).ok_or("message_not_found")?;
        if kept.state(now, expiry) != StreamState::Streaming {
            return Err("message_not_in_streaming_state");
        }
        let text = format!("{}{}", kept.text(), stream_text(f));
        kept.shown["text"] = Value::String(text);
        let mut reply = json!({"ok": true, "channel": channel, "ts": ts});
        if stop {
            kept.stream.as_mut().unwrap().stopped = true;
            reply["message"] = kept.message();
        }
        Ok(reply)
    }

    /// `chat.update`.
    pub(super) fn update(&mut self, f: &Args, now: Instant) -> Reply {
        let (channel, ts, expiry) = (arg(f, "channel"), arg(f, "ts"), self.expiry);
        let given = ["text", "markdown_text"].into_iter().find_map(|k| f.get(k).and_then(Value::as_str));
        let Some(kept) = self.find(&channel, &ts) else {
            return Ok(json!({"ok": true, "channel": channel, "ts": ts, "text": given.unwrap_or_default()}));
        };
        if !kept.is_bot() || kept.state(now, expiry) == StreamState::Streaming {
            return Err("cant_update_message");
        }
        if let Some(text) = given {
            kept.shown["text"] = Value::String(text.to_string());
        }
        Ok(json!({"ok": true, "channel": channel, "ts": ts, "text": kept.text(), "message": kept.message()}))
    }

    /// `chat.delete`.
    pub(super) fn delete(&mut self, f: &Args) -> Reply {
        let (channel, ts) = (arg(f, "channel"), arg(f, "ts"));
        let at = self.kept.iter().position(|k| k.shown["channel"] == channel && k.shown["ts"] == ts);
        let at = at.ok_or("message_not_found")?;
        if !self.kept[at].is_bot() {
            return Err("cant_delete_message");
        }
        self.kept.remove(at);
        Ok(json!({"ok": true, "channel": channel, "ts": ts}))
    }

    /// The messages history shows in `channel` (only those of `thread` and its parent, if given).
    pub(super) fn history(&self, channel: &str, thread: Option<&str>) -> Vec<Value> {
        self.kept
            .iter()
            .map(|k| &k.shown)
            .filter(|m| m["channel"] == channel)
            .filter(|m| thread.is_none_or(|t| m["thread_ts"].as_str() == Some(t) || m["ts"].as_str() == Some(t)))
            .cloned()
            .collect()
    }

    /// The bot's messages as history shows them (with their `channel`).
    pub(super) fn posts(&self) -> Vec<Value> {
        self.kept.iter().filter(|k| k.is_bot()).map(|k| k.shown.clone()).collect()
    }

    /// The bot's messages, with where each stands as a stream at `now`.
    pub(super) fn bot_messages(&self, now: Instant) -> Vec<BotMessage> {
        let expiry = self.expiry;
        self.kept
            .iter()
            .filter(|k| k.is_bot())
            .map(|k| {
                let state = k.state(now, expiry);
                BotMessage {
                    channel: k.shown["channel"].as_str().unwrap_or_default().to_string(),
                    ts: k.shown["ts"].as_str().unwrap_or_default().to_string(),
                    thread_ts: k.shown["thread_ts"].as_str().map(String::from),
                    text: k.text().to_string(),
                    streamed: k.stream.is_some(),
                    streaming: state == StreamState::Streaming,
                    stopped: state == StreamState::Stopped,
                }
            })
            .collect()
    }
}
