//! The event path reads only the fields it needs from the raw JSON; here it is held to what
//! reading the whole body as a `serde_json::Value` gave (the way it was done before), on
//! generated envelopes whose fields take every JSON type, repeat, and carry escapes.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

type Object = serde_json::Map<String, Value>;

fn text<'a>(object: &'a Object, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// The reference: a JSON body classified from the whole of it as a `Value` (a delivery, or
/// `None` for what is not one).
fn reference(body: &[u8]) -> Option<Delivery> {
    let Ok(Value::Object(env)) = serde_json::from_slice::<Value>(body) else { return None };
    match text(&env, "type").unwrap_or("") {
        "event_callback" => {}
        "url_verification" | "app_rate_limited" => return None,
        other => {
            let receipt = Some(body_key(body));
            return Some(Delivery { kind: Kind::Opaque, receipt, detail: other.into(), ..Delivery::default() });
        }
    }
    let receipt = match text(&env, "event_id") {
        Some(id) if !id.is_empty() => Some(id_key('e', id)),
        _ => Some(body_key(body)),
    };
    let event = env.get("event").and_then(Value::as_object);
    let field = |k: &str| event.and_then(|e| text(e, k)).map(String::from);
    let detail = field("type").unwrap_or_default();
    let is_message = matches!(detail.as_str(), "message" | "app_mention");
    let assistant_thread = event.filter(|_| !is_message).and_then(|e| {
        let a = e.get("assistant_thread")?.as_object()?;
        let s = |k: &str| text(a, k).map(String::from);
        Some(AssistantThread { channel: s("channel_id")?, thread_ts: s("thread_ts")?, user: s("user_id") })
    });
    let channel = field("channel")
        .or_else(|| event.and_then(|e| e.get("item")?.get("channel")?.as_str()).map(String::from))
        .or_else(|| assistant_thread.as_ref().map(|a| a.channel.clone()));
    let bot_users: Vec<String> = env
        .get("authorizations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a.get("is_bot").and_then(Value::as_bool) == Some(true))
        .filter_map(|a| a.get("user_id")?.as_str().map(String::from))
        .collect();
    let message = match (event, detail.as_str()) {
        (Some(e), "message" | "app_mention") => reference_message(&env, e, &bot_users),
        _ => None,
    };
    let user = field("user")
        .or_else(|| message.as_ref().and_then(|m| m.user.clone()))
        .or_else(|| assistant_thread.as_ref().and_then(|a| a.user.clone()));
    Some(Delivery {
        kind: Kind::Event,
        receipt,
        detail,
        channel,
        message,
        assistant_thread,
        bot_users,
        response_url: None,
        team: text(&env, "team_id").map(String::from),
        user,
        event_time: env.get("event_time").and_then(Value::as_u64),
    })
}

fn reference_message(env: &Object, event: &Object, bot_users: &[String]) -> Option<Message> {
    let team = text(event, "team").or_else(|| text(env, "team_id")).unwrap_or_default().to_string();
    let channel = text(event, "channel")?.to_string();
    let subtype = text(event, "subtype").map(String::from);
    let mentions = |m: &Object| {
        let t = text(m, "text").unwrap_or_default();
        bot_users.iter().any(|u| t.contains(&format!("<@{u}>")))
    };
    let inner = |k: &str| event.get(k).and_then(Value::as_object);
    let direct = matches!(text(event, "channel_type"), Some("im" | "mpim")) || channel.starts_with('D');
    let mut m = Message { team, channel, subtype: subtype.clone(), direct, ..Message::default() };
    let s = |o: &Object, k: &str| text(o, k).map(String::from);
    match subtype.as_deref() {
        Some("message_changed") => {
            let edited = inner("message")?;
            m.ts = text(edited, "ts")?.to_string();
            (m.thread_ts, m.edit_ts, m.user, m.bot_id) =
                (s(edited, "thread_ts"), s(event, "ts"), s(edited, "user"), s(edited, "bot_id"));
            m.mentions_bot = mentions(edited);
            m.previously_mentioned_bot = inner("previous_message").is_some_and(mentions);
        }
        Some("message_deleted") => {
            let previous = inner("previous_message");
            m.ts = text(event, "deleted_ts").or(previous.and_then(|p| text(p, "ts")))?.to_string();
            m.thread_ts = previous.and_then(|p| s(p, "thread_ts"));
        }
        _ => {
            m.ts = text(event, "ts")?.to_string();
            (m.thread_ts, m.user, m.bot_id) = (s(event, "thread_ts"), s(event, "user"), s(event, "bot_id"));
            m.mentions_bot = mentions(event);
        }
    }
    Some(m)
}

/// A value of any JSON type, now and then one that matters (a string, an id, a mention).
fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u32>().prop_map(Value::from),
        (-5i64..5).prop_map(Value::from),
        Just(json!(1.5)),
        prop_oneof![
            Just("C1"),
            Just("D9"),
            Just("U1"),
            Just("UBOT"),
            Just("1.5"),
            Just("im"),
            Just("<@UBOT> hi"),
            Just("q\"u\\o\u{e9}te"),
            Just("")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Fields written out in order, a key possibly more than once (JSON allows it; the last counts).
fn write(fields: &[(String, Value)]) -> String {
    let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{}", json!(k), v)).collect();
    format!("{{{}}}", parts.join(","))
}

/// What is done to one field of a plausible object.
#[derive(Debug, Clone)]
enum Change {
    Keep,
    Drop,
    Replace(Value),
    /// Written twice: first another value, then its own (the last counts).
    Repeat(Value),
    /// Written twice: first its own, then another value.
    Overwrite(Value),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        6 => Just(Change::Keep),
        1 => Just(Change::Drop),
        1 => any_value().prop_map(Change::Replace),
        1 => any_value().prop_map(Change::Repeat),
        1 => any_value().prop_map(Change::Overwrite),
    ]
}

/// `fields`, each changed (kept, dropped, retyped or repeated).
fn mutate(fields: Vec<(&'static str, Value)>) -> impl Strategy<Value = String> {
    proptest::collection::vec(change(), fields.len()).prop_map(move |changes| {
        let mut out = Vec::new();
        for ((k, v), c) in fields.iter().zip(changes) {
            let k = k.to_string();
            match c {
                Change::Keep => out.push((k, v.clone())),
                Change::Drop => {}
                Change::Replace(other) => out.push((k, other)),
                Change::Repeat(other) => out.extend([(k.clone(), other), (k, v.clone())]),
                Change::Overwrite(other) => out.extend([(k.clone(), v.clone()), (k, other)]),
            }
        }
        write(&out)
    })
}

/// An `assistant_thread` (Slack's assistant container), plausible then mutated.
fn assistant_thread() -> impl Strategy<Value = Value> {
    let context = json!({"channel_id": "C1", "team_id": "T2", "enterprise_id": null});
    mutate(vec![
        ("user_id", json!("U1")),
        ("context", context),
        ("channel_id", json!("D1")),
        ("thread_ts", json!("1.5")),
    ])
    .prop_map(|s| serde_json::from_str::<Value>(&s).unwrap())
}

/// An inner message (edited or previous), plausible then mutated.
fn inner() -> impl Strategy<Value = Value> {
    let text = prop_oneof![Just("<@UBOT> hi"), Just("hi <@UOTHER>"), Just("q\"u\\o\u{e9}")];
    (text, any::<bool>()).prop_flat_map(|(text, threaded)| {
        let mut fields = vec![("ts", json!("1.5")), ("user", json!("U1")), ("text", json!(text))];
        if threaded {
            fields.push(("thread_ts", json!("0.5")));
        }
        fields.push(("bot_id", json!("B1")));
        mutate(fields).prop_map(|s| serde_json::from_str::<Value>(&s).unwrap())
    })
}

fn event() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        3 => Just("message"),
        2 => Just("app_mention"),
        1 => Just("reaction_added"),
        1 => Just("assistant_thread_started"),
        1 => Just("")
    ];
    let subtype = prop_oneof![
        2 => Just(None),
        3 => Just(Some("message_changed")),
        1 => Just(Some("message_deleted")),
        1 => Just(Some("bot_message"))
    ];
    let channel = prop_oneof![Just("C1"), Just("D1"), Just("G1")];
    let text = prop_oneof![Just("<@UBOT> hi"), Just("hi"), Just("<@U1>")];
    (kind, subtype, channel, text, inner(), inner(), assistant_thread(), any::<bool>()).prop_flat_map(
        |(kind, subtype, channel, text, edited, previous, assistant, direct)| {
            let mut fields = vec![
                ("type", json!(kind)),
                ("channel", json!(channel)),
                ("user", json!("U1")),
                ("text", json!(text)),
                ("ts", json!("2.5")),
                ("thread_ts", json!("1.5")),
                ("team", json!("T2")),
                ("item", json!({"type": "message", "channel": "C9", "ts": "1.5"})),
                ("deleted_ts", json!("1.5")),
                ("message", edited),
                ("previous_message", previous),
                ("bot_id", json!("B2")),
                ("assistant_thread", assistant),
                ("blocks", json!([{"type": "rich_text", "elements": []}])),
            ];
            if let Some(subtype) = subtype {
                fields.push(("subtype", json!(subtype)));
            }
            if direct {
                fields.push(("channel_type", json!("im")));
            }
            mutate(fields)
        },
    )
}

fn envelope() -> impl Strategy<Value = String> {
    let is_bot = prop_oneof![3 => Just(json!(true)), 1 => Just(json!(false)), 1 => any_value()];
    let auth = (is_bot, prop_oneof![3 => Just(json!("UBOT")), 1 => any_value()])
        .prop_map(|(b, u)| json!({"is_bot": b, "user_id": u}));
    let auths = prop_oneof![4 => proptest::collection::vec(auth, 0..3).prop_map(Value::from), 1 => any_value()];
    (event(), auths).prop_flat_map(|(event, auths)| {
        let event: Value = serde_json::from_str(&event).unwrap();
        mutate(vec![
            ("type", json!("event_callback")),
            ("event_id", json!("Ev1")),
            ("team_id", json!("T1")),
            ("authorizations", auths),
            ("event_time", json!(1_700_000_000u64)),
            ("event", event),
        ])
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn events_classify_as_the_whole_value_did(body in envelope()) {
        let got = match classify(JSON, body.as_bytes()) {
            Ok(Request::Delivery(d)) => Some(d),
            _ => None,
        };
        prop_assert_eq!(got, reference(body.as_bytes()), "{}", body);
    }
}
