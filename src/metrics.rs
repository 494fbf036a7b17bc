//! Every metric in one place. Labels are small fixed sets (`app`, `kind`, `outcome`, …): never a
//! team, channel, user or event id.

use std::sync::LazyLock;

use prometheus::{
    exponential_buckets, register_gauge_vec_with_registry, register_histogram_vec_with_registry,
    register_int_counter_vec_with_registry, register_int_gauge_vec_with_registry, register_int_gauge_with_registry,
    GaugeVec, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

pub struct Metrics {
    pub registry: Registry,
    /// Slack-facing requests by app, kind and outcome (accepted, duplicate, ignored,
    /// unauthorized, bad_request, store_unavailable, …).
    pub requests: IntCounterVec,
    /// Time from the request's arrival to our answer to Slack.
    pub ack_seconds: HistogramVec,
    /// Requests carrying `X-Slack-Retry-Num`, by Slack's `X-Slack-Retry-Reason`.
    pub slack_retries: IntCounterVec,
    /// Attempt outcomes: delivered, retried, dead (given up or a final 4xx), expired.
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
    /// Inline pass-through of commands and interactions: in_time, late, expired, no_answer.
    pub inline: IntCounterVec,
    /// Late replies posted to a `response_url`: posted, failed.
    pub response_url_posts: IntCounterVec,
    /// The outbox as Redis last reported it (refreshed on a timer by every process).
    pub outbox_ready: IntGaugeVec,
    pub outbox_in_flight: IntGaugeVec,
    pub outbox_scheduled: IntGaugeVec,
    pub outbox_dead: IntGaugeVec,
    /// Age of the oldest delivery waiting on the stream (ready or in flight), 0 when none.
    pub outbox_oldest_age_seconds: GaugeVec,
    /// Dead letters dropped past `dead_ttl` (reason `ttl`) or beyond `dead_max` (`max`).
    pub dead_evicted: IntCounterVec,
    /// Slack-facing connections open now.
    pub connections_open: IntGauge,
    /// Connections the gateway closed itself: header_timeout, idle_timeout, over_limit.
    pub connections_closed: IntCounterVec,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let r = Registry::new_custom(Some("slackgate".into()), None).expect("static prefix is valid");
    // 0.25 ms … 2 s, then Slack's 3 s deadline.
    let mut fast = exponential_buckets(0.00025, 2.0, 14).expect("static buckets");
    fast.push(3.0);
    let slow = exponential_buckets(0.005, 2.0, 18).expect("static buckets");
    macro_rules! counter {
        ($name:literal, $help:literal, $labels:expr) => {
            register_int_counter_vec_with_registry!($name, $help, $labels, r).expect("unique metric")
        };
    }
    macro_rules! gauge {
        ($name:literal, $help:literal) => {
            register_int_gauge_vec_with_registry!($name, $help, &["app"], r).expect("unique metric")
        };
    }
    macro_rules! histogram {
        ($name:literal, $help:literal, $buckets:expr) => {
            register_histogram_vec_with_registry!($name, $help, &["app"], $buckets, r).expect("unique metric")
        };
    }
    Metrics {
        requests: counter!("requests_total", "Slack-facing requests by kind and outcome", &["app", "kind", "outcome"]),
        ack_seconds: histogram!("ack_seconds", "Time to answer Slack", fast.clone()),
        slack_retries: counter!("slack_retries_total", "Slack redeliveries seen, by reason", &["app", "reason"]),
        deliveries: counter!("deliveries_total", "Delivery attempt outcomes", &["app", "outcome"]),
        attempt_seconds: histogram!("attempt_seconds", "Duration of one attempt toward the bot", slow.clone()),
        delivered_lag_seconds: histogram!("delivered_lag_seconds", "Receipt to the bot's 2xx", slow),
        upstream_responses: counter!(
            "upstream_responses_total",
            "Bot answers by status class",
            &["app", "status_class"]
        ),
        fence_rejections: counter!("fence_rejections_total", "Completions refused by the lease fence", &["app"]),
        store_errors: counter!("store_errors_total", "Redis errors by the operation that failed", &["app", "reason"]),
        ignored: counter!("ignored_total", "Deliveries acked and not forwarded, by filter", &["app", "reason"]),
        cancelled: counter!("cancelled_total", "Waiting deliveries cancelled by message_deleted", &["app"]),
        inline: counter!("inline_total", "Inline pass-through outcomes", &["app", "kind", "outcome"]),
        response_url_posts: counter!(
            "response_url_posts_total",
            "Late replies posted to response_url",
            &["app", "outcome"]
        ),
        outbox_ready: gauge!("outbox_ready", "Deliveries waiting on the stream for a worker"),
        outbox_in_flight: gauge!("outbox_in_flight", "Deliveries leased to a worker"),
        outbox_scheduled: gauge!("outbox_scheduled", "Deliveries scheduled for a retry (or held for an inline answer)"),
        outbox_dead: gauge!("outbox_dead", "Deliveries in the dead-letter stream"),
        outbox_oldest_age_seconds: register_gauge_vec_with_registry!(
            "outbox_oldest_age_seconds",
            "Age of the oldest delivery on the stream",
            &["app"],
            r
        )
        .expect("unique metric"),
        dead_evicted: counter!("dead_evicted_total", "Dead letters dropped by their bounds", &["app", "reason"]),
        connections_open: register_int_gauge_with_registry!("connections_open", "Slack-facing connections open", r)
            .expect("unique metric"),
        connections_closed: counter!(
            "connections_closed_total",
            "Slack-facing connections closed by the gateway, by reason",
            &["reason"]
        ),
        registry: r,
    }
});

/// Every metric family name the binary exports (with the `slackgate_` prefix), whether or not
/// it has a sample yet; histograms also export `_bucket`, `_sum` and `_count`.
pub fn names() -> Vec<String> {
    use prometheus::core::Collector;
    let m = &*METRICS;
    let collectors: [&dyn Collector; 21] = [
        &m.requests,
        &m.ack_seconds,
        &m.slack_retries,
        &m.deliveries,
        &m.attempt_seconds,
        &m.delivered_lag_seconds,
        &m.upstream_responses,
        &m.fence_rejections,
        &m.store_errors,
        &m.ignored,
        &m.cancelled,
        &m.inline,
        &m.response_url_posts,
        &m.outbox_ready,
        &m.outbox_in_flight,
        &m.outbox_scheduled,
        &m.outbox_dead,
        &m.outbox_oldest_age_seconds,
        &m.dead_evicted,
        &m.connections_open,
        &m.connections_closed,
    ];
    let mut names: Vec<String> =
        collectors.iter().flat_map(|c| c.desc()).map(|d| format!("slackgate_{}", d.fq_name)).collect();
    names.sort();
    names.dedup();
    names
}

/// Every `(kind, outcome)` a Slack-facing request of an app can be counted with.
const REQUESTS: &[(&str, &[&str])] = &[
    ("event", &["accepted", "duplicate", "duplicate_message", "ignored", "store_unavailable"]),
    ("command", &["accepted", "answered", "duplicate", "ignored", "store_unavailable"]),
    ("interactivity", &["accepted", "answered", "duplicate", "ignored", "store_unavailable"]),
    ("opaque", &["accepted", "duplicate", "ignored", "store_unavailable"]),
    ("url_verification", &["answered"]),
    ("ssl_check", &["answered"]),
    ("app_rate_limited", &["ignored"]),
    ("unknown", &["unauthorized", "bad_request", "bad_method", "too_large", "body_timeout"]),
];
const RETRY_REASONS: &[&str] =
    &["http_timeout", "http_error", "connection_failed", "ssl_error", "too_many_redirects", "other"];
const DELIVERY_OUTCOMES: &[&str] = &["delivered", "retried", "dead", "expired", "cancelled"];
const STATUS_CLASSES: &[&str] = &["1xx", "2xx", "3xx", "4xx", "5xx", "error", "timeout"];
const STORE_OPERATIONS: &[&str] =
    &["record", "read", "load", "finish", "inline_finish", "promote", "reclaim", "stats", "trim"];
const IGNORE_REASONS: &[&str] =
    &["channel_denied", "channel_not_allowed", "subtype", "own_message", "bot_message", "edit"];
const INLINE_OUTCOMES: &[&str] = &["in_time", "late", "expired"];
const REPLY_OUTCOMES: &[&str] = &["posted", "failed", "refused"];
const EVICTION_REASONS: &[&str] = &["ttl", "max"];
const CLOSE_REASONS: &[&str] = &["header_timeout", "idle_timeout", "over_limit"];

/// Export every series of `app` with a fixed label set at zero, so that dashboards and
/// `rate()` alerts work before the first event of each kind.
pub fn init_app(app: &str) {
    let m = &*METRICS;
    for (kind, outcomes) in REQUESTS {
        for outcome in *outcomes {
            m.requests.with_label_values(&[app, kind, outcome]);
        }
    }
    let pairs: [(&IntCounterVec, &[&str]); 7] = [
        (&m.slack_retries, RETRY_REASONS),
        (&m.deliveries, DELIVERY_OUTCOMES),
        (&m.upstream_responses, STATUS_CLASSES),
        (&m.store_errors, STORE_OPERATIONS),
        (&m.ignored, IGNORE_REASONS),
        (&m.response_url_posts, REPLY_OUTCOMES),
        (&m.dead_evicted, EVICTION_REASONS),
    ];
    for (counter, labels) in pairs {
        for label in labels {
            counter.with_label_values(&[app, label]);
        }
    }
    for kind in ["command", "interactivity"] {
        for outcome in INLINE_OUTCOMES {
            m.inline.with_label_values(&[app, kind, outcome]);
        }
    }
    m.fence_rejections.with_label_values(&[app]);
    m.cancelled.with_label_values(&[app]);
    for h in [&m.ack_seconds, &m.attempt_seconds, &m.delivered_lag_seconds] {
        h.with_label_values(&[app]);
    }
    for g in [&m.outbox_ready, &m.outbox_in_flight, &m.outbox_scheduled, &m.outbox_dead] {
        g.with_label_values(&[app]);
    }
    m.outbox_oldest_age_seconds.with_label_values(&[app]);
    for reason in CLOSE_REASONS {
        m.connections_closed.with_label_values(&[reason]);
    }
}

/// Prometheus text exposition of everything above.
pub fn render() -> Vec<u8> {
    let mut out = Vec::new();
    let encoder = prometheus::TextEncoder::new();
    // Encoding into a Vec cannot fail for well-formed families.
    let _ = prometheus::Encoder::encode(&encoder, &METRICS.registry.gather(), &mut out);
    out
}

/// Count one attempt toward the bot: its duration and its answer's class.
pub fn attempt_observed(
    app: &str,
    result: &Result<crate::upstream::Response, crate::upstream::SendError>,
    took: std::time::Duration,
) {
    METRICS.attempt_seconds.with_label_values(&[app]).observe(took.as_secs_f64());
    let class = match result {
        Ok(r) => status_class(r.status),
        Err(crate::upstream::SendError::Timeout | crate::upstream::SendError::ConnectTimeout(_)) => "timeout",
        Err(_) => "error",
    };
    METRICS.upstream_responses.with_label_values(&[app, class]).inc();
}

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
