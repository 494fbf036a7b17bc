//! The files under `deploy/` checked against the code: every metric that the Grafana dashboard
//! and the Prometheus alerts query is one the binary exports, and every gateway config shipped
//! there (the TOML files and the one embedded in the Kubernetes ConfigMap) passes
//! `slackgate check`. promtool, YAML syntax, the schema validators, hadolint, systemd-analyze and
//! the cross-file rules (e.g. no Secret among the applied manifests) are `scripts/check-deploy`'s.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use slackgate::metrics::Metrics;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn read(rel: &str) -> String {
    let path = deploy_dir().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every metric-name-like token starting with `slackgate_` in `text`: the whole identifier
/// (`[A-Za-z0-9_:]`, so a misspelt `slackgate_Requests_total` is caught whole), not preceded by
/// an identifier character.
fn metric_idents(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "slackgate_";
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let bytes = text.as_bytes();
    let mut found = BTreeSet::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(PREFIX) {
        let start = from + at;
        let mut end = start + PREFIX.len();
        while end < bytes.len() && is_ident(bytes[end]) {
            end += 1;
        }
        if (start == 0 || !is_ident(bytes[start - 1])) && end > start + PREFIX.len() {
            found.insert(text[start..end].to_string());
        }
        from = end;
    }
    found
}

/// The histogram families: they are queried as `_bucket`, `_sum` and `_count`.
fn histograms() -> BTreeSet<String> {
    Metrics::new().histogram_names().iter().map(|n| exposed(n)).collect()
}

/// A family's name as `/metrics` shows it. The registry adds the `slackgate_` prefix when it
/// gathers, so a name taken from a collector's `desc()` may lack it.
fn exposed(name: &str) -> String {
    if name.starts_with("slackgate_") {
        name.to_string()
    } else {
        format!("slackgate_{name}")
    }
}

/// The `slackgate_` identifiers in `text` that name no exported family.
fn unknown_metrics(text: &str) -> Vec<String> {
    let exported: BTreeSet<String> = Metrics::new().names().iter().map(|n| exposed(n)).collect();
    let histograms = histograms();
    assert!(histograms.iter().all(|h| exported.contains(h)), "histograms {histograms:?} not all in names()");
    metric_idents(text)
        .into_iter()
        .filter(|id| {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| id.strip_suffix(suffix))
                .find(|base| histograms.contains(*base))
                .unwrap_or(id);
            !exported.contains(base)
        })
        .collect()
}

#[test]
fn the_name_check_refuses_unknown_names() {
    let text = "sum(rate(slackgate_requests_total[5m])) / slackgate_ack_seconds_count \
                + slackgate_ack_seconds_bucket + slackgate_nope_total + slackgate_requests_total_bucket \
                + slackgate_Outbox_dead + my_slackgate_thing";
    assert_eq!(
        unknown_metrics(text),
        ["slackgate_Outbox_dead", "slackgate_nope_total", "slackgate_requests_total_bucket"]
    );
}

/// Every panel, those nested in rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

#[test]
fn dashboard_queries_only_exported_metrics() {
    let dashboard: Value = serde_json::from_str(&read("grafana/slackgate.json")).expect("slackgate.json is JSON");
    let all = panels(&dashboard);
    let mut exprs = Vec::new();
    let mut charts = 0;
    for panel in &all {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.trim().is_empty(), "a panel without a title: {panel}");
        if panel["type"] == "row" {
            continue;
        }
        charts += 1;
        let own: Vec<&str> = panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["expr"].as_str())
            .filter(|e| !e.trim().is_empty())
            .collect();
        assert!(!own.is_empty(), "panel {title:?} has no query");
        exprs.extend(own);
    }
    assert!(charts >= 9, "only {charts} panels besides rows");

    let vars = dashboard["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no ${name} variable"));
    assert_eq!(var("datasource")["query"], "prometheus");
    let app = var("app");
    assert_eq!(app["definition"], "label_values(slackgate_requests_total, app)");
    exprs.extend(app["definition"].as_str());
    exprs.extend(app["query"]["query"].as_str().or(app["query"].as_str()));

    let text = exprs.join("\n");
    assert!(metric_idents(&text).len() >= 10, "the dashboard queries few metrics: {:?}", metric_idents(&text));
    let unknown = unknown_metrics(&text);
    assert!(unknown.is_empty(), "grafana/slackgate.json queries metrics the binary does not export: {unknown:?}");
}

#[test]
fn alerts_use_only_exported_metrics() {
    let text = read("prometheus/alerts.yml");
    assert!(metric_idents(&text).len() >= 5, "alerts.yml names few metrics: {:?}", metric_idents(&text));
    let unknown = unknown_metrics(&text);
    assert!(unknown.is_empty(), "prometheus/alerts.yml names metrics the binary does not export: {unknown:?}");

    // Each rule carries what the on-call person needs (promtool checks the syntax).
    let rules: Vec<&str> = text.split("- alert:").skip(1).collect();
    assert!(rules.len() >= 6, "only {} alerts", rules.len());
    for rule in rules {
        let name = rule.split_whitespace().next().unwrap_or_default();
        for key in ["expr:", "severity:", "summary:", "description:", "runbook:"] {
            assert!(rule.contains(key), "alert {name} has no {key}");
        }
    }
}

/// `(name, TOML)` for each `<name>.toml: |` block scalar in a YAML file, as in the ConfigMap.
fn embedded_toml(yaml: &str) -> Vec<(String, String)> {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((key, style)) = line.trim().split_once(':') else { continue };
        if !key.ends_with(".toml") || !matches!(style.trim(), "|" | "|-" | "|+") {
            continue;
        }
        let body: Vec<&str> =
            lines[i + 1..].iter().take_while(|l| l.trim().is_empty() || indent(l) > indent(line)).copied().collect();
        let Some(first) = body.iter().find(|l| !l.trim().is_empty()) else { continue };
        let strip = indent(first);
        let toml: Vec<&str> = body.iter().map(|l| l.get(strip..).unwrap_or("")).collect();
        found.push((key.trim_matches(|c| c == '"' || c == '\'').to_string(), toml.join("\n") + "\n"));
    }
    found
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// What each `${NAME}` is set to for `check`: long enough for the 16-character minimum of
/// `[server] admin_token`.
const DUMMY_VALUE: &str = "dummy-value-0123456789abcdef";

/// Every `${NAME}` a config interpolates.
fn env_refs(toml: &str) -> BTreeSet<String> {
    toml.split("${").skip(1).filter_map(|rest| rest.split_once('}')).map(|(name, _)| name.to_string()).collect()
}

fn check(label: &str, path: &Path, text: &str) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slackgate"));
    cmd.args(["check", "--config"]).arg(path).env("SLACK_SIGNING_SECRET", "x");
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("SLACKGATE_")) {
        cmd.env_remove(name);
    }
    for name in env_refs(text) {
        cmd.env(name, DUMMY_VALUE);
    }
    let out = cmd.output().expect("run slackgate check");
    assert!(
        out.status.success(),
        "slackgate check {label}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn shipped_configs_pass_check() {
    let root = deploy_dir();
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut checked = Vec::new();
    for path in &files {
        let label = path.strip_prefix(&root).unwrap_or(path).display().to_string();
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => {
                let text = fs::read_to_string(path).expect("read toml");
                check(&label, path, &text);
                checked.push(label);
            }
            Some("yaml" | "yml") => {
                let yaml = fs::read_to_string(path).expect("read yaml");
                for (n, (name, toml)) in embedded_toml(&yaml).into_iter().enumerate() {
                    let file = scratch.path().join(format!("{n}-{name}"));
                    fs::write(&file, &toml).expect("write embedded toml");
                    let label = format!("{label} ({name})");
                    check(&label, &file, &toml);
                    checked.push(label);
                }
            }
            _ => {}
        }
    }
    for expected in ["docker/gateway.toml", "kubernetes/configmap.yaml (gateway.toml)"] {
        assert!(checked.iter().any(|c| c == expected), "{expected} was not checked; checked: {checked:?}");
    }
}

#[test]
fn configmap_extraction_keeps_the_toml_whole() {
    let yaml = "data:\n  gateway.toml: |\n    [server]\n    listen = \"0.0.0.0:3000\"\n\n    [[app]]\n      \
                # indented more\n    name = \"bot\"\n  other: 1\n";
    assert_eq!(
        embedded_toml(yaml),
        [(
            "gateway.toml".to_string(),
            "[server]\nlisten = \"0.0.0.0:3000\"\n\n[[app]]\n  # indented more\nname = \"bot\"\n".to_string()
        )]
    );
}
