//! One span, made by hand: its ids chosen by the gateway (a delivery's are derived from its
//! id), its times measured where the work happened, its attributes only what is safe — Slack's
//! ids and the HTTP conventions' `server.address`, `url.path`, method and status; never text,
//! a token, a signature, a full URL or a query string.

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{Event, Link, SpanContext, SpanId, SpanKind, Status, TraceId};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::ids::context;

/// A span being made. Pushed to the exporter by [`super::Traces::push`].
pub struct Span {
    data: SpanData,
}

impl Span {
    /// A span of `trace` under `parent` (`None`: a trace's first), its own id drawn at random.
    pub fn new(name: impl Into<Cow<'static, str>>, kind: SpanKind, trace: TraceId, parent: Option<SpanId>) -> Span {
        Span::with_id(name, kind, trace, random_span_id(), parent)
    }

    /// A span whose id the caller chose (a delivery's Slack request span).
    pub fn with_id(
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        trace: TraceId,
        id: SpanId,
        parent: Option<SpanId>,
    ) -> Span {
        let now = SystemTime::now();
        Span {
            data: SpanData {
                span_context: context(trace, id, true, false),
                parent_span_id: parent.unwrap_or(SpanId::INVALID),
                parent_span_is_remote: false,
                span_kind: kind,
                name: name.into(),
                start_time: now,
                end_time: now,
                attributes: Vec::with_capacity(8),
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status: Status::Unset,
                instrumentation_scope: scope(),
            },
        }
    }

    /// This span's context (the parent of its children; what the bot gets as `traceparent`).
    pub fn context(&self) -> &SpanContext {
        &self.data.span_context
    }

    pub fn id(&self) -> SpanId {
        self.data.span_context.span_id()
    }

    /// Its parent came from another process (the bot's `traceparent`).
    pub fn remote_parent(mut self) -> Self {
        self.data.parent_span_is_remote = true;
        self
    }

    /// When it began: `at`, an `Instant` measured where the work began.
    pub fn started(mut self, at: Instant) -> Self {
        self.data.start_time = wall(at);
        self
    }

    pub fn started_at(mut self, at: SystemTime) -> Self {
        self.data.start_time = at;
        self
    }

    /// An attribute (skipped when its value is empty: an id Slack did not send).
    pub fn attr(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        let value = value.into();
        if !matches!(&value, Value::String(s) if s.as_str().is_empty()) {
            self.data.attributes.push(KeyValue::new(key, value));
        }
        self
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        let value = value.into();
        if !matches!(&value, Value::String(s) if s.as_str().is_empty()) {
            self.data.attributes.push(KeyValue::new(key, value));
        }
    }

    /// An event at `at`.
    pub fn event(&mut self, name: &'static str, at: Instant, attributes: Vec<KeyValue>) {
        self.data.events.events.push(Event::new(name, wall(at), attributes, 0));
    }

    /// A link to another trace's span (a reply attributed to its delivery).
    pub fn link(&mut self, to: SpanContext, attributes: Vec<KeyValue>) {
        self.data.links.links.push(Link::new(to, attributes, 0));
    }

    /// It failed: `message` is a fixed label, never a payload.
    pub fn error(&mut self, message: impl Into<Cow<'static, str>>) {
        self.data.status = Status::error(message);
    }

    pub fn ok(&mut self) {
        self.data.status = Status::Ok;
    }

    /// Its end at `at`; the span as the exporter takes it.
    pub fn ended(mut self, at: Instant) -> SpanData {
        self.data.end_time = wall(at).max(self.data.start_time);
        self.data
    }
}

/// `at` on the wall clock: now, less the time since.
pub fn wall(at: Instant) -> SystemTime {
    let now = (SystemTime::now(), Instant::now());
    match now.1.checked_duration_since(at) {
        Some(ago) => now.0 - ago,
        None => now.0 + at.duration_since(now.1),
    }
}

fn random_span_id() -> SpanId {
    loop {
        let id = rand::random::<u64>();
        if id != 0 {
            return SpanId::from(id);
        }
    }
}

fn scope() -> InstrumentationScope {
    static SCOPE: std::sync::OnceLock<InstrumentationScope> = std::sync::OnceLock::new();
    SCOPE
        .get_or_init(|| InstrumentationScope::builder("slackgate").with_version(env!("CARGO_PKG_VERSION")).build())
        .clone()
}

/// A span still open: attributes may be added until it is dropped, which pushes it to the
/// exporter, ended when [`Open::end_at`] said (else when dropped). Whatever path a piece of work
/// takes — concluded, abandoned with its lease — its span is exported once.
pub struct Open {
    span: Option<Span>,
    end: Option<Instant>,
    pusher: super::Pusher,
}

impl Open {
    pub(super) fn new(span: Span, pusher: super::Pusher) -> Open {
        Open { span: Some(span), end: None, pusher }
    }

    pub fn context(&self) -> Option<&SpanContext> {
        self.span.as_ref().map(Span::context)
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        if let Some(s) = &mut self.span {
            s.set(key, value);
        }
    }

    pub fn error(&mut self, message: impl Into<Cow<'static, str>>) {
        if let Some(s) = &mut self.span {
            s.error(message);
        }
    }

    /// The work ended at `at` (what is added later still goes with it).
    pub fn end_at(&mut self, at: Instant) {
        self.end = Some(at);
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(span) = self.span.take() {
            self.pusher.push(span.ended(self.end.unwrap_or_else(Instant::now)));
        }
    }
}
