//! A Socket Mode envelope through the same checks and the same record as an HTTP delivery:
//! classified from the body Slack would have POSTed, recorded under the same admission and
//! ack budget, and for commands and interactions answered inline within the same budget. Its
//! signature is not checked: it came over the app's own authenticated socket.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::answer::{Outcome, RequestKind};
use super::plan::Verified;
use super::{Audit, Ingress};
use crate::config::AppConfig;
use crate::slack::{self, Request, RetryReason};

/// What to ack an envelope with.
#[derive(Debug)]
pub struct EnvelopeAnswer {
    /// Recorded (or deliberately not: a duplicate, an ignored or unparseable payload): ack it.
    /// Else the store did not take it and Slack must redeliver: no ack.
    pub ack: bool,
    /// The bot's inline answer, for an envelope that accepts a response payload.
    pub content_type: String,
    pub body: Bytes,
    pub outcome: &'static str,
}

/// One envelope as the HTTP request it stands for.
pub struct EnvelopeRequest<'a> {
    pub content_type: &'static str,
    pub body: Bytes,
    /// The app's route for its kind (what the bot would have been sent).
    pub path: &'a str,
    pub envelope_id: &'a str,
    /// Slack's redelivery count and reason, when this is one.
    pub retry: Option<(u32, RetryReason)>,
}

impl Ingress {
    /// Record one envelope, by the ack budget counted from now.
    pub async fn envelope(&self, app: &Arc<AppConfig>, e: EnvelopeRequest<'_>) -> EnvelopeAnswer {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started) + self.config.server.ack_budget;
        let mut audit = Audit { via: "socket", ..Audit::default() };
        if let Some((n, reason)) = e.retry {
            self.shared.metrics.slack_retries.with_label_values(&[app.name.as_str(), reason.as_label()]).inc();
            audit.retry_num = n.to_string();
            audit.retry_reason = reason.as_label();
        }
        let answer = if e.body.len() > self.config.server.max_body {
            // As over HTTP: larger than any payload Slack sends, never recorded.
            audit.reason = format!("envelope {}: {} bytes, over server.max_body", e.envelope_id, e.body.len());
            super::answer::Answer::refuse(413, Outcome::TooLarge, "payload too large\n")
        } else {
            self.classified(app, e, &mut audit, deadline).await
        };
        self.account_parts(&app.name, started, &mut audit, (answer.status, answer.kind, answer.outcome));
        let ack = !matches!(answer.outcome, Outcome::StoreUnavailable | Outcome::Shed);
        let inline = answer.outcome == Outcome::Answered && (200..300).contains(&answer.status);
        EnvelopeAnswer {
            ack,
            content_type: answer.content_type.into_owned(),
            body: if inline { answer.body } else { Bytes::new() },
            outcome: answer.outcome.as_label(),
        }
    }

    /// Classified from the body Slack would have POSTed, then recorded.
    async fn classified(
        &self,
        app: &Arc<AppConfig>,
        e: EnvelopeRequest<'_>,
        audit: &mut Audit,
        deadline: tokio::time::Instant,
    ) -> super::answer::Answer {
        match slack::classify(e.content_type.as_bytes(), &e.body) {
            Ok(Request::Delivery(delivery)) => {
                let v = Verified {
                    delivery,
                    content_type: e.content_type.as_bytes().to_vec(),
                    body: e.body,
                    path: e.path.into(),
                };
                self.record(app, v, audit, deadline).await
            }
            Ok(_) => {
                audit.reason = "not a delivery (a handshake over the socket)".into();
                super::answer::Answer::empty(200, RequestKind::Unknown, Outcome::Ignored)
            }
            Err(err) => {
                audit.reason = format!("envelope {}: {err}", e.envelope_id);
                super::answer::Answer::refuse(400, Outcome::BadRequest, "unparseable payload\n")
            }
        }
    }
}
