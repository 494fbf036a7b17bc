//! The shard register (`{prefix}:shards`): the shards an app has had, and when conversations
//! began to pick them, with the receipts a version before that left on another shard.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use super::{scripts, NewDelivery, Recorded, ShardKeys, Store, StoreError};

impl Store {
    /// The shards an app's deliveries may be waiting in: `configured`, or more when it once
    /// had more (those are read until empty, never written). `register`: record `configured`
    /// as in use (the delivery workers do; the tools only look).
    pub async fn shards_in_use(
        &self,
        prefix: &str,
        app: &str,
        configured: u16,
        register: bool,
    ) -> Result<u16, StoreError> {
        let key = format!("{{{prefix}}}:shards");
        let had: u16 = if register {
            self.shards_in_use.key(&key).arg(app).arg(configured).invoke_async(&mut self.conn.clone()).await?
        } else {
            let v: Option<u16> = self.conn.clone().hget(&key, app).await?;
            v.unwrap_or(0)
        };
        Ok(had.max(configured))
    }

    /// When this deployment's conversations began to pick their deliveries' shards (ms; 0:
    /// always). The delivery workers register it the first time this version runs.
    pub async fn sharded_by_conversation(&self, prefix: &str, now_ms: u64) -> Result<u64, StoreError> {
        let key = format!("{{{prefix}}}:shards");
        static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::SHARDED_BY_CONVERSATION));
        Ok(SCRIPT.key(key).arg(now_ms).invoke_async(&mut self.conn.clone()).await?)
    }

    /// A delivery whose shard a version before turns chose otherwise (`earlier`): its
    /// receipt or message claim recorded there by that version makes it a duplicate — a retry
    /// across the upgrade still finds its receipt. Else both are claimed there too.
    pub async fn earlier_receipt(
        &self,
        earlier: &ShardKeys,
        now_shard: u16,
        d: &NewDelivery<'_>,
    ) -> Result<Option<Recorded>, StoreError> {
        let receipt = d.receipt.map(|r| earlier.receipt(r));
        let claim = d.claim.map(|c| earlier.receipt(c));
        let first = receipt.clone().or_else(|| claim.clone()).unwrap_or_else(|| earlier.delivery(d.id));
        static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::EARLIER_RECEIPT));
        let (status, id): (i64, String) = SCRIPT
            .key(receipt.as_deref().unwrap_or(&first))
            .key(claim.as_deref().unwrap_or(&first))
            .arg(format!("{now_shard}-"))
            .arg(d.id)
            .arg(d.ttl.as_millis() as u64)
            .arg(u8::from(receipt.is_some()))
            .arg(u8::from(claim.is_some()))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match status {
            0 => Some(Recorded::Duplicate(id)),
            2 => Some(Recorded::DuplicateMessage(id)),
            _ => None,
        })
    }
}
