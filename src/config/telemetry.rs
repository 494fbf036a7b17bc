//! `[telemetry]`: traces of each delivery over OpenTelemetry (OTLP over HTTP, protobuf). Off
//! unless `otlp_endpoint` is set.

use std::time::Duration;

use super::file::FileConfig;
use super::{ConfigError, Validator};

#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://collector:4318`); spans go to `<it>/v1/traces`.
    /// `None`: traces are off (no exporter, no span work anywhere).
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the gateway's spans.
    pub service_name: String,
    /// The share of deliveries traced, decided once when each arrives.
    pub sample_ratio: f64,
    /// A link to a trace in the team's tool, `{trace_id}` replaced (the pages show it).
    pub trace_url: Option<String>,
    /// Spans waiting for the exporter, at most; past it they are dropped and counted.
    pub max_queue: usize,
    /// How long one export may take before it is given up (its spans dropped and counted).
    pub export_timeout: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: "slackgate".into(),
            sample_ratio: 1.0,
            trace_url: None,
            max_queue: 8192,
            export_timeout: Duration::from_secs(5),
        }
    }
}

impl TelemetryConfig {
    /// Whether traces are exported at all.
    pub fn is_on(&self) -> bool {
        self.otlp_endpoint.is_some()
    }

    /// Where spans are posted: the endpoint's `/v1/traces`.
    pub fn traces_url(&self) -> Option<String> {
        self.otlp_endpoint.as_ref().map(|e| format!("{}/v1/traces", e.trim_end_matches('/')))
    }

    /// The link to `trace_id` in the team's tool, when `trace_url` is set.
    pub fn link(&self, trace_id: &str) -> Option<String> {
        self.trace_url.as_ref().map(|u| u.replace("{trace_id}", trace_id))
    }
}

impl Validator<'_> {
    pub(super) fn telemetry(&self, raw: &FileConfig) -> Result<TelemetryConfig, ConfigError> {
        let t = &raw.telemetry;
        let d = TelemetryConfig::default();
        let otlp_endpoint = match t.otlp_endpoint.as_deref().map(str::trim) {
            None | Some("") | Some("off") => None,
            Some(url) => {
                let parsed = url::Url::parse(url).map_err(|e| self.err("telemetry.otlp_endpoint", e.to_string()))?;
                if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                    return Err(
                        self.err("telemetry.otlp_endpoint", "must be an http:// or https:// URL (OTLP over HTTP)")
                    );
                }
                if parsed.query().is_some() || parsed.path().ends_with("/v1/traces") {
                    return Err(self.err(
                        "telemetry.otlp_endpoint",
                        "the collector's base URL (e.g. http://collector:4318), without /v1/traces or a query",
                    ));
                }
                Some(url.trim_end_matches('/').to_string())
            }
        };
        let sample_ratio = t.sample_ratio.unwrap_or(d.sample_ratio);
        if !(0.0..=1.0).contains(&sample_ratio) {
            return Err(self.err("telemetry.sample_ratio", "must be between 0 and 1"));
        }
        let service_name = t.service_name.clone().unwrap_or(d.service_name);
        if service_name.trim().is_empty() {
            return Err(self.err("telemetry.service_name", "must not be empty"));
        }
        let trace_url = t.trace_url.clone().filter(|u| !u.trim().is_empty());
        if let Some(u) = &trace_url {
            if !u.contains("{trace_id}") || !(u.starts_with("https://") || u.starts_with("http://")) {
                return Err(self.err("telemetry.trace_url", "an http(s) URL with {trace_id} in it"));
            }
        }
        let max_queue = t.max_queue.unwrap_or(d.max_queue);
        if !(64..=1_000_000).contains(&max_queue) {
            return Err(self.err("telemetry.max_queue", "must be between 64 and 1000000 spans"));
        }
        let export_timeout = self.duration("telemetry.export_timeout", &t.export_timeout, d.export_timeout)?;
        if export_timeout.is_zero() || export_timeout > Duration::from_secs(60) {
            return Err(self.err("telemetry.export_timeout", "must be between 1ms and 60s"));
        }
        Ok(TelemetryConfig { otlp_endpoint, service_name, sample_ratio, trace_url, max_queue, export_timeout })
    }
}
