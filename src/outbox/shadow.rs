//! A shadow's copy of a delivery: recorded on the shadow's lane (an app of its own, `bot.shadow`,
//! with its own stream, leases, retries and dead letters) under the live delivery's id, its
//! receipt `s:<id>` absorbing every later copy (a retry of the live delivery, a second gateway).
//! A lane where `max_waiting` deliveries wait (on its stream or scheduled for a retry) takes
//! no more: the copy is dropped, and the caller counts it.

use std::time::Duration;

use super::{NewDelivery, Placement, Recorded, ShardKeys, Store, StoreError};
use crate::slack::Kind;

/// What a copy is made of: the live delivery as recorded.
pub struct Copy<'a> {
    pub id: &'a str,
    pub body: &'a [u8],
    pub content_type: &'a str,
    pub path: &'a str,
    pub kind: Kind,
    pub detail: &'a str,
    pub received_ms: u64,
    /// Its conversation, encoded ('' when none): the shadow's turns follow it.
    pub conversation: &'a str,
    /// How long its receipt absorbs later copies (the app's `dedupe.ttl`).
    pub ttl: Duration,
}

/// What became of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    Copied,
    /// Copied before (a retry of the live delivery, another gateway).
    Already,
    /// The lane was full (`max_backlog`).
    Dropped,
}

impl Copied {
    pub const ALL: [Copied; 3] = [Copied::Copied, Copied::Already, Copied::Dropped];

    pub fn as_label(self) -> &'static str {
        match self {
            Copied::Copied => "copied",
            Copied::Already => "already",
            Copied::Dropped => "dropped",
        }
    }
}

impl Store {
    /// Copy a delivery onto the shadow's lane (`lane`: its shard of the live one's index).
    pub async fn copy_to_shadow(&self, lane: &ShardKeys, c: &Copy<'_>, max_waiting: u64) -> Result<Copied, StoreError> {
        // What waits on the lane: on its stream (not yet trimmed), and scheduled for a retry.
        let (on_stream, scheduled): (u64, u64) =
            redis::pipe().xlen(&lane.stream).zcard(&lane.sched).query_async(&mut self.conn.clone()).await?;
        if on_stream + scheduled >= max_waiting {
            return Ok(Copied::Dropped);
        }
        let receipt = format!("s:{}", c.id);
        let d = NewDelivery {
            id: c.id,
            receipt: Some(&receipt),
            body: c.body,
            content_type: c.content_type.as_bytes(),
            path: c.path,
            kind: c.kind,
            received_ms: c.received_ms,
            ttl: c.ttl,
            placement: Placement::Stream,
            claim: None,
            cancel: None,
            detail: c.detail,
            // The shadow's late answer is kept, never posted: the lane keeps no URL to post to.
            response_url: "",
            conversation: c.conversation,
            carry: false,
        };
        Ok(match self.record(lane, &d).await? {
            Recorded::New { .. } => Copied::Copied,
            _ => Copied::Already,
        })
    }
}
