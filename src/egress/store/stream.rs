//! The open streams the egress saw start (`chat.startStream`), under their channel's tag:
//! `…:sm:<ts>` the stream (its state, why, appends, bytes, when it began and was last called,
//! when the gateway last edited it, whether an edit waits, its delivery and app) and
//! `…:sx:<ts>` its text so far, bounded. Both live for [`STREAM_TTL`] past the last call; no
//! token is kept. A stream's call reads its source (the delivered message it answers, through
//! the post's `…:p:` record) in the same script: one Redis call per append.
//!
//! States: `open` (Slack streams it), `edits` (the gateway ended it and continues the answer as
//! edits of the message), `stopped` (its stop went through, or its last edit), `closed` (the
//! gateway closed it: its question is gone).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::{EgressStore, Place};
use crate::outbox::{Change, Source};
use crate::store::StoreError;

/// How long a stream's records live past its last call: past Slack's own expiry (about five
/// minutes from its start), so an answer the gateway continues as edits is still whole.
pub const STREAM_TTL: Duration = Duration::from_secs(15 * 60);
/// The most text kept per stream: Slack's limit of a message's text.
pub const STREAM_TEXT_CAP: usize = 40_000;

/// Lua shared by the stream scripts: `source(tag, posted)` the delivered message a post
/// answers ({ts, delivery, run, change, app, conversation}, or {}), `keep(sm, sx, ttl)`.
const HELPERS: &str = r#"
local function source(tag, p)
  local src = redis.call('GET', p)
  if not src then return {} end
  local r = redis.call('HMGET', tag .. ':m:' .. src, 'd', 'n', 'st', 'app', 'k')
  if not r[1] then return {} end
  return {src, r[1], r[2] or '1', r[3] or '', r[4] or '', r[5] or ''}
end
local function keep(sm, sx, ttl)
  redis.call('PEXPIRE', sm, ttl)
  redis.call('PEXPIRE', sx, ttl)
end
local function add(sm, sx, text, cap)
  local have = redis.call('STRLEN', sx)
  if have + #text > cap then
    text = string.sub(text, 1, math.max(cap - have, 0))
    redis.call('HSET', sm, 'full', 1)
  end
  redis.call('APPEND', sx, text)
  redis.call('HINCRBY', sm, 'b', #text)
  return #text
end
"#;

/// KEYS: the stream, its text. ARGV: text, now ms, ttl ms, cap, delivery, app.
const OPEN: &str = r#"
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], 'st', 'open', 'n', 0, 'b', 0, 'at', ARGV[2], 'la', ARGV[2], 'd', ARGV[5], 'app', ARGV[6])
add(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[4]))
keep(KEYS[1], KEYS[2], ARGV[3])
return 1
"#;

/// KEYS: the stream, its text, the post's source record. ARGV: channel tag, text, now ms,
/// ttl ms, cap, class (append | stop), withhold when edited (0/1), ms between edits.
///
/// Returns {what, {source}, a, b}: `none` (not a stream the gateway saw start), `stopped` or
/// `closed` (as it is), `gone` (its question is gone: closed now, `a` = why), `open` (`a` = the
/// appends so far, `b` = the bytes this call added), `edit` (`a` = the whole text to edit the
/// message to, now), `wait` (`a` = when the coalesced edit is due, ms).
const CALL: &str = r#"
local tag, text, now, ttl, cap, class = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6]
local st = redis.call('HGET', KEYS[1], 'st')
local src = source(tag, KEYS[3])
if not st then return {'none', src} end
if st == 'stopped' or st == 'closed' then return {st, src} end
if class == 'append' and (src[4] == 'deleted' or (src[4] == 'edited' and ARGV[7] == '1')) then
  redis.call('HSET', KEYS[1], 'st', 'closed', 'why', src[4], 'la', now)
  keep(KEYS[1], KEYS[2], ttl)
  return {'gone', src, src[4]}
end
local added = add(KEYS[1], KEYS[2], text, cap)
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HSET', KEYS[1], 'la', now)
keep(KEYS[1], KEYS[2], ttl)
if st == 'open' then return {'open', src, n, added} end
local lu = tonumber(redis.call('HGET', KEYS[1], 'lu')) or 0
if class == 'stop' or now >= lu + tonumber(ARGV[8]) then
  redis.call('HSET', KEYS[1], 'lu', now, 'pend', 0)
  if class == 'stop' then redis.call('HSET', KEYS[1], 'st', 'stopped') end
  return {'edit', src, redis.call('GET', KEYS[2]) or ''}
end
redis.call('HSET', KEYS[1], 'pend', 1)
return {'wait', src, lu + tonumber(ARGV[8])}
"#;

/// KEYS: the stream, its text. ARGV: why (lost | expired), now ms, stop (0/1).
/// The gateway ends the stream and continues it as edits: the whole text, to edit the message
/// to now (`false` when it is no longer open: another call settled it).
const SETTLE: &str = r#"
local st = redis.call('HGET', KEYS[1], 'st')
if st ~= 'open' then return false end
redis.call('HSET', KEYS[1], 'st', ARGV[3] == '1' and 'stopped' or 'edits', 'why', ARGV[1], 'lu', ARGV[2], 'pend', 0)
return redis.call('GET', KEYS[2]) or ''
"#;

/// KEYS: the stream, its text. ARGV: now ms, ms between edits.
/// A coalesced edit that is due: the whole text (`false`: none waits, or not yet).
const FLUSH: &str = r#"
if redis.call('HGET', KEYS[1], 'pend') ~= '1' then return false end
local lu = tonumber(redis.call('HGET', KEYS[1], 'lu')) or 0
if tonumber(ARGV[1]) < lu + tonumber(ARGV[2]) then return false end
redis.call('HSET', KEYS[1], 'lu', ARGV[1], 'pend', 0)
return redis.call('GET', KEYS[2]) or ''
"#;

/// KEYS: the stream, its text. ARGV: bytes to take back, the append's number.
/// Slack refused an append: its text is taken back, unless another append came since.
const UNDO: &str = r#"
if tonumber(redis.call('HGET', KEYS[1], 'n')) ~= tonumber(ARGV[2]) then return 0 end
local len = redis.call('STRLEN', KEYS[2])
local keep = len - tonumber(ARGV[1])
if keep <= 0 then redis.call('SET', KEYS[2], '', 'KEEPTTL') else
  redis.call('SET', KEYS[2], redis.call('GETRANGE', KEYS[2], 0, keep - 1), 'KEEPTTL')
end
redis.call('HINCRBY', KEYS[1], 'n', -1)
redis.call('HINCRBY', KEYS[1], 'b', -tonumber(ARGV[1]))
return 1
"#;

/// KEYS: the stream, its text. ARGV: the re-run's start text, now ms, ttl ms, cap.
/// A run lost with its bot left the stream open (or continued as edits); its re-run's start
/// was handed that stream: from now on the answer is the re-run's alone, continued as edits of
/// the message (the lost run's partial text is dropped, never given twice). Returns the state
/// it was in (`false`: not a stream still taking the answer).
const RERUN: &str = r#"
local st = redis.call('HGET', KEYS[1], 'st')
if st ~= 'open' and st ~= 'edits' then return false end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'st', 'edits', 'why', 'rerun', 'n', 0, 'b', 0, 'lu', ARGV[2], 'la', ARGV[2], 'pend', 0)
add(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[4]))
keep(KEYS[1], KEYS[2], ARGV[3])
return st
"#;

/// KEYS: the stream. ARGV: its state now (stopped).
const END: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'st', ARGV[1])
return 1
"#;

struct Scripts {
    open: Script,
    call: Script,
    settle: Script,
    flush: Script,
    undo: Script,
    end: Script,
    rerun: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let with = |body: &str| Script::new(&format!("{HELPERS}{body}"));
    Scripts {
        open: with(OPEN),
        call: with(CALL),
        settle: Script::new(SETTLE),
        flush: Script::new(FLUSH),
        undo: Script::new(UNDO),
        end: Script::new(END),
        rerun: with(RERUN),
    }
});

/// What a stream's call found, and did to the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamState {
    /// Not a stream the gateway saw start: the call goes on as it is.
    Unknown,
    Stopped,
    /// The gateway closed it (its question is gone).
    Closed,
    /// Its question is gone (deleted | edited): closed by this call.
    Gone(String),
    /// Slack streams it: send the call; `appends` so far, `added` bytes by this one.
    Open {
        appends: u64,
        added: u64,
    },
    /// Continued as edits: edit the message to this whole text now.
    Edit(String),
    /// Continued as edits, the next one due at this ms (coalesced).
    Wait(u64),
}

/// A stream's call, as its script takes it.
pub struct StreamCall<'a> {
    pub ts: &'a str,
    pub text: &'a str,
    pub stop: bool,
    pub withhold_edited: bool,
    pub edit_every: Duration,
}

fn text_of(v: Option<&Value>) -> String {
    v.and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default()
}

impl EgressStore {
    fn stream_keys(&self, p: &Place<'_>, ts: &str) -> (String, String, String) {
        let tag = self.channel_tag(p);
        (format!("{tag}:sm:{ts}"), format!("{tag}:sx:{ts}"), tag)
    }

    /// A stream started (`ts`) with `text`, answering `delivery` of `app` (empty when not
    /// attributed).
    pub async fn stream_open(
        &self,
        p: &Place<'_>,
        ts: &str,
        text: &str,
        now_ms: u64,
        source: (&str, &str),
    ) -> Result<(), StoreError> {
        let (sm, sx, _) = self.stream_keys(p, ts);
        let _: i64 = SCRIPTS
            .open
            .key(sm)
            .key(sx)
            .arg(text)
            .arg(now_ms)
            .arg(STREAM_TTL.as_millis() as u64)
            .arg(STREAM_TEXT_CAP)
            .arg(source.0)
            .arg(source.1)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// An append or stop of the stream `c.ts`: its text added, its state and source read.
    pub async fn stream_call(
        &self,
        p: &Place<'_>,
        c: &StreamCall<'_>,
        now_ms: u64,
    ) -> Result<(StreamState, Option<Source>), StoreError> {
        let (sm, sx, tag) = self.stream_keys(p, c.ts);
        let reply: Vec<Value> = SCRIPTS
            .call
            .key(sm)
            .key(sx)
            .key(format!("{tag}:p:{}", c.ts))
            .arg(&tag)
            .arg(c.text)
            .arg(now_ms)
            .arg(STREAM_TTL.as_millis() as u64)
            .arg(STREAM_TEXT_CAP)
            .arg(if c.stop { "stop" } else { "append" })
            .arg(u8::from(c.withhold_edited))
            .arg(c.edit_every.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let what = text_of(reply.first());
        let src: Vec<String> = reply.get(1).and_then(|v| redis::from_redis_value_ref(v).ok()).unwrap_or_default();
        let source = match src.as_slice() {
            [ts, d, n, st, app, k] => Some(Source {
                ts: ts.clone(),
                delivery: d.clone(),
                run: n.parse().unwrap_or(1),
                change: Change::from_stored(st),
                app: app.clone(),
                conversation: k.clone(),
            }),
            _ => None,
        };
        let num = |i: usize| reply.get(i).and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()).unwrap_or(0) as u64;
        let state = match what.as_str() {
            "stopped" => StreamState::Stopped,
            "closed" => StreamState::Closed,
            "gone" => StreamState::Gone(text_of(reply.get(2))),
            "open" => StreamState::Open { appends: num(2), added: num(3) },
            "edit" => StreamState::Edit(text_of(reply.get(2))),
            "wait" => StreamState::Wait(num(2)),
            _ => StreamState::Unknown,
        };
        Ok((state, source))
    }

    /// The gateway ends the stream `ts` (`why`: lost | expired; `stop`: the call was its stop)
    /// and continues it as edits: the whole text to edit it to, or `None` when another call
    /// settled it first.
    pub async fn stream_settle(
        &self,
        p: &Place<'_>,
        ts: &str,
        why: &str,
        stop: bool,
        now_ms: u64,
    ) -> Result<Option<String>, StoreError> {
        let (sm, sx, _) = self.stream_keys(p, ts);
        let text: Option<String> = SCRIPTS
            .settle
            .key(sm)
            .key(sx)
            .arg(why)
            .arg(now_ms)
            .arg(u8::from(stop))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(text)
    }

    /// A re-run's start was handed the lost run's stream `ts`: the answer is the re-run's from
    /// now on (`text` its start's), as edits. The stream's state before (`open`: Slack still
    /// streams it), or `None` when it no longer takes the answer.
    pub async fn stream_rerun(
        &self,
        p: &Place<'_>,
        ts: &str,
        text: &str,
        now_ms: u64,
    ) -> Result<Option<String>, StoreError> {
        let (sm, sx, _) = self.stream_keys(p, ts);
        let state: Option<String> = SCRIPTS
            .rerun
            .key(sm)
            .key(sx)
            .arg(text)
            .arg(now_ms)
            .arg(STREAM_TTL.as_millis() as u64)
            .arg(STREAM_TEXT_CAP)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(state)
    }

    /// A coalesced edit of `ts` that is due now: its whole text.
    pub async fn stream_flush(
        &self,
        p: &Place<'_>,
        ts: &str,
        now_ms: u64,
        every: Duration,
    ) -> Result<Option<String>, StoreError> {
        let (sm, sx, _) = self.stream_keys(p, ts);
        let text: Option<String> = SCRIPTS
            .flush
            .key(sm)
            .key(sx)
            .arg(now_ms)
            .arg(every.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(text)
    }

    /// Slack refused append number `n` of `ts`, which added `added` bytes: taken back.
    pub async fn stream_undo(&self, p: &Place<'_>, ts: &str, added: u64, n: u64) -> Result<(), StoreError> {
        let (sm, sx, _) = self.stream_keys(p, ts);
        let _: i64 = SCRIPTS.undo.key(sm).key(sx).arg(added).arg(n).invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The stream `ts` stopped.
    pub async fn stream_stopped(&self, p: &Place<'_>, ts: &str) -> Result<(), StoreError> {
        let (sm, _, _) = self.stream_keys(p, ts);
        let _: i64 = SCRIPTS.end.key(sm).arg("stopped").invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// A stream's record as the pages show it: state, why, appends, bytes (empty when none).
    pub async fn stream_summary(&self, p: &Place<'_>, ts: &str) -> Result<Vec<Option<String>>, StoreError> {
        let (sm, _, _) = self.stream_keys(p, ts);
        let v: Vec<Option<String>> =
            redis::cmd("HMGET").arg(sm).arg(&["st", "why", "n", "b", "at"]).query_async(&mut self.conn.clone()).await?;
        Ok(v)
    }
}
