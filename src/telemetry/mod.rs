//! Traces (`[telemetry]`): one trace per delivery, from Slack's request to the bot's replies,
//! exported over OpenTelemetry's OTLP/HTTP. Off by default; off, nothing here runs: no
//! exporter, no span, and the ingress draws no sampling decision.
//!
//! - `ids`: a delivery's trace from its id (so any replica continues it), `traceparent`.
//! - `span`: one span, made by hand with the gateway's own ids and times.
//! - `export`: the bounded queue and the exporting thread.

mod export;
pub mod ids;
mod span;

use std::sync::OnceLock;

use opentelemetry_sdk::trace::SpanData;
use prometheus::IntCounterVec;
use tokio::sync::mpsc;

use crate::config::TelemetryConfig;
pub use ids::{parse_traceparent, traceparent, DeliveryTrace};
pub use opentelemetry::trace::SpanKind;
pub use span::{wall, Open, Span};

/// The traces of this process: set once at start when `[telemetry]` is on.
#[derive(Default)]
pub struct Telemetry(OnceLock<Traces>);

impl Telemetry {
    /// Start exporting per `cfg` (nothing when it is off; a second start changes nothing).
    pub fn start(&self, cfg: &TelemetryConfig, counts: IntCounterVec) -> Result<(), String> {
        if !cfg.is_on() || self.0.get().is_some() {
            return Ok(());
        }
        let queue = export::start(cfg, counts.clone())?;
        let _ = self.0.set(Traces { queue, ratio: cfg.sample_ratio, counts });
        Ok(())
    }

    /// The traces, when on.
    pub fn get(&self) -> Option<&Traces> {
        self.0.get()
    }

    /// The trace of `delivery` when traces are on and it is sampled.
    pub fn of(&self, delivery: &str) -> Option<(&Traces, DeliveryTrace)> {
        let traces = self.get()?;
        let trace = DeliveryTrace::of(delivery);
        trace.sampled.then_some((traces, trace))
    }
}

/// What the pages and `slackgate show` say of `delivery`'s trace: its id and, with
/// `trace_url`, its link; `None` when traces are off or the delivery is not sampled.
pub fn shown(cfg: &TelemetryConfig, delivery: &str) -> Option<(String, Option<String>)> {
    let trace = DeliveryTrace::of(delivery);
    if !cfg.is_on() || !trace.sampled {
        return None;
    }
    let id = trace.trace_id.to_string();
    let link = cfg.link(&id);
    Some((id, link))
}

/// What an [`Open`] span needs to reach the exporter on its own.
pub struct Pusher {
    queue: mpsc::Sender<SpanData>,
    dropped: prometheus::IntCounter,
}

impl Pusher {
    fn push(&self, span: SpanData) {
        if self.queue.try_send(span).is_err() {
            self.dropped.inc();
        }
    }
}

/// Exporting traces.
pub struct Traces {
    queue: mpsc::Sender<SpanData>,
    ratio: f64,
    /// `slackgate_trace_spans_total{outcome}`: exported, failed (the collector refused them or
    /// did not answer), dropped (the queue was full).
    counts: IntCounterVec,
}

impl Traces {
    /// Whether the next delivery is traced (decided once, at its arrival).
    pub fn sample(&self) -> bool {
        self.ratio >= 1.0 || (self.ratio > 0.0 && rand::random::<f64>() < self.ratio)
    }

    /// Hand a finished span to the exporter: never waits; a full queue drops it (counted).
    pub fn push(&self, span: SpanData) {
        if self.queue.try_send(span).is_err() {
            self.counts.with_label_values(&["dropped"]).inc();
        }
    }

    /// `span`, pushed when the returned value is dropped (whoever holds it last may add to it).
    pub fn open(&self, span: Span) -> Open {
        Open::new(span, Pusher { queue: self.queue.clone(), dropped: self.counts.with_label_values(&["dropped"]) })
    }
}
