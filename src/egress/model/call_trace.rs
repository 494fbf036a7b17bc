//! What a Web API call's span needs, gathered while the call runs (`[telemetry]` on): when it
//! came, the bot's own span (its `traceparent`), the delivery it answers and its token's
//! workspace once known, the waits on the way. `super::super::trace` makes the span of it.

use std::sync::Mutex;
use std::time::Instant;

use opentelemetry::trace::SpanContext;
use opentelemetry::KeyValue;

use crate::shared::Shared;
use crate::telemetry::parse_traceparent;

/// What a call's span needs, gathered while it runs (only with traces on).
pub struct CallTrace {
    started: Instant,
    /// The bot's own span, from its `traceparent` (and `tracestate`).
    parent: Option<SpanContext>,
    /// The delivery the write was attributed to, once known; waits and 429s on the way.
    seen: Mutex<Seen>,
}

/// What the call met on its way.
#[derive(Default)]
pub(in crate::egress) struct Seen {
    /// The workspace of the call's token.
    pub team: Option<String>,
    pub delivery: Option<String>,
    pub events: Vec<(&'static str, Instant, Vec<KeyValue>)>,
}

impl CallTrace {
    /// For a call with `headers`, when traces are on.
    pub fn of(shared: &Shared, headers: &http::HeaderMap) -> Option<Box<CallTrace>> {
        shared.telemetry.get()?;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let parent = header("traceparent").and_then(|tp| parse_traceparent(tp, header("tracestate")));
        Some(Box::new(CallTrace { started: Instant::now(), parent, seen: Mutex::default() }))
    }

    /// The write answers `delivery`.
    pub fn attributed(&self, delivery: &str) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).delivery = Some(delivery.to_string());
    }

    /// The call's token is of workspace `team`.
    pub fn team(&self, team: &str) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).team = Some(team.to_string());
    }

    /// When the call came, and its bot's span, if it sent one.
    pub fn began(&self) -> (Instant, Option<&SpanContext>) {
        (self.started, self.parent.as_ref())
    }

    /// What it met, taken once (for its span).
    pub(in crate::egress) fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Something on the way: the pacing's wait, a 429.
    pub fn event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).events.push((name, Instant::now(), attributes));
    }
}
