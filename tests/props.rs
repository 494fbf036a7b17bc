//! Property tests of the pure Slack rules: the fuzz targets' properties (fuzz/src/checks.rs,
//! included here) on proptest's inputs, so that `cargo test` runs them as a smoke on every
//! build (256 cases each by default; `PROPTEST_CASES=100000 cargo test --test props` for more).
//! The coverage-guided runs are `cargo fuzz` (see BENCHMARKS.md, "Fuzzing", and scripts/fuzz-smoke).

#[path = "../fuzz/src/checks.rs"]
mod checks;

use checks::{EventFields, PayloadFields, FORM, JSON};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use slackgate::slack::Message;

/// Short strings mixing the characters that matter: separators, whitespace, JSON and form
/// metacharacters, non-ASCII.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9.]{0,12}",
        2 => "[ :%&=+{}\"\\\\\t\n\u{0}a-c0-2é€]{0,12}",
        1 => any::<String>(),
    ]
}

/// Bytes that are sometimes a timestamp, a signature or neither.
fn header() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop::option::weighted(
        0.9,
        prop_oneof![
            "[0-9]{1,13}".prop_map(String::into_bytes),
            "v0=[0-9a-fA-F]{60,66}".prop_map(String::into_bytes),
            vec(any::<u8>(), 0..80),
        ],
    )
}

/// A JSON body of Slack's shapes, or not JSON at all.
fn json_body() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        Just("event_callback"),
        Just("url_verification"),
        Just("app_rate_limited"),
        Just("block_actions"),
        Just(""),
    ];
    let event_type = prop_oneof![Just("message"), Just("app_mention"), Just("reaction_added")];
    let subtype = prop::option::of(prop_oneof![
        Just("message_changed".to_string()),
        Just("message_deleted".to_string()),
        Just("bot_message".to_string()),
        text(),
    ]);
    (kind, event_type, subtype, prop::option::of(text()), text(), text(), text(), any::<bool>()).prop_map(
        |(kind, event_type, subtype, event_id, channel, ts, user, is_bot)| {
            let event = serde_json::json!({
                "type": event_type, "subtype": subtype, "channel": channel, "ts": ts, "deleted_ts": ts,
                "user": user, "text": format!("<@{user}>"), "item": {"channel": channel},
                "message": {"ts": ts, "user": user}, "previous_message": {"ts": ts},
            });
            let env = serde_json::json!({
                "type": kind, "event_id": event_id, "challenge": ts, "team_id": "T1", "event": event,
                "authorizations": [{"user_id": user, "is_bot": is_bot}],
            });
            serde_json::to_vec(&env).expect("serialises")
        },
    )
}

fn content_type() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(JSON.to_vec()),
        Just(FORM.to_vec()),
        Just(Vec::new()),
        Just(b"Application/JSON; charset=utf-8".to_vec()),
        vec(any::<u8>(), 0..24),
    ]
}

fn form_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("command".to_string()),
        Just("channel_id".to_string()),
        Just("response_url".to_string()),
        Just("payload".to_string()),
        Just("trigger_id".to_string()),
        Just("ssl_check".to_string()),
        text(),
    ]
}

fn form_value() -> impl Strategy<Value = String> {
    prop_oneof![Just("1".to_string()), Just(String::new()), Just("{}".to_string()), text(), "[ -~]{120,140}"]
}

fn payload() -> impl Strategy<Value = PayloadFields> {
    let field = || prop::option::of(text());
    (field(), field(), field(), field()).prop_map(|(kind, trigger_id, response_url, channel_id)| PayloadFields {
        kind,
        trigger_id,
        response_url,
        channel_id,
    })
}

fn subtype() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("message_changed".to_string())),
        Just(Some("message_deleted".to_string())),
        Just(Some("bot_message".to_string())),
        text().prop_map(Some),
    ]
}

proptest! {
    #[test]
    fn verify_arbitrary_headers(
        secret in text(),
        ts in header(),
        sig in header(),
        body in vec(any::<u8>(), 0..64),
        now in 0..=i64::MAX,
        skew in -400i64..=400,
    ) {
        checks::verify_headers(&secret, ts.as_deref(), sig.as_deref(), &body, now);
        // Near the timestamp the header carries, so that the signature check is reached.
        let parsed = ts.as_deref().and_then(|t| std::str::from_utf8(t).ok()).and_then(|t| t.parse::<i64>().ok());
        if let Some(t) = parsed.filter(|t| (0..1_000_000_000_000).contains(t)) {
            checks::verify_headers(&secret, ts.as_deref(), sig.as_deref(), &body, (t + skew).max(0));
        }
    }

    #[test]
    fn verify_signed_body(
        secret in text(),
        other in prop_oneof![text(), Just(String::new()), Just("\0".to_string())],
        t in 0i64..1_000_000_000_000,
        body in vec(any::<u8>(), 0..256),
        skew in -300i64..=300,
        flip_at in any::<usize>(),
        flip_mask in 1u8..=255,
    ) {
        checks::verify_signed(&secret, &other, t, &body, skew, flip_at, flip_mask);
    }

    #[test]
    fn classify_arbitrary_bytes(ct in content_type(), body in vec(any::<u8>(), 0..256)) {
        checks::classify_any(&ct, &body);
    }

    #[test]
    fn classify_slack_shaped_json(ct in content_type(), body in json_body()) {
        checks::classify_any(&ct, &body);
    }

    #[test]
    fn classify_mutated_json(body in json_body(), at in any::<Index>(), byte in any::<u8>()) {
        let mut body = body;
        let i = at.index(body.len());
        body[i] = byte;
        checks::classify_any(JSON, &body);
        checks::classify_any(b"", &body);
    }

    #[test]
    fn keys_of_arbitrary_messages(
        team in text(),
        channel in text(),
        ts in text(),
        edit_ts in prop::option::of(text()),
        subtype in subtype(),
        user in prop::option::of(text()),
        bot_id in prop::option::of(text()),
        flags in any::<(bool, bool)>(),
    ) {
        let m = Message {
            team,
            channel,
            ts,
            edit_ts,
            thread_ts: None,
            direct: flags.0 && flags.1,
            subtype,
            user,
            bot_id,
            mentions_bot: flags.0,
            previously_mentioned_bot: flags.1,
        };
        checks::message_keys(&m);
    }

    #[test]
    fn keys_of_json_events(
        team in text(),
        channel in text(),
        ts in text(),
        edit_ts in text(),
        user in text(),
        bot_user in text(),
        mention in any::<bool>(),
        bot_id in prop::option::of(text()),
        subtype in subtype(),
    ) {
        checks::event_keys(&EventFields { team, channel, ts, edit_ts, user, bot_user, mention, bot_id, subtype });
    }

    #[test]
    fn form_arbitrary_bytes(body in vec(any::<u8>(), 0..256)) {
        checks::form_bytes(&body);
    }

    #[test]
    fn form_round_trip(pairs in vec((form_name(), form_value()), 0..8), payload in prop::option::of(payload())) {
        checks::form_pairs(&pairs, payload.as_ref());
    }
}

/// The inputs that the fuzz runs turned up (BENCHMARKS.md, "Fuzzing", "Findings"), kept as plain cases.
#[test]
fn fuzz_found_cases() {
    // Secrets that differ only by trailing NUL bytes are one HMAC key: the signed-body
    // property accounts for it.
    checks::verify_signed("", "\0", 379_692_931_326, &[2, 0, 132], 0, 0, 1);
    // Message keys repeat their ids as given (whitespace and `:` included); the key properties
    // are stated for ids without them.
    let m = |team: &str, ts: &str| Message { team: team.into(), ts: ts.into(), ..Message::default() };
    for message in [m("\n", ""), m("", ":"), m(":", "")] {
        checks::message_keys(&message);
    }
}
