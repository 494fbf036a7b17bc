//! The write path's decisions, as pure functions: time and randomness come in as arguments, and
//! nothing here touches Redis, Slack or the client. The I/O steps (`keyed`, `retry`,
//! `attribution`, `rerun`, `pacing`, `uncertain`, `look`) ask these what to do, then do it.
//!
//! - [`layer`]: which key layer a write goes through; [`on_key`]: what its key's claim means.
//! - [`on_fingerprint`] (and [`BusyWatch`]): what an identical earlier call means for this one.
//! - [`withhold`]: whether a write's source is gone.
//! - [`rerun`]: whether a write of a re-run replays the earlier run's.
//! - [`pace_per`], [`retry_wait`]: pacing, and how long Slack's 429 is waited out.
//! - [`settles`]: what an outcome leaves in a record for the next identical call.
//! - [`recovery`], [`Window`], [`from_events`]: an uncertain write, by method, and the
//!   evidence-window rule.

use std::time::Duration;

use tokio::time::Instant;

use super::model::error::Error;
use super::model::{Cached, Gone, IdemClaim, Outcome, Settle, SourceState, LEASE, LEASE_RENEW_EVERY};
use crate::outbox::WriteKind;

/// Which key a write carried, as its audit line says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    /// No key: sent as it is, or a write of its own under its fingerprint.
    None,
    /// An `Idempotency-Key`.
    Key,
    /// A client's own retry of an identical call (its fingerprint).
    Retry,
}

impl KeyKind {
    pub fn as_label(self) -> &'static str {
        match self {
            KeyKind::None => "none",
            KeyKind::Key => "key",
            KeyKind::Retry => "retry",
        }
    }
}

/// Which layer dedupes a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layer {
    /// No token: nothing to scope a key by; Slack answers it.
    Plain,
    /// `Idempotency-Key`.
    Keyed,
    /// The retry fingerprint (token, method, query and body).
    Fingerprint,
}

/// The layer of a write, by what it carries.
pub(super) fn layer(has_token: bool, has_idempotency_key: bool) -> Layer {
    match (has_token, has_idempotency_key) {
        (false, _) => Layer::Plain,
        (true, true) => Layer::Keyed,
        (true, false) => Layer::Fingerprint,
    }
}

/// What a keyed call does, given its claim of the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KeyStep {
    /// Refused: in flight, reused for another request, or no store to claim it in.
    Refuse(Error),
    /// The answer of the key's earlier call.
    Replay(Cached),
    /// The key is this call's: send.
    Send,
    /// The key's earlier call never settled: this call settles it by the uncertain-write rules.
    Reconcile { sent_ms: u64 },
}

/// A keyed call's step, by its claim (`None`: Redis did not say; a key fails closed).
pub(super) fn on_key(claim: Option<IdemClaim>) -> KeyStep {
    match claim {
        None => KeyStep::Refuse(Error::StoreUnavailable),
        Some(IdemClaim::InFlight) => KeyStep::Refuse(Error::KeyInFlight),
        Some(IdemClaim::Reused) => KeyStep::Refuse(Error::KeyReused),
        Some(IdemClaim::Done(c)) => KeyStep::Replay(c),
        Some(IdemClaim::Claimed) => KeyStep::Send,
        Some(IdemClaim::Unsettled { sent_ms }) => KeyStep::Reconcile { sent_ms },
    }
}

/// What an identical call in flight turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Twin {
    /// Still deciding: poll again.
    Unsure,
    /// Alive (its lease is renewed) and its client waits: this call is a write of its own.
    Alive,
}

/// How long an identical call in flight is watched for its client's going before this call is
/// taken for a new write of its own (a client that timed out retries at once: its first call
/// may not be marked lost yet).
pub(super) const BUSY_GRACE: Duration = Duration::from_millis(250);

/// Watching an identical call in flight: a live one renews its lease (its beats move) within
/// one renewal; a dead one's lease lapses and `fp_begin` says unsettled. Bounded either way.
pub(super) struct BusyWatch {
    first_beats: Option<u64>,
    grace_until: Instant,
    give_up: Instant,
}

impl BusyWatch {
    pub fn new(now: Instant) -> Self {
        BusyWatch { first_beats: None, grace_until: now + BUSY_GRACE, give_up: now + LEASE + LEASE_RENEW_EVERY }
    }

    /// The twin's lease renewals read `beats` at `now`.
    pub fn saw(&mut self, beats: u64, now: Instant) -> Twin {
        let first = *self.first_beats.get_or_insert(beats);
        if (beats != first && now >= self.grace_until) || now >= self.give_up {
            return Twin::Alive;
        }
        Twin::Unsure
    }
}

/// What `fp_begin` found for this call's fingerprint; `T`: the answer it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FpSeen<T> {
    /// Redis did not say.
    StoreFailed,
    New,
    /// An identical call is in flight, its client waiting; how the watch reads it.
    Busy(Twin),
    /// An identical call is in flight, its client gone: its result will be this call's.
    Wait,
    Replay(T),
    Unsettled {
        sent_ms: u64,
    },
}

/// What a call does about its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FpStep<T> {
    /// Send it as a write of its own, its fingerprint not ours.
    Send,
    /// The fingerprint is ours: send it, watching the client.
    SendTracked,
    /// The earlier call's answer, which never reached its client.
    Replay(T),
    /// The earlier call never settled: by the uncertain-write rules.
    Reconcile { sent_ms: u64 },
    /// Look again after this long (while the client is still there).
    Poll(Duration),
    /// Waited as long as the earlier call can run: unknown.
    GiveUp,
}

/// A call's step, given what its fingerprint holds and whether the earlier call could still be
/// running (`before_deadline`).
pub(super) fn on_fingerprint<T>(seen: FpSeen<T>, before_deadline: bool) -> FpStep<T> {
    match seen {
        FpSeen::StoreFailed | FpSeen::Busy(Twin::Alive) => FpStep::Send,
        FpSeen::Busy(Twin::Unsure) => FpStep::Poll(Duration::from_millis(25)),
        FpSeen::New => FpStep::SendTracked,
        FpSeen::Replay(answer) => FpStep::Replay(answer),
        FpSeen::Unsettled { sent_ms } => FpStep::Reconcile { sent_ms },
        FpSeen::Wait if before_deadline => FpStep::Poll(Duration::from_millis(50)),
        FpSeen::Wait => FpStep::GiveUp,
    }
}

/// Whether a write attributed to a source in `state` is withheld: its source was deleted, or
/// edited when `withhold_edited`. An unattributed write is posted, and so is one that acts on a
/// message the bot already posted (`names_its_message`): the bot can always finish, fix or
/// remove its own answer.
pub(super) fn withhold(state: Option<SourceState>, withhold_edited: bool, method: &str) -> Option<Gone> {
    if names_its_message(method) {
        return None;
    }
    match state? {
        SourceState::Deleted => Some(Gone::Deleted),
        SourceState::Edited if withhold_edited => Some(Gone::Edited),
        _ => None,
    }
}

/// Whether re-runs are replayed for this write: opt-in, attributed, and not an update (an
/// update of the earlier run's post is the bot's own correction).
pub(super) fn rerun_applies(enabled: bool, method: &str, attributed: bool) -> bool {
    enabled && attributed && method != "chat.update"
}

/// What a re-run's k-th write does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Rerun<T> {
    /// An earlier run made this k-th write: its answer.
    Replay(T),
    /// Post it, and record it as the k-th write of this run.
    Record(u64),
}

/// The k-th write of run `run`, given the k-th such write an earlier run made, if any.
pub(super) fn rerun<T>(k: u64, earlier: Option<(u64, T)>, run: u64) -> Rerun<T> {
    match earlier {
        Some((earlier_run, answer)) if earlier_run < run => Rerun::Replay(answer),
        _ => Rerun::Record(k),
    }
}

/// The method that posts a message: paced, looked for when uncertain, its post's source kept.
pub(super) const POST_MESSAGE: &str = "chat.postMessage";

/// Whether a write waits for its app's pace in the channel.
pub(super) fn is_paced(method: &str) -> bool {
    method == POST_MESSAGE
}

/// Whether a successful write's answer names a new post whose source is recorded (so that an
/// update or delete of it is attributed to the same source).
pub(super) fn records_its_post(method: &str) -> bool {
    matches!(method, POST_MESSAGE | "chat.startStream")
}

/// Whether a write acts on a message the bot already posted (named by its `ts`): an update, a
/// delete, a stream's stop. Never withheld for its question; its turn is the message's.
pub(super) fn names_its_message(method: &str) -> bool {
    matches!(method, "chat.update" | "chat.delete" | STOP_STREAM)
}

/// What a write is to its conversation's turn (`status`: a status call's status); `None`: not
/// an answer at all (a reaction, a view, a thread's title or suggested prompts), which a turn
/// neither waits for nor withholds.
pub(super) fn turn_write(method: &str, status: Option<&str>) -> Option<WriteKind> {
    Some(match method {
        POST_MESSAGE
        | "chat.postEphemeral"
        | "chat.meMessage"
        | "chat.scheduleMessage"
        | "files.completeUploadExternal" => WriteKind::Post,
        START_STREAM => WriteKind::Start,
        APPEND_STREAM => WriteKind::Append,
        "chat.update" | "chat.delete" => WriteKind::Continue,
        STOP_STREAM => WriteKind::Close,
        // A status cleared is the answer's last touch: it renews the turn, holds nothing.
        "assistant.threads.setStatus" if status.is_some_and(str::is_empty) => WriteKind::Continue,
        "assistant.threads.setStatus" => WriteKind::Status,
        _ => return None,
    })
}

pub(super) const START_STREAM: &str = "chat.startStream";
pub(super) const APPEND_STREAM: &str = "chat.appendStream";
pub(super) const STOP_STREAM: &str = "chat.stopStream";

/// Whether the call goes on a stream the gateway keeps (an append or a stop).
pub(super) fn continues_a_stream(method: &str) -> bool {
    matches!(method, APPEND_STREAM | STOP_STREAM)
}

/// The error Slack answers a call on a stream it no longer streams (its stop came, or it
/// expired after about five minutes).
pub(super) const NOT_STREAMING: &str = "message_not_in_streaming_state";

/// What Slack's answer to a stream's append or stop means for the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamAnswer {
    /// Slack took it.
    Taken,
    /// Slack no longer streams it: the gateway continues the answer as edits.
    Expired,
    /// Slack refused it for another reason: its text is taken back, the bot gets the answer.
    Refused,
    /// No answer after it may have reached Slack: the gateway continues the answer as edits.
    Lost,
}

/// Slack's answer to an append or stop (`None`: lost on the way).
pub(super) fn stream_answer(answer: Option<&Cached>) -> StreamAnswer {
    let Some(a) = answer else { return StreamAnswer::Lost };
    if a.succeeded() {
        return StreamAnswer::Taken;
    }
    let error =
        serde_json::from_slice::<serde_json::Value>(&a.body).ok().and_then(|v| v["error"].as_str().map(String::from));
    match error.as_deref() {
        Some(NOT_STREAMING) => StreamAnswer::Expired,
        _ => StreamAnswer::Refused,
    }
}

/// The gateway edits a message it continues at most once in this (Slack's pace for the
/// updates of one message); the edits between are coalesced, and the last is always sent.
pub(super) const EDIT_EVERY: Duration = Duration::from_secs(1);

/// Slack takes `markdown_text` up to this many characters; a longer answer is edited as
/// `text`.
pub(super) const MARKDOWN_MAX: usize = 12_000;

/// The gap between two posts of an app in a channel.
pub(super) fn pace_per(per_second: f64) -> Duration {
    Duration::from_secs_f64(1.0 / per_second)
}

/// The `Retry-After` the bot gets when the pace would hold its post past `max_wait`.
pub(super) fn paced_out_after(per: Duration) -> u64 {
    per.as_secs().max(1)
}

/// Slack's `Retry-After` is honoured no sooner than this: a `0` (or none) must not become a
/// burst of re-sends.
pub(super) const MIN_RETRY_WAIT: Duration = Duration::from_secs(1);

/// How long to wait out Slack's 429 before sending again (`Retry-After`, bounded to
/// `[1 s, max_wait]`), or `None` when that would go past `max_wait` since the write began.
pub(super) fn retry_wait(retry_after: Option<Duration>, elapsed: Duration, max_wait: Duration) -> Option<Duration> {
    let wait = retry_after.unwrap_or(MIN_RETRY_WAIT).clamp(MIN_RETRY_WAIT, max_wait.max(MIN_RETRY_WAIT));
    (elapsed.saturating_add(wait) <= max_wait).then_some(wait)
}

/// What an outcome settles; `ok`: Slack's answer was a success (a 2xx with `"ok": true`).
pub(super) fn settles(outcome: Outcome, ok: bool) -> Settle {
    match outcome {
        Outcome::Unknown => Settle::Unknown,
        _ if ok => Settle::Keep,
        _ => Settle::Drop,
    }
}

/// How a write whose outcome is unknown is recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recovery {
    LookFor,
    SendAgain,
    Unknown,
}

pub(super) fn recovery(method: &str) -> Recovery {
    match method {
        // A stream's start makes a message as a post does: looked for by its text.
        POST_MESSAGE | START_STREAM => Recovery::LookFor,
        "chat.update"
        | "chat.delete"
        | "reactions.add"
        | "reactions.remove"
        | "views.update"
        | "views.publish"
        | "pins.add"
        | "pins.remove"
        | "assistant.threads.setStatus" => Recovery::SendAgain,
        _ => Recovery::Unknown,
    }
}

/// Where the window of an earlier call's looks starts: the dead call may have given up as late
/// as its timeout. A send time from the record is never taken to be in the future.
pub(super) fn unsettled_from(sent_ms: u64, now_ms: u64, timeout: Duration) -> (u64, u64) {
    let sent_ms = sent_ms.min(now_ms);
    (sent_ms, sent_ms.saturating_add(timeout.as_millis() as u64))
}

/// An uncertain post's evidence window: a post that landed late shows by its end (its own
/// message event, or in history), so "not there" needs evidence read at or after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    from_ms: u64,
    window: Duration,
}

impl Window {
    /// The window of a post whose answer was given up at `from_ms`.
    pub fn new(from_ms: u64, window: Duration) -> Self {
        Window { from_ms, window }
    }

    /// Evidence read at or after this saw what could have landed.
    pub fn end(&self) -> u64 {
        self.from_ms.saturating_add(self.window.as_millis() as u64)
    }

    /// Whether evidence read at `read_at` that did not show the post means it is not there.
    pub fn not_found(&self, read_at: u64) -> bool {
        read_at >= self.end()
    }
}

/// What an uncertain post's wait for its own message event ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FromEvents {
    /// Its event came: posted, with this `ts`.
    Found,
    /// The gateway sees this app's posts in the channel, and none came by the window's end:
    /// not posted, and no history call.
    NotPosted,
    /// It does not see them there (or could not read): history decides.
    AskHistory,
}

/// The rule: only where the gateway sees the app's own posts does their absence, read at or
/// after the window's end, mean "not posted".
pub(super) fn from_events(found: bool, sees: bool, window: &Window, read_at: u64) -> FromEvents {
    match (found, sees && window.not_found(read_at)) {
        (true, _) => FromEvents::Found,
        (false, true) => FromEvents::NotPosted,
        (false, false) => FromEvents::AskHistory,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
