//! What the ingress tells the delivery history: what it saw of each Slack request, queued
//! after the answer is written (in `logging`), never on the ack path. Ignored deliveries,
//! Slack's retries absorbed and refused requests are only seen here.

use super::answer::Outcome;
use super::plan::{Plan, Verified};
use super::{Audit, Ingress, RequestKind};
use crate::clock::now_ms;
use crate::history::{Arrival, Note, What};
use crate::slack;

/// What the history keeps of `d` (its id `plan.id`), when the history is on.
pub(super) fn arrival(v: &Verified, plan: &Plan) -> Box<Arrival> {
    let d = &v.delivery;
    let m = d.message.as_ref();
    let text = |s: Option<&String>| s.cloned().unwrap_or_default();
    Box::new(Arrival {
        kind: d.kind.as_str(),
        detail: d.detail.clone(),
        team: text(d.team.as_ref().or(m.map(|m| &m.team))),
        channel: text(d.channel.as_ref()),
        user: text(d.user.as_ref()),
        ts: text(m.map(|m| &m.ts)),
        // An assistant thread's events name their thread, as its messages do.
        thread_ts: text(m.and_then(|m| m.thread_ts.as_ref()).or(d.assistant_thread.as_ref().map(|a| &a.thread_ts))),
        receipt: text(d.receipt.as_ref()),
        event_time: d.event_time,
        asks: d.detail == "app_mention" || m.is_some_and(|m| (m.direct || m.mentions_bot) && m.subtype.is_none()),
        conversation: plan.conversation.as_ref().map(slack::Conversation::key).unwrap_or_default(),
        path: v.path.clone(),
        content_type: String::from_utf8_lossy(&v.content_type).into_owned(),
        body: Some(v.body.clone()),
        ..Arrival::default()
    })
}

impl Ingress {
    /// Queue what the history keeps of one answered Slack request of `app`.
    pub(super) fn remember(&self, app: &str, a: &mut Audit, answered: (u16, RequestKind, Outcome), ack_ms: f64) {
        let history = &self.shared.history;
        // Slack's deliveries only: not its handshakes (url_verification, ssl_check), which
        // may come unsigned.
        let delivery = matches!(
            answered.1,
            RequestKind::Event | RequestKind::Command | RequestKind::Interactivity | RequestKind::Opaque
        );
        if !history.is_on() || app.is_empty() || !delivery {
            return;
        }
        let Some(what) = what_of(a, answered, ack_ms) else { return };
        let delivery = match &what {
            What::Answered { .. } => String::new(),
            _ if a.delivery.is_empty() => std::mem::take(&mut a.history_id),
            _ => std::mem::take(&mut a.delivery),
        };
        // The arrival's time, as near as the ack's latency tells it.
        let at_ms = now_ms().saturating_sub(ack_ms as u64);
        history.note(Note { app: app.to_string(), delivery, at_ms, what });
    }
}

/// What the history notes of a request the ingress answered; `None`: nothing (it failed
/// before its signature was checked: anyone can send those, and bad input changes nothing).
fn what_of(a: &mut Audit, (status, kind, outcome): (u16, RequestKind, Outcome), ack_ms: f64) -> Option<What> {
    let via = if a.via.is_empty() { "http" } else { a.via };
    Some(match (outcome, a.arrival.take()) {
        (Outcome::Duplicate | Outcome::DuplicateMessage, _) if crate::history::kept(&a.delivery) => What::Absorbed {
            retry_num: std::mem::take(&mut a.retry_num),
            retry_reason: a.retry_reason,
            outcome: outcome.as_label(),
            ack_ms,
            via,
        },
        (Outcome::Accepted | Outcome::Answered | Outcome::Ignored, Some(mut arrival)) => {
            arrival.via = via;
            arrival.retry_num = std::mem::take(&mut a.retry_num);
            arrival.retry_reason = a.retry_reason;
            arrival.ack_ms = ack_ms;
            arrival.status = status;
            arrival.outcome = outcome.as_label();
            arrival.reason = std::mem::take(&mut a.reason);
            What::Arrived(arrival)
        }
        // Not recorded in full (past history_rate), or Slack's request that could not be
        // recorded at all: the overview counts it.
        (
            Outcome::Accepted
            | Outcome::Answered
            | Outcome::Ignored
            | Outcome::Duplicate
            | Outcome::DuplicateMessage
            | Outcome::Shed
            | Outcome::StoreUnavailable,
            _,
        ) => What::Answered { status, ack_ms, kind: kind.as_label() },
        _ => return None,
    })
}
