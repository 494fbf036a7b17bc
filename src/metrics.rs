//! Every metric in one place. Labels are small fixed sets (`app`, `kind`, `outcome`, …): never a
//! team, channel, user or event id.

use std::sync::LazyLock;

use prometheus::{
    exponential_buckets, register_histogram_vec_with_registry, register_int_counter_vec_with_registry, HistogramVec,
    IntCounterVec, Registry,
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
    /// Attempt chain outcomes: delivered, retry, dead, final_4xx.
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
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let r = Registry::new_custom(Some("slackgate".into()), None).expect("static prefix is valid");
    let fast = exponential_buckets(0.0005, 2.0, 14).expect("static buckets");
    let slow = exponential_buckets(0.005, 2.0, 18).expect("static buckets");
    macro_rules! counter {
        ($name:literal, $help:literal, $labels:expr) => {
            register_int_counter_vec_with_registry!($name, $help, $labels, r).expect("unique metric")
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
        upstream_responses: counter!("upstream_responses_total", "Bot answers by status class", &["app", "class"]),
        fence_rejections: counter!("fence_rejections_total", "Completions refused by the lease fence", &["app"]),
        store_errors: counter!("store_errors_total", "Redis errors by operation", &["app", "op"]),
        ignored: counter!("ignored_total", "Deliveries acked and not forwarded, by filter", &["app", "reason"]),
        cancelled: counter!("cancelled_total", "Waiting deliveries cancelled by message_deleted", &["app"]),
        inline: counter!("inline_total", "Inline pass-through outcomes", &["app", "kind", "outcome"]),
        response_url_posts: counter!(
            "response_url_posts_total",
            "Late replies posted to response_url",
            &["app", "outcome"]
        ),
        registry: r,
    }
});

/// Prometheus text exposition of everything above.
pub fn render() -> Vec<u8> {
    let mut out = Vec::new();
    let encoder = prometheus::TextEncoder::new();
    // Encoding into a Vec cannot fail for well-formed families.
    let _ = prometheus::Encoder::encode(&encoder, &METRICS.registry.gather(), &mut out);
    out
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
