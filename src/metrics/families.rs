//! The families of each part of the gateway that has its own: turns, overload, the egress,
//! Socket Mode. `metrics.rs` registers and exports them with the rest.

use prometheus::{
    register_histogram_vec_with_registry, register_int_gauge_vec_with_registry, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

use super::{counter, gauge, histogram, int_counter, int_gauge};

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
    /// Runs lost with the bot and run again, by why (`rerun_lost`).
    pub reruns: IntCounterVec,
}

impl Turns {
    pub(super) fn new(r: &Registry, buckets: &[f64]) -> Turns {
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
            reruns: counter(
                r,
                "reruns_total",
                "Runs lost with the bot and run again, by why (socket_closed, silent)",
                &["app", "reason"],
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
    pub(super) fn new(r: &Registry) -> Overload {
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
    pub(super) fn new(r: &Registry, buckets: &[f64]) -> Egress {
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
    pub(super) fn new(r: &Registry, fast: &[f64]) -> SocketMetrics {
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

/// Where deliveries go: `upstreams` (DESIGN "Upstreams by kind"), and pauses ("Pause").
pub struct Routes {
    /// Attempt outcomes by the entry that chose the bot (`default`: the app's own upstream).
    pub deliveries: IntCounterVec,
    /// Deliveries a pause held (each time one was put to wait).
    pub paused: IntCounterVec,
    /// Deliveries waiting for a pause to end, as Redis last reported it.
    pub waiting: IntGaugeVec,
    /// Pauses in force, and how long the oldest has been, as this process last read them.
    pub pauses: IntGaugeVec,
    pub oldest_pause_seconds: prometheus::GaugeVec,
    /// Copies of deliveries for the shadow: copied, already (copied before), dropped (its
    /// lane full), failed.
    pub shadow_copies: IntCounterVec,
    /// The shadow's Web API calls at the egress's shadow base: kept (a write, answered as
    /// Slack would, never posted), read (passed to Slack), unattributed (a write no delivery
    /// of the shadow's explains, kept too).
    pub shadow_calls: IntCounterVec,
    /// 1 while the shadow's lane backs off from a bot it cannot connect to.
    pub shadow_unreachable: IntGaugeVec,
}

impl Routes {
    pub(super) fn collectors(&self) -> [&dyn prometheus::core::Collector; 8] {
        [
            &self.deliveries,
            &self.paused,
            &self.waiting,
            &self.pauses,
            &self.oldest_pause_seconds,
            &self.shadow_copies,
            &self.shadow_calls,
            &self.shadow_unreachable,
        ]
    }

    pub(super) fn new(r: &Registry) -> Routes {
        Routes {
            deliveries: counter(
                r,
                "upstream_deliveries_total",
                "Delivery attempt outcomes by the upstream entry that chose the bot",
                &["app", "upstream", "outcome"],
            ),
            paused: counter(r, "paused_total", "Deliveries held by a pause", &["app"]),
            waiting: gauge(r, "outbox_paused", "Deliveries waiting for a pause to end"),
            pauses: gauge(r, "pauses", "Pauses in force (an app, a team or a channel)"),
            oldest_pause_seconds: prometheus::register_gauge_vec_with_registry!(
                "pause_oldest_age_seconds",
                "How long the oldest pause in force has been on; 0 when none is",
                &["app"],
                r
            )
            .expect("unique metric"),
            shadow_copies: counter(
                r,
                "shadow_copies_total",
                "Deliveries copied to the shadow, by outcome",
                &["app", "outcome"],
            ),
            shadow_calls: counter(
                r,
                "shadow_calls_total",
                "The shadow bot's Web API calls at the egress's shadow base, by outcome",
                &["app", "outcome"],
            ),
            shadow_unreachable: gauge(
                r,
                "shadow_unreachable",
                "1 while the shadow's lane backs off from a bot it cannot connect to (probing it)",
            ),
        }
    }
}
