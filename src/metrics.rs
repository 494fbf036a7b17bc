//! Every metric in one place, on a value each process builds once (see `shared`), not a
//! process-wide static. Labels are small fixed sets (`app`, `kind`, `outcome`, …) passed as
//! plain values — the label enums live beside the code that decides them, each with one
//! `as_label()`. Never a team, channel, user or event id as a label.

use prometheus::core::Collector;
use prometheus::{
    exponential_buckets, register_gauge_vec_with_registry, register_histogram_vec_with_registry,
    register_int_counter_vec_with_registry, register_int_gauge_vec_with_registry, register_int_gauge_with_registry,
    GaugeVec, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

pub struct Metrics {
    registry: Registry,
    /// Slack-facing requests by app, kind and outcome (accepted, duplicate, ignored,
    /// unauthorized, bad_request, store_unavailable, …).
    pub requests: IntCounterVec,
    /// Time from the request's arrival to our answer to Slack.
    pub ack_seconds: HistogramVec,
    /// Requests carrying `X-Slack-Retry-Num`, by Slack's `X-Slack-Retry-Reason`.
    pub slack_retries: IntCounterVec,
    /// Attempt outcomes: delivered, retried, dead (given up or a final 4xx), expired, cancelled.
    pub deliveries: IntCounterVec,
    pub attempt_seconds: HistogramVec,
    /// From receipt by the gateway to the bot's 2xx.
    pub delivered_lag_seconds: HistogramVec,
    /// The bot's answers by class: 2xx, 3xx, 4xx, 5xx, error, timeout.
    pub upstream_responses: IntCounterVec,
    /// Completions refused because another worker holds the lease now.
    pub fence_rejections: IntCounterVec,
    pub store_errors: IntCounterVec,
    /// Deliveries acked but not forwarded, by filter reason.
    pub ignored: IntCounterVec,
    /// Waiting deliveries cancelled by a `message_deleted`.
    pub cancelled: IntCounterVec,
    /// Inline pass-through of commands and interactions: in_time, late, expired.
    pub inline: IntCounterVec,
    /// Late replies to a `response_url`: posted, failed, refused.
    pub response_url_posts: IntCounterVec,
    /// Dead letters dropped past `dead_ttl` (reason `ttl`) or beyond `dead_max` (`max`).
    pub dead_evicted: IntCounterVec,
    /// The outbox as Redis last reported it (refreshed on a timer by every process).
    pub outbox_ready: IntGaugeVec,
    pub outbox_in_flight: IntGaugeVec,
    pub outbox_scheduled: IntGaugeVec,
    pub outbox_dead: IntGaugeVec,
    /// Age of the oldest delivery still waiting, wherever it waits; 0 when none.
    pub outbox_oldest_age_seconds: GaugeVec,
    /// Slack-facing connections open now.
    pub connections_open: IntGauge,
    pub egress: Egress,
    pub turns: Turns,
    pub socket: SocketMetrics,
    pub routes: Routes,
    /// Connections the gateway closed itself: header_timeout, idle_timeout, over_limit.
    pub connections_closed: IntCounterVec,
    pub overload: Overload,
    /// Notes for the delivery history dropped because its writer was behind.
    pub history_dropped: IntCounter,
    /// Spans by what became of them: exported, failed, dropped (`[telemetry]`).
    pub trace_spans: IntCounterVec,
    /// Batches of the delivery history that Redis did not take (dropped; the outbox is the
    /// record, the history only a view of it).
    pub history_errors: IntCounter,
}

/// The label values of every series with a fixed label set, for [`Metrics::init_app`]. The
/// values come from the enums that decide them (the caller gathers their `ALL`), so a new
/// variant is exported at zero without a change here.
#[derive(Debug, Default, Clone)]
pub struct FixedLabels {
    /// `(kind, outcome)` pairs a request can be counted with.
    pub requests: Vec<(&'static str, &'static str)>,
    pub retry_reasons: Vec<&'static str>,
    pub delivery_outcomes: Vec<&'static str>,
    pub store_operations: Vec<&'static str>,
    pub ignore_reasons: Vec<&'static str>,
    /// `(kind, outcome)` of inline attempts.
    pub inline: Vec<(&'static str, &'static str)>,
    pub reply_outcomes: Vec<&'static str>,
    pub eviction_reasons: Vec<&'static str>,
    pub close_reasons: Vec<&'static str>,
    pub shed_reasons: Vec<&'static str>,
    /// `(class, outcome)` of egress calls.
    pub egress: Vec<(&'static str, &'static str)>,
    /// How a turn may end.
    pub turn_ends: Vec<&'static str>,
    /// Why lost runs are run again.
    pub rerun_reasons: Vec<&'static str>,
    /// Socket Mode's envelope types, and why a socket to Slack may end.
    pub envelope_types: Vec<&'static str>,
    pub socket_reconnects: Vec<&'static str>,
    /// The methods whose budget the egress keeps (its history series' `method`).
    pub history_methods: Vec<&'static str>,
}

/// An app's envelope outcomes exported at zero, by direction: toward Slack the ingress's
/// `accepted` (or `not_acked`), toward a bot its `acked` (or `not_acked`).
const ENVELOPE_OUTCOMES: [(&str, &str); 4] =
    [("slack", "accepted"), ("slack", "not_acked"), ("bot", "acked"), ("bot", "not_acked")];

mod families;
pub use families::{Egress, Overload, Routes, SocketMetrics, Turns, STREAM_ENDINGS};

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new_custom(Some("slackgate".into()), None).expect("static prefix is valid");
        // 0.25 ms … 2 s, then Slack's 3 s deadline.
        let mut fast = exponential_buckets(0.00025, 2.0, 14).expect("static buckets");
        fast.push(3.0);
        let slow = exponential_buckets(0.005, 2.0, 18).expect("static buckets");
        let (app, kind, outcome, reason) = ("app", "kind", "outcome", "reason");
        let counter = |name: &str, help: &str, labels: &[&str]| counter(&r, name, help, labels);
        let gauge = |name: &str, help: &str| gauge(&r, name, help);
        let histogram = |name: &str, help: &str, buckets: &[f64]| histogram(&r, name, help, buckets);
        Metrics {
            requests: counter("requests_total", "Slack-facing requests by kind and outcome", &[app, kind, outcome]),
            ack_seconds: histogram("ack_seconds", "Time to answer Slack", &fast),
            slack_retries: counter("slack_retries_total", "Slack redeliveries seen, by reason", &[app, reason]),
            deliveries: counter("deliveries_total", "Delivery attempt outcomes", &[app, outcome]),
            attempt_seconds: histogram("attempt_seconds", "Duration of one attempt toward the bot", &slow),
            delivered_lag_seconds: histogram("delivered_lag_seconds", "Receipt to the bot's 2xx", &slow),
            upstream_responses: counter(
                "upstream_responses_total",
                "Bot answers by status class",
                &[app, "status_class"],
            ),
            fence_rejections: counter("fence_rejections_total", "Completions refused by the lease fence", &[app]),
            store_errors: counter("store_errors_total", "Redis errors by the operation that failed", &[app, reason]),
            ignored: counter("ignored_total", "Deliveries acked and not forwarded, by filter", &[app, reason]),
            cancelled: counter("cancelled_total", "Waiting deliveries cancelled by message_deleted", &[app]),
            inline: counter("inline_total", "Inline pass-through outcomes", &[app, kind, outcome]),
            response_url_posts: counter("response_url_posts_total", "Late replies to response_url", &[app, outcome]),
            dead_evicted: counter("dead_evicted_total", "Dead letters dropped by their bounds", &[app, reason]),
            outbox_ready: gauge("outbox_ready", "Deliveries waiting on the stream for a worker"),
            outbox_in_flight: gauge("outbox_in_flight", "Deliveries leased to a worker"),
            outbox_scheduled: gauge(
                "outbox_scheduled",
                "Deliveries scheduled for a retry (or held for an inline answer)",
            ),
            outbox_dead: gauge("outbox_dead", "Deliveries in the dead-letter stream"),
            outbox_oldest_age_seconds: register_gauge_vec_with_registry!(
                "outbox_oldest_age_seconds",
                "Age of the oldest delivery still waiting",
                &[app],
                r
            )
            .expect("unique metric"),
            connections_open: int_gauge(&r, "connections_open", "Slack-facing connections open"),
            connections_closed: counter(
                "connections_closed_total",
                "Slack-facing connections closed by the gateway",
                &[reason],
            ),
            overload: Overload::new(&r),
            egress: Egress::new(&r, &slow),
            turns: Turns::new(&r, &slow),
            socket: SocketMetrics::new(&r, &fast),
            routes: Routes::new(&r),
            history_dropped: int_counter(&r, "history_dropped_total", "Delivery history notes dropped (writer behind)"),
            trace_spans: trace_spans(&r),
            history_errors: int_counter(&r, "history_errors_total", "Delivery history batches Redis did not take"),
            registry: r,
        }
    }

    /// Every metric family name this exports (with the `slackgate_` prefix), whether or not it
    /// has a sample yet; histograms also export `_bucket`, `_sum` and `_count`.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.collectors().iter().flat_map(|c| c.desc()).map(|d| format!("slackgate_{}", d.fq_name)).collect();
        names.sort();
        names.dedup();
        names
    }

    /// The histogram families (queried as `_bucket`, `_sum` and `_count`), with the prefix.
    pub fn histogram_names(&self) -> Vec<String> {
        let vecs = [
            &self.ack_seconds,
            &self.attempt_seconds,
            &self.delivered_lag_seconds,
            &self.egress.slack_seconds,
            &self.turns.duration_seconds,
            &self.socket.ack_seconds,
        ];
        let descs = vecs.iter().flat_map(|h| h.desc()).chain(self.egress.pacing_seconds.desc());
        descs.map(|d| format!("slackgate_{}", d.fq_name)).collect()
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        let mut all: Vec<&dyn Collector> = vec![
            &self.requests,
            &self.ack_seconds,
            &self.slack_retries,
            &self.deliveries,
            &self.attempt_seconds,
            &self.delivered_lag_seconds,
            &self.upstream_responses,
            &self.fence_rejections,
            &self.store_errors,
            &self.ignored,
            &self.cancelled,
            &self.inline,
            &self.response_url_posts,
            &self.dead_evicted,
            &self.outbox_ready,
            &self.outbox_in_flight,
            &self.outbox_scheduled,
            &self.outbox_dead,
            &self.outbox_oldest_age_seconds,
            &self.connections_open,
            &self.connections_closed,
            &self.overload.admitted,
            &self.overload.shed,
            &self.overload.limit,
            &self.overload.pending,
            &self.overload.waiting,
            &self.overload.unverified_bytes,
            &self.overload.pressure,
            &self.overload.delivery_allowed,
            &self.egress.calls,
            &self.egress.pacing_seconds,
            &self.egress.slack_seconds,
            &self.egress.store_skipped,
            &self.egress.reconciled,
            &self.egress.history_calls,
            &self.egress.history_refused,
            &self.egress.replies_from_record,
            &self.egress.seen_dropped,
            &self.egress.seen_errors,
            &self.egress.streams,
            &self.turns.conversations_waiting,
            &self.turns.held,
            &self.turns.duration_seconds,
            &self.turns.ended,
            &self.turns.superseded,
            &self.turns.reruns,
            &self.socket.connections,
            &self.socket.envelopes,
            &self.socket.ack_seconds,
            &self.socket.reconnects,
            &self.socket.link_disabled,
            &self.history_dropped,
            &self.trace_spans,
            &self.history_errors,
        ];
        all.extend(self.routes.collectors());
        all
    }

    /// Prometheus text exposition of everything above.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let encoder = prometheus::TextEncoder::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = prometheus::Encoder::encode(&encoder, &self.registry.gather(), &mut out);
        out
    }

    /// Export every series of `app` with a fixed label set at zero, so that dashboards and
    /// `rate()` alerts work before the first event of each kind.
    pub fn init_app(&self, app: &str, labels: &FixedLabels) {
        for (kind, outcome) in &labels.requests {
            self.requests.with_label_values(&[app, kind, outcome]);
        }
        let pairs: [(&IntCounterVec, &[&str]); 8] = [
            (&self.slack_retries, &labels.retry_reasons),
            (&self.deliveries, &labels.delivery_outcomes),
            (&self.upstream_responses, &STATUS_CLASSES),
            (&self.store_errors, &labels.store_operations),
            (&self.ignored, &labels.ignore_reasons),
            (&self.response_url_posts, &labels.reply_outcomes),
            (&self.dead_evicted, &labels.eviction_reasons),
            (&self.overload.shed, &labels.shed_reasons),
        ];
        for (counter, values) in pairs {
            for value in values {
                counter.with_label_values(&[app, value]);
            }
        }
        for (kind, outcome) in &labels.inline {
            self.inline.with_label_values(&[app, kind, outcome]);
        }
        self.fence_rejections.with_label_values(&[app]);
        self.cancelled.with_label_values(&[app]);
        self.overload.admitted.with_label_values(&[app]);
        self.overload.delivery_allowed.with_label_values(&[app]);
        for ended in &labels.turn_ends {
            self.turns.ended.with_label_values(&[app, ended]);
        }
        self.turns.superseded.with_label_values(&[app]);
        for reason in &labels.rerun_reasons {
            self.turns.reruns.with_label_values(&[app, reason]);
        }
        self.turns.conversations_waiting.with_label_values(&[app]);
        self.turns.held.with_label_values(&[app]);
        for h in [&self.ack_seconds, &self.attempt_seconds, &self.delivered_lag_seconds, &self.turns.duration_seconds] {
            h.with_label_values(&[app]);
        }
        for g in [&self.outbox_ready, &self.outbox_in_flight, &self.outbox_scheduled, &self.outbox_dead] {
            g.with_label_values(&[app]);
        }
        self.outbox_oldest_age_seconds.with_label_values(&[app]);
        for reason in &labels.close_reasons {
            self.connections_closed.with_label_values(&[reason]);
        }
        for (class, outcome) in &labels.egress {
            self.egress.calls.with_label_values(&[class, outcome]);
        }
        for class in ["read", "write"] {
            self.egress.slack_seconds.with_label_values(&[class]);
        }
        for from in ["events", "history"] {
            self.egress.reconciled.with_label_values(&[from]);
        }
        for ending in STREAM_ENDINGS {
            self.egress.streams.with_label_values(&[ending]);
        }
    }

    /// The attempt outcomes of each of an app's routes (`labels`: `default` and its entries'
    /// labels), and its pauses' series, at zero.
    pub fn init_routes(&self, app: &str, routes: &[&str], outcomes: &[&'static str]) {
        for route in routes {
            for outcome in outcomes {
                self.routes.deliveries.with_label_values(&[app, route, outcome]);
            }
        }
        self.routes.paused.with_label_values(&[app]);
        self.routes.waiting.with_label_values(&[app]);
        self.routes.pauses.with_label_values(&[app]);
        self.routes.oldest_pause_seconds.with_label_values(&[app]);
    }

    /// The shadow's copies and calls of `app` at zero.
    pub fn init_shadow(&self, app: &str) {
        for outcome in crate::outbox::shadow::Copied::ALL.map(|c| c.as_label()).iter().chain(&["failed"]) {
            self.routes.shadow_copies.with_label_values(&[app, outcome]);
        }
        for outcome in ["kept", "read", "unattributed"] {
            self.routes.shadow_calls.with_label_values(&[app, outcome]);
        }
        self.routes.shadow_unreachable.with_label_values(&[app]);
    }

    /// Socket Mode's series of `app` at zero, for the directions it uses: `slack` (the
    /// gateway's sockets to Slack), `bot` (a Socket Mode bot's socket to the gateway). An app
    /// without Socket Mode has none, so "no Socket Mode connection" is never said of it.
    pub fn init_socket(&self, app: &str, (slack, bot): (bool, bool), labels: &FixedLabels) {
        let s = &self.socket;
        for (direction, used) in [("slack", slack), ("bot", bot)] {
            if !used {
                continue;
            }
            s.connections.with_label_values(&[app, direction]);
            for (d, outcome) in ENVELOPE_OUTCOMES.iter().filter(|(d, _)| *d == direction) {
                for kind in &labels.envelope_types {
                    s.envelopes.with_label_values(&[app, d, kind, outcome]);
                }
            }
        }
        if slack {
            s.link_disabled.with_label_values(&[app]);
            s.ack_seconds.with_label_values(&[app]);
            for reason in &labels.socket_reconnects {
                s.reconnects.with_label_values(&[app, reason]);
            }
        }
    }

    /// Drop the connection series of an app and direction no longer using Socket Mode
    /// (`uses`: after a reload), once none of its sockets is open, so that the "no Socket Mode
    /// connection" alert stops naming it.
    pub fn forget_sockets(&self, uses: impl Fn(&str, &str) -> bool) {
        use prometheus::core::Collector;
        for family in self.socket.connections.collect() {
            for m in family.get_metric() {
                let label = |name: &str| m.get_label().iter().find(|l| l.name() == name).map(|l| l.value().to_string());
                let (Some(app), Some(direction)) = (label("app"), label("direction")) else { continue };
                if !uses(&app, &direction) && m.get_gauge().get_value() == 0.0 {
                    let _ = self.socket.connections.remove_label_values(&[&app, &direction]);
                }
            }
        }
    }

    /// The egress's history-budget series at zero, by their own labels (method, caller).
    pub fn init_egress(&self, labels: &FixedLabels) {
        for method in &labels.history_methods {
            self.egress.history_refused.with_label_values(&[method]);
            for by in ["egress", "bot"] {
                self.egress.history_calls.with_label_values(&[method, by]);
            }
        }
    }

    /// Count one attempt toward the bot: its duration and its answer's class (see
    /// [`status_class`]; `error` or `timeout` when there was no answer).
    pub fn attempt(&self, app: &str, took: std::time::Duration, class: &'static str) {
        self.attempt_seconds.with_label_values(&[app]).observe(took.as_secs_f64());
        self.upstream_responses.with_label_values(&[app, class]).inc();
    }
}

/// `trace_spans_total{outcome}` (`[telemetry]`).
fn trace_spans(r: &Registry) -> IntCounterVec {
    let help = "Spans of delivery traces: exported, failed (the collector refused them or did not answer), dropped \
                (queue full)";
    counter(r, "trace_spans_total", help, &["outcome"])
}

pub(crate) fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register_int_counter_vec_with_registry!(name, help, labels, r).expect("unique metric")
}

pub(crate) fn int_counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    prometheus::register_int_counter_with_registry!(name, help, r).expect("unique metric")
}

pub(crate) fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    register_int_gauge_with_registry!(name, help, r).expect("unique metric")
}

pub(crate) fn gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    register_int_gauge_vec_with_registry!(name, help, &["app"], r).expect("unique metric")
}

pub(crate) fn histogram(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> HistogramVec {
    register_histogram_vec_with_registry!(name, help, &["app"], buckets.to_vec(), r).expect("unique metric")
}

/// Every status class an attempt is counted with.
pub const STATUS_CLASSES: [&str; 7] = ["1xx", "2xx", "3xx", "4xx", "5xx", "error", "timeout"];

/// `2xx`, `4xx`, … for a status code.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connections(m: &Metrics) -> Vec<String> {
        let text = String::from_utf8(m.render()).unwrap();
        text.lines().filter(|l| l.starts_with("slackgate_socket_connections{")).map(String::from).collect()
    }

    #[test]
    fn socket_series_only_for_the_directions_used_and_forgotten_when_unused_and_closed() {
        let m = Metrics::new();
        let labels = FixedLabels {
            envelope_types: vec!["events_api"],
            socket_reconnects: vec!["warning"],
            ..FixedLabels::default()
        };
        m.init_socket("slack_only", (true, false), &labels);
        m.init_socket("bot_only", (false, true), &labels);
        m.init_socket("none", (false, false), &labels);
        let open = connections(&m);
        assert_eq!(open.len(), 2, "{open:?}");
        assert!(open.iter().any(|l| l.contains("app=\"slack_only\",direction=\"slack\"")), "{open:?}");
        assert!(open.iter().any(|l| l.contains("app=\"bot_only\",direction=\"bot\"")), "{open:?}");
        // A reload turns both off; the bot's socket is still open, so its series stays.
        m.socket.connections.with_label_values(&["bot_only", "bot"]).inc();
        m.forget_sockets(|_, _| false);
        let open = connections(&m);
        assert_eq!(open, ["slackgate_socket_connections{app=\"bot_only\",direction=\"bot\"} 1"]);
    }
}
