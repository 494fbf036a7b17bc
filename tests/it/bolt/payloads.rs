//! Slack's payloads as Slack sends them, for the Bolt scenarios.

use serde_json::{json, Value};

/// An `app_mention` Events API envelope as Slack sends it.
pub fn app_mention(event_id: &str, ts: &str, text: &str) -> Vec<u8> {
    json!({
        "token": "verification-token",
        "team_id": "T1",
        "api_app_id": "A1",
        "event": {
            "type": "app_mention",
            "user": "U1",
            "text": text,
            "ts": ts,
            "team": "T1",
            "channel": "C1",
            "event_ts": ts,
            "blocks": []
        },
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1700000000,
        "authorizations": [{
            "enterprise_id": null, "team_id": "T1", "user_id": "UBOT", "is_bot": true, "is_enterprise_install": false
        }],
        "is_ext_shared_channel": false,
        "event_context": "4-eyJldCI6ImFwcF9tZW50aW9uIn0"
    })
    .to_string()
    .into_bytes()
}

/// A slash command as Slack posts it (form-encoded).
pub fn slash_command(command: &str, text: &str, trigger_id: &str) -> Vec<u8> {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("token", "verification-token")
        .append_pair("team_id", "T1")
        .append_pair("team_domain", "example")
        .append_pair("channel_id", "C1")
        .append_pair("channel_name", "general")
        .append_pair("user_id", "U1")
        .append_pair("user_name", "alice")
        .append_pair("command", command)
        .append_pair("text", text)
        .append_pair("api_app_id", "A1")
        .append_pair("is_enterprise_install", "false")
        .append_pair("response_url", "https://hooks.slack.com/commands/T1/1/abc")
        .append_pair("trigger_id", trigger_id)
        .finish()
        .into_bytes()
}

/// An interactive payload as Slack posts it: `payload=<urlencoded JSON>`.
pub fn interaction(payload: Value) -> Vec<u8> {
    form_urlencoded::Serializer::new(String::new()).append_pair("payload", &payload.to_string()).finish().into_bytes()
}

pub fn user() -> Value {
    json!({"id": "U1", "username": "alice", "name": "alice", "team_id": "T1"})
}

pub fn team() -> Value {
    json!({"id": "T1", "domain": "example"})
}

pub fn modal(callback_id: &str) -> Value {
    json!({
        "id": "V1", "team_id": "T1", "type": "modal", "private_metadata": "", "callback_id": callback_id,
        "title": {"type": "plain_text", "text": "Form"},
        "blocks": [{
            "type": "input", "block_id": "field",
            "label": {"type": "plain_text", "text": "Field"},
            "element": {"type": "plain_text_input", "action_id": "input"}
        }],
        "state": {"values": {"field": {"input": {"type": "plain_text_input", "value": "x"}}}},
        "hash": "1700000000.abcdef", "clear_on_close": false, "notify_on_close": false,
        "root_view_id": "V1", "previous_view_id": null, "app_id": "A1", "external_id": "",
        "app_installed_team_id": "T1", "bot_id": "BBOT"
    })
}

pub fn view_submission(trigger_id: &str) -> Vec<u8> {
    interaction(json!({
        "type": "view_submission",
        "team": team(),
        "user": user(),
        "api_app_id": "A1",
        "token": "verification-token",
        "trigger_id": trigger_id,
        "view": modal("form"),
        "response_urls": [],
        "is_enterprise_install": false,
        "enterprise": null
    }))
}

pub fn block_suggestion(value: &str) -> Vec<u8> {
    interaction(json!({
        "type": "block_suggestion",
        "user": user(),
        "container": {"type": "view", "view_id": "V1"},
        "api_app_id": "A1",
        "token": "verification-token",
        "action_id": "picker",
        "block_id": "pick",
        "value": value,
        "team": team(),
        "enterprise": null,
        "is_enterprise_install": false,
        "view": modal("form")
    }))
}

pub fn block_actions(trigger_id: &str) -> Vec<u8> {
    interaction(json!({
        "type": "block_actions",
        "user": user(),
        "api_app_id": "A1",
        "token": "verification-token",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C1", "is_ephemeral": false},
        "trigger_id": trigger_id,
        "team": team(),
        "enterprise": null,
        "is_enterprise_install": false,
        "channel": {"id": "C1", "name": "general"},
        "message": {
            "type": "message", "user": "UBOT", "bot_id": "BBOT", "ts": "1700000000.000100", "text": "Deploy?",
            "blocks": [{"type": "actions", "block_id": "acts", "elements": [{
                "type": "button", "action_id": "button", "text": {"type": "plain_text", "text": "Go"}, "value": "go"
            }]}]
        },
        "state": {"values": {}},
        "response_url": "https://hooks.slack.com/actions/T1/1/abc",
        "actions": [{
            "action_id": "button", "block_id": "acts", "type": "button", "value": "go",
            "text": {"type": "plain_text", "text": "Go", "emoji": true},
            "action_ts": "1700000001.000200"
        }]
    }))
}
