//! A write's span (`[telemetry]` on): `slack <method>`, a client span toward Slack with the
//! write's outcome (posted, replayed, withheld and why, …). It is a child of the bot's own span
//! when the call carried a `traceparent` (an instrumented client), else a trace of its own
//! linked to the delivery the write was attributed to, else a trace of its own. The bot's
//! `traceparent` and `tracestate` never reach Slack (`headers::toward_slack`).

use std::time::Instant;

use opentelemetry::trace::TraceId;
use opentelemetry::KeyValue;

use super::model::{Call, Outcome};
use super::plan::KeyKind;
use crate::shared::Shared;
use crate::telemetry::{DeliveryTrace, Span, SpanKind};

/// Export the write's span, once its outcome is known.
/// `api_host`: Slack's Web API host the write went to (`None`: a shadow's, kept).
pub(super) fn export(shared: &Shared, call: &Call, key: KeyKind, outcome: Outcome, api_host: Option<&str>) {
    let (Some(t), Some(traces)) = (call.trace.as_deref(), shared.telemetry.get()) else { return };
    let (started, parent) = t.began();
    let seen = t.take();
    let delivery = seen.delivery.as_deref().map(DeliveryTrace::of);
    let name = format!("slack {}", call.method);
    let mut span = match (parent, delivery) {
        (Some(parent), _) if !parent.is_sampled() => return,
        (Some(parent), _) => {
            Span::new(name, SpanKind::Client, parent.trace_id(), Some(parent.span_id())).remote_parent()
        }
        (None, Some(d)) if !d.sampled => return,
        (None, Some(_)) => Span::new(name, SpanKind::Client, random_trace(), None),
        (None, None) if !traces.sample() => return,
        (None, None) => Span::new(name, SpanKind::Client, random_trace(), None),
    };
    if let Some(d) = delivery {
        span.link(d.root_context(), vec![KeyValue::new("slackgate.link", "attributed delivery")]);
    }
    let mut span = span
        .started(started)
        .attr("http.request.method", "POST")
        .attr("server.address", api_host.unwrap_or_default().to_string())
        .attr("url.path", format!("/api/{}", call.method))
        .attr("slack.api.method", call.method.clone())
        .attr("slack.team_id", seen.team.clone().unwrap_or_default())
        .attr("slack.channel_id", call.fields.channel.clone().unwrap_or_default())
        .attr("slackgate.delivery", seen.delivery.clone().unwrap_or_default())
        .attr("slackgate.key", key.as_label())
        .attr("slackgate.outcome", outcome.as_label());
    for (name, at, attributes) in seen.events {
        span.event(name, at, attributes);
    }
    if matches!(outcome, Outcome::Failed | Outcome::Unknown) {
        span.error(outcome.as_label());
    }
    traces.push(span.ended(Instant::now()));
}

/// A stream's life, once it ended (`began_ms`: its start): a span of its delivery's trace, under
/// the Slack request, with its appends, bytes and how it ended.
pub(super) fn stream(shared: &Shared, delivery: &str, end: &crate::history::StreamEnd, began_ms: u64) {
    let Some((traces, trace)) = shared.telemetry.of(delivery) else { return };
    let began = std::time::UNIX_EPOCH + std::time::Duration::from_millis(began_ms);
    let span = Span::new("slack stream", SpanKind::Internal, trace.trace_id, Some(trace.root))
        .started_at(if began_ms > 0 { began } else { std::time::SystemTime::now() })
        .attr("slack.channel_id", end.channel.clone())
        .attr("slackgate.delivery", delivery.to_string())
        .attr("slackgate.stream.appends", end.appends as i64)
        .attr("slackgate.stream.bytes", end.bytes as i64)
        .attr("slackgate.stream.ending", end.ending);
    traces.push(span.ended(Instant::now()));
}

fn random_trace() -> TraceId {
    TraceId::from(rand::random::<u128>() | 1)
}
