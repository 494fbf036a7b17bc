//! With `show_text` off (the default), what people wrote never reaches an operator: the
//! payloads issue 32 reproduced leaks with (a legacy dialog's `submission`, a file's name and
//! preview, `link_shared` URLs, a view's `private_metadata`, a command's names) go through a
//! real gateway, and neither a delivery's page nor `slackgate show --json` shows any of their
//! text. The rule itself is unit-tested over every fixture in `src/history/describe/tests.rs`.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::ui::page;
use crate::utils::*;

/// Text that must not show: every string below but ids, types and timestamps carries it.
const MARK: &str = "zqSECRETqz";

fn bodies() -> Vec<Vec<u8>> {
    let m = |what: &str| format!("{MARK} {what}");
    let interaction = |payload: Value| {
        form_urlencoded::Serializer::new(String::new()).append_pair("payload", &payload.to_string()).finish()
    };
    let dialog = json!({"type": "dialog_submission", "token": "XXYYZZ", "action_ts": "1700000002.000100",
        "team": {"id": "T1", "domain": m("domain")}, "user": {"id": "U1", "name": m("name")},
        "channel": {"id": "C1", "name": m("channel")}, "callback_id": "offsite", "state": m("state"),
        "submission": {"name": m("submission"), "comment": m("comment")},
        "response_url": "https://hooks.slack.com/app/T1/1/abc"});
    let modal = json!({"type": "view_submission", "token": "XXYYZZ", "trigger_id": "TrHidden1",
        "team": {"id": "T1", "domain": m("domain")}, "user": {"id": "U1", "username": m("username")},
        "view": {"id": "V1", "type": "modal", "callback_id": "report", "private_metadata": m("metadata"),
            "state": {"values": {"b": {"a": {"type": "plain_text_input", "value": m("value")}}}}}});
    let event = |id: &str, inner: Value| {
        json!({"token": "XXYYZZ", "type": "event_callback", "event_id": id, "team_id": "T1", "api_app_id": "A1",
            "event_time": 1_700_000_000, "event": inner})
        .to_string()
    };
    let links = event(
        "EvHiddenLinks",
        json!({"type": "link_shared", "channel": "C1", "user": "U1", "message_ts": "1700000000.000600",
            "unfurl_id": m("unfurl"), "source": "conversations_history", "event_ts": "1700000000.000700",
            "links": [{"domain": m("domain"), "url": format!("https://example.com/{MARK}")}]}),
    );
    let file = event(
        "EvHiddenFile",
        json!({"type": "message", "subtype": "file_share", "channel": "C1", "user": "U1", "text": m("text"),
            "ts": "1700000000.000300", "files": [{"id": "F1", "name": m("name"), "title": m("title"),
                "preview": m("preview"), "plain_text": m("plain"), "size": 12}]}),
    );
    let command = form_urlencoded::Serializer::new(String::new())
        .append_pair("token", "XXYYZZ")
        .append_pair("team_id", "T1")
        .append_pair("team_domain", &m("domain"))
        .append_pair("channel_id", "C1")
        .append_pair("channel_name", &m("channel"))
        .append_pair("user_id", "U1")
        .append_pair("user_name", &m("user"))
        .append_pair("command", "/hide")
        .append_pair("text", &m("text"))
        .append_pair("response_url", "https://hooks.slack.com/commands/T1/2/def")
        .append_pair("trigger_id", "TrHidden2")
        .finish();
    [interaction(dialog), interaction(modal), links, file, command].map(String::into_bytes).to_vec()
}

fn show_json(gw: &Gateway, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_slackgate"))
        .args(args)
        .args(["--json", "--config"])
        .arg(&gw.config_path)
        .env("SG_TEST_SECRET", SECRET)
        .env_remove("SLACKGATE_REDIS_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_text_of_the_reproduced_leaks_shows_on_the_page_or_in_show_json() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let gw = Gateway::start(&GatewayConfig::new(&redis.url(), &prefix("hidden"), &bot.url())).await;
    let sent = bodies();
    for body in &sent {
        assert_eq!(send(gw.port, Req::signed("/slack/events", body.clone(), SECRET)).await.0, 200);
    }
    // Every delivery listed, and delivered (its record complete).
    let mut hrefs: Vec<String> = Vec::new();
    let listed = until(Duration::from_secs(15), async || {
        let list = page(gw.admin_port, "/ui/deliveries?status=delivered", "", None).await;
        hrefs =
            list.body.split("href=\"/ui/d/").skip(1).filter_map(|r| r.split('"').next()).map(String::from).collect();
        hrefs.sort();
        hrefs.dedup();
        hrefs.len() == sent.len()
    })
    .await;
    assert!(listed, "listed {hrefs:?}:\n{}", gw.log());
    let list = page(gw.admin_port, "/ui/deliveries", "", None).await;
    assert!(!list.body.contains(MARK), "the list shows text:\n{}", list.body);
    let mut kinds = Vec::new();
    for href in &hrefs {
        let shown = page(gw.admin_port, &format!("/ui/d/{href}"), "", None).await;
        assert_eq!(shown.status, 200, "{href}");
        assert!(!shown.body.contains(MARK) && !shown.body.contains("XXYYZZ"), "{href}:\n{}", shown.body);
        let id = href.rsplit('/').next().unwrap();
        let json = show_json(&gw, &["show", id]);
        assert!(!json.contains(MARK) && !json.contains("XXYYZZ") && !json.contains("hooks.slack.com"), "{json}");
        let body: Value = serde_json::from_str(&json).unwrap();
        kinds.push(body["body"].as_str().unwrap_or_default().to_string());
    }
    // The structure and the ids stay.
    let all = kinds.join("\n");
    for kept in ["dialog_submission", "\"submission\"", "private_metadata", "EvHiddenLinks", "\"preview\"", "/hide"] {
        assert!(all.contains(kept), "{kept} missing:\n{all}");
    }
}
