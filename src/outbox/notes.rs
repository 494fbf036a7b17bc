//! The egress's notes for operators: writes withheld (their source was deleted or edited) and
//! writes whose outcome is unknown. Each list is a stream kept for a day and at most
//! [`NOTES_MAX`] entries, read a page at a time, newest first (`slackgate egress`, `GET /egress`).
//! A burst of thousands of notes costs a bounded list, never an unbounded answer.
//!
//! The egress writes them and the operator's tools read them: the records live here, so the
//! tools need no egress. Keys: `{P:egress}:notes:withheld`, `{P:egress}:notes:unknown`.

use std::time::Duration;

use serde::Serialize;

use super::StoreError;
use crate::store::{connect_lazy, Conn, Endpoint, Lazy};

/// Most notes kept per list; the oldest go first.
pub const NOTES_MAX: usize = 1000;
/// Most notes in one page.
pub const PAGE_MAX: usize = 1000;
/// How long a note is kept.
const DAY_MS: u64 = 24 * 3600 * 1000;

/// Which list a note goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteList {
    Withheld,
    Unknown,
}

impl NoteList {
    pub fn as_label(self) -> &'static str {
        match self {
            NoteList::Withheld => "withheld",
            NoteList::Unknown => "unknown",
        }
    }
}

/// One page of a list, newest first.
#[derive(Debug, Default, Serialize)]
pub struct NotePage {
    pub notes: Vec<serde_json::Value>,
    /// How many the list holds (a day's, at most [`NOTES_MAX`]).
    pub total: u64,
    /// Where the next (older) page starts, when there is one.
    pub next: Option<String>,
}

/// A stream entry as XREVRANGE gives it: its id and its fields.
type Entry = (String, Vec<(String, String)>);

/// Whether `s` is a stream entry id (`<ms>-<seq>`), the only cursor a page accepts.
pub fn is_cursor(s: &str) -> bool {
    let Some((ms, seq)) = s.split_once('-') else { return false };
    let digits = |p: &str| !p.is_empty() && p.len() <= 20 && p.bytes().all(|b| b.is_ascii_digit());
    digits(ms) && digits(seq)
}

/// The notes of one deployment (its key prefix).
#[derive(Clone)]
pub struct Notes {
    conn: Conn,
    prefix: String,
}

impl Lazy<Notes> {
    /// The notes under `prefix`, connected on first use (see [`Lazy`]).
    pub fn notes(endpoint: &Endpoint, prefix: &str) -> Self {
        let prefix = prefix.to_string();
        Lazy::new(endpoint, Duration::from_secs(2), move |endpoint, timeout| {
            Ok(Notes::new(connect_lazy(endpoint, timeout)?, &prefix))
        })
    }
}

impl Notes {
    pub fn new(conn: Conn, prefix: &str) -> Self {
        Notes { conn, prefix: prefix.into() }
    }

    fn key(&self, list: NoteList) -> String {
        format!("{{{}:egress}}:notes:{}", self.prefix, list.as_label())
    }

    /// Keep a note: capped by count at once, and by age.
    pub async fn note(&self, list: NoteList, json: &serde_json::Value, now_ms: u64) -> Result<(), StoreError> {
        let k = self.key(list);
        let mut add = redis::cmd("XADD");
        add.arg(&k).arg("MAXLEN").arg(NOTES_MAX).arg("*").arg("n").arg(json.to_string());
        let mut trim = redis::cmd("XTRIM");
        trim.arg(&k).arg("MINID").arg(now_ms.saturating_sub(DAY_MS));
        redis::pipe()
            .add_command(add)
            .ignore()
            .add_command(trim)
            .ignore()
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Up to `limit` notes older than `cursor` (from the newest without one).
    pub async fn page(
        &self,
        list: NoteList,
        limit: usize,
        cursor: Option<&str>,
        now_ms: u64,
    ) -> Result<NotePage, StoreError> {
        let k = self.key(list);
        let limit = limit.clamp(1, PAGE_MAX);
        let from = cursor.filter(|c| is_cursor(c)).map_or("+".to_string(), |c| format!("({c}"));
        let oldest = now_ms.saturating_sub(DAY_MS).to_string();
        let mut conn = self.conn.clone();
        // Trimmed by age here too, so that the total of a quiet list is a day's.
        let (entries, total): (Vec<Entry>, u64) = redis::pipe()
            .cmd("XTRIM")
            .arg(&k)
            .arg("MINID")
            .arg(&oldest)
            .ignore()
            .cmd("XREVRANGE")
            .arg(&k)
            .arg(&from)
            .arg(&oldest)
            .arg("COUNT")
            .arg(limit + 1)
            .cmd("XLEN")
            .arg(&k)
            .query_async(&mut conn)
            .await?;
        let more = entries.len() > limit;
        let page: Vec<_> = entries.into_iter().take(limit).collect();
        let next = if more { page.last().map(|(id, _)| id.clone()) } else { None };
        let notes = page
            .iter()
            .filter_map(|(_, fields)| fields.iter().find(|(f, _)| f == "n"))
            .filter_map(|(_, v)| serde_json::from_str(v).ok())
            .collect();
        Ok(NotePage { notes, total, next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_stream_ids_only() {
        assert!(is_cursor("1700000000000-0"));
        assert!(!is_cursor("+"));
        assert!(!is_cursor("1-"));
        assert!(!is_cursor("(1-2"));
        assert!(!is_cursor("1-2 3"));
    }
}
