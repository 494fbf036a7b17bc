use super::*;

const JSON: &[u8] = b"application/json";
const FORM: &[u8] = b"application/x-www-form-urlencoded";

fn sha_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

fn delivery(result: Result<Request, ClassifyError>) -> Delivery {
    match result {
        Ok(Request::Delivery(d)) => d,
        other => panic!("expected a delivery, got {other:?}"),
    }
}

fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish().into_bytes()
}

/// A receipt made of a tag, `:` and the id as is.
fn assert_raw_receipt(receipt: &Option<String>, tag: char, id: &str) {
    assert_eq!(receipt.as_deref(), Some(format!("{tag}:{id}").as_str()));
}

/// A receipt made of a tag, `#` and the sha256 hex of the id.
fn assert_hashed_id(receipt: &Option<String>, tag: char, id: &str) {
    assert_eq!(receipt.as_deref(), Some(format!("{tag}#{}", sha_hex(id.as_bytes())).as_str()));
}

fn assert_body_hash(receipt: &Option<String>, body: &[u8]) {
    assert_eq!(receipt.as_deref(), Some(format!("h:{}", sha_hex(body)).as_str()));
}

// ---------------------------------------------------------------- JSON (Events API)

#[test]
fn url_verification_returns_the_challenge() {
    let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    assert_eq!(
        classify(JSON, body),
        Ok(Request::UrlVerification { challenge: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into() })
    );
}

#[test]
fn url_verification_without_challenge_gives_empty_challenge() {
    assert_eq!(
        classify(JSON, br#"{"type":"url_verification"}"#),
        Ok(Request::UrlVerification { challenge: String::new() })
    );
}

#[test]
fn event_callback_receipt_is_event_id_and_detail_is_inner_type() {
    let body = br#"{
        "token": "z",
        "team_id": "T123",
        "api_app_id": "A123",
        "event": {"type": "app_mention", "user": "U1", "text": "<@U0> hi", "ts": "1515449522.000016", "channel": "C1"},
        "type": "event_callback",
        "event_id": "Ev08MFMKH6",
        "event_time": 1234567890
    }"#;
    let d = delivery(classify(JSON, body));
    assert_eq!(d.kind, Kind::Event);
    assert_raw_receipt(&d.receipt, 'e', "Ev08MFMKH6");
    assert_eq!(d.detail, "app_mention");
}

#[test]
fn event_callback_retries_share_a_receipt() {
    let first = br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"message"},"event_time":1}"#;
    let retry = br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"message"},"event_time":1, "x":2}"#;
    assert_eq!(delivery(classify(JSON, first)).receipt, delivery(classify(JSON, retry)).receipt);
}

#[test]
fn event_callback_without_event_id_falls_back_to_body_hash() {
    let body = br#"{"type":"event_callback","event":{"type":"message"}}"#;
    let d = delivery(classify(JSON, body));
    assert_eq!(d.kind, Kind::Event);
    assert_body_hash(&d.receipt, body);
    assert_eq!(d.detail, "message");

    let body = br#"{"type":"event_callback","event_id":"","event":{"type":"message"}}"#;
    assert_body_hash(&delivery(classify(JSON, body)).receipt, body);
}

#[test]
fn event_callback_without_inner_event_has_empty_detail() {
    let d = delivery(classify(JSON, br#"{"type":"event_callback","event_id":"Ev2"}"#));
    assert_eq!(d.kind, Kind::Event);
    assert_eq!(d.detail, "");
    assert_raw_receipt(&d.receipt, 'e', "Ev2");
}

#[test]
fn event_callback_with_escaped_strings() {
    let body = br#"{"type":"event_callback","event_id":"Ev\u0031","event":{"type":"mess\u0061ge"}}"#;
    let d = delivery(classify(JSON, body));
    assert_raw_receipt(&d.receipt, 'e', "Ev1");
    assert_eq!(d.detail, "message");
}

#[test]
fn long_event_id_is_hashed() {
    let id = "E".repeat(129);
    let body = format!(r#"{{"type":"event_callback","event_id":"{id}","event":{{"type":"message"}}}}"#);
    let d = delivery(classify(JSON, body.as_bytes()));
    assert_hashed_id(&d.receipt, 'e', &id);
    assert!(d.receipt.as_deref().unwrap().starts_with("e#"));
    assert_eq!(d.receipt.as_deref().unwrap().len(), 2 + 64);

    // Exactly the limit is still used as is.
    let id = "E".repeat(128);
    let body = format!(r#"{{"type":"event_callback","event_id":"{id}"}}"#);
    assert_raw_receipt(&delivery(classify(JSON, body.as_bytes())).receipt, 'e', &id);
}

#[test]
fn event_id_with_space_or_non_ascii_is_hashed() {
    for id in ["Ev 1", "Ev\t1", "Év1", "Ev1\n"] {
        let body = serde_json::json!({"type": "event_callback", "event_id": id}).to_string();
        let d = delivery(classify(JSON, body.as_bytes()));
        assert_hashed_id(&d.receipt, 'e', id);
    }
}

#[test]
fn app_rate_limited_is_rate_limited() {
    let body =
        br#"{"token":"x","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820,"api_app_id":"A1"}"#;
    assert_eq!(classify(JSON, body), Ok(Request::RateLimited));
}

#[test]
fn unknown_json_type_is_opaque_with_body_hash() {
    let body = br#"{"type":"something_new","event_id":"Ev9","data":[1,2,{"a":null}]}"#;
    let d = delivery(classify(JSON, body));
    assert_eq!(d.kind, Kind::Opaque);
    assert_body_hash(&d.receipt, body);
    assert_eq!(d.detail, "something_new");
}

#[test]
fn json_object_without_type_is_opaque() {
    let body = br#"{"hello":"world"}"#;
    let d = delivery(classify(JSON, body));
    assert_eq!(d.kind, Kind::Opaque);
    assert_eq!(d.detail, "");
    assert_body_hash(&d.receipt, body);

    let d = delivery(classify(JSON, b"{}"));
    assert_eq!(d.kind, Kind::Opaque);
}

#[test]
fn json_non_objects_are_refused() {
    for body in [
        &b"[]"[..],
        b"[1,2]",
        br#"["type","event_callback"]"#,
        br#""event_callback""#,
        b"42",
        b"-1.5e3",
        b"true",
        b"null",
        b"  [ ]",
    ] {
        assert_eq!(classify(JSON, body), Err(ClassifyError::NotObject), "body {:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn invalid_json_is_bad_json() {
    for body in [&b"{"[..], b"{\"type\":", b"{\"type\":\"event_callback\",}", b"{'a':1}", b"{} trailing", b"{\"a\":1}}"]
    {
        assert_eq!(classify(JSON, body), Err(ClassifyError::BadJson), "body {:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn empty_body_is_refused() {
    assert_eq!(classify(JSON, b""), Err(ClassifyError::NotObject));
    assert_eq!(classify(FORM, b""), Err(ClassifyError::UnknownForm));
    assert_eq!(classify(b"", b""), Err(ClassifyError::UnknownForm));
}

#[test]
fn deeply_nested_json_does_not_overflow_the_stack() {
    const DEPTH: usize = 100_000;
    let open = "[".repeat(DEPTH);
    let close = "]".repeat(DEPTH);

    // Unclosed, in an ignored field and in fields we do read.
    for field in ["x", "event", "type", "event_id", "challenge", "trigger_id"] {
        let body = format!(r#"{{"{field}":{open}"#);
        assert!(classify(JSON, body.as_bytes()).is_err(), "field {field}");
    }
    let body = format!(r#"{{"event":{}"#, r#"{"a":"#.repeat(DEPTH));
    assert!(classify(JSON, body.as_bytes()).is_err());

    // Balanced: whichever answer, no crash; an answer must be an opaque delivery.
    for field in ["x", "event"] {
        let body = format!(r#"{{"{field}":{open}{close}}}"#);
        match classify(JSON, body.as_bytes()) {
            Err(_) => {}
            Ok(Request::Delivery(d)) => assert_eq!(d.kind, Kind::Opaque),
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }

    // A top-level array is not an object, however deep.
    assert_eq!(classify(JSON, open.as_bytes()), Err(ClassifyError::NotObject));

    // The same inside an interactivity payload.
    let payload = format!(r#"{{"type":"block_actions","x":{open}"#);
    assert_eq!(classify(FORM, &form(&[("payload", &payload)])), Err(ClassifyError::BadPayload));
}

// ---------------------------------------------------------------- forms (commands, interactivity)

#[test]
fn slash_command_receipt_is_trigger_id() {
    let body = form(&[
        ("token", "x"),
        ("team_id", "T1"),
        ("channel_id", "C1"),
        ("user_id", "U1"),
        ("command", "/weather"),
        ("text", "94070"),
        ("response_url", "https://hooks.slack.com/commands/1234/5678"),
        ("trigger_id", "13345224609.738474920.8088930838d88f008e0"),
    ]);
    let d = delivery(classify(FORM, &body));
    assert_eq!(d.kind, Kind::Command);
    assert_raw_receipt(&d.receipt, 't', "13345224609.738474920.8088930838d88f008e0");
    assert_eq!(d.detail, "/weather");
}

#[test]
fn slash_command_without_trigger_id_has_no_receipt() {
    // The same command typed twice is two commands: never deduplicated by its body.
    let body = form(&[("command", "/deploy"), ("text", "prod")]);
    let d = delivery(classify(FORM, &body));
    assert_eq!(d.kind, Kind::Command);
    assert_eq!(d.receipt, None);
    assert_eq!(d.detail, "/deploy");
    // An empty trigger_id counts as none.
    let body = form(&[("command", "/deploy"), ("trigger_id", "")]);
    assert_eq!(delivery(classify(FORM, &body)).receipt, None);
}

#[test]
fn slash_command_with_long_trigger_id_is_hashed() {
    let trigger = "1".repeat(200);
    let d = delivery(classify(FORM, &form(&[("command", "/x"), ("trigger_id", &trigger)])));
    assert_hashed_id(&d.receipt, 't', &trigger);
}

#[test]
fn command_wins_over_payload() {
    let body = form(&[("payload", r#"{"type":"block_actions"}"#), ("command", "/x"), ("trigger_id", "T1")]);
    let d = delivery(classify(FORM, &body));
    assert_eq!(d.kind, Kind::Command);
    assert_raw_receipt(&d.receipt, 't', "T1");
}

#[test]
fn ssl_check_is_answered() {
    assert_eq!(classify(FORM, &form(&[("ssl_check", "1"), ("token", "x")])), Ok(Request::SslCheck));
    // Even alongside a command.
    assert_eq!(classify(FORM, &form(&[("command", "/x"), ("ssl_check", "1")])), Ok(Request::SslCheck));
    // ssl_check=0 is not a check.
    assert_eq!(classify(FORM, &form(&[("ssl_check", "0")])), Err(ClassifyError::UnknownForm));
}

#[test]
fn block_actions_receipt_is_trigger_id() {
    let payload = r#"{"type":"block_actions","user":{"id":"U1"},"trigger_id":"12466734323.1395872398","actions":[{"action_id":"a","value":"v"}],"response_url":"https://hooks.slack.com/actions/x"}"#;
    let d = delivery(classify(FORM, &form(&[("payload", payload)])));
    assert_eq!(d.kind, Kind::Interactivity);
    assert_raw_receipt(&d.receipt, 't', "12466734323.1395872398");
    assert_eq!(d.detail, "block_actions");
}

#[test]
fn view_submission_receipt_is_trigger_id() {
    let payload = r#"{"type":"view_submission","team":{"id":"T1"},"user":{"id":"U1"},"view":{"id":"V1","state":{"values":{}}},"trigger_id":"1.2.abc"}"#;
    let d = delivery(classify(FORM, &form(&[("payload", payload)])));
    assert_eq!(d.kind, Kind::Interactivity);
    assert_raw_receipt(&d.receipt, 't', "1.2.abc");
    assert_eq!(d.detail, "view_submission");
}

#[test]
fn block_suggestion_without_trigger_id_has_no_receipt() {
    // The same query typed twice wants its options twice.
    let body = form(&[("payload", r#"{"type":"block_suggestion","action_id":"a","value":"que"}"#)]);
    let d = delivery(classify(FORM, &body));
    assert_eq!(d.kind, Kind::Interactivity);
    assert_eq!(d.receipt, None);
    assert_eq!(d.detail, "block_suggestion");
}

#[test]
fn interactivity_payload_without_type_has_empty_detail() {
    let d = delivery(classify(FORM, &form(&[("payload", r#"{"trigger_id":"T9"}"#)])));
    assert_eq!(d.kind, Kind::Interactivity);
    assert_eq!(d.detail, "");
    assert_raw_receipt(&d.receipt, 't', "T9");
}

#[test]
fn form_without_command_or_payload_is_unknown() {
    assert_eq!(classify(FORM, &form(&[("token", "x"), ("text", "hi")])), Err(ClassifyError::UnknownForm));
    assert_eq!(classify(FORM, b"&&&==&"), Err(ClassifyError::UnknownForm));
}

#[test]
fn payload_that_is_not_a_json_object_is_bad_payload() {
    for payload in
        ["not json", "{", r#"{"type":}"#, "[]", r#"[{"type":"block_actions"}]"#, r#""block_actions""#, "7", "", "null"]
    {
        assert_eq!(
            classify(FORM, &form(&[("payload", payload)])),
            Err(ClassifyError::BadPayload),
            "payload {payload:?}"
        );
    }
}

// ---------------------------------------------------------------- content type

#[test]
fn content_type_is_case_insensitive_and_may_carry_parameters() {
    let body = br#"{"type":"app_rate_limited"}"#;
    assert_eq!(classify(b"Application/JSON; charset=utf-8", body), Ok(Request::RateLimited));
    let body = form(&[("ssl_check", "1")]);
    assert_eq!(classify(b"APPLICATION/X-WWW-FORM-URLENCODED; charset=utf-8", &body), Ok(Request::SslCheck));
}

#[test]
fn declared_content_type_beats_sniffing() {
    // JSON declared, form body: not an object.
    assert_eq!(classify(JSON, &form(&[("ssl_check", "1")])), Err(ClassifyError::NotObject));
    // Form declared, JSON body: no command or payload.
    assert_eq!(classify(FORM, br#"{"type":"app_rate_limited"}"#), Err(ClassifyError::UnknownForm));
}

#[test]
fn content_type_is_sniffed_when_missing_or_unknown() {
    for ct in [&b""[..], b"text/plain", b"application/octet-stream"] {
        assert_eq!(classify(ct, br#"{"type":"app_rate_limited"}"#), Ok(Request::RateLimited));
        assert_eq!(classify(ct, b" \r\n\t{\"type\":\"app_rate_limited\"}"), Ok(Request::RateLimited));
        assert_eq!(classify(ct, &form(&[("ssl_check", "1")])), Ok(Request::SslCheck));
        let d = delivery(classify(ct, &form(&[("command", "/x"), ("trigger_id", "T1")])));
        assert_eq!(d.kind, Kind::Command);
        // A JSON array is not sniffed as JSON; as a form it has no command.
        assert_eq!(classify(ct, b"[1]"), Err(ClassifyError::UnknownForm));
    }
}

// ---------------------------------------------------------------- kinds

#[test]
fn kind_round_trips_through_its_name() {
    for k in [Kind::Event, Kind::Command, Kind::Interactivity, Kind::Opaque] {
        assert_eq!(Kind::parse(k.as_str()), k);
    }
    assert_eq!(Kind::parse("nonsense"), Kind::Opaque);
    assert_eq!(Kind::parse(""), Kind::Opaque);
}

#[test]
fn receipt_prefixes_do_not_collide() {
    let same = "X1";
    let e = delivery(classify(JSON, br#"{"type":"event_callback","event_id":"X1"}"#)).receipt.unwrap();
    let t = delivery(classify(FORM, &form(&[("command", "/x"), ("trigger_id", same)]))).receipt.unwrap();
    assert_ne!(e, t);
    assert!(e.starts_with("e:") && t.starts_with("t:"));
}

mod oracle;
mod robustness;

#[test]
fn each_event_place_names_its_key() {
    let places = [
        (ev::TYPE, "type"),
        (ev::CHANNEL, "channel"),
        (ev::ITEM, "item"),
        (ev::USER, "user"),
        (ev::TEAM, "team"),
        (ev::SUBTYPE, "subtype"),
        (ev::TEXT, "text"),
        (ev::CHANNEL_TYPE, "channel_type"),
        (ev::TS, "ts"),
        (ev::THREAD_TS, "thread_ts"),
        (ev::BOT_ID, "bot_id"),
        (ev::DELETED_TS, "deleted_ts"),
        (ev::MESSAGE, "message"),
        (ev::PREVIOUS_MESSAGE, "previous_message"),
        (ev::ASSISTANT_THREAD, "assistant_thread"),
    ];
    assert_eq!(places.len(), EVENT_KEYS.len());
    for (i, key) in places {
        assert_eq!(EVENT_KEYS[i], key);
    }
}
