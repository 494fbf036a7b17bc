//! Socket Mode's series: connections each way, envelopes, acks, reconnects.

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec, Registry};

use crate::metrics::{counter, histogram};

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
    pub fn new(r: &Registry, fast: &[f64]) -> SocketMetrics {
        SocketMetrics {
            connections: prometheus::register_int_gauge_vec_with_registry!(
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
            link_disabled: crate::metrics::gauge(
                r,
                "socket_link_disabled",
                "1 while Slack says Socket Mode is disabled for the app (link_disabled)",
            ),
        }
    }
}
