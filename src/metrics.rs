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
    /// Connections the gateway closed itself: header_timeout, idle_timeout, over_limit.
    pub connections_closed: IntCounterVec,
    pub overload: Overload,
    /// Notes for the delivery history dropped because its writer was behind.
    pub history_dropped: IntCounter,
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

/// Turns: one delivery of a conversation with the bot at a time (`turns`).
pub struct Turns {
    /// Conversations with deliveries held, and the deliveries held (refreshed on a timer).
    pub conversations_waiting: IntGaugeVec,
    pub held: IntGaugeVec,
    pub duration_seconds: HistogramVec,
    /// Turns by how they ended (reply, answer, refused, passed, timeout, superseded, …).
    pub ended: IntCounterVec,
    /// Deliveries `order = "latest"` passed over.
    pub superseded: IntCounterVec,
}

impl Turns {
    fn new(r: &Registry, buckets: &[f64]) -> Turns {
        Turns {
            conversations_waiting: gauge(r, "turn_conversations_waiting", "Conversations with deliveries held"),
            held: gauge(r, "turn_held", "Deliveries held, waiting for their conversation's turn"),
            duration_seconds: histogram(r, "turn_duration_seconds", "How long turns lasted", buckets),
            ended: counter(r, "turns_total", "Turns by how they ended", &["app", "ended"]),
            superseded: counter(
                r,
                "turn_superseded_total",
                "Deliveries passed over by order = \"latest\" for a newer message",
                &["app"],
            ),
        }
    }
}

/// Admission and yielding (DESIGN "Overload").
pub struct Overload {
    /// Records admitted and requests shed (503 at once), by app.
    pub admitted: IntCounterVec,
    pub shed: IntCounterVec,
    /// The adaptive limit on pending records, the records pending and the requests waiting.
    pub limit: IntGauge,
    pub pending: IntGauge,
    pub waiting: IntGauge,
    /// Bytes of request bodies not yet verified, held across all connections (see
    /// `server.unverified_budget`).
    pub unverified_bytes: IntGauge,
    /// How pressed the ack path is (0–1), set when scraped.
    pub pressure: prometheus::Gauge,
    /// The attempts each app's workers allow themselves now.
    pub delivery_allowed: IntGaugeVec,
}

impl Overload {
    fn new(r: &Registry) -> Overload {
        Overload {
            admitted: counter(r, "admitted_total", "Records admitted by the ingress's admission", &["app"]),
            shed: counter(
                r,
                "shed_total",
                "Slack requests answered 503 at once: the store was at its limit",
                &["app", "reason"],
            ),
            limit: int_gauge(r, "admission_limit", "The adaptive limit on pending records"),
            pending: int_gauge(r, "admission_pending", "Records pending in the store"),
            waiting: int_gauge(r, "admission_waiting", "Requests waiting for a record slot"),
            unverified_bytes: int_gauge(
                r,
                "unverified_bytes",
                "Bytes of request bodies held before their signature is checked, across all connections",
            ),
            pressure: prometheus::register_gauge_with_registry!(
                "ack_pressure",
                "How pressed the ack path is (0 calm, 1 shedding): the delivery workers yield to it",
                r
            )
            .expect("unique metric"),
            delivery_allowed: gauge(r, "delivery_allowed", "Attempts the workers allow themselves now"),
        }
    }
}

/// How a stream through the egress ends: stopped by the bot; continued as edits by the
/// gateway (an append's answer lost, or Slack's expiry); closed by the gateway (its question
/// deleted or edited).
pub const STREAM_ENDINGS: [&str; 5] =
    ["stopped", "continued_lost", "continued_expired", "closed_deleted", "closed_edited"];

/// The egress for the Slack Web API.
pub struct Egress {
    pub calls: IntCounterVec,
    /// Time writes waited for their channel's pace.
    pub pacing_seconds: prometheus::Histogram,
    /// Slack's latency as the egress saw it, by class (read, write).
    pub slack_seconds: HistogramVec,
    /// Redis steps of writes skipped because an earlier step of the same call found Redis not
    /// answering.
    pub store_skipped: IntCounter,
    /// Uncertain posts settled as posted, by what showed it (`events`, `history`).
    pub reconciled: IntCounterVec,
    /// History reads (`conversations.history`, `.replies`) by method and caller (`egress`: its
    /// looks for uncertain posts; `bot`: the bots' own reads through it).
    pub history_calls: IntCounterVec,
    /// Looks the egress did not make: no budget left in Slack's tier for the method.
    pub history_refused: IntCounterVec,
    /// `conversations.replies` Slack refused (429) that the egress answered from its record.
    pub replies_from_record: IntCounter,
    /// What the ingress saw of conversations (own posts, thread messages) dropped: its writer
    /// was behind.
    pub seen_dropped: IntCounter,
    /// Batches of it Redis did not take.
    pub seen_errors: IntCounter,
    /// Streams the egress saw start, by how they ended (`plan::STREAM_ENDINGS`).
    pub streams: IntCounterVec,
}

impl Egress {
    fn new(r: &Registry, buckets: &[f64]) -> Egress {
        Egress {
            calls: counter(r, "egress_calls_total", "Web API calls through the egress", &["class", "outcome"]),
            store_skipped: prometheus::register_int_counter_with_registry!(
                "egress_store_skipped_total",
                "Redis steps of egress writes skipped after an earlier step of the call found Redis not answering",
                r
            )
            .expect("unique metric"),
            pacing_seconds: prometheus::register_histogram_with_registry!(
                "egress_pacing_seconds",
                "Time writes waited for their channel's pace",
                buckets.to_vec(),
                r
            )
            .expect("unique metric"),
            reconciled: counter(r, "egress_reconciled_total", "Uncertain posts found posted, by evidence", &["from"]),
            history_calls: counter(
                r,
                "egress_history_calls_total",
                "History reads through the egress, by method and caller",
                &["method", "by"],
            ),
            history_refused: counter(
                r,
                "egress_history_refused_total",
                "Looks for uncertain posts not made: the method's budget at Slack was spent",
                &["method"],
            ),
            replies_from_record: int_counter(
                r,
                "egress_replies_from_record_total",
                "conversations.replies Slack refused, answered from the gateway's record of the thread",
            ),
            seen_dropped: int_counter(
                r,
                "seen_dropped_total",
                "Messages seen for evidence or the thread record dropped (writer behind)",
            ),
            seen_errors: int_counter(r, "seen_errors_total", "Batches of messages seen that Redis did not take"),
            streams: counter(
                r,
                "egress_streams_total",
                "Streams (chat.startStream) through the egress, by how they ended",
                &["ending"],
            ),
            slack_seconds: register_histogram_vec_with_registry!(
                "egress_slack_seconds",
                "Slack's latency as the egress saw it",
                &["class"],
                buckets.to_vec(),
                r
            )
            .expect("unique metric"),
        }
    }
}

/// Socket Mode's series: connections each way, envelopes, acks, reconnects.
pub struct SocketMetrics {
    /// Open, greeted sockets by app and direction: `slack` (ours to Slack) or `bot` (a Socket
    /// Mode bot's to us).
    pub connections: IntGaugeVec,
    /// Envelopes by app, direction, type and outcome (Slack's: the ingress outcome, or
    /// `not_acked`; the bot's: `acked`, or `not_acked` when the attempt got no ack).
    pub envelopes: IntCounterVec,
    /// From an envelope's arrival to our ack (toward Slack).
    pub ack_seconds: HistogramVec,
    /// Sockets to Slack ended, by why: refresh_requested, warning, link_disabled, dropped,
    /// open_failed, ping_timeout.
    pub reconnects: IntCounterVec,
    /// 1 while Slack says Socket Mode is disabled for the app (`link_disabled`).
    pub link_disabled: IntGaugeVec,
}

impl SocketMetrics {
    fn new(r: &Registry, fast: &[f64]) -> SocketMetrics {
        SocketMetrics {
            connections: register_int_gauge_vec_with_registry!(
                "socket_connections",
                "Open Socket Mode connections, by direction (slack: ours to Slack; bot: a bot's to us)",
                &["app", "direction"],
                r
            )
            .expect("unique metric"),
            envelopes: counter(
                r,
                "socket_envelopes_total",
                "Socket Mode envelopes by direction, type and outcome",
                &["app", "direction", "type", "outcome"],
            ),
            ack_seconds: histogram(r, "socket_ack_seconds", "From a Socket Mode envelope's arrival to our ack", fast),
            reconnects: counter(
                r,
                "socket_reconnects_total",
                "Socket Mode connections to Slack ended, by reason",
                &["app", "reason"],
            ),
            link_disabled: gauge(
                r,
                "socket_link_disabled",
                "1 while Slack says Socket Mode is disabled for the app (link_disabled)",
            ),
        }
    }
}

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
            history_dropped: int_counter(&r, "history_dropped_total", "Delivery history notes dropped (writer behind)"),
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

    fn collectors(&self) -> [&dyn Collector; 52] {
        [
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
            &self.socket.connections,
            &self.socket.envelopes,
            &self.socket.ack_seconds,
            &self.socket.reconnects,
            &self.socket.link_disabled,
            &self.history_dropped,
            &self.history_errors,
        ]
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
