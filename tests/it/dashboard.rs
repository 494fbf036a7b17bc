//! The shipped Grafana dashboard against a gateway that has just started: every query names
//! only metric families the gateway already exports (at zero), or falls back to
//! `or vector(0)` where its feature may be off — no panel says "No data". Socket Mode's series
//! exist for the apps and directions that use it, and only for them (so the "no Socket Mode
//! connection" alert cannot name an app without it).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::utils::*;

/// Every query of the shipped dashboard (the `$app` variable's too).
fn dashboard_queries() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/slackgate.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    fn walk(panels: &Value, out: &mut Vec<String>) {
        for panel in panels.as_array().into_iter().flatten() {
            let targets = panel["targets"].as_array().into_iter().flatten();
            out.extend(targets.filter_map(|t| t["expr"].as_str()).map(String::from));
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    let vars = dashboard["templating"]["list"].as_array().into_iter().flatten();
    out.extend(vars.filter_map(|v| v["definition"].as_str()).filter(|d| d.contains("slackgate_")).map(String::from));
    assert!(out.len() >= 20, "only {} queries", out.len());
    out
}

/// The metric names a PromQL expression reads: identifiers starting with `slackgate_`.
fn names_in(expr: &str) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("slackgate_") {
        let before = rest[..at].chars().next_back();
        let len = rest[at..].find(|c: char| !ident(c)).unwrap_or(rest.len() - at);
        if !before.is_some_and(ident) {
            out.insert(rest[at..at + len].to_string());
        }
        rest = &rest[at + len..];
    }
    out
}

/// The sample names of a `/metrics` scrape (a histogram's `_bucket`, `_sum`, `_count`).
fn exported(scrape: &str) -> BTreeSet<String> {
    let samples = scrape.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty());
    samples.filter_map(|l| l.split(['{', ' ']).next()).map(String::from).collect()
}

async fn scrape(admin_port: u16) -> String {
    let mut req = Req::signed("/metrics", Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    let (status, body) = send(admin_port, req).await;
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body).into_owned()
}

/// The gateway's scrape once its series are there (`/metrics` answers as it starts).
async fn started_scrape(gw: &Gateway) -> String {
    let mut text = String::new();
    let ready = until(Duration::from_secs(10), async || {
        text = scrape(gw.admin_port).await;
        text.contains("slackgate_requests_total{")
    })
    .await;
    assert!(ready, "no series:\n{text}\n{}", gw.log());
    text
}

/// The queries that would draw "No data": one names a family the scrape lacks, with no
/// `or vector(0)` to fall back on (`fallback`: whether one counts).
fn without_data(scrape: &str, fallback: bool) -> Vec<(String, Vec<String>)> {
    let have = exported(scrape);
    let mut out = Vec::new();
    for expr in dashboard_queries() {
        let flat = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        let missing: Vec<String> = names_in(&expr).into_iter().filter(|n| !have.contains(n)).collect();
        let rescued = fallback && flat.contains("or vector(0)");
        if !missing.is_empty() && !rescued {
            out.push((flat, missing));
        }
    }
    out
}

#[test]
fn the_tokenizer_finds_whole_names() {
    let names = names_in("sum(rate(slackgate_a_total{x=\"slackgate_b\"}[5m])) / my_slackgate_c + slackgate_d_bucket");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["slackgate_a_total", "slackgate_b", "slackgate_d_bucket"]);
    let have =
        exported("# HELP slackgate_x x\nslackgate_x{app=\"a\"} 0\nslackgate_y_bucket{le=\"1\"} 0\nslackgate_z 1\n");
    assert_eq!(have.into_iter().collect::<Vec<_>>(), ["slackgate_x", "slackgate_y_bucket", "slackgate_z"]);
}

/// As shipped: one app over HTTP, the egress on, no Socket Mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_has_a_number_on_a_gateway_just_started() {
    let redis = RedisServer::start();
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("dashplain"), "http://127.0.0.1:9/slack/events");
    cfg.egress = "slack_api_url = \"http://127.0.0.1:9/api/\"".into();
    let gw = Gateway::start(&cfg).await;
    let text = started_scrape(&gw).await;
    let blank = without_data(&text, true);
    assert!(blank.is_empty(), "panels with no data on a fresh gateway: {blank:#?}");
    for family in ["slackgate_egress_history_calls_total", "slackgate_egress_history_refused_total"] {
        assert!(exported(&text).contains(family), "{family} not at zero with the egress on");
    }
    // No app uses Socket Mode: no connection series, so its alert has nothing to fire on.
    assert!(!text.contains("slackgate_socket_connections{"), "{text}");
}

/// One app whose bot is in Socket Mode (`upstream = "socket"`, no socket to Slack), one with
/// sockets to Slack: each direction's series at zero for its app, and none for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_mode_series_start_at_zero_for_the_apps_and_directions_that_use_it() {
    const XAPP: &str = "xapp-1-A1-dash";
    const XAPP_SOCK: &str = "xapp-1-A2-dash";
    let redis = RedisServer::start();
    let slack = FakeSocket::start(XAPP_SOCK).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("dashsock"), "socket");
    cfg.passthrough = "[]".into();
    cfg.server = "socket_listen = \"127.0.0.1:0\"".into();
    cfg.app = "socket_mode = { app_token = \"${SG_XAPP}\", connections = 0 }".into();
    cfg.egress = "slack_api_url = \"http://127.0.0.1:9/api/\"".into();
    cfg.tail = format!(
        "[[app]]\nname = \"sock\"\nsigning_secret = \"${{SG_TEST_SECRET}}\"\nupstream = \"http://127.0.0.1:9/\"\n\
         events_path = \"/slack/sock\"\ncommands_path = \"/slack/sock\"\ninteractivity_path = \"/slack/sock\"\n\
         socket_mode = {{ app_token = \"${{SG_XAPP_SOCK}}\", connections = 1, api_url = \"{}\" }}\n",
        slack.api_url()
    );
    let gw = Gateway::start_with_env(&cfg, &[("SG_XAPP", XAPP), ("SG_XAPP_SOCK", XAPP_SOCK)]).await;
    let text = started_scrape(&gw).await;
    // Every feature the dashboard shows is on: every family is there, no fallback needed.
    let blank = without_data(&text, false);
    assert!(blank.is_empty(), "families missing: {blank:#?}");
    let series = |s: &str| text.lines().any(|l| l.starts_with(s));
    assert!(series("slackgate_socket_connections{app=\"bot\",direction=\"bot\"}"), "{text}");
    assert!(series("slackgate_socket_connections{app=\"sock\",direction=\"slack\"}"), "{text}");
    assert!(!series("slackgate_socket_connections{app=\"bot\",direction=\"slack\"}"), "{text}");
    assert!(!series("slackgate_socket_connections{app=\"sock\",direction=\"bot\"}"), "{text}");
    for family in
        ["slackgate_socket_envelopes_total", "slackgate_socket_ack_seconds_bucket", "slackgate_socket_reconnects_total"]
    {
        assert!(exported(&text).contains(family), "{family} not at zero:\n{text}");
    }
    assert!(series("slackgate_socket_envelopes_total{app=\"bot\",direction=\"bot\""), "{text}");
    assert!(!series("slackgate_socket_envelopes_total{app=\"bot\",direction=\"slack\""), "{text}");
    assert!(!series("slackgate_socket_ack_seconds_bucket{app=\"bot\""), "{text}");
    assert!(!series("slackgate_socket_reconnects_total{app=\"bot\""), "{text}");
}
