//! What the gateway knows of conversations: the messages it delivered (by channel and thread),
//! the ones deleted or edited since, and which of the bot's posts answer which message. The
//! inbound side writes these records (the workers as they deliver, the ingress as deletions
//! and edits arrive, both off the ack path) and the egress reads them to attribute a reply to
//! the message it answers: the two sides meet here, in the store, and nowhere else.
//!
//! Keys of one channel share the hash tag `{prefix:e:team:channel}`: `…:m:<ts>` a delivered
//! message (its thread, delivery, attempt, app, and `st` = deleted | edited) · `…:t:<thread>`
//! the thread's latest delivered message · `…:p:<ts>` the message a post of the bot answers.
//! Every record lives for the attribution window.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{AsyncCommands, Script};

use super::{Conn, StoreError};
use crate::slack::Conversation;

/// KEYS: the message's record, its thread's latest. ARGV: thread ts, delivery, attempt,
/// window ms, message ts, app, conversation key. The thread's latest moves forward only.
const DELIVERING: &str = r#"
redis.call('HSET', KEYS[1], 'th', ARGV[1], 'd', ARGV[2], 'n', ARGV[3], 'app', ARGV[6], 'k', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local latest = redis.call('GET', KEYS[2])
if not latest or tonumber(ARGV[5]) >= tonumber(latest) then
  redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[4])
end
return 1
"#;

/// KEYS: a message's record. ARGV: its change (deleted | edited). Only a message the gateway
/// delivered has a record; a deletion wins over an edit.
const CHANGED: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == 'edited' and redis.call('HGET', KEYS[1], 'st') == 'deleted' then return 1 end
redis.call('HSET', KEYS[1], 'st', ARGV[1])
return 1
"#;

/// KEYS: the thread's latest delivered message, the posted message's source (for an update or
/// delete of the bot's own post). ARGV: channel key tag, thread ts.
/// Returns {message ts, delivery, attempt, change, app, conversation key} of the delivered
/// message a write answers, or {} when nothing the gateway delivered matches.
const SOURCE: &str = r#"
local source = redis.call('GET', KEYS[2])
local ts = source or redis.call('GET', KEYS[1]) or ARGV[2]
local r = redis.call('HMGET', ARGV[1] .. ':m:' .. ts, 'd', 'n', 'st', 'app', 'k')
if not r[1] then return {} end
return {ts, r[1], r[2] or '1', r[3] or '', r[4] or '', r[5] or ''}
"#;

struct Scripts {
    delivering: Script,
    changed: Script,
    source: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    delivering: Script::new(DELIVERING),
    changed: Script::new(CHANGED),
    source: Script::new(SOURCE),
});

/// What happened to a delivered message since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Deleted,
    Edited,
}

impl Change {
    /// As stored (`st`), and as the egress's notes say it.
    pub fn as_label(self) -> &'static str {
        match self {
            Change::Deleted => "deleted",
            Change::Edited => "edited",
        }
    }

    /// A stored change; `None` for none, and for a value this version does not know (its
    /// replies are posted).
    pub fn from_stored(text: &str) -> Option<Change> {
        match text {
            "deleted" => Some(Change::Deleted),
            "edited" => Some(Change::Edited),
            _ => None,
        }
    }
}

/// The delivered message a write answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub ts: String,
    pub delivery: String,
    /// The attempt (run) the delivery was on when it was last sent.
    pub run: u64,
    pub change: Option<Change>,
    /// The app it was delivered to, and its conversation's key (empty in a record of a version
    /// that kept none).
    pub app: String,
    pub conversation: String,
}

/// A channel of a workspace, where conversations happen.
#[derive(Debug, Clone, Copy)]
pub struct Channel<'a> {
    pub team: &'a str,
    pub channel: &'a str,
}

/// The hash tag of a channel's keys, `{prefix:e:team:channel}`: the conversation records' and
/// the egress's per-channel records (pacing, re-runs) alike.
pub fn channel_tag(prefix: &str, c: Channel<'_>) -> String {
    format!("{{{prefix}:e:{}:{}}}", c.team, c.channel)
}

/// The conversation records of one deployment (see the module doc).
#[derive(Clone)]
pub struct Conversations {
    conn: Conn,
    prefix: Arc<str>,
    /// How long a record lives: the egress's attribution window.
    window: Duration,
}

impl Conversations {
    pub fn new(conn: Conn, prefix: &str, window: Duration) -> Self {
        Conversations { conn, prefix: prefix.into(), window }
    }

    fn tag(&self, c: Channel<'_>) -> String {
        channel_tag(&self.prefix, c)
    }

    /// A worker is about to send attempt `run` of `delivery`, whose message is `c`'s.
    pub async fn delivering(&self, c: &Conversation, delivery: &str, run: u64, app: &str) -> Result<(), StoreError> {
        let tag = self.tag(Channel { team: &c.team, channel: &c.channel });
        let _: i64 = SCRIPTS
            .delivering
            .key(format!("{tag}:m:{}", c.ts))
            .key(format!("{tag}:t:{}", c.thread))
            .arg(&c.thread)
            .arg(delivery)
            .arg(run)
            .arg(self.window.as_millis() as u64)
            .arg(&c.ts)
            .arg(app)
            .arg(c.key())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The message `ts` in `at` was deleted or edited: replies to it are stale from now on.
    pub async fn changed(&self, at: Channel<'_>, ts: &str, change: Change) -> Result<(), StoreError> {
        let key = format!("{}:m:{ts}", self.tag(at));
        let _: i64 = SCRIPTS.changed.key(key).arg(change.as_label()).invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The delivered message a write to `thread` in `at` answers, if any: the source of the
    /// bot's own post `thread` (an update or delete of it), else the thread's latest.
    pub async fn source(&self, at: Channel<'_>, thread: &str) -> Result<Option<Source>, StoreError> {
        let tag = self.tag(at);
        let reply: Vec<String> = SCRIPTS
            .source
            .key(format!("{tag}:t:{thread}"))
            .key(format!("{tag}:p:{thread}"))
            .arg(&tag)
            .arg(thread)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match reply.as_slice() {
            [ts, d, n, st, app, k] => Some(Source {
                ts: ts.clone(),
                delivery: d.clone(),
                run: n.parse().unwrap_or(1),
                change: Change::from_stored(st),
                app: app.clone(),
                conversation: k.clone(),
            }),
            _ => None,
        })
    }

    /// The bot posted `posted_ts` in answer to the delivered message `source_ts`: an update or
    /// delete of that post is attributed to the same source.
    pub async fn posted(&self, at: Channel<'_>, posted_ts: &str, source_ts: &str) -> Result<(), StoreError> {
        let key = format!("{}:p:{posted_ts}", self.tag(at));
        self.conn.clone().pset_ex::<_, _, ()>(key, source_ts, self.window.as_millis() as u64).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_keep_the_values_existing_records_hold() {
        assert_eq!([Change::Deleted, Change::Edited].map(Change::as_label), ["deleted", "edited"]);
        for c in [Change::Deleted, Change::Edited] {
            assert_eq!(Change::from_stored(c.as_label()), Some(c));
        }
        assert_eq!(Change::from_stored(""), None);
        assert_eq!(Change::from_stored("something newer"), None);
    }
}
