//! What the egress's layers share, and nothing of the egress itself: a call and the write it
//! becomes, where the write goes (its target and source), Slack's answer as the egress keeps
//! it, what a claim or a fingerprint holds, how a record is settled, and the outcome a call
//! is counted as; and ([`error`]) the egress's own errors, each with what the bot gets for it.
//! The plan decides over these; the layers and the store use them.

mod call_trace;
pub mod error;

pub use call_trace::CallTrace;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;

use crate::outbox::{Change, Channel, Source};
use crate::secret::Secret;

/// How a call through the egress ended, as the `egress_calls_total` outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Sent to Slack; its answer returned.
    Forwarded,
    /// The answer of an earlier call with the same `Idempotency-Key`, not sent again.
    ReplayedKey,
    /// The answer of an identical earlier call whose answer never reached its client.
    ReplayedRetry,
    /// The answer of the same write of an earlier run of the same delivery.
    ReplayedRerun,
    /// Another call with the same `Idempotency-Key` is in flight: 409.
    Conflict,
    /// The `Idempotency-Key` came with another request than its first: 422.
    KeyReused,
    WithheldDeleted,
    WithheldEdited,
    /// A turn's new post while a newer message of its conversation waits (`on_newer`).
    WithheldSuperseded,
    /// A post whose answer was lost, found in the channel.
    Reconciled,
    /// Could not tell whether Slack took it: the bot gets an error its client retries.
    Unknown,
    /// Held past `max_wait` by pacing or Slack's 429: the 429 goes back to the bot.
    RateLimited,
    /// No answer from Slack (not sent, or a read that failed).
    Failed,
    /// A keyed call while Redis is down: 503, fail closed.
    StoreUnavailable,
    /// Answered by the gateway itself: a Socket Mode bot's `apps.connections.open`.
    SocketOpened,
    /// A `conversations.replies` Slack refused, answered from the gateway's record.
    FromRecord,
    /// A stream's call the gateway settled: the stream ended (its answer lost, or Slack's
    /// expiry) and the answer continued as edits of its message; the bot got `ok`.
    Continued,
    /// A shadow bot's write, kept and answered by the gateway as Slack would; never sent.
    Kept,
}

impl Outcome {
    pub const ALL: [Outcome; 18] = [
        Outcome::Forwarded,
        Outcome::ReplayedKey,
        Outcome::ReplayedRetry,
        Outcome::ReplayedRerun,
        Outcome::Conflict,
        Outcome::KeyReused,
        Outcome::WithheldDeleted,
        Outcome::WithheldEdited,
        Outcome::WithheldSuperseded,
        Outcome::Reconciled,
        Outcome::Unknown,
        Outcome::RateLimited,
        Outcome::Failed,
        Outcome::StoreUnavailable,
        Outcome::SocketOpened,
        Outcome::FromRecord,
        Outcome::Continued,
        Outcome::Kept,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::ReplayedKey => "replayed_key",
            Outcome::ReplayedRetry => "replayed_retry",
            Outcome::ReplayedRerun => "replayed_rerun",
            Outcome::Conflict => "conflict",
            Outcome::KeyReused => "key_reused",
            Outcome::WithheldDeleted => "withheld_deleted",
            Outcome::WithheldEdited => "withheld_edited",
            Outcome::WithheldSuperseded => "withheld_superseded",
            Outcome::Reconciled => "reconciled",
            Outcome::Unknown => "unknown",
            Outcome::RateLimited => "rate_limited",
            Outcome::Failed => "failed",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::SocketOpened => "socket_opened",
            Outcome::FromRecord => "from_record",
            Outcome::Continued => "continued",
            Outcome::Kept => "kept",
        }
    }
}

/// An answer from Slack, as cached and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub status: u16,
    pub content_type: String,
    pub body: Bytes,
    pub retry_after: Option<u64>,
    /// The small set of Slack's headers the answer keeps (`egress::headers::kept`).
    pub headers: Vec<(String, String)>,
}

impl Cached {
    /// Whether it is Slack's success: a 2xx with `"ok": true`. Anything else is not cached.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status)
            && serde_json::from_slice::<serde_json::Value>(&self.body).is_ok_and(|v| v["ok"].as_bool() == Some(true))
    }
}

/// What the egress answers the bot.
pub(crate) struct Reply {
    pub answer: Cached,
    pub outcome: Outcome,
    /// Extra response headers (`Idempotent-Replayed`).
    pub headers: Vec<(&'static str, &'static str)>,
}

impl Reply {
    pub fn new(answer: Cached, outcome: Outcome) -> Self {
        Reply { answer, outcome, headers: Vec::new() }
    }

    /// A JSON answer of the egress's own, shaped like Slack's.
    pub fn own(status: u16, json: serde_json::Value, outcome: Outcome, retry_after: Option<u64>) -> Self {
        let answer = Cached {
            status,
            content_type: "application/json; charset=utf-8".into(),
            body: Bytes::from(json.to_string()),
            retry_after,
            headers: Vec::new(),
        };
        Reply::new(answer, outcome)
    }
}

/// A call, read whole.
pub struct Call {
    pub method: String,
    /// As the bot sent it: a GET stays a GET (its arguments are in the query).
    pub verb: Verb,
    /// `/api/<method>` plus the query, as it goes to Slack.
    pub path_and_query: String,
    /// The bot's end-to-end headers, as they go to Slack (`headers::toward_slack`).
    pub headers: http::HeaderMap,
    pub idempotency_key: Option<String>,
    pub body: Bytes,
    /// The token, from the bearer header or the body; never logged or stored.
    pub token: Option<Secret>,
    pub fields: Fields,
    /// With traces on: what its span needs (the bot's `traceparent`, its delivery, waits).
    pub trace: Option<Box<CallTrace>>,
}

/// What a write says about where it goes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fields {
    pub channel: Option<String>,
    pub thread_ts: Option<String>,
    /// The message a `chat.update` or `chat.delete` acts on.
    pub ts: Option<String>,
    pub text: Option<String>,
    /// The text a stream's call adds: its `markdown_text`, then the text of its `markdown_text`
    /// chunks, in order.
    pub appended: Option<String>,
    /// `assistant.threads.setStatus`'s status (empty: cleared).
    pub status: Option<String>,
}

impl Fields {
    /// The thread a write belongs to: `thread_ts`, or for an update or delete the message it
    /// acts on.
    pub fn thread(&self) -> Option<&str> {
        self.thread_ts.as_deref().or(self.ts.as_deref())
    }

    /// The text of the message a post or a stream's start makes.
    pub fn message_text(&self) -> Option<&str> {
        self.text.as_deref().or(self.appended.as_deref())
    }
}

/// The HTTP methods the Web API takes: its arguments in the query (GET) or the body (POST).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
}

/// What a write knows once it is read.
pub struct Write {
    pub call: Call,
    /// The keyed hash of the token, when Redis could give the key.
    pub token_hash: Option<String>,
    /// What identifies the request: its query and body — every argument, wherever it was sent.
    pub digest: String,
    /// A Redis step of this call found the store not answering: the later ones skip it.
    store_down: AtomicBool,
}

impl Write {
    pub fn new(call: Call, digest: String) -> Self {
        Write { call, token_hash: None, digest, store_down: AtomicBool::new(false) }
    }

    /// Whether a Redis step of this call found the store not answering.
    pub fn store_down(&self) -> bool {
        self.store_down.load(Ordering::Relaxed)
    }

    pub fn set_store_down(&self) {
        self.store_down.store(true, Ordering::Relaxed);
    }
}

/// A write's call may have reached Slack without an answer (sent at `sent_ms`): the
/// uncertain-write rules settle it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    pub sent_ms: u64,
}

/// Who a token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub team: String,
    pub user_id: String,
    pub bot_id: String,
}

/// Where a write goes: a channel of a workspace.
pub struct Place<'a> {
    pub team: &'a str,
    pub channel: &'a str,
}

/// Where an attributable write goes, who sends it, and the delivered message it answers.
pub struct Target<'a> {
    pub who: Identity,
    pub channel: &'a str,
    pub source: Option<Attributed>,
}

impl Target<'_> {
    pub fn place(&self) -> Place<'_> {
        Place { team: &self.who.team, channel: self.channel }
    }

    /// The same place, as the conversation records name it.
    pub fn channel(&self) -> Channel<'_> {
        Channel { team: &self.who.team, channel: self.channel }
    }
}

/// What the gateway recorded about a delivered message since it was delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceState {
    /// Neither deleted nor edited.
    Current,
    Deleted,
    Edited,
}

impl From<Option<Change>> for SourceState {
    /// What the conversation records say of the message (see `outbox::Change`).
    fn from(change: Option<Change>) -> Self {
        match change {
            Some(Change::Deleted) => SourceState::Deleted,
            Some(Change::Edited) => SourceState::Edited,
            None => SourceState::Current,
        }
    }
}

/// The delivered message a write answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    pub ts: String,
    pub delivery: String,
    /// The attempt (run) the delivery is on.
    pub run: u64,
    pub state: SourceState,
    /// The app it was delivered to, and its conversation (empty when its record kept none).
    pub app: String,
    pub conversation: String,
}

impl From<Source> for Attributed {
    fn from(s: Source) -> Self {
        Attributed {
            ts: s.ts,
            delivery: s.delivery,
            run: s.run,
            state: SourceState::from(s.change),
            app: s.app,
            conversation: s.conversation,
        }
    }
}

/// Why a write was withheld.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Deleted,
    Edited,
    /// The conversation moved past it: a newer message waits for its turn (`on_newer`).
    Superseded,
}

impl Gone {
    pub fn outcome(self) -> Outcome {
        match self {
            Gone::Deleted => Outcome::WithheldDeleted,
            Gone::Edited => Outcome::WithheldEdited,
            Gone::Superseded => Outcome::WithheldSuperseded,
        }
    }
}

/// What a write's outcome leaves in its record (a key's, a fingerprint's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Slack took it: the answer is kept and replayed.
    Keep,
    /// Slack may have taken it: the next identical call reconciles.
    Unknown,
    /// Slack did not take it: forgotten, the next call sends again.
    Drop,
}

impl Settle {
    /// As the record's scripts take it (`done`, `unknown`, `drop`).
    pub fn as_label(self) -> &'static str {
        match self {
            Settle::Keep => "done",
            Settle::Unknown => "unknown",
            Settle::Drop => "drop",
        }
    }
}

/// How long an in-flight claim (a key, a retry fingerprint) lives unless its call renews it.
pub const LEASE: Duration = Duration::from_secs(3);
/// How often a running call renews its claim's lease.
pub const LEASE_RENEW_EVERY: Duration = Duration::from_secs(1);

/// What a call's claim of its `Idempotency-Key` found.
pub enum IdemClaim {
    Claimed,
    /// Another call with the key is in flight (its lease is alive).
    InFlight,
    Done(Cached),
    /// The key came with another request (body or query) than the one it was first used for.
    Reused,
    /// An earlier call with the key never settled (it died, or its outcome was unknown): this
    /// call holds the claim now and settles it by the uncertain-write rules.
    Unsettled {
        sent_ms: u64,
    },
}

/// How a keyed call ended, for its record.
pub enum IdemEnd<'a> {
    Done(&'a Cached),
    Unknown,
    Drop,
}

impl<'a> IdemEnd<'a> {
    /// How a settled outcome is written to a key's record.
    pub fn settled(settle: Settle, answer: &'a Cached) -> Self {
        match settle {
            Settle::Keep => IdemEnd::Done(answer),
            Settle::Unknown => IdemEnd::Unknown,
            Settle::Drop => IdemEnd::Drop,
        }
    }
}

/// What a call's retry fingerprint (token, method, query and body) found.
pub enum Fingerprint {
    New,
    /// An identical call is in flight, its client waiting; `beats` counts its lease renewals.
    Busy {
        beats: u64,
    },
    Wait,
    Replay(Cached),
    /// The earlier identical call never settled; ours now, to settle by the uncertain rules.
    Unsettled {
        sent_ms: u64,
    },
}

/// What changes about a fingerprint.
#[derive(Clone, Copy)]
pub enum FpUpdate<'a> {
    /// The call's client went before its answer: the answer is its retry's.
    Lost,
    /// A replayed answer reached its client.
    Delivered,
    Done(&'a Cached),
    Unknown,
    Drop,
}

impl<'a> FpUpdate<'a> {
    /// As the `fp_set` script takes it.
    pub fn as_label(self) -> &'static str {
        match self {
            FpUpdate::Lost => "lost",
            FpUpdate::Delivered => "delivered",
            FpUpdate::Done(_) => Settle::Keep.as_label(),
            FpUpdate::Unknown => Settle::Unknown.as_label(),
            FpUpdate::Drop => Settle::Drop.as_label(),
        }
    }

    /// How a settled outcome is written to a fingerprint.
    pub fn settled(settle: Settle, answer: &'a Cached) -> Self {
        match settle {
            Settle::Keep => FpUpdate::Done(answer),
            Settle::Unknown => FpUpdate::Unknown,
            Settle::Drop => FpUpdate::Drop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_written_as_the_scripts_and_existing_records_know_them() {
        let c = Cached {
            status: 200,
            content_type: "application/json".into(),
            body: Bytes::from_static(b"{}"),
            retry_after: None,
            headers: Vec::new(),
        };
        let fp = [FpUpdate::Lost, FpUpdate::Delivered, FpUpdate::Done(&c), FpUpdate::Unknown, FpUpdate::Drop];
        assert_eq!(fp.map(FpUpdate::as_label), ["lost", "delivered", "done", "unknown", "drop"]);
        let settled = [Settle::Keep, Settle::Unknown, Settle::Drop].map(|s| FpUpdate::settled(s, &c).as_label());
        assert_eq!(settled, ["done", "unknown", "drop"]);
        assert!(matches!(IdemEnd::settled(Settle::Keep, &c), IdemEnd::Done(_)));
        assert!(matches!(IdemEnd::settled(Settle::Unknown, &c), IdemEnd::Unknown));
        assert!(matches!(IdemEnd::settled(Settle::Drop, &c), IdemEnd::Drop));
    }
}
