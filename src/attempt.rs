//! One attempt toward the bot, and what follows it, the same for the two paths that make one:
//! a delivery worker holding the entry's lease, and the ingress's inline pass-through holding
//! it in the schedule while Slack's request waits.
//!
//! - [`send_once`]: send the delivery once over the app's [`Transport`] (re-signed now, over
//!   HTTP), judge the answer and count it.
//! - [`conclude`]: the policy's step, the fenced finish, the count, the audit line and the
//!   history note, then the bot's answer to whoever still wants it — Slack's waiting request,
//!   or else (a command's or block action's 2xx) the payload's `response_url`.
//!
//! What differs between the paths is data: the [`Fence`] that finishes the entry, and the
//! [`Path`] that says who made the attempt and whether Slack still waits for its answer.

use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::config::{AppConfig, Chosen};
use crate::metrics::{status_class, Metrics};
use crate::outbox::{Finish, StoreError, StoreOp};
use crate::policy::{self, Outcome, Verdict};
use crate::shared::Shared;
use crate::slack::{self, Kind, ReplyOutcome};
use crate::upstream::{Outgoing, Response, SendError, Transport, UpstreamClient};

mod shadow;
mod trace;

pub use shadow::ShadowCopy;

/// What is sent: the delivery as Slack sent it.
pub struct Delivery<'a> {
    pub id: &'a str,
    /// 1 for the first attempt.
    pub number: u64,
    /// Its run: 1 the first, more when a run lost with the bot runs again.
    pub run: u64,
    /// Slack's retry number for it: 0 for the first attempt of each run.
    pub retry: u64,
    pub path: &'a str,
    pub content_type: &'a str,
    pub body: Bytes,
    /// The bot it goes to (the app's own, or an entry of `upstreams`) and its delivery policy.
    pub route: Chosen<'a>,
}

/// One attempt, done.
pub struct Attempted {
    pub result: Result<Response, SendError>,
    pub verdict: Verdict,
    pub took: Duration,
    /// How it reached the bot: "http" or "socket".
    via: &'static str,
    /// Its span, with traces on: exported when this is dropped.
    span: trace::AttemptSpan,
}

impl Attempted {
    /// The bot's status, when it answered.
    pub fn status(&self) -> Option<u16> {
        self.result.as_ref().ok().map(|r| r.status)
    }

    /// The attempt's audit line (target `slackgate::audit`); `next_retry_ms` is the delay to the
    /// next attempt when one is scheduled.
    fn audit(&self, message: &'static str, (number, trace_id): (u64, &str), outcome: Outcome, next_retry_ms: u64) {
        let error = self.result.as_ref().err().map(SendError::as_label).unwrap_or_default();
        info!(
            target: "slackgate::audit",
            attempt = number,
            outcome = outcome.as_label(),
            status = self.status().unwrap_or(0),
            error,
            latency_ms = self.took.as_secs_f64() * 1000.0,
            next_retry_ms,
            trace_id,
            "{message}"
        );
    }

    /// The attempt, for the delivery history, stamped when it was sent: `(app, delivery, by)`,
    /// `by` the consumer that made it.
    fn remember(
        &self,
        shared: &Shared,
        (app, delivery, by): (&str, &str, &str),
        (number, run): (u64, u64),
        outcome: Outcome,
        next_retry_ms: u64,
    ) {
        let sent_ms = now_ms().saturating_sub(self.took.as_millis() as u64);
        shared.history.step_at(app, delivery, sent_ms, || {
            crate::history::What::Attempt(crate::history::Attempt {
                number,
                run,
                outcome: outcome.as_label(),
                status: self.status().unwrap_or(0),
                error: self.result.as_ref().err().map(SendError::as_label).unwrap_or_default(),
                latency_ms: self.took.as_secs_f64() * 1000.0,
                next_retry_ms,
                by: by.to_string(),
                via: self.via,
            })
        });
    }
}

/// Send `d` to its route's bot once over `transport`, re-signed now (over HTTP), within the
/// route's `delivery.timeout`; judge and count it. With traces on, the attempt is a span of the
/// delivery's trace, and an HTTP bot gets its `traceparent` (flags `00` when the delivery is not
/// sampled, so the bot's own sampling follows).
pub async fn send_once(transport: Transport<'_>, shared: &Shared, app: &AppConfig, d: Delivery<'_>) -> Attempted {
    let timeout = d.route.delivery.timeout;
    let started = Instant::now();
    let mut span = trace::AttemptSpan::begin(shared, app, &d, &transport);
    let via = match transport {
        Transport::Socket(_) => "socket",
        Transport::Http(_) => "http",
    };
    let result = match transport {
        Transport::Socket(bots) => {
            let body = (d.content_type, &d.body[..]);
            bots.send(&shared.metrics, &app.name, d.id, (d.number, d.retry), body, timeout).await
        }
        Transport::Http(client) => {
            let out = Outgoing {
                upstream: d.route.upstream,
                path: d.path,
                content_type: d.content_type,
                body: d.body,
                secret: &app.secrets[0],
                delivery_id: d.id,
                attempt: d.number,
                run: d.run,
                traceparent: span.traceparent(),
            };
            client.send(out, timeout).await
        }
    };
    span.answered(&result);
    judged(&shared.metrics, app, result, started.elapsed(), via, span)
}

fn judged(
    metrics: &Metrics,
    app: &AppConfig,
    result: Result<Response, SendError>,
    took: Duration,
    via: &'static str,
    span: trace::AttemptSpan,
) -> Attempted {
    let class = match &result {
        Ok(r) => status_class(r.status),
        Err(SendError::Timeout | SendError::ConnectTimeout(_)) => "timeout",
        Err(_) => "error",
    };
    metrics.attempt(&app.name, took, class);
    Attempted { verdict: policy::judge(&result), result, took, via, span }
}

/// How an attempt's entry is finished: through a worker's lease, or through the ingress's
/// inline fence. Either refuses the word of one that holds the entry no more.
pub trait Fence: Sync {
    /// Record `how` for the entry: `Ok(true)` recorded, `Ok(false)` refused (another holds the
    /// entry now; nothing was changed).
    fn finish(&self, how: Finish<'static>) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// Which path made the attempt, and what it owes afterwards.
pub enum Path<'a> {
    /// A delivery worker, its consumer `by`: Slack had its 200 when the delivery was recorded,
    /// so a late answer can only go to `response_url`.
    Worker { by: &'a str },
    /// The ingress's inline pass-through: Slack's request waits for the bot's answer on `slack`
    /// until its budget runs out (then the receiver is closed, and the answer is late).
    Inline { slack: oneshot::Sender<Option<Response>> },
}

/// What a path's counters and log lines say.
struct Words {
    /// The audit line's message.
    audit: &'static str,
    /// The finish, as a `store_errors_total` operation.
    op: StoreOp,
    /// When the fence refused the finish.
    fenced: &'static str,
    /// When Redis failed it.
    unrecorded: &'static str,
}

const WORKER: Words = Words {
    audit: "attempt",
    op: StoreOp::Finish,
    fenced: "lease was taken by another worker; result discarded",
    unrecorded: "cannot record the outcome; the lease will expire and the entry be retried",
};

const INLINE: Words = Words {
    audit: "inline attempt",
    op: StoreOp::InlineFinish,
    fenced: "the workers own this delivery now; result discarded",
    unrecorded: "cannot record the outcome; the workers will retry it after the lease",
};

impl Path<'_> {
    fn words(&self) -> &'static Words {
        match self {
            Path::Worker { .. } => &WORKER,
            Path::Inline { .. } => &INLINE,
        }
    }

    /// Who made the attempt, for the history.
    fn by(&self) -> &str {
        match self {
            Path::Worker { by } => by,
            Path::Inline { .. } => "inline",
        }
    }
}

/// The attempt's delivery, as its conclusion needs it.
pub struct Context<'a> {
    pub shared: &'a Shared,
    /// Posts a late answer to `response_url`.
    pub client: &'a UpstreamClient,
    pub app: &'a AppConfig,
    pub delivery: &'a str,
    /// The attempt's number, 1 for the first.
    pub number: u64,
    /// Its run: 1 the first, more after a run lost with the bot.
    pub run: u64,
    /// How many attempts before it ended in a retry.
    pub retries: u64,
    pub received_ms: u64,
    /// How long pauses held it: not counted toward `give_up_after`.
    pub paused_ms: u64,
    /// The route the attempt took: its policy decides the next step.
    pub route: Chosen<'a>,
    /// Where a late answer may go.
    pub reply_to: ReplyTo<'a>,
    pub path: Path<'a>,
}

/// Everything after `attempted`: the policy's step, the finish through `fence`, the count, the
/// audit line and the history note, then the bot's answer to Slack or to `response_url`.
pub async fn conclude(mut attempted: Attempted, fence: &impl Fence, at: Context<'_>) {
    let now = now_ms();
    let (how, outcome) = at.step(&attempted.verdict, now);
    let next_retry_ms = at.retry_delay(&how, now);
    if !at.finished(fence.finish(how).await, outcome) {
        return;
    }
    attempted.span.concluded(outcome.as_label(), next_retry_ms);
    let trace_id = trace::trace_id(at.shared, at.delivery);
    attempted.audit(at.path.words().audit, (at.number, &trace_id), outcome, next_retry_ms);
    let who = (at.app.name.as_str(), at.delivery, at.path.by());
    attempted.remember(at.shared, who, (at.number, at.run), outcome, next_retry_ms);
    at.hand_on(&attempted, now).await;
}

impl Context<'_> {
    /// The outbox transition and the outcome for `verdict`.
    fn step(&self, verdict: &Verdict, now: u64) -> (Finish<'static>, Outcome) {
        match verdict {
            // Options are useless later: a failed block_suggestion is not retried. (Only the
            // inline path sends one: a worker expires it unsent.)
            Verdict::Retry { .. } if self.reply_to.is_suggestion() => (Finish::Done, Outcome::Expired),
            v => {
                let since = self.received_ms + self.paused_ms;
                policy::step(self.route.delivery, v, self.retries, since, now, rand::random())
            }
        }
    }

    /// The delay to the next attempt, for the audit line and the history note.
    fn retry_delay(&self, how: &Finish<'_>, now: u64) -> u64 {
        match (how, &self.path) {
            (Finish::Retry { due_ms, .. }, Path::Worker { .. }) => due_ms.saturating_sub(now),
            // The inline path has always said 0 here, though its retry is scheduled as any other.
            _ => 0,
        }
    }

    /// Count the finish; whether the conclusion goes on.
    fn finished(&self, finished: Result<bool, StoreError>, outcome: Outcome) -> bool {
        let (m, app, words) = (&self.shared.metrics, self.app.name.as_str(), self.path.words());
        match finished {
            Ok(true) => {
                m.deliveries.with_label_values(&[app, outcome.as_label()]).inc();
                m.routes.deliveries.with_label_values(&[app, self.route.label, outcome.as_label()]).inc();
                true
            }
            Ok(false) => {
                m.fence_rejections.with_label_values(&[app]).inc();
                warn!(attempt = self.number, outcome = outcome.as_label(), "{}", words.fenced);
                false
            }
            Err(e) => {
                m.store_errors.with_label_values(&[app, words.op.as_label()]).inc();
                warn!(attempt = self.number, error = %e, "{}", words.unrecorded);
                // Slack's waiting request still gets the bot's answer.
                matches!(self.path, Path::Inline { .. })
            }
        }
    }

    /// The bot's answer to whoever still wants it: Slack's waiting request, else the payload's
    /// `response_url` (a command's or block action's 2xx answer only).
    async fn hand_on(self, attempted: &Attempted, now: u64) {
        let (m, app) = (&self.shared.metrics, self.app.name.as_str());
        let late = match self.path {
            Path::Worker { .. } => {
                if attempted.verdict == Verdict::Delivered {
                    let lag = now.saturating_sub(self.received_ms) as f64 / 1000.0;
                    m.delivered_lag_seconds.with_label_values(&[app]).observe(lag);
                }
                true
            }
            Path::Inline { slack } => {
                let outcome = answer(slack, attempted, self.reply_to.is_suggestion());
                m.inline.with_label_values(&[app, self.reply_to.kind.as_str(), outcome.as_label()]).inc();
                outcome == InlineOutcome::Late
            }
        };
        if let (true, Ok(resp)) = (late, &attempted.result) {
            late_reply(self.client, self.shared, (app, self.delivery), &self.reply_to, resp).await;
        }
    }
}

/// How an inline attempt (a command or interaction answered within Slack's request) ended, as
/// the `inline_total` outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineOutcome {
    /// The bot's answer went back to Slack in its request.
    InTime,
    /// It came after Slack got its empty 200 (and was posted to `response_url` if it could be).
    Late,
    /// A `block_suggestion` answered too late: options are useless later.
    Expired,
}

impl InlineOutcome {
    pub const ALL: [InlineOutcome; 3] = [InlineOutcome::InTime, InlineOutcome::Late, InlineOutcome::Expired];

    pub fn as_label(self) -> &'static str {
        match self {
            InlineOutcome::InTime => "in_time",
            InlineOutcome::Late => "late",
            InlineOutcome::Expired => "expired",
        }
    }
}

/// Give Slack's waiting request the bot's answer (a retried attempt's none: Slack gets an
/// empty 200); how that went.
fn answer(slack: oneshot::Sender<Option<Response>>, attempted: &Attempted, suggestion: bool) -> InlineOutcome {
    let pass = match attempted.verdict {
        Verdict::Delivered | Verdict::Final { .. } => attempted.result.as_ref().ok().cloned(),
        Verdict::Retry { .. } => None,
    };
    if slack.send(pass).is_ok() {
        return InlineOutcome::InTime;
    }
    if suggestion {
        info!("block_suggestion answered too late for Slack; expired");
        return InlineOutcome::Expired;
    }
    InlineOutcome::Late
}

/// Where a late answer may go: the payload's `response_url` (empty: none), and the hosts it
/// may be on.
pub struct ReplyTo<'a> {
    pub kind: Kind,
    pub detail: &'a str,
    pub response_url: &'a str,
    pub allowed_hosts: &'a [String],
}

impl ReplyTo<'_> {
    /// A `block_suggestion`: options, useless once Slack's request is over.
    fn is_suggestion(&self) -> bool {
        self.kind == Kind::Interactivity && self.detail == "block_suggestion"
    }
}

/// Post a bot's late 2xx answer to a slash command or block action to its `response_url`,
/// once (the URL is valid five times in 30 minutes; a failure is not retried), and only when
/// that URL is Slack's. Counted and audited; other deliveries and empty answers post nothing.
async fn late_reply(
    client: &UpstreamClient,
    shared: &Shared,
    (app, delivery): (&str, &str),
    to: &ReplyTo<'_>,
    resp: &Response,
) {
    if !(200..300).contains(&resp.status) || !slack::replies_late(to.kind, to.detail) || to.response_url.is_empty() {
        return;
    }
    let Some(json) = slack::late_reply(resp.content_type.as_deref(), &resp.body) else { return };
    let started = Instant::now();
    let checked = slack::check_response_url(to.response_url, to.allowed_hosts);
    let (outcome, detail) = match &checked {
        Err(refused) => (ReplyOutcome::Refused, refused.to_string()),
        Ok(url) => match client.post_json(url, Bytes::from(json), Duration::from_secs(5)).await {
            Ok(r) if (200..300).contains(&r.status) => (ReplyOutcome::Posted, String::new()),
            Ok(r) => (ReplyOutcome::Failed, format!("status {}", r.status)),
            Err(e) => (ReplyOutcome::Failed, e.to_string()),
        },
    };
    trace::late_reply(shared, delivery, started, checked.as_ref().ok(), outcome.as_label());
    shared.metrics.response_url_posts.with_label_values(&[app, outcome.as_label()]).inc();
    info!(target: "slackgate::audit", outcome = outcome.as_label(), detail, "late reply");
}

/// `http://host:port` of `[egress] listen` as a bot on this host reaches it (a wildcard
/// address is reached on loopback).
pub fn egress_base(listen: &str) -> String {
    let addr = listen.replace("0.0.0.0:", "127.0.0.1:").replace("[::]:", "[::1]:");
    format!("http://{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempted(status: u16) -> Attempted {
        let body = Bytes::from_static(b"{}");
        let result = Ok(Response {
            status,
            content_type: None,
            body,
            retry_after: None,
            headers: Default::default(),
            socket: None,
        });
        Attempted {
            verdict: policy::judge(&result),
            result,
            took: Duration::ZERO,
            via: "http",
            span: trace::AttemptSpan::Off,
        }
    }

    #[test]
    fn slack_waiting_gets_the_bots_answer_else_it_is_late_or_expired() {
        let (slack, mut waiting) = oneshot::channel();
        assert_eq!(answer(slack, &attempted(200), false), InlineOutcome::InTime);
        assert_eq!(waiting.try_recv().unwrap().map(|r| r.status), Some(200));
        let (slack, mut waiting) = oneshot::channel();
        assert_eq!(answer(slack, &attempted(404), false), InlineOutcome::InTime);
        assert_eq!(waiting.try_recv().unwrap().map(|r| r.status), Some(404), "a final answer is Slack's too");
        let (slack, mut waiting) = oneshot::channel();
        assert_eq!(answer(slack, &attempted(503), false), InlineOutcome::InTime);
        assert!(waiting.try_recv().unwrap().is_none(), "retried: Slack gets an empty 200");
        // The budget ran out: the receiver is closed.
        for (suggestion, outcome) in [(false, InlineOutcome::Late), (true, InlineOutcome::Expired)] {
            let (slack, mut waiting) = oneshot::channel();
            waiting.close();
            assert_eq!(answer(slack, &attempted(200), suggestion), outcome);
        }
    }
}
