//! How a worker takes its entries: the blocking read and its fenced load, the one-step read
//! and re-claim that load as they lease (for apps with turns), and the wait for new entries.

use std::collections::HashMap;
use std::time::Duration;

use redis::{AsyncCommands, Value};

use super::carried;
use super::model::stored;
use super::{Conn, Lease, Loaded, ShardKeys, Store, StoreError, TurnRules, GROUP};

impl Store {
    /// Load the deliveries a worker just leased, checking in the same step that each lease is
    /// still its own (an attempt is never sent for an entry another worker holds): one round
    /// trip for a whole read, one [`Loaded`] per lease, in order.
    pub async fn load_leased(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        leases: &[Lease],
    ) -> Result<Vec<Loaded>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = self.load.key(&keys.stream);
        invocation.arg(GROUP).arg(consumer);
        for l in leases {
            invocation.key(keys.delivery(&l.delivery)).arg(&l.entry).arg(l.token);
        }
        let replies: Vec<Value> = invocation.invoke_async(&mut self.conn.clone()).await?;
        if replies.len() != leases.len() {
            return Err(StoreError::Protocol(format!("{} loads for {} leases", replies.len(), leases.len())));
        }
        replies.into_iter().map(loaded).collect()
    }

    /// Read up to `count` new entries for `consumer` and load their deliveries in the same
    /// step, holding those whose conversation's turn another delivery has (`rules`): no entry
    /// is ever leased and left unloaded, or out of its turn, by a reader that dies. Nothing
    /// new: the group's last delivered id, to [wait after](Store::wait_for_new). `legacy`: on
    /// the stream of versions before carried deliveries.
    pub async fn read_loaded(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        count: usize,
        rules: Option<&TurnRules>,
        legacy: bool,
    ) -> Result<Read, StoreError> {
        let flat: Vec<Value> = self
            .read_loaded
            .key(keys.on(legacy))
            .arg(GROUP)
            .arg(consumer)
            .arg(count)
            .arg(rules.map(|r| r.timeout.as_millis().to_string()).unwrap_or_default())
            .arg(crate::clock::now_ms())
            .arg(&keys.tag)
            .invoke_async(&mut self.conn.clone())
            .await?;
        if let [last] = flat.as_slice() {
            let last: String = redis::from_redis_value_ref(last).map_err(|e| StoreError::Protocol(e.to_string()))?;
            return Ok(Read { leased: Vec::new(), last_delivered: last });
        }
        Ok(Read { leased: leased(flat, legacy)?, last_delivered: String::new() })
    }

    /// Take over entries of one stream (`legacy`: that of versions before) idle longer than `lease`
    /// and load their deliveries in the same step (see [`Store::read_loaded`]).
    pub async fn reclaim_loaded(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        (lease, max): (Duration, usize),
        rules: Option<&TurnRules>,
        legacy: bool,
    ) -> Result<Vec<(Lease, Loaded)>, StoreError> {
        let flat: Vec<Value> = self
            .reclaim_loaded
            .key(keys.on(legacy))
            .arg(GROUP)
            .arg(consumer)
            .arg(lease.as_millis() as u64)
            .arg(max)
            .arg(rules.map(|r| r.timeout.as_millis().to_string()).unwrap_or_default())
            .arg(crate::clock::now_ms())
            .arg(&keys.tag)
            .invoke_async(&mut self.conn.clone())
            .await?;
        leased(flat, legacy)
    }

    /// Wait up to `block` for an entry after `after` (the group's last delivered id), on a
    /// connection of its own (see [`Store::read_new`]).
    pub async fn wait_for_new(&self, keys: &ShardKeys, after: &str, block: Duration) -> Result<(), StoreError> {
        let opts = redis::streams::StreamReadOptions::default().count(1).block(block.as_millis() as usize);
        let _: Option<redis::streams::StreamReadReply> =
            self.conn.clone().xread_options(&[&keys.stream], &[after], &opts).await?;
        Ok(())
    }

    /// Read up to `count` new entries of one stream (`legacy`: that of versions before) for
    /// `consumer`, blocking up to `block` (zero: not at all), with their deliveries: a carried
    /// delivery's fields are its entry's, and the others' hashes are loaded in one more round
    /// trip of `HGETALL`s. No script on either step (a script's Lua turned each delivery's
    /// fields into Lua values and back: more of Redis' work than the reads themselves). Nothing
    /// is fenced between the two steps: the entries were handed to this consumer a round trip
    /// earlier, and an attempt is fenced where it counts, at its finish. A reader that dies in
    /// between leaves its entries leased, and they are re-claimed after the lease like any
    /// other. For an app that takes turns the read and the load stay one step
    /// ([`Store::read_loaded`]). Call it on a store of its own (a blocking read would stall
    /// every other command on a shared connection).
    pub async fn read_then_load(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        count: usize,
        block: Duration,
        legacy: bool,
    ) -> Result<Vec<(Lease, Loaded)>, StoreError> {
        let mut conn = self.conn.clone();
        let mut opts = redis::streams::StreamReadOptions::default().group(GROUP, consumer).count(count);
        if !block.is_zero() {
            opts = opts.block(block.as_millis() as usize);
        }
        let reply: Value = conn.xread_options(&[keys.on(legacy)], &[">"], &opts).await?;
        let mut out = Vec::new();
        let mut unloaded = Vec::new();
        for (entry, fields) in entries(reply)? {
            let (mut delivery, mut carried) = (String::new(), None);
            for (name, value) in fields {
                match name.as_slice() {
                    b"d" => delivery = String::from_utf8_lossy(&value).into_owned(),
                    b"c" => carried = Some(value),
                    _ => {}
                }
            }
            // Fresh entries are handed out with a delivery count of 1.
            let lease = Lease { entry, delivery, token: 1, legacy };
            match carried {
                Some(packed) => {
                    let loaded = carried::unpack(packed).map_or(Loaded::Gone, |d| Loaded::Stored(Box::new(d)));
                    out.push((lease, loaded));
                }
                None => unloaded.push(lease),
            }
        }
        if unloaded.is_empty() {
            return Ok(out);
        }
        let mut pipe = redis::pipe();
        for lease in &unloaded {
            pipe.hgetall(keys.delivery(&lease.delivery));
        }
        let maps: Vec<HashMap<String, Vec<u8>>> = pipe.query_async(&mut conn).await?;
        if maps.len() != unloaded.len() {
            return Err(StoreError::Protocol(format!("{} loads for {} leases", maps.len(), unloaded.len())));
        }
        let loaded = maps.iter().map(|m| if m.is_empty() { Loaded::Gone } else { Loaded::Stored(Box::new(stored(m))) });
        out.extend(unloaded.into_iter().zip(loaded));
        Ok(out)
    }

    /// Read new entries for `consumer`, blocking up to `block`. Call it on a store of its own
    /// (a [`LazyStore`] the reader alone uses): a blocking read would stall every other command
    /// on a shared multiplexed connection.
    pub async fn read_new(
        &self,
        keys: &ShardKeys,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        read_new(&mut self.conn.clone(), keys, consumer, count, block).await
    }
}

/// What one read found: the entries leased, each with its delivery loaded; or, when there was
/// nothing new, the group's last delivered id.
#[derive(Debug)]
pub struct Read {
    pub leased: Vec<(Lease, Loaded)>,
    pub last_delivered: String,
}

/// A delivery as a load script answered for one lease: its fields (none: gone), 0 (the lease
/// was lost) or 1 (held for its conversation's turn).
fn loaded(reply: Value) -> Result<Loaded, StoreError> {
    match reply {
        Value::Int(0) => return Ok(Loaded::LeaseLost),
        Value::Int(_) => return Ok(Loaded::Held),
        _ => {}
    }
    let map: HashMap<String, Vec<u8>> =
        redis::from_redis_value(reply).map_err(|e| StoreError::Protocol(e.to_string()))?;
    Ok(if map.is_empty() { Loaded::Gone } else { Loaded::Stored(Box::new(stored(&map))) })
}

/// `{entry, delivery, token, load, …}` as leases with their loads.
fn leased(flat: Vec<Value>, legacy: bool) -> Result<Vec<(Lease, Loaded)>, StoreError> {
    if flat.len() % 4 != 0 {
        return Err(StoreError::Protocol(format!("{} values for leases of four", flat.len())));
    }
    let mut out = Vec::with_capacity(flat.len() / 4);
    let mut values = flat.into_iter();
    while let (Some(entry), Some(delivery), Some(token), Some(load)) =
        (values.next(), values.next(), values.next(), values.next())
    {
        let bad = |e: redis::ParsingError| StoreError::Protocol(e.to_string());
        let lease = Lease {
            entry: redis::from_redis_value(entry).map_err(bad)?,
            delivery: redis::from_redis_value(delivery).map_err(bad)?,
            token: redis::from_redis_value(token).map_err(bad)?,
            legacy,
        };
        out.push((lease, loaded(load)?));
    }
    Ok(out)
}

/// Read new entries for `consumer` on `conn`, blocking up to `block` (see [`Store::read_new`]).
pub async fn read_new(
    conn: &mut Conn,
    keys: &ShardKeys,
    consumer: &str,
    count: usize,
    block: Duration,
) -> Result<Vec<Lease>, StoreError> {
    let opts = redis::streams::StreamReadOptions::default()
        .group(GROUP, consumer)
        .count(count)
        .block(block.as_millis() as usize);
    let reply: Option<redis::streams::StreamReadReply> = conn.xread_options(&[&keys.stream], &[">"], &opts).await?;
    let mut out = Vec::new();
    for key in reply.map(|r| r.keys).unwrap_or_default() {
        for e in key.ids {
            let delivery: String = e.get("d").unwrap_or_default();
            // Fresh entries are handed out with a delivery count of 1.
            out.push(Lease { entry: e.id, delivery, token: 1, legacy: false });
        }
    }
    Ok(out)
}

/// An entry's fields, name and value, in order.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// A stream read's reply (one stream) as its entries: id and fields, taken apart as they come
/// (no map of maps in between, and the packed fields moved, not copied).
fn entries(reply: Value) -> Result<Vec<(String, Fields)>, StoreError> {
    let bad = || StoreError::Protocol("a stream read's reply is not streams of entries".into());
    let streams = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams.into_iter().map(|s| match s {
            Value::Array(mut pair) if pair.len() == 2 => Ok(pair.swap_remove(1)),
            _ => Err(bad()),
        }),
        _ => return Err(bad()),
    };
    let mut out = Vec::new();
    for entries in streams {
        let Value::Array(entries) = entries? else { return Err(bad()) };
        for e in entries {
            let Value::Array(mut e) = e else { return Err(bad()) };
            let (Some(fields), Some(Value::BulkString(id))) = (e.pop(), e.pop()) else { return Err(bad()) };
            let id = String::from_utf8(id).map_err(|_| bad())?;
            let fields = match fields {
                // An entry deleted while pending comes back without its fields.
                Value::Nil => Vec::new(),
                Value::Array(flat) => {
                    let mut pairs = Vec::with_capacity(flat.len() / 2);
                    let mut flat = flat.into_iter();
                    while let (Some(Value::BulkString(k)), Some(Value::BulkString(v))) = (flat.next(), flat.next()) {
                        pairs.push((k, v));
                    }
                    pairs
                }
                _ => return Err(bad()),
            };
            out.push((id, fields));
        }
    }
    Ok(out)
}
