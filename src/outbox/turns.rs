//! Turns: one delivery of a conversation with the bot at a time (`turns` of an app). A
//! conversation's turn, its held deliveries and those deliveries' records share the shard's
//! hash tag (a conversation picks its shard), so every step is one atomic script:
//!
//! - a worker reads a delivery and, in the same step, gives it its conversation's turn or, when
//!   another delivery holds the turn, puts it to wait off the stream (`READ_LOADED`,
//!   `RECLAIM_LOADED`);
//! - the delivery's end — the bot's 2xx, or its refusal — ends the turn or starts its wait for
//!   the bot's replies (`FINISH`);
//! - the egress's writes of the turn renew it, close it, or are withheld when a newer message
//!   waits (`TURN_WRITE`);
//! - the housekeeping ends turns that are due: timed out, passed, quiet after replies, or whose
//!   delivery was cancelled (`TURN_DUE`).
//!
//! Ending a turn hands it to the next held delivery (the oldest; with `latest` the newest, the
//! rest superseded) and puts that one on the stream. A turn is a lease, never a lock: its key
//! lives for its timeout (and a minute), and whatever waits for it puts it in the shard's turn
//! index by its deadline, so a gateway that dies mid-turn holds nothing past it.
//!
//! Keys, under the shard's tag: `…:tn:<conversation>` the turn (its holder, its message's ts,
//! when it began, answered, writes, the last write, waiters, cancelled; see the scripts' codec),
//! living for its timeout and a minute · `…:tq:<conversation>` its held deliveries by message
//! ts · `…:turns` the deadlines of the turns something waits for (held deliveries, the bot's
//! replies, a cancellation) · `…:waiting` conversations with deliveries held, by how many ·
//! `…:superseded` (a capped stream) and `…:superseded:n` (a counter) of the deliveries
//! `latest` passed over.
//!
//! A turn nothing waits for costs four commands: its key read and written when its delivery is
//! leased, read and deleted when the bot's answer ends it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};

use super::{scripts, Conn, ShardKeys, Store, StoreError};
use crate::config::{Order, RunsConfig, TurnsConfig};

/// How a turn ended, as the `turns_total` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// The bot wrote to the conversation, then was quiet (or closed its stream).
    Reply,
    /// The bot's 2xx (`end = "answer"`).
    Answer,
    /// The bot refused the delivery for good (a final 4xx, a dead letter).
    Refused,
    /// The bot answered and wrote nothing within `pass_after`.
    Passed,
    Timeout,
    /// Its write was withheld: a newer message of the conversation waits.
    Superseded,
    /// Its delivery was cancelled (its message deleted) before it was sent.
    Cancelled,
    /// The app's `order` was turned off.
    Off,
    /// Its delivery was paused (it comes back as a new arrival on resume).
    Paused,
    /// Its run was lost with the bot as many times as `rerun_limit` allows re-runs.
    Lost,
}

impl TurnEnd {
    pub const ALL: [TurnEnd; 10] = [
        TurnEnd::Reply,
        TurnEnd::Answer,
        TurnEnd::Refused,
        TurnEnd::Passed,
        TurnEnd::Timeout,
        TurnEnd::Superseded,
        TurnEnd::Cancelled,
        TurnEnd::Off,
        TurnEnd::Paused,
        TurnEnd::Lost,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            TurnEnd::Reply => "reply",
            TurnEnd::Answer => "answer",
            TurnEnd::Refused => "refused",
            TurnEnd::Passed => "passed",
            TurnEnd::Timeout => "timeout",
            TurnEnd::Superseded => "superseded",
            TurnEnd::Cancelled => "cancelled",
            TurnEnd::Off => "off",
            TurnEnd::Paused => "paused",
            TurnEnd::Lost => "lost",
        }
    }

    fn parse(text: &str) -> Option<TurnEnd> {
        TurnEnd::ALL.into_iter().find(|e| e.as_label() == text)
    }
}

/// A turn that ended: how, after how long, the delivery it went to next (now on the stream),
/// and the deliveries `latest` superseded on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnEnded {
    pub how: TurnEnd,
    pub lasted: Duration,
    pub next: Option<String>,
    pub superseded: Vec<String>,
}

impl TurnEnded {
    /// From a script's `{how, duration ms, released id, {superseded ids}}`.
    pub(super) fn from_reply(parts: &[Value]) -> Result<TurnEnded, StoreError> {
        let text = |v: &Value| -> String { redis::from_redis_value::<String>(v.clone()).unwrap_or_default() };
        let bad = || StoreError::Protocol(format!("a turn's end: {parts:?}"));
        let [how, ms, next, superseded] = parts else { return Err(bad()) };
        let how = TurnEnd::parse(&text(how)).ok_or_else(bad)?;
        let ms: u64 = redis::from_redis_value(ms.clone()).unwrap_or(0);
        let next = Some(text(next)).filter(|n| !n.is_empty());
        let superseded: Vec<String> = redis::from_redis_value(superseded.clone()).unwrap_or_default();
        Ok(TurnEnded { how, lasted: Duration::from_millis(ms), next, superseded })
    }
}

/// An app's turns, as the scripts take them: its `turns`, when it takes them.
pub type TurnRules = TurnsConfig;

/// A duration as the scripts take it (ms).
fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// What a write of a conversation is to its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A new answer by a post: withheld when a newer message waits; `quiet` ends its turn.
    Post,
    /// A new answer by a stream (`chat.startStream`): withheld when a newer message waits;
    /// holds its turn until the stream stops (up to its idle limit).
    Start,
    /// More of a stream (`chat.appendStream`): never withheld for a newer message; holds the
    /// turn as its start did.
    Append,
    /// A change to a message already posted (an update, a delete): always goes.
    Continue,
    /// The end of a reply (`chat.stopStream`): ends the turn.
    Close,
    /// A status ("is thinking…"): never withheld; before the first answer it holds the turn
    /// like a placeholder, for the status's life.
    Status,
}

impl WriteKind {
    fn as_arg(self) -> &'static str {
        match self {
            WriteKind::Post => "post",
            WriteKind::Start => "start",
            WriteKind::Append => "append",
            WriteKind::Continue => "continue",
            WriteKind::Close => "close",
            WriteKind::Status => "status",
        }
    }

    /// How long past its call the write holds its turn, under `rules`.
    pub fn hold(self, rules: &TurnRules) -> Duration {
        match self {
            WriteKind::Start | WriteKind::Append => rules.stream_idle,
            WriteKind::Status => rules.status_hold(),
            _ => Duration::ZERO,
        }
    }
}

/// A write through the egress, attributed to `delivery` of `app` (whose message is `ts`) in
/// `conversation`.
#[derive(Debug, Clone, Copy)]
pub struct TurnWrite<'a> {
    pub app: &'a str,
    pub delivery: &'a str,
    pub conversation: &'a str,
    pub ts: &'a str,
    pub kind: WriteKind,
}

/// A write, as its turn judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnVerdict {
    /// Withheld: a newer message of the conversation waits (or holds the turn already).
    pub withhold: bool,
    /// The turn it ended, if it did.
    pub ended: Option<TurnEnded>,
}

/// A delivery `latest` passed over, as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Superseded {
    pub id: String,
    pub delivery: String,
    /// The newer delivery that was sent instead.
    pub by: String,
    pub at_ms: u64,
    pub team: String,
    pub channel: String,
    pub ts: String,
    pub thread: String,
}

struct Scripts {
    write: Script,
    due: Script,
}

static SCRIPTS: LazyLock<Scripts> =
    LazyLock::new(|| Scripts { write: Script::new(scripts::TURN_WRITE), due: Script::new(scripts::TURN_DUE) });

/// The turns of one deployment's shards, for the egress (which knows a write's delivery, and
/// from it the shard, but holds no outbox store).
#[derive(Clone)]
pub struct Turns {
    conn: Conn,
    prefix: Arc<str>,
}

impl Turns {
    pub fn new(conn: Conn, prefix: &str) -> Self {
        Turns { conn, prefix: prefix.into() }
    }

    /// A write of a conversation's turn, on the shard its delivery's id names.
    pub async fn write(&self, w: &TurnWrite<'_>, rules: &TurnRules, now_ms: u64) -> Result<TurnVerdict, StoreError> {
        let shard = w.delivery.split_once('-').and_then(|(s, _)| s.parse::<u16>().ok()).unwrap_or(0);
        let keys = ShardKeys::new(&self.prefix, w.app, shard);
        let reply: Vec<Value> = SCRIPTS
            .write
            .key(keys.turn_index())
            .arg(&keys.tag)
            .arg(w.conversation)
            .arg(w.delivery)
            .arg(w.ts)
            .arg(w.kind.as_arg())
            .arg(now_ms)
            .arg(u8::from(rules.withhold_on_newer))
            .arg(ms(rules.quiet))
            .arg(ms(rules.timeout))
            .arg(rules.order.as_str())
            .arg(ms(w.kind.hold(rules)))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let verdict = reply.first().map(|v| redis::from_redis_value::<String>(v.clone()).unwrap_or_default());
        let ended = match reply.get(1) {
            Some(Value::BulkString(how)) if !how.is_empty() => Some(TurnEnded::from_reply(&reply[1..])?),
            _ => None,
        };
        Ok(TurnVerdict { withhold: verdict.as_deref() == Some("withhold"), ended })
    }
}

impl ShardKeys {
    /// The shard's turn deadlines.
    pub fn turn_index(&self) -> String {
        format!("{}:turns", self.tag)
    }

    /// The conversations with deliveries held, by how many.
    pub fn turns_waiting(&self) -> String {
        format!("{}:waiting", self.tag)
    }

    pub fn superseded(&self) -> String {
        format!("{}:superseded", self.tag)
    }

    pub fn superseded_count(&self) -> String {
        format!("{}:superseded:n", self.tag)
    }
}

impl Store {
    /// The turns of this store's deployment (`prefix`), for the egress.
    pub fn turns(&self, prefix: &str) -> Turns {
        Turns::new(self.conn.clone(), prefix)
    }

    /// End the turns of a shard that are due (all of them, and release everything held, when
    /// `rules` is `None`: the app takes no turns, or no longer does). At most `max` per call.
    /// With `runs`, a silent run on a message addressed to the bot runs again instead of
    /// passing (`rerun_lost = "addressed"`).
    pub async fn turns_due(
        &self,
        keys: &ShardKeys,
        rules: Option<&TurnRules>,
        runs: &RunsConfig,
        now_ms: u64,
        max: usize,
    ) -> Result<Due, StoreError> {
        let (order, timeout) = match rules {
            Some(r) => (r.order.as_str(), ms(r.timeout)),
            None => (Order::Off.as_str(), 0),
        };
        let (ended, reruns): (Vec<Vec<Value>>, Vec<DueRerun>) = SCRIPTS
            .due
            .key(keys.turn_index())
            .key(keys.turns_waiting())
            .arg(&keys.tag)
            .arg(now_ms)
            .arg(order)
            .arg(timeout)
            .arg(max)
            .arg(runs.lost.as_str())
            .arg(runs.limit)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let ended = ended.iter().map(|parts| TurnEnded::from_reply(parts)).collect::<Result<_, _>>()?;
        let reruns =
            reruns.into_iter().map(|(delivery, _, run)| Rerun { delivery, reason: RerunReason::Silent, run }).collect();
        Ok(Due { ended, reruns })
    }

    /// The latest deliveries `latest` superseded on a shard, newest first.
    pub async fn superseded(&self, keys: &ShardKeys, count: usize) -> Result<Vec<Superseded>, StoreError> {
        let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XREVRANGE")
            .arg(keys.superseded())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count)
            .query_async::<redis::streams::StreamRangeReply>(&mut self.conn.clone())
            .await?
            .ids
            .into_iter()
            .map(|e| {
                let fields =
                    e.map.iter().map(|(k, v)| (k.clone(), redis::from_redis_value(v.clone()).unwrap_or_default()));
                (e.id, fields.collect())
            })
            .collect();
        Ok(entries
            .into_iter()
            .map(|(id, f)| {
                let get = |k: &str| f.get(k).cloned().unwrap_or_default();
                let cv = crate::slack::Conversation::decode(&get("cv"));
                let (team, channel, ts, thread) = match cv {
                    Some(c) => (c.team, c.channel, c.ts, c.thread),
                    None => Default::default(),
                };
                Superseded {
                    id,
                    delivery: get("d"),
                    by: get("by"),
                    at_ms: get("at").parse().unwrap_or(0),
                    team,
                    channel,
                    ts,
                    thread,
                }
            })
            .collect())
    }
}

/// Why a run was run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RerunReason {
    /// The Socket Mode socket that carried it closed before the run ended.
    SocketClosed,
    /// The bot wrote nothing within `pass_after` on a message addressed to it.
    Silent,
}

impl RerunReason {
    pub const ALL: [RerunReason; 2] = [RerunReason::SocketClosed, RerunReason::Silent];

    pub fn as_label(self) -> &'static str {
        match self {
            RerunReason::SocketClosed => "socket_closed",
            RerunReason::Silent => "silent",
        }
    }
}

/// A lost run: run again (`run`, 1 the first re-run), or, with `run` 0, not (the limit was
/// reached: its turn ended `lost`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerun {
    pub delivery: String,
    pub reason: RerunReason,
    pub run: u64,
}

/// A run `TURN_DUE` ran again (or ended lost): its delivery, why, the re-run's number.
type DueRerun = (String, String, u64);

/// What a shard's due turns came to: the turns that ended, and the runs that run again (or
/// were lost) instead of passing.
#[derive(Debug, Default)]
pub struct Due {
    pub ended: Vec<TurnEnded>,
    pub reruns: Vec<Rerun>,
}

/// The arguments `FINISH` takes for an app's turns (`''` and zeros for none).
pub(super) fn finish_args(rules: Option<&TurnRules>) -> (&'static str, &'static str, u64, u64, u64) {
    match rules {
        None => ("", "", 0, 0, 0),
        Some(r) => (r.order.as_str(), r.end.as_str(), ms(r.quiet), ms(r.pass_after), ms(r.timeout)),
    }
}

/// How a fenced completion went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Another worker holds the entry now: nothing was changed.
    Fenced,
    /// Recorded; with the turn the delivery's end ended, if it did.
    Recorded(Option<TurnEnded>),
    /// Delivered, and its run goes on past the 2xx, tracked (see `runs`).
    RunOpen,
}

/// A `FINISH` reply.
pub(super) fn finished(reply: Value) -> Result<Finished, StoreError> {
    match reply {
        Value::Int(0) => Ok(Finished::Fenced),
        Value::Int(2) => Ok(Finished::RunOpen),
        Value::Int(_) => Ok(Finished::Recorded(None)),
        Value::Array(parts) if parts.len() == 5 => Ok(Finished::Recorded(Some(TurnEnded::from_reply(&parts[1..])?))),
        other => Err(StoreError::Protocol(format!("FINISH answered {other:?}"))),
    }
}
