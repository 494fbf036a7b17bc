//! The properties of slackgate's pure Slack rules, shared by the `cargo fuzz` targets
//! (`fuzz/fuzz_targets/`, through the `slackgate-fuzz` library) and the proptest suite
//! (`tests/props.rs`, through `#[path]`). Each function takes plain values, panics when a
//! property fails and otherwise returns nothing; the callers only generate inputs.
//!
//! Where a property needs an expected value it comes from a small reference model written from
//! Slack's documentation and the module docs (e.g. "a receipt is `t:<id>` for a short printable
//! id, else `t#<sha256>`"), not from the implementation's private helpers.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use slackgate::config::Secret;
use slackgate::slack::verify::MAX_SKEW_SECS;
use slackgate::slack::{
    classify, deleted_message_key, ignore_reason, message_key, sign, verify, ClassifyError, Delivery, IgnoreReason,
    Kind, Message, Request, Rules, VerifyError,
};

pub const JSON: &[u8] = b"application/json";
pub const FORM: &[u8] = b"application/x-www-form-urlencoded";

/// Every reason `ignore_reason` may give (they are metric label values).
const REASONS: [&str; 6] = ["channel_denied", "channel_not_allowed", "subtype", "own_message", "bot_message", "edit"];

// ---------------------------------------------------------------- signatures

/// The header rules, modelled from Slack's "Verifying requests from Slack" and `verify.rs`'s
/// contract: both headers present; the timestamp 1–12 ASCII digits within 300 s of `now`;
/// the signature exactly `v0=` and 64 hex digits (either case) equal to `sign`'s.
fn verify_model(secret: &str, ts: Option<&[u8]>, sig: Option<&[u8]>, body: &[u8], now: i64) -> Result<(), VerifyError> {
    let (Some(ts), Some(sig)) = (ts, sig) else { return Err(VerifyError::Missing) };
    if ts.is_empty() || ts.len() > 12 || !ts.iter().all(u8::is_ascii_digit) {
        return Err(VerifyError::BadTimestamp);
    }
    let ts = std::str::from_utf8(ts).expect("ASCII digits");
    let t: i64 = ts.parse().expect("at most 12 digits");
    if (now - t).abs() > MAX_SKEW_SECS {
        return Err(VerifyError::Stale);
    }
    let expected = sign(secret.as_bytes(), ts, body);
    let matches = sig.len() == expected.len()
        && sig.starts_with(b"v0=")
        && sig[3..].eq_ignore_ascii_case(&expected.as_bytes()[3..]);
    if matches {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// Arbitrary header bytes never panic, and the answer is the model's. `now` is what the
/// gateway passes: Unix seconds from the clock, so never negative.
pub fn verify_headers(secret: &str, ts: Option<&[u8]>, sig: Option<&[u8]>, body: &[u8], now: i64) {
    assert!(now >= 0, "the caller's clock gives seconds since 1970");
    let secrets = [Secret::new(secret)];
    let got = verify(&secrets, ts, sig, body, now);
    assert_eq!(got, verify(&secrets, ts, sig, body, now), "deterministic");
    assert_eq!(got, verify_model(secret, ts, sig, body, now), "ts {ts:?} sig {sig:?} now {now}");
}

/// A body signed with `sign` at `t` verifies at `t` and within the window, is stale outside it,
/// verifies under any rotated secret list that holds its secret, and fails after one byte of
/// the body, the signature or the timestamp is changed (`flip_mask` != 0 is XORed into the
/// byte at `flip_at`, modulo the length).
pub fn verify_signed(secret: &str, other: &str, t: i64, body: &[u8], skew: i64, flip_at: usize, flip_mask: u8) {
    assert!((0..=999_999_999_999).contains(&t) && skew.abs() <= MAX_SKEW_SECS && flip_mask != 0);
    let ts = t.to_string();
    let sig = sign(secret.as_bytes(), &ts, body);
    assert_eq!(sig, sign(secret.as_bytes(), &ts, body), "deterministic");
    assert!(sig.len() == 67 && sig.starts_with("v0=") && sig[3..].bytes().all(|b| b.is_ascii_hexdigit()), "{sig}");
    let one = [Secret::new(secret)];
    let check = |secrets: &[Secret], ts: &[u8], sig: &[u8], body: &[u8], now: i64| {
        let got = verify(secrets, Some(ts), Some(sig), body, now);
        if let [only] = secrets {
            let secret = std::str::from_utf8(only.expose()).expect("made from a str");
            assert_eq!(got, verify_model(secret, Some(ts), Some(sig), body, now));
        }
        got
    };
    let (tsb, sigb) = (ts.as_bytes(), sig.as_bytes());
    assert_eq!(check(&one, tsb, sigb, body, t), Ok(()));
    assert_eq!(check(&one, tsb, sigb, body, t + skew), Ok(()), "skew {skew}");
    assert_eq!(check(&one, tsb, sigb, body, t + MAX_SKEW_SECS + 1), Err(VerifyError::Stale));
    if t > MAX_SKEW_SECS {
        assert_eq!(check(&one, tsb, sigb, body, t - MAX_SKEW_SECS - 1), Err(VerifyError::Stale));
    }
    // Upper-case hex is the same signature.
    let upper = format!("v0={}", sig[3..].to_ascii_uppercase());
    assert_eq!(check(&one, tsb, upper.as_bytes(), body, t), Ok(()));
    // Rotation: any listed secret verifies; a list without it does not.
    let rotated = [Secret::new(other), Secret::new(secret)];
    assert_eq!(check(&rotated, tsb, sigb, body, t), Ok(()));
    let expected_other = if same_hmac_key(other, secret) { Ok(()) } else { Err(VerifyError::Mismatch) };
    assert_eq!(check(&[Secret::new(other)], tsb, sigb, body, t), expected_other);
    // One changed byte of the body.
    if !body.is_empty() {
        let mut changed = body.to_vec();
        changed[flip_at % body.len()] ^= flip_mask;
        assert_eq!(check(&one, tsb, sigb, &changed, t), Err(VerifyError::Mismatch));
    }
    // One changed byte of the signature: refused, except a hex letter's case (mask 0x20).
    let i = flip_at % sig.len();
    let mut changed = sigb.to_vec();
    changed[i] ^= flip_mask;
    let same_digit = i >= 3 && sigb[i].is_ascii_lowercase() && flip_mask == 0x20;
    let expected = if same_digit { Ok(()) } else { Err(VerifyError::Mismatch) };
    assert_eq!(check(&one, tsb, &changed, body, t), expected, "sig byte {i} ^ {flip_mask:#x}");
    // One changed byte of the timestamp: never accepted.
    let mut changed = tsb.to_vec();
    changed[flip_at % tsb.len()] ^= flip_mask;
    assert_ne!(check(&one, &changed, sigb, body, t), Ok(()), "ts {changed:?}");
}

/// Whether two secrets are one HMAC-SHA256 key (RFC 2104): a key longer than the 64-byte block
/// is replaced by its SHA-256, and a shorter one is padded with zero bytes, so `"k"` and
/// `"k\0"` sign alike.
fn same_hmac_key(a: &str, b: &str) -> bool {
    let block = |k: &str| {
        let k = if k.len() > 64 { Sha256::digest(k.as_bytes()).to_vec() } else { k.as_bytes().to_vec() };
        let end = k.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        k[..end].to_vec()
    };
    block(a) == block(b)
}

// ---------------------------------------------------------------- classification

/// The receipt of an id, per `Delivery::receipt`'s contract: `<tag>:<id>` for an id of at most
/// 128 printable ASCII bytes, else `<tag>#<sha256 hex of the id>`.
fn id_receipt(tag: char, id: &str) -> String {
    if id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()) {
        format!("{tag}:{id}")
    } else {
        format!("{tag}#{}", sha_hex(id.as_bytes()))
    }
}

fn body_receipt(body: &[u8]) -> String {
    format!("h:{}", sha_hex(body))
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether the request is read as JSON (else as a form), per `classify`'s contract: the
/// declared type wins, and without one a body whose first non-blank byte is `{` is JSON.
fn reads_as_json(content_type: &[u8], body: &[u8]) -> bool {
    let ct = content_type.to_ascii_lowercase();
    ct.starts_with(b"application/json")
        || (!ct.starts_with(b"application/x-www-form-urlencoded")
            && body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'))
}

/// A receipt is a Redis key part and a log field: at most 140 bytes of printable ASCII, and
/// one of the documented shapes for its kind. Commands and interactions have one only with a
/// trigger id (never a body hash: the same body twice is a user acting twice).
fn check_receipt(d: &Delivery, body: &[u8]) {
    let Some(r) = d.receipt.as_deref() else {
        assert!(matches!(d.kind, Kind::Command | Kind::Interactivity), "{:?} without a receipt", d.kind);
        return;
    };
    assert!(r.len() <= 140 && r.bytes().all(|b| b.is_ascii_graphic()), "receipt {r:?}");
    let tags: &[char] = match d.kind {
        Kind::Event => &['e', 'h'],
        Kind::Command | Kind::Interactivity => &['t'],
        Kind::Opaque => &['h'],
    };
    let mut chars = r.chars();
    let (tag, sep, rest) = (chars.next(), chars.next(), chars.as_str());
    assert!(tag.is_some_and(|t| tags.contains(&t)), "{:?} receipt {r:?}", d.kind);
    match (tag, sep) {
        (Some('h'), Some(':')) => assert_eq!(r, body_receipt(body)),
        (Some(_), Some('#')) => {
            assert!(rest.len() == 64 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')), "{r:?}");
        }
        (Some(_), Some(':')) => assert!(!rest.is_empty() && rest.len() <= 128, "{r:?}"),
        _ => panic!("receipt {r:?}"),
    }
}

/// Any content type and body: never a panic, the same answer twice, the content type's case
/// does not matter, the error and kind belong to the parser the content type picked, and a
/// delivery's receipt, message, keys and filter reasons keep their contracts.
pub fn classify_any(content_type: &[u8], body: &[u8]) {
    let got = classify(content_type, body);
    assert_eq!(got, classify(content_type, body), "deterministic");
    assert_eq!(got, classify(&content_type.to_ascii_uppercase(), body), "content type case");
    let json = reads_as_json(content_type, body);
    match &got {
        Err(ClassifyError::BadJson | ClassifyError::NotObject) => assert!(json, "{got:?} from a form"),
        Err(ClassifyError::UnknownForm | ClassifyError::BadPayload) => assert!(!json, "{got:?} from JSON"),
        Ok(Request::UrlVerification { .. } | Request::RateLimited) => assert!(json, "{got:?} from a form"),
        Ok(Request::SslCheck) => assert!(!json, "ssl_check from JSON"),
        Ok(Request::Delivery(d)) => {
            assert_eq!(json, matches!(d.kind, Kind::Event | Kind::Opaque), "{:?}, json {json}", d.kind);
            check_delivery(d, body);
        }
    }
}

fn check_delivery(d: &Delivery, body: &[u8]) {
    check_receipt(d, body);
    if d.kind == Kind::Opaque {
        assert_eq!((&d.channel, &d.message, &d.response_url), (&None, &None, &None));
        assert!(d.bot_users.is_empty());
    }
    if matches!(d.kind, Kind::Event | Kind::Opaque) {
        assert_eq!(d.response_url, None);
    }
    if let Some(m) = &d.message {
        assert_eq!(d.kind, Kind::Event);
        assert!(d.detail == "message" || d.detail == "app_mention", "message in a {:?}", d.detail);
        message_keys(m);
    }
    let reason = ignore_reason(d, &Rules::default());
    assert!(reason.is_none_or(|r| REASONS.contains(&r.as_label())), "{reason:?}");
    let everything = Rules {
        own_messages: true,
        bot_messages: true,
        allow_bots: Vec::new(),
        subtypes: d.message.iter().filter_map(|m| m.subtype.clone()).collect(),
        channels_allow: Vec::new(),
        channels_deny: Vec::new(),
        edits_mention_added: true,
    };
    let reason = ignore_reason(d, &everything);
    assert!(reason.is_none_or(|r| REASONS.contains(&r.as_label())), "{reason:?}");
    if let Some(channel) = &d.channel {
        let deny = Rules { channels_deny: vec![channel.clone()], ..Rules::default() };
        assert_eq!(ignore_reason(d, &deny).map(IgnoreReason::as_label), Some("channel_denied"));
        let allow_other = Rules { channels_allow: vec![format!("{channel}x")], ..Rules::default() };
        assert_eq!(ignore_reason(d, &allow_other).map(IgnoreReason::as_label), Some("channel_not_allowed"));
        let allow = Rules { channels_allow: vec![channel.clone()], ..Rules::default() };
        assert_eq!(ignore_reason(d, &allow), ignore_reason(d, &Rules::default()));
    }
}

// ---------------------------------------------------------------- message keys

/// `message_key` and `deleted_message_key`: deterministic, never both, present exactly when
/// documented, `m:<team>:<channel>:<ts>[:<edit ts>]`, free of whitespace when the ids are,
/// and giving the ids back when they hold no `:` (so distinct messages get distinct claims).
pub fn message_keys(m: &Message) {
    let key = message_key(m);
    let deleted = deleted_message_key(m);
    assert_eq!(key, message_key(&m.clone()), "deterministic");
    assert_eq!(deleted, deleted_message_key(&m.clone()), "deterministic");
    assert!(key.is_none() || deleted.is_none(), "both keys for {m:?}");
    let subtype = m.subtype.as_deref();
    let mut parts = vec![m.team.as_str(), m.channel.as_str(), m.ts.as_str()];
    let expected_key = match (subtype, &m.edit_ts) {
        (Some("message_deleted"), _) | (Some("message_changed"), None) => None,
        (Some("message_changed"), Some(edit)) => {
            parts.push(edit);
            Some(format!("m:{}", parts.join(":")))
        }
        _ => Some(format!("m:{}", parts.join(":"))),
    };
    assert_eq!(key, expected_key);
    let expected_deleted = (subtype == Some("message_deleted")).then(|| format!("m:{}", parts.join(":")));
    assert_eq!(deleted, expected_deleted);
    let Some(k) = key.or(deleted) else { return };
    if !parts.iter().any(|p| p.chars().any(char::is_whitespace)) {
        assert!(!k.chars().any(char::is_whitespace), "whitespace in {k:?}");
    }
    if !parts.iter().any(|p| p.contains(':')) {
        let back: Vec<&str> = k.strip_prefix("m:").expect("m: prefix").split(':').collect();
        assert_eq!(back, parts, "the ids back from {k:?}");
    }
}

/// One message event built from its fields, the way Slack sends it.
#[derive(Debug, Clone, Default)]
pub struct EventFields {
    pub team: String,
    pub channel: String,
    pub ts: String,
    pub edit_ts: String,
    pub user: String,
    pub bot_user: String,
    pub mention: bool,
    pub bot_id: Option<String>,
    /// `None`, `message_changed`, `message_deleted` or anything else.
    pub subtype: Option<String>,
}

fn envelope(f: &EventFields, event_type: &str) -> Vec<u8> {
    let text = if f.mention { format!("<@{}> hi", f.bot_user) } else { "hi".to_string() };
    let mut event = Map::new();
    event.insert("type".into(), json!(event_type));
    event.insert("channel".into(), json!(f.channel));
    match f.subtype.as_deref() {
        Some("message_changed") => {
            event.insert("ts".into(), json!(f.edit_ts));
            event.insert("message".into(), json!({"user": f.user, "text": text, "ts": f.ts}));
            event.insert("previous_message".into(), json!({"user": f.user, "text": "before", "ts": f.ts}));
        }
        Some("message_deleted") => {
            event.insert("ts".into(), json!(f.edit_ts));
            event.insert("deleted_ts".into(), json!(f.ts));
            event.insert("previous_message".into(), json!({"user": f.user, "text": text, "ts": f.ts}));
        }
        _ => {
            event.insert("ts".into(), json!(f.ts));
            event.insert("user".into(), json!(f.user));
            event.insert("text".into(), json!(text));
        }
    }
    if let Some(subtype) = &f.subtype {
        event.insert("subtype".into(), json!(subtype));
    }
    if let Some(bot_id) = &f.bot_id {
        event.insert("bot_id".into(), json!(bot_id));
    }
    let env = json!({
        "type": "event_callback",
        "team_id": f.team,
        "event_id": "Ev0000000001",
        "authorizations": [{"user_id": f.bot_user, "is_bot": true}],
        "event": Value::Object(event),
    });
    serde_json::to_vec(&env).expect("serialises")
}

fn message_delivery(f: &EventFields, event_type: &str) -> Delivery {
    match classify(JSON, &envelope(f, event_type)) {
        Ok(Request::Delivery(d)) => d,
        other => panic!("{other:?} for {f:?}"),
    }
}

/// From a JSON event to its keys: the message fields come through as sent; a `message` and an
/// `app_mention` of one post claim the same key; an edit claims a key of its own; a deletion
/// names exactly the claim of the message it deletes.
pub fn event_keys(f: &EventFields) {
    let d = message_delivery(f, "message");
    check_delivery(&d, &envelope(f, "message"));
    let m = d.message.as_ref().expect("a message event has a message");
    assert_eq!((&m.team, &m.channel, &m.ts, &m.subtype), (&f.team, &f.channel, &f.ts, &f.subtype));
    assert_eq!(d.channel.as_ref(), Some(&f.channel));
    assert_eq!(d.bot_users, std::slice::from_ref(&f.bot_user));
    if f.subtype.as_deref() != Some("message_deleted") {
        assert_eq!(m.mentions_bot, f.mention, "mention of {:?}", f.bot_user);
    }
    message_keys(m);
    let mention = message_delivery(f, "app_mention");
    assert_eq!(message_key(m), message_key(mention.message.as_ref().expect("app_mention")), "one post, one key");

    let plain = EventFields { subtype: None, ..f.clone() };
    let original = message_key(message_delivery(&plain, "message").message.as_ref().expect("message"));
    assert!(original.is_some());
    let edit = EventFields { subtype: Some("message_changed".into()), ..f.clone() };
    let edit_key = message_key(message_delivery(&edit, "message").message.as_ref().expect("edit"));
    let colon_free = [&f.team, &f.channel, &f.ts, &f.edit_ts].iter().all(|s| !s.contains(':'));
    if colon_free {
        assert_ne!(edit_key, original, "an edit is not taken for the original");
    }
    let deletion = EventFields { subtype: Some("message_deleted".into()), ..f.clone() };
    let dm = message_delivery(&deletion, "message").message.expect("deletion");
    assert_eq!(message_key(&dm), None);
    assert_eq!(deleted_message_key(&dm), original, "a deletion names the original's claim");
}

// Form decoding lives beside this file; `tests/props.rs` includes this file by path, so the
// child is named by path too (relative to this file's directory).
#[path = "forms.rs"]
mod forms;
pub use forms::{form_bytes, form_pairs, PayloadFields};
