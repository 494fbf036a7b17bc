//! Slack's payloads as Slack sends them, for the hiding tests: the Bolt scenarios' (shared with
//! `tests/it`), and the shapes that once showed text with `show_text` off — a legacy dialog's
//! `submission`, files, unfurled links, a view's `private_metadata` — as Slack's reference
//! pages show them.

use serde_json::{json, Value};

#[path = "../../../tests/it/bolt/payloads.rs"]
mod bolt;

/// Every fixture body: JSON, a slash command's form, or an interactive `payload=` form.
pub fn bodies() -> Vec<(&'static str, String)> {
    let s = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8");
    let mut out = vec![
        ("bolt app_mention", s(bolt::app_mention("Ev1", "1700000000.000100", "<@UBOT> the plan"))),
        ("bolt slash command", s(bolt::slash_command("/ask", "what is the plan", "Tr1"))),
        ("bolt view_submission", s(bolt::view_submission("Tr2"))),
        ("bolt block_suggestion", s(bolt::block_suggestion("partial query"))),
        ("bolt block_actions", s(bolt::block_actions("Tr3"))),
        ("bolt user and team", json!({"user": bolt::user(), "team": bolt::team()}).to_string()),
        ("bolt modal", bolt::modal("form").to_string()),
    ];
    out.extend(events().into_iter().map(|(n, e)| (n, e.to_string())));
    out.extend(interactions().into_iter().map(|(n, p)| (n, s(bolt::interaction(p)))));
    out.push(("command form with names", command()));
    out
}

/// An Events API envelope around `event`.
fn envelope(event: Value) -> Value {
    json!({
        "token": "XXYYZZ", "team_id": "T1", "api_app_id": "A1", "event": event, "type": "event_callback",
        "event_id": "Ev2", "event_time": 1_700_000_000, "event_context": "4-eyJldCI6Im1lc3NhZ2UifQ",
        "authorizations": [{"enterprise_id": "E1", "team_id": "T1", "user_id": "UBOT", "is_bot": true,
            "is_enterprise_install": false}],
        "authed_users": ["UBOT"], "is_ext_shared_channel": false,
        "enterprise": {"id": "E1", "name": "Acme Corp"}
    })
}

fn file() -> Value {
    json!({
        "id": "F1", "created": 1_700_000_000, "timestamp": 1_700_000_000, "name": "layoffs-2026.pdf",
        "title": "Layoffs 2026", "mimetype": "text/plain", "filetype": "text", "pretty_type": "Plain Text",
        "user": "U1", "user_team": "T1", "editable": true, "size": 1234, "mode": "snippet",
        "is_external": false, "external_type": "", "is_public": true, "public_url_shared": false,
        "url_private": "https://files.slack.com/files-pri/T1-F1/layoffs-2026.pdf",
        "url_private_download": "https://files.slack.com/files-pri/T1-F1/download/layoffs-2026.pdf",
        "permalink": "https://acme.slack.com/files/U1/F1/layoffs-2026.pdf",
        "preview": "Names of the people to let go", "preview_highlight": "<div>Names</div>",
        "plain_text": "Alice, Bob", "lines": 2, "lines_more": 0, "has_rich_preview": false,
        "channels": ["C1"], "groups": [], "ims": [], "comments_count": 0,
        "shares": {"public": {"C1": [{"reply_users": ["U2"], "reply_count": 1, "ts": "1700000000.000200",
            "channel_name": "general", "team_id": "T1", "share_user_id": "U1"}]}}
    })
}

/// Every event fixture.
fn events() -> Vec<(&'static str, Value)> {
    let mut all = message_events();
    all.extend(other_events());
    all
}

/// Message events and the file and link events around them.
fn message_events() -> Vec<(&'static str, Value)> {
    let rich = json!([{"type": "rich_text", "block_id": "b1", "elements": [{"type": "rich_text_section",
        "elements": [{"type": "user", "user_id": "UBOT"}, {"type": "text", "text": " the merger is off"},
            {"type": "link", "url": "https://example.com/deal", "text": "deal memo"},
            {"type": "emoji", "name": "shushing_face", "unicode": "1f92b"}]}]}]);
    vec![
        (
            "message with files and attachments",
            envelope(json!({
                "type": "message", "subtype": "file_share", "channel": "C1", "channel_type": "channel", "user": "U1",
                "text": "see attached", "ts": "1700000000.000300", "event_ts": "1700000000.000300",
                "client_msg_id": "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "blocks": rich, "files": [file()],
                "upload": false, "display_as_bot": false,
                "attachments": [{"fallback": "Q3 numbers", "pretext": "FYI", "title": "Quarterly",
                    "title_link": "https://example.com/q3", "text": "revenue down", "footer": "Finance bot",
                    "image_url": "https://example.com/chart.png", "color": "#36a64f", "id": 1,
                    "fields": [{"title": "Margin", "value": "-4%", "short": true}]}],
                "reactions": [{"name": "eyes", "users": ["U2"], "count": 1}],
                "edited": {"user": "U1", "ts": "1700000000.000400"}
            })),
        ),
        (
            "file_shared",
            envelope(json!({"type": "file_shared", "file_id": "F1", "user_id": "U1", "file": {"id": "F1"},
                "channel_id": "C1", "event_ts": "1700000000.000500"})),
        ),
        (
            "link_shared",
            envelope(json!({"type": "link_shared", "channel": "C1", "is_bot_user_member": true, "user": "U1",
                "message_ts": "1700000000.000600", "unfurl_id": "C1.1700000000.000600.abc",
                "thread_ts": "1700000000.000100", "source": "conversations_history", "event_ts": "1700000000.000700",
                "links": [{"domain": "example.com", "url": "https://example.com/secret-report?q=acquisition"}]})),
        ),
        (
            "message_changed",
            envelope(json!({"type": "message", "subtype": "message_changed", "hidden": true, "channel": "C1",
                "ts": "1700000000.000800", "event_ts": "1700000000.000800",
                "message": {"type": "message", "user": "U1", "text": "edited text", "ts": "1700000000.000300",
                    "edited": {"user": "U1", "ts": "1700000000.000800"}, "blocks": rich},
                "previous_message": {"type": "message", "user": "U1", "text": "original text",
                    "ts": "1700000000.000300"}})),
        ),
    ]
}

/// The events that are no message: a home tab, a workflow step, Slack's own handshakes.
fn other_events() -> Vec<(&'static str, Value)> {
    vec![
        (
            "app_home_opened",
            envelope(json!({"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "home",
                "event_ts": "1700000000.000900", "view": {"id": "V2", "team_id": "T1", "type": "home",
                    "private_metadata": "{\"account\":\"ACME-42\"}", "callback_id": "home",
                    "external_id": "customer-acme", "hash": "1700000000.abc", "app_id": "A1", "bot_id": "B1",
                    "title": {"type": "plain_text", "text": "Home"}, "blocks": [], "state": {"values": {}}}})),
        ),
        (
            "function_executed",
            envelope(json!({"type": "function_executed", "function_execution_id": "Fx1",
                "workflow_execution_id": "Wx1", "event_ts": "1700000001.000100",
                "bot_access_token": "xwfp-1-abcdef",
                "function": {"id": "Fn1", "callback_id": "send_note", "title": "Send a note",
                    "description": "Sends a note", "type": "app", "app_id": "A1", "date_created": 1_700_000_000,
                    "input_parameters": [{"type": "slack#/types/user_id", "name": "user_id",
                        "description": "Who gets it", "title": "User", "is_required": true}]},
                "inputs": {"user_id": "U1", "note": "you are fired"}})),
        ),
        (
            "url_verification",
            json!({"token": "XXYYZZ", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
                "type": "url_verification"}),
        ),
        (
            "app_rate_limited",
            json!({"token": "XXYYZZ", "type": "app_rate_limited", "team_id": "T1",
                "minute_rate_limited": 1_518_467_820, "api_app_id": "A1"}),
        ),
    ]
}

fn user() -> Value {
    json!({"id": "U1", "username": "alice", "name": "alice", "team_id": "T1"})
}

/// A modal's `state` after a submission: one input of each kind.
fn submitted() -> Value {
    let option = |text: &str, value: &str| json!({"text": {"type": "plain_text", "text": text}, "value": value});
    let rich = json!({"type": "rich_text", "elements": [{"type": "rich_text_section",
        "elements": [{"type": "text", "text": "more detail"}]}]});
    json!({"values": {
        "what": {"in": {"type": "plain_text_input", "value": "my manager shouted"}},
        "when": {"date": {"type": "datepicker", "selected_date": "2026-11-30"}},
        "who": {"pick": {"type": "users_select", "selected_user": "U9"}},
        "how": {"sel": {"type": "static_select", "selected_option": option("In person", "in_person")}},
        "tags": {"multi": {"type": "multi_static_select", "selected_options": [option("Urgent", "urgent")]}},
        "notes": {"rich": {"type": "rich_text_input", "rich_text_value": rich}}
    }})
}

fn team() -> Value {
    json!({"id": "T1", "domain": "acme", "enterprise_id": "E1", "enterprise_name": "Acme Corp"})
}

/// Every interaction fixture.
fn interactions() -> Vec<(&'static str, Value)> {
    let mut all = submissions();
    all.extend(actions());
    all
}

/// Dialogs and modals submitted or closed.
fn submissions() -> Vec<(&'static str, Value)> {
    let team = team();
    vec![
        (
            "dialog_submission",
            json!({"type": "dialog_submission", "token": "XXYYZZ", "action_ts": "1700000002.000100",
                "team": team, "user": {"id": "U1", "name": "alice"}, "channel": {"id": "C1", "name": "hr-private"},
                "submission": {"name": "Sigourney Dreamweaver", "email": "sigdre@example.com",
                    "phone": "+1 800-555-1212", "comment": "No sour cream please", "team_channel": "C0LFFBKPB"},
                "callback_id": "employee_offsite", "state": "Limo",
                "response_url": "https://hooks.slack.com/app/T1/1/JpmK0yzoZDeRiqfeduTBYXWQ"}),
        ),
        (
            "view_submission with inputs",
            json!({"type": "view_submission", "team": team, "user": user(), "api_app_id": "A1",
                "token": "XXYYZZ", "trigger_id": "Tr4", "is_enterprise_install": false, "enterprise": null,
                "view": {"id": "V3", "team_id": "T1", "type": "modal", "callback_id": "report",
                    "private_metadata": "{\"case\":\"harassment-17\"}", "external_id": "",
                    "title": {"type": "plain_text", "text": "Report"},
                    "submit": {"type": "plain_text", "text": "Send"}, "hash": "1700000000.def",
                    "root_view_id": "V3", "previous_view_id": null, "app_id": "A1", "bot_id": "B1",
                    "blocks": [{"type": "input", "block_id": "what",
                        "label": {"type": "plain_text", "text": "What happened"},
                        "element": {"type": "plain_text_input", "action_id": "in",
                            "placeholder": {"type": "plain_text", "text": "Tell us"}}}],
                    "state": submitted()},
                "response_urls": [{"block_id": "ch", "action_id": "c", "channel_id": "C1",
                    "response_url": "https://hooks.slack.com/app/T1/2/abc"}]}),
        ),
        (
            "view_closed",
            json!({"type": "view_closed", "team": team, "user": user(), "api_app_id": "A1", "token": "XXYYZZ",
                "is_cleared": false, "view": {"id": "V3", "type": "modal", "callback_id": "report",
                    "private_metadata": "draft: my manager", "hash": "1700000000.def"}}),
        ),
    ]
}

/// Shortcuts, actions and suggestions.
fn actions() -> Vec<(&'static str, Value)> {
    let team = team();
    vec![
        (
            "global shortcut",
            json!({"type": "shortcut", "token": "XXYYZZ", "action_ts": "1700000003.000100", "team": team,
                "user": user(), "is_enterprise_install": false, "enterprise": null,
                "callback_id": "new_task", "trigger_id": "Tr5"}),
        ),
        (
            "message shortcut",
            json!({"type": "message_action", "token": "XXYYZZ", "action_ts": "1700000003.000200", "team": team,
                "user": user(), "channel": {"id": "C1", "name": "general"}, "callback_id": "make_ticket",
                "trigger_id": "Tr6", "message_ts": "1700000000.000300",
                "message": {"type": "message", "user": "U2", "ts": "1700000000.000300", "text": "server is down",
                    "client_msg_id": "0f1e2d3c-aaaa-bbbb-cccc-000000000002"},
                "response_url": "https://hooks.slack.com/app/T1/3/def"}),
        ),
        (
            "block_actions with state",
            json!({"type": "block_actions", "token": "XXYYZZ", "trigger_id": "Tr7", "team": team, "user": user(),
                "api_app_id": "A1", "container": {"type": "message", "message_ts": "1700000000.000300",
                    "channel_id": "C1", "is_ephemeral": false},
                "channel": {"id": "C1", "name": "general"},
                "state": {"values": {"b": {"sel": {"type": "static_select",
                    "selected_option": {"text": {"type": "plain_text", "text": "Fire Bob"}, "value": "fire_bob"}}}}},
                "actions": [{"type": "overflow", "action_id": "more", "block_id": "b2", "action_ts": "1700000004.1",
                    "selected_option": {"text": {"type": "plain_text", "text": "Delete"}, "value": "delete"}}],
                "response_url": "https://hooks.slack.com/actions/T1/4/ghi"}),
        ),
        (
            "legacy interactive_message",
            json!({"type": "interactive_message", "actions": [{"name": "game", "type": "button", "value": "chess"}],
                "callback_id": "wopr_game", "team": team, "channel": {"id": "C1", "name": "games"},
                "user": {"id": "U1", "name": "alice"}, "action_ts": "1700000005.1", "message_ts": "1700000000.000300",
                "attachment_id": "1", "token": "XXYYZZ", "is_app_unfurl": false,
                "original_message": {"text": "Would you like to play a game?", "attachments": [
                    {"callback_id": "wopr_game", "fallback": "You are unable to choose a game", "id": 1,
                        "actions": [{"id": "1", "name": "game", "text": "Chess", "type": "button", "value": "chess"}]}]},
                "response_url": "https://hooks.slack.com/actions/T1/5/jkl", "trigger_id": "Tr8"}),
        ),
        (
            "dialog_suggestion",
            json!({"type": "dialog_suggestion", "token": "XXYYZZ", "action_ts": "1700000006.1", "team": team,
                "user": {"id": "U1", "name": "alice"}, "channel": {"id": "C1", "name": "general"},
                "name": "external_id", "value": "acquisition target", "callback_id": "bugs"}),
        ),
    ]
}

/// A slash command as Slack posts it, with the names that count as text.
fn command() -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("token", "XXYYZZ")
        .append_pair("team_id", "T1")
        .append_pair("team_domain", "acme")
        .append_pair("enterprise_id", "E1")
        .append_pair("enterprise_name", "Acme Corp")
        .append_pair("channel_id", "C1")
        .append_pair("channel_name", "hr-private")
        .append_pair("user_id", "U1")
        .append_pair("user_name", "alice")
        .append_pair("command", "/report")
        .append_pair("text", "bob xoxb-looks-like-a-token")
        .append_pair("api_app_id", "A1")
        .append_pair("is_enterprise_install", "false")
        .append_pair("response_url", "https://hooks.slack.com/commands/T1/6/mno")
        .append_pair("trigger_id", "Tr9")
        .finish()
}
