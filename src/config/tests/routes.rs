use super::*;
use crate::slack::Kind;

// ---------------------------------------------------------------- upstreams, shadow, pause_answer

fn with_egress(text: &str) -> String {
    format!("[egress]\nlisten = \"127.0.0.1:0\"\n{text}")
}

#[test]
fn an_app_without_upstreams_keeps_its_one_bot() {
    let c = load(&app("a", "SG_CFG_RT_NONE", "")).unwrap();
    let a = &c.apps[0];
    assert!(a.upstreams.is_empty() && a.shadow.is_none());
    let f = crate::config::Facts { kind: Kind::Command, detail: "/x", team: None, channel: None };
    assert_eq!(a.route(&f).label, "default");
    assert_eq!(a.pause_answer.body, "");
}

#[test]
fn the_first_matching_entry_decides_and_may_change_the_delivery() {
    let extra = r#"upstreams = [
  { match = { kinds = ["command"] }, upstream = "http://127.0.0.1:9001", delivery = { timeout = "2s", max_in_flight = 4 } },
  { match = { kinds = ["event"], types = ["app_mention"], channels = ["C9"] }, upstream = "http://127.0.0.1:9002" },
  { match = { kinds = ["event"] }, upstream = "http://127.0.0.1:9003", delivery = { timeout = "40s" } },
]"#;
    let c = load(&app("a", "SG_CFG_RT_FIRST", extra)).unwrap();
    let a = &c.apps[0];
    let f = |kind, detail, channel| crate::config::Facts { kind, detail, team: Some("T1"), channel };
    let cmd = a.route(&f(Kind::Command, "/deploy", None));
    assert_eq!((cmd.label, cmd.upstream.port, cmd.delivery.timeout), ("upstreams[0]", 9001, Duration::from_secs(2)));
    assert_eq!(cmd.delivery.max_in_flight, 4);
    assert!(a.upstreams[0].own_slots && !a.upstreams[1].own_slots);
    assert_eq!(a.route(&f(Kind::Event, "app_mention", Some("C9"))).upstream.port, 9002);
    assert_eq!(a.route(&f(Kind::Event, "app_mention", Some("C1"))).upstream.port, 9003);
    let other = a.route(&f(Kind::Interactivity, "block_actions", None));
    assert_eq!((other.label, other.upstream.port), ("default", 8000));
    assert_eq!(a.delivery.lease, Duration::from_secs(80), "the lease outlives the longest entry's timeout");
    assert_eq!(a.upstreams[2].delivery.lease, a.delivery.lease);
}

#[test]
fn bad_entries_are_named() {
    let bad = |extra: &str, key: &str| assert_err(&load_err(&app("a", "SG_CFG_RT_BAD", extra)), key);
    bad(
        r#"upstreams = [{ match = { kinds = ["events"] }, upstream = "http://127.0.0.1:1" }]"#,
        "app[0].upstreams[0].match.kinds[0]",
    );
    bad(r#"upstreams = [{ match = {} }]"#, "app[0].upstreams[0].upstream");
    bad(r#"upstreams = [{ upstream = "ftp://x" }]"#, "app[0].upstreams[0].upstream");
    bad(r#"upstreams = [{ upstream = "socket" }]"#, "app[0].upstreams[0].upstream");
    bad(r#"upstreams = [{ upstream = "http://127.0.0.1:1", delivery = { lease = "9s" } }]"#, "(toml)");
    bad(
        r#"upstreams = [{ upstream = "http://127.0.0.1:1", delivery = { max_in_flight = 0 } }]"#,
        "app[0].upstreams[0].delivery.max_in_flight",
    );
    bad(
        r#"upstreams = [{ match = { types = [""] }, upstream = "http://127.0.0.1:1" }]"#,
        "app[0].upstreams[0].match.types[0]",
    );
    bad(
        "delivery = { lease = \"30s\" }\nupstreams = [{ upstream = \"http://127.0.0.1:1\", delivery = { timeout = \"30s\" } }]",
        "app[0].delivery.lease",
    );
}

#[test]
fn a_shadow_is_an_http_bot_behind_the_egress() {
    let ok = with_egress(&app("a", "SG_CFG_SHADOW", "shadow = { upstream = \"http://127.0.0.1:9100\", share = 0.5 }"));
    let s = load(&ok).unwrap().apps[0].shadow.clone().unwrap();
    assert_eq!((s.upstream.port, s.share, s.max_backlog), (9100, 0.5, 10_000));
    let bad = |extra: &str, key: &str| assert_err(&load_err(&with_egress(&app("a", "SG_CFG_SHADOW", extra))), key);
    bad("shadow = { upstream = \"socket\" }", "app[0].shadow.upstream");
    bad("shadow = { upstream = \"http://127.0.0.1:1\", share = 0.0 }", "app[0].shadow.share");
    bad("shadow = { upstream = \"http://127.0.0.1:1\", share = 1.5 }", "app[0].shadow.share");
    bad("shadow = { upstream = \"http://127.0.0.1:1\", max_backlog = 0 }", "app[0].shadow.max_backlog");
    bad("shadow = { upstream = \"http://127.0.0.1:1\", bogus = 1 }", "(toml)");
    let no_egress = app("a", "SG_CFG_SHADOW", "shadow = { upstream = \"http://127.0.0.1:1\" }");
    let err = load_err(&no_egress);
    assert_err(&err, "app[0].shadow.upstream");
    assert!(err.message.contains("[egress] listen"), "{err}");
}

#[test]
fn a_pause_answer_is_json_or_text() {
    let json = load(&app("a", "SG_CFG_PAUSE_A", "pause_answer = '{\"text\": \"back soon\"}'")).unwrap();
    assert_eq!(json.apps[0].pause_answer.content_type, "application/json");
    let text = load(&app("a", "SG_CFG_PAUSE_A", "pause_answer = \"paused for a deploy\"")).unwrap();
    assert!(text.apps[0].pause_answer.content_type.starts_with("text/plain"));
    assert_err(&load_err(&app("a", "SG_CFG_PAUSE_A", "pause_answer = '{broken'")), "app[0].pause_answer");
}
