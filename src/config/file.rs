//! `gateway.toml` exactly as written: serde structs that refuse unknown keys. Nothing here is
//! validated beyond its TOML type; `super::Config::from_file` turns these into the one internal
//! config the rest of the gateway reads.

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub redis: RedisSection,
    #[serde(default)]
    pub egress: EgressSection,
    #[serde(default)]
    pub ui: UiSection,
    #[serde(default)]
    pub telemetry: TelemetrySection,
    #[serde(default, rename = "app")]
    pub apps: Vec<AppSection>,
    /// Files of one app each (`apps.d/*.toml`), relative to this file.
    #[serde(default)]
    pub include: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub socket_listen: Option<String>,
    pub max_body: Option<SizeValue>,
    pub unverified_budget: Option<SizeValue>,
    pub ack_budget: Option<String>,
    pub threads: Option<usize>,
    pub shutdown_grace: Option<String>,
    pub admin_token: Option<String>,
    pub admin_read_token: Option<String>,
    #[serde(default)]
    pub admin_hosts: Vec<String>,
    #[serde(default)]
    pub response_url_hosts: Vec<String>,
    pub header_timeout: Option<String>,
    pub body_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub max_connections: Option<usize>,
    pub max_pending: Option<usize>,
    pub admission_wait: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSection {
    pub url: Option<String>,
    pub cluster: Option<Vec<String>>,
    pub sentinel: Option<Vec<String>>,
    pub master_name: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub password_file: Option<String>,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
    pub sentinel_password_file: Option<String>,
    pub tls_ca_file: Option<String>,
    pub tls_cert_file: Option<String>,
    pub tls_key_file: Option<String>,
    pub key_prefix: Option<String>,
    pub shards: Option<u16>,
    pub durability: Option<String>,
    pub wait_replicas: Option<u32>,
    pub wait_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiSection {
    pub history: Option<String>,
    pub history_max: Option<usize>,
    pub history_rate: Option<u32>,
    pub show_text: Option<bool>,
    pub session: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    pub otlp_endpoint: Option<String>,
    pub service_name: Option<String>,
    pub sample_ratio: Option<f64>,
    pub trace_url: Option<String>,
    pub max_queue: Option<usize>,
    pub export_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSection {
    pub listen: Option<String>,
    pub slack_api_url: Option<String>,
    pub write_methods: Option<Vec<String>>,
    pub retry_window: Option<String>,
    pub attribution_window: Option<String>,
    pub on_edited: Option<String>,
    pub rerun: Option<String>,
    pub pace_per_second: Option<f64>,
    pub pace_burst: Option<u32>,
    pub max_wait: Option<String>,
    pub timeout: Option<String>,
    pub evidence_window: Option<String>,
    pub evidence_recent: Option<String>,
    pub history_tier: Option<String>,
    pub replies_fallback: Option<String>,
    pub replies_keep: Option<String>,
    pub close_stream: Option<String>,
    pub close_line: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppSection {
    pub name: Option<String>,
    pub signing_secret: Option<OneOrMany>,
    pub signing_secret_file: Option<String>,
    pub upstream: Option<String>,
    pub events_path: Option<String>,
    pub commands_path: Option<String>,
    pub interactivity_path: Option<String>,
    #[serde(default)]
    pub passthrough: Vec<String>,
    #[serde(default)]
    pub dedupe: DedupeSection,
    #[serde(default)]
    pub ignore: IgnoreSection,
    #[serde(default)]
    pub inline: InlineSection,
    #[serde(default)]
    pub delivery: DeliverySection,
    #[serde(default)]
    pub turns: super::turns::TurnsSection,
    pub socket_mode: Option<super::socket::SocketModeSection>,
    #[serde(default)]
    pub upstreams: Vec<UpstreamSection>,
    pub shadow: Option<ShadowSection>,
    pub pause_answer: Option<String>,
    pub rerun_lost: Option<String>,
    pub rerun_limit: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DedupeSection {
    pub ttl: Option<String>,
    pub message: Option<bool>,
    pub edits: Option<String>,
    pub cancel_on_delete: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreSection {
    pub own_messages: Option<bool>,
    pub bot_messages: Option<bool>,
    #[serde(default)]
    pub allow_bots: Vec<String>,
    #[serde(default)]
    pub subtypes: Vec<String>,
    #[serde(default)]
    pub channels_allow: Vec<String>,
    #[serde(default)]
    pub channels_deny: Vec<String>,
}

/// `inline = { command = "2.5s", interactivity = "off" }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlineSection {
    pub command: Option<String>,
    pub interactivity: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverySection {
    pub timeout: Option<String>,
    pub max_in_flight: Option<usize>,
    pub retry_initial: Option<String>,
    pub retry_max: Option<String>,
    pub give_up_after: Option<String>,
    pub lease: Option<String>,
    pub dead_ttl: Option<String>,
    pub dead_max: Option<usize>,
}

/// A secret may be one string or a list (old and new during rotation).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// `max_body = 1048576` or `max_body = "1MiB"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

/// `match = { kinds = [...], types = [...], teams = [...], channels = [...] }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSection {
    #[serde(default)]
    pub kinds: Vec<String>,
    #[serde(default)]
    pub types: Vec<String>,
    #[serde(default)]
    pub teams: Vec<String>,
    #[serde(default)]
    pub channels: Vec<String>,
}

/// One entry of `upstreams`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSection {
    #[serde(rename = "match", default)]
    pub matcher: MatchSection,
    pub upstream: Option<String>,
    #[serde(default)]
    pub delivery: RouteDeliverySection,
}

/// The delivery keys an entry may change (the lease and the dead letters stay the app's).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteDeliverySection {
    pub timeout: Option<String>,
    pub retry_initial: Option<String>,
    pub retry_max: Option<String>,
    pub give_up_after: Option<String>,
    pub max_in_flight: Option<usize>,
}

/// `shadow = { upstream, match, share, max_backlog }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowSection {
    pub upstream: Option<String>,
    #[serde(rename = "match", default)]
    pub matcher: MatchSection,
    pub share: Option<f64>,
    pub max_backlog: Option<u64>,
}
