//! What the gateway saw, in Redis: the writer's commands (own posts, threads) and the egress's
//! reads (does it see an app's posts in a channel, is this post among them, a thread whole).

use std::time::Duration;

use redis::{AsyncCommands, Pipeline};
use serde_json::Value;

use super::message::{Op, OwnPost};
use super::Keys;
use crate::store::Conn;

/// At most this many own posts are kept per channel (the newest).
const OWN_MAX: isize = 1_000;
/// At most this many messages per thread record; past it the thread is no longer held whole.
const THREAD_MAX: usize = 1_000;
/// A thread record's field that says it missed a message: never answered from.
const LOST: &str = "~lost";
/// The cursor of a page of the record's, so that its next page comes from the record too.
const CURSOR: &str = "sgrec_";

/// One change to a thread's record. A root starts it (for `replies_keep`); the rest apply only
/// to a record that has its root, so a thread the gateway did not see begin is never held. A
/// message already there is replaced only by an edit (a redelivered event never undoes one).
const THREAD: &str = r#"
local k, op, ts = KEYS[1], ARGV[1], ARGV[2]
if op == 'root' then
  local fresh = redis.call('EXISTS', k) == 0
  redis.call('HSETNX', k, ts, ARGV[3])
  if fresh then redis.call('PEXPIRE', k, ARGV[4]) end
  return 1
end
if redis.call('EXISTS', k) == 0 then return 0 end
if op == 'lost' then
  redis.call('HSET', k, '~lost', '1')
elseif op == 'reply' then
  if redis.call('HEXISTS', k, ts) == 0 and redis.call('HLEN', k) >= tonumber(ARGV[5]) then
    redis.call('HSET', k, '~lost', '1')
  else
    redis.call('HSETNX', k, ts, ARGV[3])
  end
elseif op == 'edit' then
  if redis.call('HEXISTS', k, ts) == 1 then redis.call('HSET', k, ts, ARGV[3]) end
elseif op == 'delete' then
  redis.call('HDEL', k, ts)
  if ts == ARGV[6] then
    if redis.call('HLEN', k) - redis.call('HEXISTS', k, '~lost') == 0 then
      redis.call('DEL', k)
    else
      redis.call('HSET', k, ts, ARGV[3])
    end
  end
end
return 1
"#;

/// An own post as a member of the channel's sorted set of own posts.
impl OwnPost {
    fn member(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.ts,
            self.thread_ts.as_deref().unwrap_or("-"),
            or_dash(&self.user),
            or_dash(&self.bot_id),
            self.digest
        )
    }

    fn parse(member: &str) -> Option<OwnPost> {
        let mut f = member.split(' ');
        let mut next = || f.next().map(|s| if s == "-" { String::new() } else { s.to_string() });
        let (ts, thread, user, bot_id, digest) = (next()?, next()?, next()?, next()?, next()?);
        Some(OwnPost { ts, thread_ts: (!thread.is_empty()).then_some(thread), user, bot_id, digest })
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// A Slack `ts` as seconds, for scores.
fn seconds(ts: &str) -> f64 {
    ts.parse().unwrap_or(0.0)
}

/// How long what the writer writes is kept.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    /// Own posts: as long as a retry of an uncertain post may come (`retry_window`).
    pub own: Duration,
    /// "Sees this app's posts here": `evidence_recent`.
    pub recent: Duration,
    /// A thread record after its root: `replies_keep`.
    pub thread: Duration,
}

/// Add one channel's changes to `p`.
pub fn add(p: &mut Pipeline, keys: &Keys, ops: &[Op], keep: Keep, now_ms: u64) {
    for op in ops {
        let (kind, thread, ts, message) = match op {
            Op::Own(post) => {
                add_own(p, keys, post, keep, now_ms);
                continue;
            }
            Op::Root { ts, message } => ("root", ts, ts, message.clone()),
            Op::Reply { thread, ts, message } => ("reply", thread, ts, message.clone()),
            Op::Edit { thread, ts, message } => ("edit", thread, ts, message.clone()),
            Op::Delete { thread, ts } => ("delete", thread, ts, tombstone(ts)),
            Op::Lost { thread } => ("lost", thread, thread, String::new()),
        };
        p.cmd("EVAL")
            .arg(THREAD)
            .arg(1)
            .arg(keys.thread(thread))
            .arg(kind)
            .arg(ts)
            .arg(message)
            .arg(keep.thread.as_millis() as u64)
            .arg(THREAD_MAX)
            .arg(thread)
            .ignore();
    }
}

fn add_own(p: &mut Pipeline, keys: &Keys, post: &OwnPost, keep: Keep, now_ms: u64) {
    let own = keys.own();
    let oldest = now_ms.saturating_sub(keep.own.as_millis() as u64) as f64 / 1000.0;
    p.zadd(&own, post.member(), seconds(&post.ts)).ignore();
    p.cmd("ZREMRANGEBYSCORE").arg(&own).arg("-inf").arg(format!("({oldest:.3}")).ignore();
    p.cmd("ZREMRANGEBYRANK").arg(&own).arg(0).arg(-(OWN_MAX + 1)).ignore();
    p.pexpire(&own, keep.own.as_millis() as i64).ignore();
    for id in [&post.user, &post.bot_id].into_iter().filter(|id| !id.is_empty()) {
        p.cmd("SET").arg(keys.sees(id)).arg(1).arg("PX").arg(keep.recent.as_millis() as u64).ignore();
    }
}

/// What Slack shows for a deleted root that has replies.
fn tombstone(ts: &str) -> String {
    serde_json::json!({
        "type": "message", "subtype": "tombstone", "text": "This message was deleted.", "user": "USLACKBOT",
        "hidden": true, "ts": ts, "thread_ts": ts,
    })
    .to_string()
}

/// The egress's reads, on its connection.
#[derive(Clone)]
pub struct Record {
    conn: Conn,
    prefix: String,
}

/// Who posted: a token's bot user and bot id.
pub struct Author<'a> {
    pub user: &'a str,
    pub bot_id: &'a str,
}

impl Author<'_> {
    fn posted(&self, p: &OwnPost) -> bool {
        (!self.bot_id.is_empty() && p.bot_id == self.bot_id) || (!self.user.is_empty() && p.user == self.user)
    }
}

impl Record {
    pub fn new(conn: Conn, prefix: &str) -> Self {
        Record { conn, prefix: prefix.to_string() }
    }

    /// Whether the gateway received one of `who`'s own posts in this channel recently.
    pub async fn sees(&self, team: &str, channel: &str, who: &Author<'_>) -> redis::RedisResult<bool> {
        let keys = Keys::new(&self.prefix, team, channel);
        let ids: Vec<String> =
            [who.user, who.bot_id].iter().filter(|id| !id.is_empty()).map(|id| keys.sees(id)).collect();
        if ids.is_empty() {
            return Ok(false);
        }
        let n: u32 = self.conn.clone().exists(ids).await?;
        Ok(n > 0)
    }

    /// `who`'s own post of the text with `digest` in the channel (and `thread`), since `since_ms`.
    pub async fn own_post(
        &self,
        (team, channel, thread): (&str, &str, Option<&str>),
        digest: &str,
        who: &Author<'_>,
        since_ms: u64,
    ) -> redis::RedisResult<Option<OwnPost>> {
        let key = Keys::new(&self.prefix, team, channel).own();
        let since = format!("{:.3}", since_ms as f64 / 1000.0);
        let members: Vec<String> = self.conn.clone().zrangebyscore(key, since, "+inf").await?;
        Ok(members
            .iter()
            .filter_map(|m| OwnPost::parse(m))
            .find(|p| p.digest == digest && who.posted(p) && p.thread_ts.as_deref() == thread))
    }

    /// A thread's messages, oldest first, when the record holds it from its root and missed
    /// nothing; `None` otherwise.
    pub async fn thread(&self, team: &str, channel: &str, ts: &str) -> redis::RedisResult<Option<Vec<Value>>> {
        let key = Keys::new(&self.prefix, team, channel).thread(ts);
        let fields: Vec<(String, String)> = self.conn.clone().hgetall(key).await?;
        if !fields.iter().any(|(k, _)| k == ts) || fields.iter().any(|(k, _)| k == LOST) {
            return Ok(None);
        }
        let mut messages: Vec<(TsKey, Value)> =
            fields.into_iter().filter_map(|(k, v)| Some((TsKey::of(&k)?, serde_json::from_str(&v).ok()?))).collect();
        messages.sort_by_key(|m| m.0);
        Ok(Some(messages.into_iter().map(|(_, m)| m).collect()))
    }
}

/// A `ts` in an order that compares right (`10.000001` after `9.000002`): seconds, then micros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct TsKey(u64, u64);

impl TsKey {
    fn of(ts: &str) -> Option<TsKey> {
        let (s, f) = ts.split_once('.').unwrap_or((ts, "0"));
        let micros = format!("{f:0<6}");
        Some(TsKey(s.parse().ok()?, micros.get(..6)?.parse().ok()?))
    }
}

/// A `conversations.replies` call's paging, as Slack takes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepliesQuery {
    pub channel: String,
    pub ts: String,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
    pub oldest: Option<String>,
    pub latest: Option<String>,
    pub inclusive: bool,
}

impl RepliesQuery {
    /// From the call's arguments (form, JSON or query, already merged).
    pub fn from_args(arg: impl Fn(&str) -> Option<String>) -> Option<RepliesQuery> {
        let truthy = |v: Option<String>| v.is_some_and(|v| v == "true" || v == "1");
        Some(RepliesQuery {
            channel: arg("channel").filter(|c| !c.is_empty())?,
            ts: arg("ts").filter(|t| TsKey::of(t).is_some())?,
            limit: arg("limit").and_then(|l| l.parse().ok()),
            cursor: arg("cursor").filter(|c| !c.is_empty()),
            oldest: arg("oldest"),
            latest: arg("latest"),
            inclusive: truthy(arg("inclusive")),
        })
    }

    /// The cursor is one of the record's pages.
    pub fn continues_record(&self) -> bool {
        self.cursor.as_deref().is_some_and(|c| c.starts_with(CURSOR))
    }

    /// Slack's answer from `messages` (oldest first): the ones in `oldest`..`latest`, from the
    /// cursor on, at most `limit` (Slack's default and cap 1,000; `page` caps it further, as
    /// Slack's tier does), with the cursor of the rest. `None` for a cursor not of ours.
    pub fn page(&self, messages: &[Value], page: usize) -> Option<Value> {
        let from = match &self.cursor {
            None => None,
            Some(c) => Some(TsKey::of(c.strip_prefix(CURSOR)?)?),
        };
        let bound = |b: &Option<String>| b.as_deref().and_then(TsKey::of);
        let (oldest, latest) = (bound(&self.oldest), bound(&self.latest));
        let inside = |t: TsKey| {
            let above = oldest.is_none_or(|o| if self.inclusive { t >= o } else { t > o });
            let below = latest.is_none_or(|l| if self.inclusive { t <= l } else { t < l });
            above && below && from.is_none_or(|f| t >= f)
        };
        let ts_of = |m: &Value| m.get("ts").and_then(Value::as_str).and_then(TsKey::of);
        let mut left = messages.iter().filter(|m| ts_of(m).is_some_and(inside));
        let limit = self.limit.filter(|l| *l > 0).unwrap_or(1_000).min(1_000).min(page.max(1));
        let shown: Vec<Value> = left.by_ref().take(limit).cloned().collect();
        let next = left.next().and_then(|m| m.get("ts").and_then(Value::as_str)).map(|ts| format!("{CURSOR}{ts}"));
        Some(serde_json::json!({
            "ok": true,
            "messages": shown,
            "has_more": next.is_some(),
            "response_metadata": { "next_cursor": next.unwrap_or_default() },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn thread() -> Vec<Value> {
        ["1.000001", "1.000002", "1.000010", "2.000000"].iter().map(|ts| json!({"ts": ts, "text": ts})).collect()
    }

    fn shown(v: &Value) -> Vec<&str> {
        v["messages"].as_array().unwrap().iter().map(|m| m["ts"].as_str().unwrap()).collect()
    }

    #[test]
    fn pages_follow_slacks_paging() {
        let q = RepliesQuery { channel: "C1".into(), ts: "1.000001".into(), limit: Some(2), ..Default::default() };
        let first = q.page(&thread(), 1_000).unwrap();
        assert_eq!(shown(&first), ["1.000001", "1.000002"]);
        assert_eq!(first["has_more"], true);
        let cursor = first["response_metadata"]["next_cursor"].as_str().unwrap().to_string();
        let q2 = RepliesQuery { cursor: Some(cursor), ..q.clone() };
        assert!(q2.continues_record());
        let second = q2.page(&thread(), 1_000).unwrap();
        assert_eq!(shown(&second), ["1.000010", "2.000000"]);
        assert_eq!(
            (second["has_more"].clone(), second["response_metadata"]["next_cursor"].clone()),
            (json!(false), json!(""))
        );
        // A tier's page caps the limit; a cursor not of ours is refused.
        assert_eq!(shown(&RepliesQuery { limit: None, ..q.clone() }.page(&thread(), 3).unwrap()).len(), 3);
        assert!(RepliesQuery { cursor: Some("bmV4dA==".into()), ..q.clone() }.page(&thread(), 9).is_none());
    }

    #[test]
    fn oldest_and_latest_are_exclusive_unless_inclusive() {
        let q = RepliesQuery { oldest: Some("1.000002".into()), latest: Some("2.000000".into()), ..Default::default() };
        assert_eq!(shown(&q.page(&thread(), 1_000).unwrap()), ["1.000010"]);
        let q = RepliesQuery { inclusive: true, ..q };
        assert_eq!(shown(&q.page(&thread(), 1_000).unwrap()), ["1.000002", "1.000010", "2.000000"]);
    }

    #[test]
    fn an_own_post_round_trips_through_its_member() {
        let p = OwnPost {
            ts: "1.2".into(),
            thread_ts: None,
            user: "UBOT".into(),
            bot_id: String::new(),
            digest: "ab".into(),
        };
        assert_eq!(OwnPost::parse(&p.member()), Some(p.clone()));
        let who = Author { user: "UBOT", bot_id: "BBOT" };
        assert!(who.posted(&p));
        assert!(!Author { user: "U2", bot_id: "" }.posted(&p));
        assert!(TsKey::of("10.000001") > TsKey::of("9.000002"), "not as strings");
        assert!(TsKey::of("1.1") == TsKey::of("1.100000"));
    }
}
