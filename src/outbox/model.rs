//! The outbox's vocabulary: what is recorded, where it waits, who holds it, how an attempt
//! chain step ends, and which store operation failed.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

use crate::slack::{Conversation, Kind};

/// The store operation that failed, as the `store_errors_total` reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Record,
    Read,
    Load,
    Finish,
    InlineFinish,
    Promote,
    Reclaim,
    Stats,
    Trim,
    Turns,
}

impl StoreOp {
    pub const ALL: [StoreOp; 10] = [
        StoreOp::Record,
        StoreOp::Read,
        StoreOp::Load,
        StoreOp::Finish,
        StoreOp::InlineFinish,
        StoreOp::Promote,
        StoreOp::Reclaim,
        StoreOp::Stats,
        StoreOp::Trim,
        StoreOp::Turns,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            StoreOp::Record => "record",
            StoreOp::Read => "read",
            StoreOp::Load => "load",
            StoreOp::Finish => "finish",
            StoreOp::InlineFinish => "inline_finish",
            StoreOp::Promote => "promote",
            StoreOp::Reclaim => "reclaim",
            StoreOp::Stats => "stats",
            StoreOp::Trim => "trim",
            StoreOp::Turns => "turns",
        }
    }
}

/// A verified delivery about to be recorded.
pub struct NewDelivery<'a> {
    pub id: &'a str,
    /// What absorbs Slack's redeliveries; `None`: nothing does (see `slack::Delivery`).
    pub receipt: Option<&'a str>,
    pub body: &'a [u8],
    pub content_type: &'a [u8],
    pub path: &'a str,
    pub kind: Kind,
    pub received_ms: u64,
    pub ttl: Duration,
    pub placement: Placement,
    /// The message claim (`m:…`) that collapses several events of one human message.
    pub claim: Option<&'a str>,
    /// The claim of a message being deleted, whose waiting delivery is to be cancelled.
    pub cancel: Option<&'a str>,
    /// The interaction type or command, for the workers' rules.
    pub detail: &'a str,
    pub response_url: &'a str,
    /// The conversation its message belongs to, encoded (empty: none).
    pub conversation: &'a str,
    /// Carried in its stream entry when it goes on the stream claiming no message (the app
    /// takes no turns): see `scripts::RECORD`.
    pub carry: bool,
}

/// Where a new delivery waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// On the stream, for the workers.
    Stream,
    /// Held by the ingress for an inline attempt until `due_ms`, then promoted to the workers.
    Inline { due_ms: u64 },
    /// Not stored at all: only its receipt and its cancellation take effect (a filtered-out
    /// `message_deleted` still cancels the deleted message's waiting delivery).
    Discard,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded; `cancelled` when it also cancelled a deleted message's waiting delivery.
    New { cancelled: bool },
    /// A retry of a known receipt; carries the id of the original delivery.
    Duplicate(String),
    /// Another event of a message that is already claimed (e.g. `message` after
    /// `app_mention`); carries the id of the delivery that claimed it.
    DuplicateMessage(String),
}

/// An entry this worker holds: `(consumer, token)` is its claim on it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub entry: String,
    pub delivery: String,
    pub token: u64,
    /// On the stream of versions before carried deliveries (`ShardKeys::legacy`).
    pub legacy: bool,
}

/// A delivery as stored, ready to send.
#[derive(Debug, Clone)]
pub struct Stored {
    pub body: Bytes,
    pub content_type: String,
    pub path: String,
    pub kind: Kind,
    pub received_ms: u64,
    /// Attempts that already ended in a retry.
    pub retries: u64,
    /// The interaction type or command.
    pub detail: String,
    pub response_url: String,
    /// The last failed attempt's status or error, when there was one.
    pub last_status: Option<u16>,
    pub last_error: String,
    /// Parked in the dead-letter stream.
    pub dead: bool,
    /// The conversation its message belongs to, as recorded.
    pub conversation: Kept,
    /// The message claim it holds or was kept under ('' when none).
    pub claim: String,
    /// How long pauses held it (ms): not counted toward `give_up_after`.
    pub paused_ms: u64,
    /// Times its run was lost with the bot and run again (0: its first run).
    pub reruns: u64,
    /// `retries` when its latest re-run began.
    pub rerun_from: u64,
}

impl Stored {
    /// The number of an attempt on a lease of `token`: 1 for the first, and past every attempt
    /// before it, those of a lost run included.
    pub fn attempt_number(&self, token: u64) -> u64 {
        self.retries + token + self.reruns
    }

    /// Slack's own retry number for that attempt (`retry_attempt` of a Socket Mode envelope):
    /// 0 for the first attempt of each run — a re-run is not Slack's retry, and bots that drop
    /// Slack's retries must still get it.
    pub fn slack_retry(&self, token: u64) -> u64 {
        (self.retries + token).saturating_sub(self.rerun_from + 1)
    }
}

/// A delivered entry for the batched completion: its lease, and its message claim as loaded
/// (whose other copies its completion drops).
#[derive(Debug, Clone)]
pub struct Delivered {
    pub lease: Lease,
    pub claim: String,
}

impl Delivered {
    pub fn new(lease: &Lease, stored: &Stored) -> Self {
        Delivered { lease: lease.clone(), claim: stored.claim.clone() }
    }
}

/// How an attempt chain step ends. `status` is the bot's last answer (`None`: there was none,
/// and `error` says why).
#[derive(Debug, Clone)]
pub enum Finish<'a> {
    Done,
    Retry {
        due_ms: u64,
        status: Option<u16>,
        error: &'a str,
    },
    /// Parked in the dead-letter stream. `final_` when the bot refused it (a 4xx), rather
    /// than time running out: another copy of its message may then be delivered instead.
    Dead {
        now_ms: u64,
        status: Option<u16>,
        error: &'a str,
        final_: bool,
    },
    /// Held off the stream, uncounted, until its pause ends (`outbox::pauses`): `place` is its
    /// `team\tchannel` (each '' when unknown), for the release to tell which pause holds it.
    Pause {
        now_ms: u64,
        place: &'a str,
    },
}

impl Finish<'_> {
    /// Mode, time, status (empty when none), error and final, as the scripts take them.
    pub(super) fn parts(&self) -> (&'static str, u64, String, &str, bool) {
        let text = |s: Option<u16>| s.map(|s| s.to_string()).unwrap_or_default();
        match *self {
            Finish::Done => ("done", crate::clock::now_ms(), String::new(), "", false),
            Finish::Retry { due_ms, status, error } => ("retry", due_ms, text(status), error, false),
            Finish::Dead { now_ms, status, error, final_ } => ("dead", now_ms, text(status), error, final_),
            Finish::Pause { now_ms, place } => ("pause", now_ms, String::new(), place, false),
        }
    }
}

/// What a worker finds when it loads the entry it leased.
#[derive(Debug)]
pub enum Loaded {
    Stored(Box<Stored>),
    /// The delivery's record is gone (cancelled, or completed meanwhile).
    Gone,
    /// Another worker holds the entry now: the attempt must not be made.
    LeaseLost,
    /// Put to wait for its conversation's turn (off the stream): not sent now.
    Held,
}

/// A delivery hash's fields, as stored by the scripts.
pub(super) fn stored(map: &HashMap<String, Vec<u8>>) -> Stored {
    let text = |k: &str| map.get(k).map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
    let num = |k: &str| text(k).parse::<u64>().unwrap_or(0);
    Stored {
        body: Bytes::from(map.get("b").cloned().unwrap_or_default()),
        content_type: text("ct"),
        path: text("p"),
        kind: Kind::parse(&text("k")),
        received_ms: num("rcv"),
        retries: num("n"),
        detail: text("x"),
        response_url: text("ru"),
        last_status: text("st").parse().ok(),
        last_error: text("err"),
        dead: map.contains_key("de"),
        conversation: match map.get("cv") {
            None => Kept::Unknown,
            Some(cv) => std::str::from_utf8(cv).ok().and_then(Conversation::decode).map_or(Kept::None, Kept::Some),
        },
        claim: text("mc"),
        paused_ms: num("pd"),
        reruns: num("rr"),
        rerun_from: num("rn"),
    }
}

/// What a stored delivery says of its conversation (kept as `cv` in its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// Recorded by a version that kept none (an upgrade, a backlog): read the body once.
    Unknown,
    /// Recorded with none: not a message that starts or continues a conversation.
    None,
    Some(Conversation),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_without_a_conversation_was_recorded_before_one_was_kept() {
        let mut map: HashMap<String, Vec<u8>> =
            HashMap::from([("b".into(), b"{}".to_vec()), ("k".into(), b"event".to_vec())]);
        assert_eq!(stored(&map).conversation, Kept::Unknown, "an older version's entry: read the body once");
        map.insert("cv".into(), Vec::new());
        assert_eq!(stored(&map).conversation, Kept::None);
        map.insert("cv".into(), b"T1\tC1\t2.5\t1.5".to_vec());
        let c = Conversation { team: "T1".into(), channel: "C1".into(), ts: "2.5".into(), thread: "1.5".into() };
        assert_eq!(stored(&map).conversation, Kept::Some(c));
    }
}
