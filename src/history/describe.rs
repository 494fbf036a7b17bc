//! The history in words, the same on the pages and in `slackgate show`: one line per timeline
//! entry, and a delivery's body with what must never be shown taken out.
//!
//! Never shown, whatever `[ui] show_text` says: the legacy verification `token`, anything that
//! looks like a Slack token (`xox…`, `xapp-…`), and `response_url`s (whoever holds one may post
//! to the channel). Shown only with `show_text`: the text people wrote (`text`, `fallback`,
//! `pretext`, `title`, input `value`s, a command's text, an options `query`).

use serde_json::Value;

const HIDDEN: &str = "(hidden: [ui] show_text is off)";
const NEVER: &str = "(never shown)";
const TEXT_KEYS: &[&str] = &["text", "fallback", "pretext", "title", "value", "query", "initial_value"];
const SECRET_KEYS: &[&str] = &["token", "response_url", "response_urls"];

/// `body` (JSON, or a form with a JSON `payload`) made fit to show, pretty-printed.
pub fn redact(body: &str, show_text: bool) -> String {
    if let Ok(mut v) = serde_json::from_str::<Value>(body) {
        scrub(&mut v, show_text);
        return serde_json::to_string_pretty(&v).unwrap_or_default();
    }
    let mut out = serde_json::Map::new();
    for (k, v) in form_urlencoded::parse(body.as_bytes()) {
        let shown = match &*k {
            k if SECRET_KEYS.contains(&k) => Value::from(NEVER),
            "payload" => match serde_json::from_str::<Value>(&v) {
                Ok(mut p) => {
                    scrub(&mut p, show_text);
                    p
                }
                Err(_) => Value::from(NEVER),
            },
            "text" if !show_text => Value::from(HIDDEN),
            _ if looks_secret(&v) => Value::from(NEVER),
            _ => Value::from(v.into_owned()),
        };
        out.insert(k.into_owned(), shown);
    }
    serde_json::to_string_pretty(&Value::Object(out)).unwrap_or_default()
}

fn looks_secret(s: &str) -> bool {
    ["xoxb-", "xoxp-", "xoxa-", "xoxe", "xoxr-", "xoxs-", "xapp-"].iter().any(|p| s.starts_with(p))
}

fn scrub(v: &mut Value, show_text: bool) {
    match v {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if SECRET_KEYS.contains(&k.as_str()) {
                    *v = Value::from(NEVER);
                } else if !show_text && TEXT_KEYS.contains(&k.as_str()) && v.is_string() {
                    *v = Value::from(HIDDEN);
                } else {
                    scrub(v, show_text);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| scrub(i, show_text)),
        Value::String(s) if looks_secret(s) => *v = Value::from(NEVER),
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
        "replayed" => match s("as").as_str() {
            "" => "replayed by an operator: back on the outbox".into(),
            new => format!("sent to the bot again by an operator, as delivery {new}"),
        },
        "superseded" => format!("superseded by the newer message's delivery {}", s("by")),
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

/// An attempt in words: who made it, what the bot answered, what follows.
fn attempt(e: &Value) -> String {
    let n = |k: &str| e[k].as_f64().unwrap_or(0.0);
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
    let status =
        if n("status") > 0.0 { format!("HTTP {}", e["status"]) } else { format!("no answer ({})", s("error")) };
    let next = match n("next_retry_ms") {
        ms if ms > 0.0 => format!(", next try in {:.1} s", ms / 1000.0),
        _ => String::new(),
    };
    format!("attempt {} by {}: {status} in {:.1} ms → {}{next}", e["number"], s("by"), n("latency_ms"), s("outcome"))
}

/// A link that opens a posted message in Slack (the workspace the viewer is signed in to).
pub fn message_link(channel: &str, ts: &str) -> Option<String> {
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
    (ok(channel) && ok(ts)).then(|| format!("https://slack.com/archives/{channel}/p{}", ts.replace('.', "")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_response_urls_never_show_and_text_only_when_asked() {
        let event = r#"{"token":"legacy","team_id":"T1","event":{"type":"app_mention","text":"the secret plan","user":"U1",
            "blocks":[{"elements":[{"text":"the secret plan"}]}]},"authed":"xoxb-123"}"#;
        let hidden = redact(event, false);
        assert!(
            !hidden.contains("legacy") && !hidden.contains("secret plan") && !hidden.contains("xoxb-123"),
            "{hidden}"
        );
        assert!(hidden.contains("\"T1\"") && hidden.contains("app_mention"));
        let shown = redact(event, true);
        assert!(shown.contains("the secret plan") && !shown.contains("legacy"), "{shown}");
        let command = "token=legacy&team_id=T1&command=%2Fask&text=why&response_url=https%3A%2F%2Fhooks.slack.com%2Fx";
        let c = redact(command, false);
        assert!(!c.contains("legacy") && !c.contains("why") && !c.contains("hooks.slack.com"), "{c}");
        assert!(c.contains("/ask"));
        assert!(redact(command, true).contains("why"));
        let action = format!("payload={}", form_urlencoded::byte_serialize(br#"{"type":"block_actions","token":"legacy","actions":[{"value":"v1"}],"response_url":"https://hooks.slack.com/y"}"#).collect::<String>());
        let a = redact(&action, false);
        assert!(!a.contains("legacy") && !a.contains("v1") && !a.contains("hooks.slack.com"), "{a}");
    }

    #[test]
    fn entries_in_words_and_links() {
        let e = serde_json::json!({"what":"attempt","number":2,"by":"gw-1","status":503,"latency_ms":4.0,"outcome":"retried","next_retry_ms":2000});
        assert_eq!(describe(&e), "attempt 2 by gw-1: HTTP 503 in 4.0 ms → retried, next try in 2.0 s");
        let a = serde_json::json!({"what":"absorbed","retry_num":"1","retry_reason":"http_timeout","outcome":"duplicate","ack_ms":1.5});
        assert!(describe(&a).contains("retry 1 (http_timeout)"));
        assert_eq!(message_link("C1", "1700.0001").as_deref(), Some("https://slack.com/archives/C1/p17000001"));
        assert_eq!(message_link("C1\"><", "1"), None);
    }
}
