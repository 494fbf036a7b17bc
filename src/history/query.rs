//! Reading the history back, for the pages and the CLI: a filtered list, newest first; one
//! delivery's timeline; the overview's minutes. A list scans each app's index newest first
//! in chunks and filters the summaries folded from the timelines in the gateway, so it never
//! reads more than the history holds (`history_max` per app), usually far less (it stops at a
//! page), and never a body (bodies have keys of their own, read by [`show`] alone).

use std::collections::HashMap;
use std::time::Duration;

use redis::RedisResult;
use serde::Serialize;
use serde_json::Value;

use super::fields::{fold, LATENCY_BUCKETS};
pub use super::shadow::{shadow_stats, ShadowStats};
use super::tag;
use crate::store::Conn;

/// Ids read from the index per round trip.
const CHUNK: usize = 200;

/// The arrival's fields kept beside its timeline (`…:s:<delivery>`, a hash), so that a filter
/// on them reads these few bytes of each delivery and the timelines of the matches alone.
pub const SIFTED: [&str; 7] = ["team", "channel", "kind", "detail", "receipt", "ts", "thread"];

/// What the list shows; every field empty or `None` matches everything.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Filter {
    pub apps: Vec<String>,
    pub team: String,
    pub channel: String,
    /// The kind (`event`, `command`, `interactivity`) or the event/command/interaction type.
    pub kind: String,
    /// delivered, waiting, retrying, paused, dead, ignored, duplicate (absorbed a retry or a
    /// copy), held, superseded, expired, cancelled; or `shadow_differs`: copied to the app's
    /// shadow, and only one of the two bots answered.
    pub status: String,
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
    /// A delivery id, an `event_id`, a `trigger_id` or a message `ts`.
    pub search: String,
    /// Mentions and DMs delivered this long ago or longer with no reply attributed to them.
    pub never_answered: Option<Duration>,
    /// Also an operator's replays (arrivals `via = "replay"`), which are left out otherwise
    /// (a delivery searched for by its id is always found).
    pub replays: bool,
}

/// One delivery as the list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub app: String,
    pub id: String,
    pub fields: HashMap<String, String>,
}

impl Summary {
    /// A summary of app `bot`'s delivery `0-abc` with these fields (for tests).
    #[cfg(test)]
    pub(crate) fn of(pairs: &[(&str, &str)]) -> Summary {
        let fields = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Summary { app: "bot".into(), id: "0-abc".into(), fields }
    }

    pub fn get(&self, k: &str) -> &str {
        self.fields.get(k).map_or("", String::as_str)
    }

    pub fn num(&self, k: &str) -> u64 {
        self.get(k).parse().unwrap_or(0)
    }

    /// Arrival (ms since the epoch).
    pub fn received(&self) -> u64 {
        self.num("received")
    }

    /// What the arrival alone decides: team, channel, kind and the search (the fields of
    /// [`SIFTED`]).
    fn arrival_matches(&self, f: &Filter) -> bool {
        let is = |k: &str, want: &str| want.is_empty() || self.get(k) == want;
        let kind_ok = f.kind.is_empty() || self.get("kind") == f.kind || self.get("detail") == f.kind;
        let q = f.search.trim();
        let search_ok = q.is_empty()
            || self.id == q
            || [format!("e:{q}"), format!("t:{q}"), q.to_string()].iter().any(|r| self.get("receipt") == r)
            || self.get("ts") == q
            || self.get("thread") == q;
        is("team", &f.team) && is("channel", &f.channel) && kind_ok && search_ok
    }

    pub(super) fn matches(&self, f: &Filter, now_ms: u64) -> bool {
        let status_ok = match f.status.as_str() {
            "" => true,
            "duplicate" => self.num("absorbed") > 0,
            // Only one of the live bot and its shadow answered the same delivery.
            "shadow_differs" => {
                self.get("shadow") == "copied" && (self.num("replies") > 0) != (self.num("shadow_replies") > 0)
            }
            s => self.get("status") == s,
        };
        let unanswered = f.never_answered.is_none_or(|within| {
            let delivered = self.num("delivered");
            // A duration from a query string can be anything: saturate, never overflow.
            let within = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
            self.get("asks") == "1"
                && self.get("status") == "delivered"
                && self.num("replies") == 0
                && delivered > 0
                && delivered.saturating_add(within) <= now_ms
        });
        // Replays match only when asked for (or named by their id), so "what to replay" never
        // grows with what it replayed.
        let replay_ok = f.replays || self.get("via") != "replay" || self.id == f.search.trim();
        self.arrival_matches(f) && status_ok && unanswered && replay_ok
    }
}

impl Filter {
    /// The fields of [`SIFTED`] this filter decides on.
    fn sifted(&self) -> Vec<&'static str> {
        SIFTED
            .iter()
            .copied()
            .filter(|k| match *k {
                "team" => !self.team.is_empty(),
                "channel" => !self.channel.is_empty(),
                "kind" | "detail" => !self.kind.is_empty(),
                _ => !self.search.trim().is_empty(),
            })
            .collect()
    }

    fn sifts(&self) -> bool {
        !self.sifted().is_empty()
    }
}

/// A page of the list, and whether more matched past it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Page {
    pub rows: Vec<Summary>,
    pub more: bool,
    /// Per app with a shadow, of the rows copied to it: who answered, and how fast.
    pub shadow: Vec<ShadowStats>,
}

/// The newest `limit` deliveries matching `f`, over its apps (all of `apps` when it names
/// none); `cap` bounds how many each app's scan reads.
pub async fn list(conn: &mut Conn, prefix: &str, f: &Filter, limit: usize, cap: usize) -> RedisResult<Page> {
    let now = crate::clock::now_ms();
    let mut rows = Vec::new();
    for app in &f.apps {
        rows.extend(scan(conn, prefix, app, f, limit + 1, cap, now).await?);
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.received()));
    let more = rows.len() > limit;
    rows.truncate(limit);
    let shadow = shadow_stats(&rows);
    Ok(Page { rows, more, shadow })
}

/// Up to `want` matches of one app, newest first, reading at most `cap` ids.
async fn scan(
    conn: &mut Conn,
    prefix: &str,
    app: &str,
    f: &Filter,
    want: usize,
    cap: usize,
    now: u64,
) -> RedisResult<Vec<Summary>> {
    let tag = tag(prefix, app);
    let (max, min) = (f.until_ms.map_or("+inf".to_string(), |u| u.to_string()), f.since_ms.unwrap_or(0));
    let mut found = Vec::new();
    let mut offset = 0;
    // Whether a delivery's timeline decides whether it matches, or its arrival alone does.
    let by_timeline = !f.status.is_empty() || f.never_answered.is_some();
    while found.len() < want && offset < cap {
        let left = want - found.len();
        // Unfiltered, the next `left` are the page (the live poll reads a page, not a chunk).
        let chunk = if by_timeline || f.sifts() { CHUNK } else { left.min(CHUNK) };
        let ids: Vec<String> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(format!("{tag}:idx"))
            .arg(&max)
            .arg(min)
            .arg("LIMIT")
            .arg(offset)
            .arg(chunk)
            .query_async(conn)
            .await?;
        let mut candidates = sift(conn, &tag, app, f, &ids).await?;
        match candidates.get(left) {
            // The arrival decided: the first `left` candidates are the page, and the next
            // round (if one is needed: a record without its arrival) starts after them.
            Some(&next) if !by_timeline => {
                offset += next;
                candidates.truncate(left);
            }
            _ => offset += ids.len(),
        }
        let candidates: Vec<&String> = candidates.into_iter().map(|i| &ids[i]).collect();
        found.extend(summaries(conn, &tag, app, &candidates).await?.into_iter().filter(|s| s.matches(f, now)));
        if ids.len() < chunk {
            break;
        }
    }
    found.truncate(want);
    Ok(found)
}

/// The summaries of `ids` of one app, from their timelines (one pipelined read). A record whose
/// arrival was never noted (a full queue dropped it) is not listed.
async fn summaries(conn: &mut Conn, tag: &str, app: &str, ids: &[&String]) -> RedisResult<Vec<Summary>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut p = redis::pipe();
    for id in ids {
        p.cmd("GET").arg(format!("{tag}:t:{id}"));
    }
    let records: Vec<Option<String>> = p.query_async(conn).await?;
    let summaries = ids.iter().zip(records).filter_map(|(id, record)| {
        let folded = record.as_deref().and_then(fold).filter(|f| f.fields.contains_key("received"))?;
        Some(Summary { app: app.to_string(), id: id.to_string(), fields: folded.fields })
    });
    Ok(summaries.collect())
}

/// The places in `ids` (one chunk) of those whose arrival may match `f`: with a filter on the arrival's fields,
/// only those of [`SIFTED`] that it names are read for each (a delivery without them, written
/// by a version before, stays a candidate); without one, all of them.
async fn sift(conn: &mut Conn, tag: &str, app: &str, f: &Filter, ids: &[String]) -> RedisResult<Vec<usize>> {
    let named = f.sifted();
    if named.is_empty() || ids.is_empty() {
        return Ok((0..ids.len()).collect());
    }
    let mut p = redis::pipe();
    for id in ids {
        p.cmd("HMGET").arg(format!("{tag}:s:{id}")).arg(&named);
    }
    let values: Vec<Vec<Option<String>>> = p.query_async(conn).await?;
    Ok(ids
        .iter()
        .zip(values)
        .enumerate()
        .filter(|(_, (id, v))| {
            if v.iter().all(Option::is_none) {
                return true;
            }
            let fields = named.iter().zip(v).filter_map(|(k, v)| Some((k.to_string(), v.clone()?))).collect();
            Summary { app: app.to_string(), id: id.to_string(), fields }.arrival_matches(f)
        })
        .map(|(i, _)| i)
        .collect())
}

/// One delivery's whole record: its summary, its body (when kept) and its timeline in order.
#[derive(Debug, Clone, Serialize)]
pub struct Detail {
    pub summary: Summary,
    pub body: Option<String>,
    pub timeline: Vec<Value>,
    /// The delivery's trace id, when traces are on and it was sampled (set by its reader).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

impl Detail {
    /// Drop the replies' text from the timeline unless `show_text` is on now (text kept while
    /// it was on is shown only while it is).
    pub fn hide_text(&mut self, show_text: bool) {
        if show_text {
            return;
        }
        for e in &mut self.timeline {
            if let Some(o) = e.as_object_mut() {
                o.remove("text");
            }
        }
    }
}

/// One delivery: its timeline and, from its own key, its body.
pub async fn show(conn: &mut Conn, prefix: &str, app: &str, id: &str) -> RedisResult<Option<Detail>> {
    let tag = tag(prefix, app);
    let (record, body): (Option<String>, Option<Vec<u8>>) = redis::pipe()
        .cmd("GET")
        .arg(format!("{tag}:t:{id}"))
        .cmd("GET")
        .arg(format!("{tag}:b:{id}"))
        .query_async(conn)
        .await?;
    Ok(record.as_deref().and_then(fold).map(|f| Detail {
        summary: Summary { app: app.to_string(), id: id.to_string(), fields: f.fields },
        body: body.map(|b| String::from_utf8_lossy(&b).into_owned()).or(f.body),
        timeline: f.timeline,
        trace_id: None,
    }))
}

/// What one app's Slack traffic came to over some minutes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub minutes: u64,
    pub fields: HashMap<String, u64>,
}

impl Counts {
    pub fn get(&self, k: &str) -> u64 {
        self.fields.get(k).copied().unwrap_or(0)
    }

    /// Slack's requests answered (2xx or not).
    pub fn requests(&self) -> u64 {
        self.get("ok") + self.get("failed")
    }

    /// The share of Slack's requests that did not get a 2xx.
    pub fn failed_share(&self) -> Option<f64> {
        let n = self.requests();
        (n > 0).then(|| self.get("failed") as f64 / n as f64)
    }

    /// The smallest latency bound (ms) that 99 % of the acks were within; `None` past 3 s.
    pub fn ack_p99_ms(&self) -> Option<f64> {
        let n = self.requests();
        if n == 0 {
            return Some(0.0);
        }
        let mut seen = 0;
        for (le, field) in LATENCY_BUCKETS {
            seen += self.get(field);
            if seen as f64 >= 0.99 * n as f64 {
                return Some(*le);
            }
        }
        None
    }
}

/// `app`'s counts over the last `minutes` minutes, this one included.
pub async fn counts(conn: &mut Conn, prefix: &str, app: &str, minutes: u64, now_ms: u64) -> RedisResult<Counts> {
    let tag = tag(prefix, app);
    let now = now_ms / 60_000;
    let mut p = redis::pipe();
    for m in (now + 1).saturating_sub(minutes)..=now {
        p.cmd("HGETALL").arg(format!("{tag}:m:{m}"));
    }
    let all: Vec<HashMap<String, u64>> = p.query_async(conn).await?;
    let mut c = Counts { minutes, fields: HashMap::new() };
    for minute in all {
        for (k, v) in minute {
            *c.fields.entry(k).or_default() += v;
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(pairs: &[(&str, &str)]) -> Summary {
        Summary::of(pairs)
    }

    #[test]
    fn filters_match_what_a_person_asks_for() {
        let s = summary(&[
            ("channel", "C1"),
            ("kind", "event"),
            ("detail", "app_mention"),
            ("status", "delivered"),
            ("receipt", "e:Ev1"),
            ("ts", "1.5"),
            ("asks", "1"),
            ("delivered", "1000"),
        ]);
        let f = |g: fn(&mut Filter)| {
            let mut f = Filter::default();
            g(&mut f);
            f
        };
        assert!(s.matches(&f(|f| f.channel = "C1".into()), 0));
        assert!(!s.matches(&f(|f| f.channel = "C2".into()), 0));
        assert!(s.matches(&f(|f| f.kind = "app_mention".into()), 0));
        assert!(s.matches(&f(|f| f.kind = "event".into()), 0));
        assert!(!s.matches(&f(|f| f.status = "dead".into()), 0));
        assert!(!s.matches(&f(|f| f.status = "duplicate".into()), 0));
        for q in ["Ev1", "e:Ev1", "1.5", "0-abc"] {
            let filter = Filter { search: q.into(), ..Filter::default() };
            assert!(s.matches(&filter, 0), "{q}");
        }
        let never = f(|f| f.never_answered = Some(Duration::from_secs(60)));
        assert!(!s.matches(&never, 30_000), "not yet a minute");
        assert!(s.matches(&never, 61_000));
        let answered = summary(&[("asks", "1"), ("status", "delivered"), ("delivered", "1000"), ("replies", "1")]);
        assert!(!answered.matches(&never, 61_000));
        let forever = f(|f| f.never_answered = Some(Duration::from_millis(u64::MAX)));
        assert!(!s.matches(&forever, 61_000), "a huge wait saturates");
        let forever = f(|f| f.never_answered = Some(Duration::MAX));
        assert!(!s.matches(&forever, 61_000), "a wait past u64 ms saturates");
    }

    #[test]
    fn an_operators_replay_is_listed_only_when_asked_for() {
        let replay = summary(&[("status", "delivered"), ("via", "replay")]);
        assert!(!replay.matches(&Filter::default(), 0));
        assert!(replay.matches(&Filter { replays: true, ..Filter::default() }, 0));
        assert!(replay.matches(&Filter { search: "0-abc".into(), ..Filter::default() }, 0), "found by its id");
        assert!(summary(&[("status", "delivered"), ("via", "http")]).matches(&Filter::default(), 0));
    }

    #[test]
    fn the_p99_and_the_failed_share() {
        let mut c = Counts::default();
        assert_eq!(c.failed_share(), None);
        c.fields.insert("ok".into(), 98);
        c.fields.insert("failed".into(), 2);
        c.fields.insert("l10".into(), 98);
        c.fields.insert("l3000".into(), 2);
        assert_eq!(c.failed_share(), Some(0.02));
        assert_eq!(c.ack_p99_ms(), Some(3000.0));
        c.fields.insert("l10".into(), 100);
        c.fields.insert("l3000".into(), 0);
        assert_eq!(c.ack_p99_ms(), Some(10.0));
    }
}
