//! The Slack request's spans (`[telemetry]` on): the request itself (a server span whose id is
//! derived from the delivery's id, the parent of everything the delivery does later, on any
//! replica), its signature check and its record (the one Redis call before the ack) as
//! children; a redelivery the receipt absorbed as a span on the original delivery's trace. Made
//! after the answer was written, from times measured on the way.

use std::time::Instant;

use super::answer::{Outcome, RequestKind};
use super::Audit;
use crate::telemetry::{DeliveryTrace, Span, SpanKind, Traces};

/// What the request's spans need, gathered on the way (only when traces are on).
pub(super) struct RequestTrace {
    /// Whether a new delivery's trace is sampled (its id then carries the bit).
    pub sampled: bool,
    /// When the signature was checked (the request was read and verified).
    pub verified: Instant,
    /// The record's start and end.
    pub record: Option<(Instant, Instant)>,
    pub path: String,
    pub team: String,
    pub channel: String,
}

impl RequestTrace {
    pub fn new(sampled: bool, path: &str, d: &crate::slack::Delivery) -> Box<RequestTrace> {
        Box::new(RequestTrace {
            sampled,
            verified: Instant::now(),
            record: None,
            path: path.split('?').next().unwrap_or_default().to_string(),
            team: d.team.clone().unwrap_or_default(),
            channel: d.channel.clone().unwrap_or_default(),
        })
    }
}

/// Export the request's spans to `traces`, its delivery's `trace` being sampled.
pub(super) fn export(
    (traces, trace): (&Traces, DeliveryTrace),
    app: &str,
    a: &Audit,
    started: Instant,
    answered: (u16, RequestKind, Outcome),
) {
    let Some(rt) = a.trace.as_deref() else { return };
    let (status, kind, outcome) = answered;
    let now = Instant::now();
    let socket = a.via == "socket";
    let slack = |s: Span| {
        s.attr("slack.app", app.to_string())
            .attr("slack.kind", kind.as_label())
            .attr("slack.event_type", a.detail.clone())
            .attr("slack.event_id", a.receipt.strip_prefix("e:").unwrap_or_default().to_string())
            .attr("slack.team_id", rt.team.clone())
            .attr("slack.channel_id", rt.channel.clone())
            .attr("slack.retry_num", a.retry_num.clone())
            .attr("slackgate.delivery", a.delivery.clone())
    };
    if matches!(outcome, Outcome::Duplicate | Outcome::DuplicateMessage) {
        // Slack's redelivery, absorbed by the receipt: on the original delivery's trace.
        let span = Span::new("slack redelivery absorbed", SpanKind::Server, trace.trace_id, Some(trace.root));
        let span = slack(span.started(started)).attr("slackgate.outcome", outcome.as_label());
        return traces.push(span.ended(now));
    }
    let name = if socket { "slack socket envelope".to_string() } else { format!("POST {}", rt.path) };
    let mut root = Span::with_id(name, SpanKind::Server, trace.trace_id, trace.root, None).started(started);
    if !socket {
        root = root.attr("http.request.method", "POST").attr("url.path", rt.path.clone());
    }
    let mut root =
        slack(root).attr("http.response.status_code", i64::from(status)).attr("slackgate.outcome", outcome.as_label());
    if status >= 500 {
        root.error(outcome.as_label());
    }
    let verify = Span::new("verify signature", SpanKind::Internal, trace.trace_id, Some(trace.root)).started(started);
    traces.push(verify.ended(rt.verified));
    if let Some((from, to)) = rt.record {
        let record = Span::new("record", SpanKind::Client, trace.trace_id, Some(trace.root))
            .started(from)
            .attr("db.system.name", "redis");
        traces.push(record.ended(to));
    }
    root.event("ack", now, vec![]);
    traces.push(root.ended(now));
}
