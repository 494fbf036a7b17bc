//! One attempt toward the bot, the same for the ingress's inline path and the delivery workers:
//! build the signed request, send it once, judge the answer and count it; then, for a command or
//! block action whose answer came too late for Slack's request, post it to `response_url`.
//! What happens to the delivery afterwards (fenced finish, retry, dead letter) is each caller's,
//! decided by the same [`policy`].

use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::info;

use crate::config::AppConfig;
use crate::metrics::{status_class, Metrics};
use crate::policy::{self, Outcome, Verdict};
use crate::shared::Shared;
use crate::slack::{self, Kind, ReplyOutcome};
use crate::upstream::{Outgoing, Response, SendError, Transport, UpstreamClient};

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

/// What is sent: the delivery as Slack sent it.
pub struct Delivery<'a> {
    pub id: &'a str,
    /// 1 for the first attempt.
    pub number: u64,
    pub path: &'a str,
    pub content_type: &'a str,
    pub body: Bytes,
}

/// One attempt, done.
pub struct Attempted {
    pub result: Result<Response, SendError>,
    pub verdict: Verdict,
    pub took: Duration,
}

impl Attempted {
    /// The bot's status, when it answered.
    pub fn status(&self) -> Option<u16> {
        self.result.as_ref().ok().map(|r| r.status)
    }

    /// The attempt's audit line (target `slackgate::audit`); `next_retry_ms` is the delay to the
    /// next attempt when one is scheduled.
    pub fn audit(&self, message: &'static str, number: u64, outcome: Outcome, next_retry_ms: u64) {
        let error = self.result.as_ref().err().map(SendError::as_label).unwrap_or_default();
        info!(
            target: "slackgate::audit",
            attempt = number,
            outcome = outcome.as_label(),
            status = self.status().unwrap_or(0),
            error,
            latency_ms = self.took.as_secs_f64() * 1000.0,
            next_retry_ms,
            "{message}"
        );
    }
}

impl Attempted {
    /// The attempt, for the delivery history: `(app, delivery, by)`, `by` the consumer that
    /// made it.
    pub fn remember(
        &self,
        shared: &Shared,
        (app, delivery, by): (&str, &str, &str),
        number: u64,
        outcome: Outcome,
        next_retry_ms: u64,
    ) {
        shared.history.step(app, delivery, || {
            crate::history::What::Attempt(crate::history::Attempt {
                number,
                outcome: outcome.as_label(),
                status: self.status().unwrap_or(0),
                error: self.result.as_ref().err().map(SendError::as_label).unwrap_or_default(),
                latency_ms: self.took.as_secs_f64() * 1000.0,
                next_retry_ms,
                by: by.to_string(),
            })
        });
    }
}

/// Send `d` to `app`'s bot once over `transport`, re-signed now (over HTTP), within
/// `delivery.timeout`; judge and count it.
pub async fn send_once(transport: Transport<'_>, metrics: &Metrics, app: &AppConfig, d: Delivery<'_>) -> Attempted {
    let timeout = app.delivery.timeout;
    let started = Instant::now();
    let result = match transport {
        Transport::Socket(bots) => {
            let body = (d.content_type, &d.body[..]);
            bots.send(metrics, &app.name, d.id, d.number, body, timeout).await
        }
        Transport::Http(client) => {
            let out = Outgoing {
                upstream: &app.upstream,
                path: d.path,
                content_type: d.content_type,
                body: d.body,
                secret: &app.secrets[0],
                delivery_id: d.id,
                attempt: d.number,
            };
            client.send(out, timeout).await
        }
    };
    judged(metrics, app, result, started.elapsed())
}

fn judged(metrics: &Metrics, app: &AppConfig, result: Result<Response, SendError>, took: Duration) -> Attempted {
    let class = match &result {
        Ok(r) => status_class(r.status),
        Err(SendError::Timeout | SendError::ConnectTimeout(_)) => "timeout",
        Err(_) => "error",
    };
    metrics.attempt(&app.name, took, class);
    Attempted { verdict: policy::judge(&result), result, took }
}

/// Where a late answer may go: the payload's `response_url`, and the hosts it may be on.
pub struct ReplyTo<'a> {
    pub kind: Kind,
    pub detail: &'a str,
    pub response_url: &'a str,
    pub allowed_hosts: &'a [String],
}

/// Post a bot's late 2xx answer to a slash command or block action to its `response_url`,
/// once (the URL is valid five times in 30 minutes; a failure is not retried), and only when
/// that URL is Slack's. Counted and audited; other deliveries and empty answers post nothing.
pub async fn late_reply(client: &UpstreamClient, metrics: &Metrics, app: &str, to: &ReplyTo<'_>, resp: &Response) {
    if !(200..300).contains(&resp.status) || !slack::replies_late(to.kind, to.detail) || to.response_url.is_empty() {
        return;
    }
    let Some(json) = slack::late_reply(resp.content_type.as_deref(), &resp.body) else { return };
    let (outcome, detail) = match slack::check_response_url(to.response_url, to.allowed_hosts) {
        Err(refused) => (ReplyOutcome::Refused, refused.to_string()),
        Ok(url) => match client.post_json(&url, Bytes::from(json), Duration::from_secs(5)).await {
            Ok(r) if (200..300).contains(&r.status) => (ReplyOutcome::Posted, String::new()),
            Ok(r) => (ReplyOutcome::Failed, format!("status {}", r.status)),
            Err(e) => (ReplyOutcome::Failed, e.to_string()),
        },
    };
    metrics.response_url_posts.with_label_values(&[app, outcome.as_label()]).inc();
    info!(target: "slackgate::audit", outcome = outcome.as_label(), detail, "late reply");
}
