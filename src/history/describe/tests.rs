use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Map, Value};

use super::fixtures::bodies;
use super::*;

/// What the tests put in place of every string that must not show: unique, and made of
/// characters no fixture's shown string has.
const MARK: &str = "HIDE§";
const SECRETS: &[&str] = &["token", "response_url", "response_urls"];
const ODD_STRINGS: &[&str] = &["true", "false", "xoxb-1-2", "xapp-1-A1", "https://hooks.slack.com/z"];

/// The oracle: a string shown without `show_text` is one under a key of the allow-list, or an
/// `is_…` flag a form writes as a string.
fn allowed(key: Option<&str>, value: &str) -> bool {
    key.is_some_and(|k| SAFE_KEYS.contains(&k) || (k.starts_with("is_") && matches!(value, "true" | "false")))
}

/// Every string of `v` (under `key`) that the allow-list does not name replaced by a unique
/// marker.
/// Never-shown values are left as they are (the secret assertions watch them).
fn mark(v: &mut Value, key: Option<&str>, n: &mut usize) {
    if key.is_some_and(|k| SECRETS.contains(&k)) {
        return;
    }
    match v {
        Value::Object(map) => map.iter_mut().for_each(|(k, v)| mark(v, Some(k), n)),
        Value::Array(items) => items.iter_mut().for_each(|i| mark(i, key, n)),
        Value::String(s) if !allowed(key, s) => {
            *n += 1;
            *s = format!("{MARK}{n}§");
        }
        _ => {}
    }
}

/// A body parsed as the tests see it: JSON, or a form's fields in order (a `payload` parsed).
enum Body {
    Json(Value),
    Form(Vec<(String, Value)>),
}

impl Body {
    fn parse(text: &str) -> Body {
        if let Ok(v) = serde_json::from_str(text) {
            return Body::Json(v);
        }
        let field = |(k, v): (std::borrow::Cow<str>, std::borrow::Cow<str>)| {
            let v = match &*k {
                "payload" => serde_json::from_str(&v).expect("a JSON payload"),
                _ => Value::from(v.into_owned()),
            };
            (k.into_owned(), v)
        };
        Body::Form(form_urlencoded::parse(text.as_bytes()).map(field).collect())
    }

    fn mark(&mut self) -> usize {
        let mut n = 0;
        match self {
            Body::Json(v) => mark(v, None, &mut n),
            Body::Form(fields) => {
                fields.iter_mut().for_each(|(k, v)| mark(v, (k != "payload").then_some(k.as_str()), &mut n))
            }
        }
        n
    }

    /// The values that objects may get new keys in (a form's fields are one of them).
    fn values(&mut self) -> Vec<&mut Value> {
        match self {
            Body::Json(v) => vec![v],
            Body::Form(fields) => fields.iter_mut().filter(|(k, _)| k == "payload").map(|(_, v)| v).collect(),
        }
    }

    fn text(&self) -> String {
        match self {
            Body::Json(v) => v.to_string(),
            Body::Form(fields) => {
                let mut out = form_urlencoded::Serializer::new(String::new());
                for (k, v) in fields {
                    out.append_pair(k, v.as_str().map_or_else(|| v.to_string(), String::from).as_str());
                }
                out.finish()
            }
        }
    }
}

/// Every object in `v`, as JSON pointers.
fn objects(v: &Value, at: String, out: &mut Vec<String>) {
    let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                objects(v, format!("{at}/{}", escape(k)), out);
            }
            out.push(at);
        }
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| objects(v, format!("{at}/{i}"), out)),
        _ => {}
    }
}

/// Every key of `v`, but those inside a never-shown value.
fn keys_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                if !SECRETS.contains(&k.as_str()) {
                    keys_of(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| keys_of(v, out)),
        _ => {}
    }
}

fn object_at<'a>(v: &'a mut Value, pointer: &str) -> &'a mut Map<String, Value> {
    v.pointer_mut(pointer).and_then(Value::as_object_mut).expect("an object")
}

#[test]
fn no_string_outside_the_allow_list_shows_in_any_fixture() {
    let mut with_text = 0;
    for (name, text) in bodies() {
        let mut body = Body::parse(&text);
        let marked = body.mark();
        let text = body.text();
        let hidden = redact(&text, false);
        assert!(!hidden.contains(MARK), "{name}: text shows with show_text off:\n{hidden}");
        if marked > 0 {
            assert!(redact(&text, true).contains(MARK), "{name}: text hidden with show_text on");
            with_text += 1;
        }
    }
    assert!(with_text >= 20, "only {with_text} fixtures with text");
}

/// The leaks issue 32 reproduced, and what stays: ids, types, timestamps, flags, structure.
#[test]
fn the_reproduced_leaks_are_hidden_and_ids_stay() {
    let all: Vec<(&str, String)> = bodies().into_iter().map(|(n, b)| (n, redact(&b, false))).collect();
    let shown = |name: &str| &all.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no {name}")).1;
    let dialog = shown("dialog_submission");
    assert!(!dialog.contains("Sigourney") && !dialog.contains("sigdre@") && !dialog.contains("hr-private"), "{dialog}");
    assert!(dialog.contains("\"email\"") && dialog.contains("\"employee_offsite\""), "{dialog}");
    let files = shown("message with files and attachments");
    for text in ["layoffs", "Names of the people", "Alice, Bob", "see attached", "merger", "Q3", "shushing"] {
        assert!(!files.contains(text), "{text}: {files}");
    }
    assert!(files.contains("\"F1\"") && files.contains("\"file_share\"") && files.contains("1234"), "{files}");
    assert!(files.contains("\"is_public\": true") && files.contains("\"Ev2\""), "{files}");
    let links = shown("link_shared");
    assert!(!links.contains("example.com") && links.contains("\"1700000000.000600\""), "{links}");
    let view = shown("view_submission with inputs");
    for text in ["harassment", "shouted", "2026-11-30", "In person", "more detail", "hooks.slack.com"] {
        assert!(!view.contains(text), "{text}: {view}");
    }
    assert!(view.contains("\"V3\"") && view.contains("\"1700000000.def\"") && view.contains("\"Tr4\""), "{view}");
    let command = shown("command form with names");
    for text in ["acme", "Acme Corp", "hr-private", "alice", "bob", "XXYYZZ", "hooks.slack.com"] {
        assert!(!command.contains(text), "{text}: {command}");
    }
    assert!(command.contains("\"/report\"") && command.contains("\"U1\"") && command.contains("\"false\""));
}

#[test]
fn the_allow_list_is_short_and_names_no_text() {
    assert!(SAFE_KEYS.len() <= 40, "{} keys", SAFE_KEYS.len());
    let text = ["text", "name", "user_name", "channel_name", "team_domain", "domain", "value", "title", "url"];
    let more = ["private_metadata", "submission", "preview", "plain_text", "external_id", "username", "query"];
    for key in text.iter().chain(&more) {
        assert!(!SAFE_KEYS.contains(key), "{key} is text");
    }
}

#[test]
fn tokens_and_response_urls_never_show_and_text_only_when_asked() {
    let event = r#"{"token":"legacy","team_id":"T1","event":{"type":"app_mention","text":"the secret plan","user":"U1",
        "blocks":[{"elements":[{"text":"the secret plan"}]}]},"authed":"xoxb-123"}"#;
    let hidden = redact(event, false);
    assert!(!hidden.contains("legacy") && !hidden.contains("secret plan") && !hidden.contains("xoxb-123"), "{hidden}");
    assert!(hidden.contains("\"T1\"") && hidden.contains("app_mention"));
    let shown = redact(event, true);
    assert!(shown.contains("the secret plan") && !shown.contains("legacy") && !shown.contains("xoxb-123"), "{shown}");
    let command = "token=legacy&team_id=T1&command=%2Fask&text=why&response_url=https%3A%2F%2Fhooks.slack.com%2Fx";
    let c = redact(command, false);
    assert!(!c.contains("legacy") && !c.contains("why") && !c.contains("hooks.slack.com"), "{c}");
    assert!(c.contains("/ask"));
    let c = redact(command, true);
    assert!(c.contains("why") && !c.contains("legacy") && !c.contains("hooks.slack.com"), "{c}");
    let action = format!("payload={}", form_urlencoded::byte_serialize(br#"{"type":"block_actions","token":"legacy","actions":[{"value":"v1"}],"response_url":"https://hooks.slack.com/y"}"#).collect::<String>());
    let a = redact(&action, false);
    assert!(!a.contains("legacy") && !a.contains("v1") && !a.contains("hooks.slack.com"), "{a}");
    for body in bodies().iter().map(|(_, b)| b) {
        for show_text in [false, true] {
            let out = redact(body, show_text);
            for secret in ["XXYYZZ", "verification-token", "hooks.slack.com", "xwfp-", "xoxb-"] {
                assert!(!out.contains(secret), "{secret}: {out}");
            }
        }
    }
}

#[test]
fn a_body_that_is_neither_json_nor_a_form_is_hidden_whole() {
    let out = redact("the secret plan, in plain text", false);
    assert!(!out.contains("secret") && out.contains("hidden"), "{out}");
    assert_eq!(redact("", false), "{}");
}

/// A key to add: any name, now and then one of the allow-list, a secret's or a flag's.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z_]{1,12}",
        1 => proptest::sample::select(SAFE_KEYS).prop_map(String::from),
        1 => proptest::sample::select(SECRETS).prop_map(String::from),
        1 => "is_[a-z]{1,6}",
        1 => "[a-zé€ .~/-]{1,6}",
    ]
}

/// A value to add: text (marked later unless its key is on the allow-list), a flag-like or
/// token-like string, a number, a bool, null, or arrays and objects of them.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        3 => "[A-Za-z0-9 .:<@>]{0,16}".prop_map(Value::from),
        1 => proptest::sample::select(ODD_STRINGS).prop_map(Value::from),
        1 => any::<i32>().prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::vec((key(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Any fixture with new keys (and new form fields) anywhere: no string outside the
    /// allow-list shows, no token or `response_url` shows even with `show_text` on, and every
    /// key stays.
    #[test]
    fn text_under_any_key_stays_hidden(
        which in any::<Index>(),
        added in proptest::collection::vec((any::<Index>(), key(), value()), 0..6),
        fields in proptest::collection::vec(("[a-z_]{1,12}", "[A-Za-z0-9 ]{0,12}"), 0..3),
    ) {
        let all = bodies();
        let (name, text) = &all[which.index(all.len())];
        let mut body = Body::parse(text);
        for (at, k, v) in added {
            let Some(root) = body.values().into_iter().next() else { continue };
            let mut places = Vec::new();
            objects(root, String::new(), &mut places);
            let place = &places[at.index(places.len())];
            object_at(root, place).insert(k, v);
        }
        if let Body::Form(f) = &mut body {
            f.extend(fields.into_iter().map(|(k, v)| (k, Value::from(v))));
        }
        body.mark();
        let text = body.text();
        let hidden = redact(&text, false);
        prop_assert!(!hidden.contains(MARK), "{}: text shows:\n{}\nfrom {}", name, hidden, text);
        for out in [&hidden, &redact(&text, true)] {
            for secret in ["xoxb-1-2", "xapp-1-A1", "hooks.slack.com", "XXYYZZ"] {
                prop_assert!(!out.contains(secret), "{}: {} shows:\n{}", name, secret, out);
            }
        }
        let mut keys = Vec::new();
        if let Body::Form(f) = &body {
            keys.extend(f.iter().map(|(k, _)| k.clone()));
        }
        body.values().into_iter().for_each(|v| keys_of(v, &mut keys));
        for k in keys {
            prop_assert!(hidden.contains(&format!("{}:", json!(k))), "{}: key {} lost:\n{}", name, k, hidden);
        }
    }
}

#[test]
fn entries_in_words_and_links() {
    let e = serde_json::json!({"what":"attempt","number":2,"by":"gw-1","status":503,"latency_ms":4.0,"outcome":"retried","next_retry_ms":2000});
    assert_eq!(describe(&e), "attempt 2 by gw-1: HTTP 503 in 4.0 ms → retried, next try in 2.0 s");
    let socket = |status: u16, error: &str| {
        serde_json::json!({"what":"attempt","number":1,"run":2,"by":"gw-1","status":status,"error":error,
            "latency_ms":3.0,"outcome":"delivered","via":"socket"})
    };
    assert_eq!(describe(&socket(200, "")), "attempt 1 (run 2) by gw-1: acked on its socket in 3.0 ms → delivered");
    assert!(describe(&socket(0, "timeout")).contains("no ack on its socket (timeout)"));
    let a = serde_json::json!({"what":"absorbed","retry_num":"1","retry_reason":"http_timeout","outcome":"duplicate","ack_ms":1.5});
    assert!(describe(&a).contains("retry 1 (http_timeout)"));
    assert_eq!(message_link("C1", "1700.0001").as_deref(), Some("https://slack.com/archives/C1/p17000001"));
    assert_eq!(message_link("C1\"><", "1"), None);
    let wrote =
        |outcome: &str| serde_json::json!({"what": "wrote", "channel": "C1", "ts": "1700.0001", "outcome": outcome});
    assert!(entry_link(&wrote("forwarded")).is_some());
    assert_eq!(entry_link(&wrote("kept_shadow")), None, "a shadow's write was never posted: no link");
}
