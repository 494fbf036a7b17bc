//! A delivery's record: one JSON line per thing that happened to it, appended (`APPEND`, the
//! cheapest write Redis has: no read, no hash to grow), and read back by folding the lines in
//! time order into the summary the list shows and the timeline its page shows. The notes of one
//! delivery can reach the writer out of order (a worker may attempt before the ingress queued
//! what it answered); folding by `at` puts them back.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::{Note, What};

/// The line `note` appends to its delivery's record.
pub fn line(note: &Note) -> String {
    let at = note.at_ms;
    let mut out = match &note.what {
        What::Arrived(a) => serde_json::to_string(&ArrivedLine {
            what: "arrived",
            at,
            kind: a.kind,
            detail: &a.detail,
            team: &a.team,
            channel: &a.channel,
            user: &a.user,
            ts: &a.ts,
            thread: &a.thread_ts,
            receipt: &a.receipt,
            via: a.via,
            retry_num: &a.retry_num,
            retry_reason: a.retry_reason,
            event_time: a.event_time,
            ack_ms: (a.ack_ms * 100.0).round() / 100.0,
            status: a.status,
            outcome: a.outcome,
            reason: &a.reason,
            asks: a.asks,
            conversation: &a.conversation,
            path: &a.path,
            content_type: &a.content_type,
        }),
        What::Absorbed { retry_num, retry_reason, outcome, ack_ms, via } => serde_json::to_string(&serde_json::json!({
            "what": "absorbed", "at": at, "retry_num": retry_num, "retry_reason": retry_reason,
            "outcome": outcome, "ack_ms": (ack_ms * 100.0).round() / 100.0, "via": via })),
        What::Attempt(a) => serde_json::to_string(&AttemptLine {
            what: "attempt",
            at,
            number: a.number,
            run: a.run,
            outcome: a.outcome,
            status: a.status,
            error: a.error,
            latency_ms: (a.latency_ms * 100.0).round() / 100.0,
            next_retry_ms: a.next_retry_ms,
            by: &a.by,
            via: a.via,
        }),
        What::Held
        | What::Paused { .. }
        | What::Resumed
        | What::Shadow { .. }
        | What::Superseded { .. }
        | What::Rerun { .. }
        | What::Replayed { .. } => step_line(&note.what, at),
        What::Stream(_) | What::Wrote(_) => egress_line(&note.what, at),
        What::Answered { status, ack_ms, kind } => serde_json::to_string(&serde_json::json!({
            "what": "answered", "at": at, "status": status, "ack_ms": ack_ms, "kind": kind })),
    }
    .unwrap_or_default();
    out.push('\n');
    out
}

/// The steps of a delivery between its attempts: held for a turn or a pause, resumed, copied
/// to the shadow, superseded, replayed.
fn step_line(what: &What, at: u64) -> Result<String, serde_json::Error> {
    let v = match what {
        What::Held => serde_json::json!({ "what": "held", "at": at }),
        What::Paused { pause } => serde_json::json!({ "what": "paused", "at": at, "pause": pause }),
        What::Resumed => serde_json::json!({ "what": "resumed", "at": at }),
        What::Shadow { outcome } => serde_json::json!({ "what": "shadow", "at": at, "outcome": outcome }),
        What::Superseded { by } => serde_json::json!({ "what": "superseded", "at": at, "by": by }),
        What::Rerun { reason, run: 0 } => serde_json::json!({ "what": "lost", "at": at, "reason": reason }),
        What::Rerun { reason, run } => serde_json::json!({ "what": "rerun", "at": at, "reason": reason, "run": run }),
        What::Replayed { as_id } => serde_json::json!({ "what": "replayed", "at": at, "as": as_id }),
        _ => return Ok(String::new()),
    };
    serde_json::to_string(&v)
}

/// The egress's steps of a delivery: a write of the bot's, its stream's end.
fn egress_line(what: &What, at: u64) -> Result<String, serde_json::Error> {
    match what {
        What::Stream(e) => serde_json::to_string(&serde_json::json!({
            "what": "stream", "at": at, "channel": e.channel, "ts": e.ts, "appends": e.appends,
            "bytes": e.bytes, "ending": e.ending })),
        What::Wrote(w) => {
            let mut line = serde_json::json!({
                "what": "wrote", "at": at, "method": w.method, "channel": w.channel, "outcome": w.outcome,
                "key": w.key, "ts": w.ts, "took_ms": w.took_ms, "bytes": w.bytes });
            if let Some(text) = &w.text {
                line["text"] = text.as_str().into();
            }
            serde_json::to_string(&line)
        }
        _ => Ok(String::new()),
    }
}

#[derive(Serialize)]
struct AttemptLine<'a> {
    what: &'static str,
    at: u64,
    number: u64,
    run: u64,
    outcome: &'a str,
    status: u16,
    error: &'a str,
    latency_ms: f64,
    next_retry_ms: u64,
    by: &'a str,
    via: &'a str,
}

#[derive(Serialize)]
struct ArrivedLine<'a> {
    what: &'static str,
    at: u64,
    kind: &'a str,
    detail: &'a str,
    team: &'a str,
    channel: &'a str,
    user: &'a str,
    ts: &'a str,
    thread: &'a str,
    receipt: &'a str,
    via: &'a str,
    retry_num: &'a str,
    retry_reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_time: Option<u64>,
    ack_ms: f64,
    status: u16,
    outcome: &'a str,
    reason: &'a str,
    asks: bool,
    conversation: &'a str,
    path: &'a str,
    content_type: &'a str,
}

/// A record read back: the summary fields, the body (when kept) and the timeline in order.
/// The writer keeps an arrival's body in a key of its own (`…:b:<delivery>`); records
/// written before that carry it in the arrival's line, and folding moves it out.
pub struct Folded {
    pub fields: HashMap<String, String>,
    pub body: Option<String>,
    pub timeline: Vec<Value>,
}

/// Fold a record's lines; `None` when it holds none (or only unreadable ones).
pub fn fold(record: &str) -> Option<Folded> {
    let mut timeline: Vec<Value> = record.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    if timeline.is_empty() {
        return None;
    }
    // In time order; within one millisecond, an arrival, then a run lost, then an attempt,
    // then what the bot did (its writes answer the attempt stamped when it was sent).
    timeline.sort_by_key(|e| {
        let rank = match e["what"].as_str().unwrap_or_default() {
            "arrived" => 0,
            "rerun" | "lost" => 1,
            "attempt" => 2,
            _ => 3,
        };
        (e["at"].as_u64().unwrap_or(0), rank)
    });
    let mut f = Folded { fields: HashMap::new(), body: None, timeline: Vec::new() };
    for mut e in timeline {
        f.apply(&mut e);
        f.timeline.push(e);
    }
    Some(f)
}

impl Folded {
    fn set(&mut self, k: &str, v: impl ToString) {
        self.fields.insert(k.to_string(), v.to_string());
    }

    fn bump(&mut self, k: &str) {
        let n = self.fields.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1;
        self.set(k, n);
    }

    /// What entry `e` says of the delivery (the body moves out of the entry).
    fn apply(&mut self, e: &mut Value) {
        if let Some(Value::String(body)) = e.as_object_mut().and_then(|o| o.remove("body")) {
            self.body = Some(body);
        }
        let e = &*e;
        let at = e["at"].as_u64().unwrap_or(0);
        let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        self.set("updated", at);
        match e["what"].as_str().unwrap_or_default() {
            "arrived" => self.arrived(e, at),
            "absorbed" => self.bump("absorbed"),
            "attempt" => {
                self.set("attempts", e["number"].as_u64().unwrap_or(0));
                self.set("last_status", e["status"].as_u64().unwrap_or(0));
                let outcome = text("outcome");
                if outcome == "delivered" && !self.fields.contains_key("delivered") {
                    // Stamped when sent: delivered at the bot's answer.
                    let took = e["latency_ms"].as_f64().unwrap_or(0.0).round() as u64;
                    self.set("delivered", at.saturating_add(took));
                }
                self.set("status", if outcome == "retried" { "retrying".to_string() } else { outcome });
            }
            "held" => self.set("status", "held"),
            "paused" => self.set("status", "paused"),
            "resumed" => self.set("status", "waiting"),
            "shadow" => self.set("shadow", text("outcome")),
            "superseded" => self.set("status", "superseded"),
            "rerun" => {
                self.set("status", "waiting");
                self.set("runs", e["run"].as_u64().unwrap_or(0));
            }
            "lost" => self.set("status", "lost"),
            "replayed" if text("as").is_empty() => self.set("status", "waiting"),
            "wrote" if text("outcome") == super::SHADOW_KEPT => {
                self.bump("shadow_replies");
                if !self.fields.contains_key("shadow_answered") {
                    self.set("shadow_answered", at);
                }
            }
            "wrote" if answers(&text("outcome")) => {
                self.bump("replies");
                if !self.fields.contains_key("answered") {
                    self.set("answered", at);
                }
            }
            _ => {}
        }
    }
}

impl Folded {
    /// What the arrival says: who, where, when, and the status until a step says more.
    fn arrived(&mut self, e: &Value, at: u64) {
        let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        for k in [
            "kind",
            "detail",
            "team",
            "channel",
            "user",
            "ts",
            "thread",
            "receipt",
            "via",
            "conversation",
            "path",
            "content_type",
        ] {
            let v = text(k);
            if !v.is_empty() {
                self.set(k, v);
            }
        }
        self.set("received", at);
        self.set("asks", if e["asks"] == true { "1" } else { "0" });
        if let Some(t) = e["event_time"].as_u64() {
            self.set("event_time", t);
        }
        if text("via") != "replay" {
            self.set("ack_ms", format!("{:.2}", e["ack_ms"].as_f64().unwrap_or(0.0)));
        }
        if !self.fields.contains_key("status") {
            let status = match e["outcome"].as_str().unwrap_or_default() {
                "accepted" | "answered" => "waiting".to_string(),
                other => other.to_string(),
            };
            self.set("status", status);
        }
    }
}

/// Whether an egress write with this outcome answered the delivery (it reached the thread, or
/// already had).
pub fn answers(outcome: &str) -> bool {
    matches!(outcome, "forwarded" | "replayed_key" | "replayed_retry" | "replayed_rerun" | "reconciled" | "continued")
}

/// What one Slack request adds to its minute of the overview: answered 2xx or not, and the
/// ack's latency bucket.
pub fn minute_fields(status: u16, ack_ms: f64) -> [&'static str; 2] {
    let answer = if (200..300).contains(&status) { "ok" } else { "failed" };
    let bucket = LATENCY_BUCKETS.iter().find(|(le, _)| ack_ms <= *le).map_or("l_inf", |(_, name)| name);
    [answer, bucket]
}

/// The ack latency buckets of the overview (ms, field).
pub const LATENCY_BUCKETS: &[(f64, &str)] =
    &[(10.0, "l10"), (100.0, "l100"), (500.0, "l500"), (1000.0, "l1000"), (2000.0, "l2000"), (3000.0, "l3000")];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Arrival, Attempt};

    fn note(at_ms: u64, what: What) -> Note {
        Note { app: "bot".into(), delivery: "0-a".into(), at_ms, what }
    }

    fn attempt(number: u64, outcome: &'static str, status: u16) -> What {
        What::Attempt(Attempt {
            number,
            run: 1,
            outcome,
            status,
            error: "",
            latency_ms: 3.0,
            next_retry_ms: 0,
            by: "gw-1".into(),
            via: "http",
        })
    }

    #[test]
    fn lines_fold_back_in_time_order_whatever_order_they_were_written_in() {
        let arrival =
            Arrival { outcome: "accepted", channel: "C1".into(), body: Some("{\"a\":1}".into()), ..Arrival::default() };
        // The attempts were appended before the arrival reached the writer.
        let record = [
            note(20, attempt(1, "retried", 503)),
            note(30, attempt(2, "delivered", 200)),
            note(10, What::Arrived(Box::new(arrival))),
        ]
        .iter()
        .map(line)
        .collect::<String>();
        let f = fold(&record).unwrap();
        assert_eq!(f.fields["status"], "delivered");
        assert_eq!((f.fields["attempts"].as_str(), f.fields["received"].as_str()), ("2", "10"));
        assert_eq!(
            (f.fields["channel"].as_str(), f.fields["delivered"].as_str()),
            ("C1", "33"),
            "sent at 30, answered 3 ms later"
        );
        assert_eq!(f.body, None, "the body is kept apart from the lines");
        assert!(!record.contains("{\\\"a\\\":1}"), "{record}");
        let old = format!("{}\n", r#"{"what":"arrived","at":1,"outcome":"accepted","body":"{\"a\":1}"}"#);
        let before = fold(&old).unwrap();
        assert_eq!(before.body.as_deref(), Some("{\"a\":1}"), "a record of the version before");
        assert!(before.timeline[0].get("body").is_none(), "the body is not a timeline entry");
        let whats: Vec<&str> = f.timeline.iter().map(|e| e["what"].as_str().unwrap()).collect();
        assert_eq!(whats, ["arrived", "attempt", "attempt"]);
        assert!(fold("not json\n").is_none());
    }

    #[test]
    fn an_arrival_after_a_step_keeps_the_steps_status() {
        let record = [
            note(5, What::Held),
            note(1, What::Arrived(Box::new(Arrival { outcome: "accepted", ..Arrival::default() }))),
        ]
        .iter()
        .map(line)
        .collect::<String>();
        assert_eq!(fold(&record).unwrap().fields["status"], "held");
    }

    #[test]
    fn within_one_millisecond_the_attempt_comes_before_the_writes_that_answer_it() {
        let wrote = What::Wrote(crate::history::Write {
            method: "chat.postMessage".into(),
            channel: "C1".into(),
            outcome: "forwarded",
            key: "none",
            ts: "1.000001".into(),
            took_ms: 0,
            bytes: 10,
            text: None,
        });
        let lost = What::Rerun { reason: "socket_closed", run: 2 };
        // A bot that acks first writes before its attempt's end is recorded: appended first.
        let record = [note(40, wrote), note(40, attempt(2, "delivered", 200)), note(40, lost)]
            .iter()
            .map(line)
            .collect::<String>();
        let f = fold(&record).unwrap();
        let whats: Vec<&str> = f.timeline.iter().map(|e| e["what"].as_str().unwrap()).collect();
        assert_eq!(whats, ["rerun", "attempt", "wrote"]);
        assert_eq!((f.fields["status"].as_str(), f.fields["replies"].as_str()), ("delivered", "1"));
    }

    #[test]
    fn latency_buckets_and_answers() {
        assert_eq!(minute_fields(200, 3.0), ["ok", "l10"]);
        assert_eq!(minute_fields(503, 2500.0), ["failed", "l3000"]);
        assert_eq!(minute_fields(200, 3001.0), ["ok", "l_inf"]);
        assert!(answers("forwarded") && answers("replayed_rerun") && !answers("withheld_deleted"));
    }
}
