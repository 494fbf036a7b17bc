//! How notes become the fields of a delivery's history hash, and what the overview counts.
//!
//! The notes of one delivery can reach the writer out of order (the worker may attempt before
//! the ingress has queued what it answered), so the arrival sets the status only when none is
//! there yet (`HSETNX`); every later step sets it outright.

use serde_json::{json, Value};

use super::{status_after, Note, What};

/// The summary fields the list reads (one `HMGET` per delivery).
pub const SUMMARY: &[&str] = &[
    "kind",
    "detail",
    "team",
    "channel",
    "user",
    "ts",
    "thread",
    "receipt",
    "via",
    "received",
    "event_time",
    "ack_ms",
    "status",
    "attempts",
    "last_status",
    "replies",
    "absorbed",
    "asks",
    "delivered",
    "answered",
    "conversation",
];

/// What one batch does to one delivery's hash.
#[derive(Debug, Default)]
pub struct Fold {
    pub set: Vec<(&'static str, String)>,
    /// Set only when absent.
    pub set_nx: Vec<(&'static str, String)>,
    pub incr: Vec<(&'static str, i64)>,
    /// Timeline entries: (field name, JSON).
    pub events: Vec<(String, String)>,
    /// The arrival's time, for the index.
    pub arrived_ms: Option<u64>,
}

impl Fold {
    /// Fold `note` in; `seq` makes its timeline field unique within this writer.
    pub fn add(&mut self, note: &Note, seq: u64) {
        let entry = self.fields(note);
        if let Some(status) = status_after(&note.what) {
            match &note.what {
                What::Arrived(_) => self.set_nx.push(("status", status.into())),
                _ => self.set.push(("status", status.into())),
            }
        }
        self.set.push(("updated", note.at_ms.to_string()));
        let mut entry = entry;
        entry["at"] = json!(note.at_ms);
        self.events.push((format!("e:{:013}:{seq}", note.at_ms), entry.to_string()));
    }

    /// The summary fields `note` sets, and its timeline entry.
    fn fields(&mut self, note: &Note) -> Value {
        match &note.what {
            What::Arrived(a) => {
                self.arrived_ms = Some(note.at_ms);
                let text = |v: &str| v.to_string();
                for (k, v) in [
                    ("kind", text(a.kind)),
                    ("detail", a.detail.clone()),
                    ("team", a.team.clone()),
                    ("channel", a.channel.clone()),
                    ("user", a.user.clone()),
                    ("ts", a.ts.clone()),
                    ("thread", a.thread_ts.clone()),
                    ("receipt", a.receipt.clone()),
                    ("via", text(a.via)),
                    ("received", note.at_ms.to_string()),
                    ("ack_ms", if a.via == "replay" { String::new() } else { format!("{:.2}", a.ack_ms) }),
                    ("asks", if a.asks { "1" } else { "0" }.into()),
                    ("conversation", a.conversation.clone()),
                    ("path", a.path.clone()),
                    ("content_type", a.content_type.clone()),
                ] {
                    if !v.is_empty() {
                        self.set.push((k, v));
                    }
                }
                if let Some(t) = a.event_time {
                    self.set.push(("event_time", t.to_string()));
                }
                if let Some(body) = &a.body {
                    self.set.push(("body", String::from_utf8_lossy(body).into_owned()));
                }
                json!({ "what": "arrived", "status": a.status, "outcome": a.outcome, "ack_ms": a.ack_ms,
                        "retry_num": a.retry_num, "retry_reason": a.retry_reason, "reason": a.reason, "via": a.via })
            }
            What::Absorbed { retry_num, retry_reason, outcome, ack_ms, via } => {
                self.incr.push(("absorbed", 1));
                json!({ "what": "absorbed", "retry_num": retry_num, "retry_reason": retry_reason,
                        "outcome": outcome, "ack_ms": ack_ms, "via": via })
            }
            What::Attempt(a) => {
                self.set.push(("attempts", a.number.to_string()));
                self.set.push(("last_status", a.status.to_string()));
                if a.outcome == "delivered" {
                    self.set_nx.push(("delivered", note.at_ms.to_string()));
                }
                json!({ "what": "attempt", "number": a.number, "outcome": a.outcome, "status": a.status,
                        "error": a.error, "latency_ms": a.latency_ms, "next_retry_ms": a.next_retry_ms, "by": a.by })
            }
            What::Held => json!({ "what": "held" }),
            What::Replayed { as_id } => json!({ "what": "replayed", "as": as_id }),
            What::Answered { status, ack_ms, kind } => {
                json!({ "what": "answered", "status": status, "ack_ms": ack_ms, "kind": kind })
            }
            What::Superseded { by } => json!({ "what": "superseded", "by": by }),
            What::Wrote(w) => {
                if crate::history::fields::answers(w.outcome) {
                    self.incr.push(("replies", 1));
                    self.set_nx.push(("answered", note.at_ms.to_string()));
                }
                json!({ "what": "wrote", "method": w.method, "channel": w.channel, "outcome": w.outcome,
                        "key": w.key, "ts": w.ts, "took_ms": w.took_ms })
            }
        }
    }
}

/// Whether an egress write with this outcome answered the delivery (it reached the thread, or
/// already had).
pub fn answers(outcome: &str) -> bool {
    matches!(outcome, "forwarded" | "replayed_key" | "replayed_retry" | "replayed_rerun" | "reconciled")
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

    fn note(what: What) -> Note {
        Note { app: "bot".into(), delivery: "0-a".into(), at_ms: 1_700_000_000_000, what }
    }

    #[test]
    fn an_arrival_sets_the_status_only_when_none_is_there_and_an_attempt_sets_it_outright() {
        let mut f = Fold::default();
        f.add(
            &note(What::Arrived(Box::new(Arrival { outcome: "accepted", channel: "C1".into(), ..Arrival::default() }))),
            1,
        );
        assert_eq!(f.set_nx, vec![("status", "waiting".to_string())]);
        assert!(f.set.contains(&("channel", "C1".to_string())));
        assert_eq!(f.arrived_ms, Some(1_700_000_000_000));
        let attempt = Attempt {
            number: 2,
            outcome: "delivered",
            status: 200,
            error: "",
            latency_ms: 3.0,
            next_retry_ms: 0,
            by: "gw-1".into(),
        };
        f.add(&note(What::Attempt(attempt)), 2);
        assert!(f.set.contains(&("status", "delivered".to_string())));
        assert_eq!(f.events.len(), 2);
        assert!(f.events[1].0.starts_with("e:1700000000000:2"));
        let entry: Value = serde_json::from_str(&f.events[1].1).unwrap();
        assert_eq!(entry["by"], "gw-1");
    }

    #[test]
    fn latency_buckets_and_answers() {
        assert_eq!(minute_fields(200, 3.0), ["ok", "l10"]);
        assert_eq!(minute_fields(503, 2500.0), ["failed", "l3000"]);
        assert_eq!(minute_fields(200, 3001.0), ["ok", "l_inf"]);
        assert!(answers("forwarded") && answers("replayed_rerun") && !answers("withheld_deleted"));
    }
}
