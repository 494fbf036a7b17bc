//! An attempt's span (`[telemetry]` on): a client span of the delivery's trace, under the
//! Slack request's span, whichever process or retry makes it; its `traceparent` goes to an
//! HTTP bot. Its attributes are the HTTP conventions' safe part (`server.address`, `url.path`,
//! the method and status; never a query or a full URL) and Slack's ids.

use std::time::Instant;

use super::Delivery;
use crate::config::AppConfig;
use crate::shared::Shared;
use crate::telemetry::{traceparent, DeliveryTrace, Open, Span, SpanKind};
use crate::upstream::{SendError, Transport};

/// The delivery's trace id for the audit lines ('' with traces off or not sampled).
pub(super) fn trace_id(shared: &Shared, delivery: &str) -> String {
    shared.telemetry.of(delivery).map(|(_, t)| t.trace_id.to_string()).unwrap_or_default()
}

/// The late `response_url` reply's span: its host and the path's first segment (`/commands`,
/// `/actions`) only — the rest of the URL is what lets anyone post, never exported.
pub(super) fn late_reply(
    shared: &Shared,
    delivery: &str,
    started: Instant,
    url: Option<&url::Url>,
    outcome: &'static str,
) {
    let Some((traces, trace)) = shared.telemetry.of(delivery) else { return };
    let mut span = Span::new("slack response_url", SpanKind::Client, trace.trace_id, Some(trace.root))
        .started(started)
        .attr("http.request.method", "POST")
        .attr("slackgate.delivery", delivery.to_string())
        .attr("slackgate.outcome", outcome);
    if let Some(url) = url {
        let kind = url.path_segments().and_then(|mut s| s.next()).unwrap_or_default();
        span.set("server.address", url.host_str().unwrap_or_default().to_string());
        span.set("url.path", format!("/{kind}/…"));
    }
    if outcome != "posted" {
        span.error(outcome);
    }
    traces.push(span.ended(Instant::now()));
}

/// An attempt's span while it runs.
pub(super) enum AttemptSpan {
    /// Traces are off: nothing at all.
    Off,
    /// The delivery's trace is not sampled: the bot is told so, nothing is exported.
    Unsampled(String),
    Sampled(Box<Open>),
}

impl AttemptSpan {
    pub(super) fn begin(shared: &Shared, app: &AppConfig, d: &Delivery<'_>, transport: &Transport<'_>) -> AttemptSpan {
        let Some(traces) = shared.telemetry.get() else { return AttemptSpan::Off };
        let trace = DeliveryTrace::of(d.id);
        if !trace.sampled {
            let id = opentelemetry::trace::SpanId::from(rand::random::<u64>() | 1);
            return AttemptSpan::Unsampled(traceparent(trace.trace_id, id, false));
        }
        let socket = matches!(transport, Transport::Socket(_));
        let name = format!("deliver to {}", app.name);
        let mut span = Span::new(name, SpanKind::Client, trace.trace_id, Some(trace.root))
            .started(Instant::now())
            .attr("slack.app", app.name.clone())
            .attr("slackgate.delivery", d.id.to_string())
            .attr("slackgate.attempt", d.number as i64)
            .attr("slackgate.upstream", d.route.label.to_string());
        if !socket {
            let path = d.route.upstream.path.as_deref().unwrap_or(d.path);
            span = span
                .attr("http.request.method", "POST")
                .attr("server.address", d.route.upstream.host.clone())
                .attr("server.port", i64::from(d.route.upstream.port))
                .attr("url.path", path.split('?').next().unwrap_or_default().to_string());
        } else {
            span = span.attr("slackgate.transport", "socket");
        }
        AttemptSpan::Sampled(Box::new(traces.open(span)))
    }

    /// The bot's `traceparent` (none with traces off).
    pub(super) fn traceparent(&self) -> Option<String> {
        match self {
            AttemptSpan::Off => None,
            AttemptSpan::Unsampled(tp) => Some(tp.clone()),
            AttemptSpan::Sampled(span) => {
                let c = span.context()?;
                Some(traceparent(c.trace_id(), c.span_id(), true))
            }
        }
    }

    /// What the attempt found: the bot's status or the error; the span ends now.
    pub(super) fn answered(&mut self, result: &Result<crate::upstream::Response, SendError>) {
        let AttemptSpan::Sampled(span) = self else { return };
        span.end_at(Instant::now());
        match result {
            Ok(r) => {
                span.set("http.response.status_code", i64::from(r.status));
                if r.status >= 400 {
                    span.error(crate::metrics::status_class(r.status));
                }
            }
            Err(e) => {
                span.set("error.type", e.as_label());
                span.error(SendError::as_label(e));
            }
        }
    }

    /// How the attempt was concluded: its outcome and, when retried, the wait to the next try.
    /// (The span is exported when the attempt is dropped, concluded or not.)
    pub(super) fn concluded(&mut self, outcome: &'static str, next_retry_ms: u64) {
        let AttemptSpan::Sampled(span) = self else { return };
        span.set("slackgate.outcome", outcome);
        if next_retry_ms > 0 {
            span.set("slackgate.next_retry_ms", next_retry_ms as i64);
        }
    }
}
