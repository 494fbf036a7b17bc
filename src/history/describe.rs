//! The history in words, the same on the pages and in `slackgate show`: one line per timeline
//! entry, and a delivery's body with what must never be shown taken out.
//!
//! Never shown, whatever `[ui] show_text` says: the legacy verification `token`, anything that
//! looks like a Slack token (`xox…`, `xapp-…`), and `response_url`s (whoever holds one may post
//! to the channel). Without `show_text` the body keeps its structure (every key, array and
//! nesting), its numbers, flags and nulls, and the strings of a short list of keys known to
//! hold ids, types and timestamps ([`SAFE_KEYS`]); every other string is hidden, whatever its
//! key — a name, a file's title, a URL, a dialog's submission, a key Slack adds tomorrow. The
//! same rule holds for a form's fields (a slash command's) and its JSON `payload`.

use serde_json::Value;

const HIDDEN: &str = "(hidden: [ui] show_text is off)";
const NEVER: &str = "(never shown)";
const SECRET_KEYS: &[&str] = &["token", "response_url", "response_urls"];

/// The keys whose string values are shown without `show_text`: ids, types and timestamps, as
/// Slack sends them. A name (`user_name`, `channel_name`, `team_domain`, a `name`) is text.
/// `event_context` is Slack's opaque handle for `apps.event.authorizations.list` (ids only).
pub const SAFE_KEYS: &[&str] = &[
    // What it is.
    "type",
    "subtype",
    "channel_type",
    "command",
    // When.
    "ts",
    "thread_ts",
    "event_ts",
    "message_ts",
    "action_ts",
    // Who and where.
    "channel",
    "channel_id",
    "team",
    "team_id",
    "user",
    "user_id",
    "enterprise_id",
    "api_app_id",
    "app_id",
    "bot_id",
    "id",
    // Which delivery, view or element.
    "event_id",
    "event_context",
    "trigger_id",
    "callback_id",
    "action_id",
    "block_id",
    "view_id",
    "root_view_id",
    "previous_view_id",
    "hash",
];

/// `body` (JSON, or a form with a JSON `payload`) made fit to show, pretty-printed.
pub fn redact(body: &str, show_text: bool) -> String {
    if let Ok(mut v) = serde_json::from_str::<Value>(body) {
        scrub(&mut v, None, show_text);
        return serde_json::to_string_pretty(&v).unwrap_or_default();
    }
    let fields: Vec<_> = form_urlencoded::parse(body.as_bytes()).collect();
    // Not a form (a key that is no field name is the body's own text): nothing of it to show.
    if !show_text && !fields.iter().all(|(k, _)| is_field_name(k)) {
        return serde_json::to_string_pretty(&Value::from(HIDDEN)).unwrap_or_default();
    }
    let mut out = serde_json::Map::new();
    for (k, v) in fields {
        let shown = match &*k {
            "payload" => match serde_json::from_str::<Value>(&v) {
                Ok(mut p) => {
                    scrub(&mut p, None, show_text);
                    p
                }
                Err(_) => Value::from(NEVER),
            },
            _ => {
                let mut v = Value::from(v.into_owned());
                scrub(&mut v, Some(&k), show_text);
                v
            }
        };
        out.insert(if looks_secret(&k) { NEVER.to_string() } else { k.into_owned() }, shown);
    }
    serde_json::to_string_pretty(&Value::Object(out)).unwrap_or_default()
}

/// Whether `s` holds something that looks like a Slack token, at its start or after a
/// non-alphanumeric character (a token pasted into a message counts), or a URL on Slack's
/// hooks host (a `response_url` or an incoming webhook: whoever holds one may post).
fn looks_secret(s: &str) -> bool {
    const PREFIXES: [&str; 8] = ["xoxb-", "xoxp-", "xoxa-", "xoxe", "xoxr-", "xoxs-", "xapp-", "xwfp-"];
    let token = s.match_indices(['x']).any(|(at, _)| {
        let word_start = s[..at].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
        word_start && PREFIXES.iter().any(|p| s[at..].starts_with(p))
    });
    token || s.to_ascii_lowercase().contains("hooks.slack.com/")
}

/// A form's field name as Slack writes them (`team_id`, `payload`, `is_enterprise_install`).
fn is_field_name(k: &str) -> bool {
    !k.is_empty() && k.len() <= 64 && k.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Whether the string `value` under `key` is shown without `show_text`: an id, a type or a
/// timestamp by its key, or an `is_…` flag (a form writes flags as strings).
pub fn shown_as_is(key: Option<&str>, value: &str) -> bool {
    key.is_some_and(|k| SAFE_KEYS.contains(&k) || (k.starts_with("is_") && matches!(value, "true" | "false")))
}

/// `v`, found under `key` (an array's items under the array's), made fit to show.
fn scrub(v: &mut Value, key: Option<&str>, show_text: bool) {
    if key.is_some_and(|k| SECRET_KEYS.contains(&k)) {
        *v = Value::from(NEVER);
        return;
    }
    match v {
        Value::Object(map) => map.iter_mut().for_each(|(k, v)| scrub(v, Some(k), show_text)),
        Value::Array(items) => items.iter_mut().for_each(|i| scrub(i, key, show_text)),
        Value::String(s) if looks_secret(s) => *v = Value::from(NEVER),
        Value::String(s) if !show_text && !shown_as_is(key, s) => *v = Value::from(HIDDEN),
        _ => {}
    }
}

/// One timeline entry in words (without its time).
pub fn describe(e: &Value) -> String {
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
    let n = |k: &str| e[k].as_f64().unwrap_or(0.0);
    let retry = || match s("retry_num").as_str() {
        "" => String::new(),
        r => format!(", Slack's retry {r} ({})", s("retry_reason")),
    };
    match e["what"].as_str().unwrap_or_default() {
        "arrived" if s("via") == "replay" => s("reason"),
        "arrived" => {
            let reason = if s("reason").is_empty() { String::new() } else { format!(" — {}", s("reason")) };
            format!(
                "arrived over {}: {} {}, acked in {:.1} ms{}{reason}",
                s("via"),
                e["status"],
                s("outcome"),
                n("ack_ms"),
                retry()
            )
        }
        "absorbed" => format!(
            "Slack sent it again{}: absorbed by the receipt ({}), acked in {:.1} ms",
            retry(),
            s("outcome"),
            n("ack_ms")
        ),
        "attempt" => attempt(e),
        "held" => "held: an earlier turn of its thread is still running".into(),
        "paused" => format!("paused: held until the pause of {} ends", s("pause")),
        "shadow" if s("outcome") == "dropped" => "not copied to the shadow bot: its lane was full (max_backlog)".into(),
        "shadow" => "copied to the shadow bot".into(),
        "resumed" => "resumed: its pause ended; it waits for the bot as if it had just arrived".into(),
        "replayed" => match s("as").as_str() {
            "" => "replayed by an operator: back on the outbox".into(),
            new => format!("sent to the bot again by an operator, as delivery {new}"),
        },
        "superseded" => format!("superseded by the newer message's delivery {}", s("by")),
        "rerun" => format!("run lost with the bot ({}): sent again as run {}", lost_why(&s("reason")), e["run"]),
        "lost" => format!(
            "run lost with the bot ({}), and not run again: `rerun_limit` re-runs were made",
            lost_why(&s("reason"))
        ),
        "stream" => stream(e),
        "wrote" if s("outcome") == super::SHADOW_KEPT => match s("method").as_str() {
            "response_url" => "the shadow bot answered to its response_url: kept, never posted".into(),
            m => format!("the shadow bot wrote {m} in {}: kept, never posted", s("channel")),
        },
        "wrote" => {
            let ts = if s("ts").is_empty() { String::new() } else { format!(", posted as {}", s("ts")) };
            format!(
                "the bot wrote {} in {}: {}{ts} ({} ms at the egress)",
                s("method"),
                s("channel"),
                s("outcome"),
                e["took_ms"]
            )
        }
        other => other.to_string(),
    }
}

/// A stream's end in words: its appends, its bytes, and who ended it how.
fn stream(e: &Value) -> String {
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
    let ending = match s("ending").as_str() {
        "stopped" => "stopped by the bot".to_string(),
        "continued_lost" => "continued by the gateway as edits (an append's answer was lost)".to_string(),
        "continued_expired" => "continued by the gateway as edits (Slack had ended the stream)".to_string(),
        "closed_deleted" => "closed by the gateway (its question was deleted)".to_string(),
        "closed_edited" => "closed by the gateway (its question was edited)".to_string(),
        other => other.to_string(),
    };
    format!(
        "the bot's stream {} in {}: {} appends, {} bytes; {ending}",
        s("ts"),
        s("channel"),
        e["appends"],
        e["bytes"]
    )
}

/// An attempt in words: who made it, what the bot answered, what follows.
fn attempt(e: &Value) -> String {
    let n = |k: &str| e[k].as_f64().unwrap_or(0.0);
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
    // A Socket Mode bot answers with its envelope's ack, not a status (entries written before
    // `via` was recorded were over HTTP or read the same).
    let status = match (n("status") > 0.0, s("via") == "socket") {
        (true, true) => "acked on its socket".to_string(),
        (true, false) => format!("HTTP {}", e["status"]),
        (false, true) => format!("no ack on its socket ({})", s("error")),
        (false, false) => format!("no answer ({})", s("error")),
    };
    let next = match n("next_retry_ms") {
        ms if ms > 0.0 => format!(", next try in {:.1} s", ms / 1000.0),
        _ => String::new(),
    };
    let run = match e["run"].as_u64() {
        Some(run) if run > 1 => format!(" (run {run})"),
        _ => String::new(),
    };
    format!(
        "attempt {}{run} by {}: {status} in {:.1} ms → {}{next}",
        e["number"],
        s("by"),
        n("latency_ms"),
        s("outcome")
    )
}

/// The link of a timeline entry's message in Slack, when it has one there: a shadow's write
/// was never posted, so its `ts` is nothing Slack knows.
pub fn entry_link(e: &serde_json::Value) -> Option<String> {
    let text = |k: &str| e[k].as_str().unwrap_or_default();
    if text("outcome") == super::SHADOW_KEPT {
        return None;
    }
    message_link(text("channel"), text("ts"))
}

/// A link that opens a posted message in Slack (the workspace the viewer is signed in to).
pub fn message_link(channel: &str, ts: &str) -> Option<String> {
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
    (ok(channel) && ok(ts)).then(|| format!("https://slack.com/archives/{channel}/p{}", ts.replace('.', "")))
}

/// Why a run was lost, as an operator reads it.
fn lost_why(reason: &str) -> &'static str {
    match reason {
        "socket_closed" => "its Socket Mode socket closed before the run ended",
        "silent" => "no write within `pass_after` on a message addressed to the bot",
        _ => "lost",
    }
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
