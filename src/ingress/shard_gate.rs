//! The shard gate: one stalled shard cannot take the ack path's slots from the others.
//!
//! Each app's outbox is split over shards, and on Redis Cluster the shards live on different
//! primaries. When one primary stops answering (killed, frozen, partitioned, mid-failover),
//! records for its shards hang until the ack budget runs out, and under traffic they would fill
//! every admission slot, so that the shards on the healthy primaries could not be acked either.
//! The gate keeps a count per (app, shard) lane: a lane that has records pending but has
//! recorded nothing for [`stall`](ShardGate::new) is stalled, and until it records again takes
//! at most [`PROBES`] records at once (they find out when it answers again); the rest are
//! answered 503 at once (Slack retries them) without taking a slot. Lanes that record are
//! never limited here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Records a stalled lane may have pending: enough to notice it answering again.
pub const PROBES: u32 = 2;

pub struct ShardGate {
    lanes: Mutex<Lanes>,
    stall: Duration,
}

struct Lanes {
    /// App name → shard → lane.
    by_app: HashMap<Arc<str>, HashMap<u16, Lane>>,
    /// When any lane last recorded: a stalled lane while others record is a local failure
    /// (one primary); every lane stalled is the whole store.
    last_record: Option<Instant>,
}

struct Lane {
    pending: u32,
    /// When the lane last recorded, or when it went from idle to busy.
    progress: Instant,
    /// Seen busy without recording for `stall`; only a record clears it.
    stalled: bool,
}

/// What the gate says of a record about to wait for an admission slot.
pub enum Ask {
    /// The lane records: wait for a slot as usual.
    Admit,
    /// Stalled with its probes out: 503 at once.
    Refuse,
    /// Stalled with room for a probe: this record is one, and takes no admission slot.
    Probe(Pass),
}

/// One record's place on its lane; call [`Pass::recorded`] when it was recorded.
pub struct Pass {
    gate: Arc<ShardGate>,
    lane: (Arc<str>, u16),
    recorded: bool,
}

impl ShardGate {
    /// `stall`: how long a busy lane may go without recording before it is stalled.
    pub fn new(stall: Duration) -> Arc<ShardGate> {
        Arc::new(ShardGate { lanes: Mutex::new(Lanes { by_app: HashMap::new(), last_record: None }), stall })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What a record for `app`'s `shard` may do, asked before it waits for an admission slot:
    /// a dead shard's events never queue for one, and its probes take none (the gate bounds
    /// them, and a limit lowered by the first failures must not be spent on a dead primary).
    pub fn ask(self: &Arc<Self>, app: &str, shard: u16) -> Ask {
        let mut lanes = self.lock();
        let Some((name, shards)) = lanes.by_app.get_key_value(app) else { return Ask::Admit };
        let name = name.clone();
        let Some(lane) = shards.get(&shard) else { return Ask::Admit };
        let stalled = lane.stalled || (lane.pending > 0 && lane.progress.elapsed() > self.stall);
        let lane = lanes.by_app.get_mut(&name).and_then(|s| s.get_mut(&shard)).expect("looked up above");
        lane.stalled = stalled;
        match (stalled, lane.pending >= PROBES) {
            (false, _) => Ask::Admit,
            (true, true) => Ask::Refuse,
            (true, false) => {
                lane.pending += 1;
                Ask::Probe(Pass { gate: self.clone(), lane: (name, shard), recorded: false })
            }
        }
    }

    /// A place on `app`'s `shard` for a record about to be made (it holds an admission slot:
    /// time spent waiting for one is not the lane's), or `None` when the lane is stalled and
    /// has its probes out.
    pub fn enter(self: &Arc<Self>, app: &str, shard: u16) -> Option<Pass> {
        let mut lanes = self.lock();
        let app = match lanes.by_app.get_key_value(app) {
            Some((name, _)) => name.clone(),
            None => {
                let name: Arc<str> = app.into();
                lanes.by_app.insert(name.clone(), HashMap::new());
                name
            }
        };
        let now = Instant::now();
        let shards = lanes.by_app.get_mut(&app).expect("inserted above");
        let lane = shards.entry(shard).or_insert(Lane { pending: 0, progress: now, stalled: false });
        if lane.pending == 0 && !lane.stalled {
            lane.progress = now;
        }
        lane.stalled |= lane.pending > 0 && now.duration_since(lane.progress) > self.stall;
        if lane.stalled && lane.pending >= PROBES {
            return None;
        }
        lane.pending += 1;
        Some(Pass { gate: self.clone(), lane: (app, shard), recorded: false })
    }

    /// Whether `app`'s `shard` is stalled now.
    #[cfg(test)]
    pub fn stalled(&self, app: &str, shard: u16) -> bool {
        let lanes = self.lock();
        let lane = lanes.by_app.get(app).and_then(|shards| shards.get(&shard));
        lane.is_some_and(|l| l.stalled || (l.pending > 0 && l.progress.elapsed() > self.stall))
    }
}

impl Pass {
    /// The record was made: the lane is recording.
    pub fn recorded(mut self) {
        self.recorded = true;
    }

    /// The record failed: was that this lane's own trouble (it is stalled while another lane
    /// recorded within the stall time), rather than the whole store's?
    pub fn failed_alone(self) -> bool {
        let lanes = self.gate.lock();
        let (app, shard) = &self.lane;
        let lane = lanes.by_app.get(app).and_then(|shards| shards.get(shard));
        let stalled = lane.is_some_and(|l| l.stalled || l.progress.elapsed() > self.gate.stall);
        let others_record = lanes.last_record.is_some_and(|t| t.elapsed() <= self.gate.stall);
        stalled && others_record
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut lanes = self.gate.lock();
        let now = Instant::now();
        if self.recorded {
            lanes.last_record = Some(now);
        }
        let (app, shard) = &self.lane;
        if let Some(lane) = lanes.by_app.get_mut(app).and_then(|shards| shards.get_mut(shard)) {
            lane.pending -= 1;
            if self.recorded {
                lane.progress = now;
                lane.stalled = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lane_that_records_nothing_is_held_to_its_probes_and_the_others_are_not() {
        let gate = ShardGate::new(Duration::from_secs(1));
        let app = "bot";
        // Shard 0 hangs: its records never finish.
        let hung: Vec<Pass> = (0..10).map(|_| gate.enter(app, 0).expect("not stalled yet")).collect();
        tokio::time::advance(Duration::from_millis(1100)).await;
        assert!(matches!(gate.ask(app, 0), Ask::Refuse) && gate.stalled(app, 0));
        assert!(gate.enter(app, 0).is_none(), "stalled with more than its probes out");
        // Shard 1 records: always let in, however many.
        for _ in 0..100 {
            assert!(matches!(gate.ask(app, 1), Ask::Admit));
            gate.enter(app, 1).expect("a recording lane is never limited").recorded();
        }
        let busy: Vec<Pass> = (0..50).map(|_| gate.enter(app, 1).unwrap()).collect();
        tokio::time::advance(Duration::from_millis(1100)).await;
        // Busy for over a second without a record: stalled too, until one is made.
        assert!(gate.enter(app, 1).is_none());
        let mut busy = busy.into_iter();
        busy.next().unwrap().recorded();
        assert!(gate.enter(app, 1).is_some(), "a record ends the stall");
        // Shard 0's records fail while shard 1 records: its own trouble. The hung records give
        // up; shard 0 stays stalled, its probes only, and the first record there ends it.
        let mut hung = hung.into_iter();
        assert!(hung.next().unwrap().failed_alone());
        drop(hung);
        assert!(gate.stalled(app, 0), "idle is not recording");
        let probes: Vec<Pass> = (0..PROBES)
            .map(|_| match gate.ask(app, 0) {
                Ask::Probe(pass) => pass,
                _ => panic!("a stalled lane with room takes a probe, without a slot"),
            })
            .collect();
        assert!(matches!(gate.ask(app, 0), Ask::Refuse), "probes only");
        assert!(gate.enter(app, 0).is_none(), "probes only");
        let mut probes = probes.into_iter();
        probes.next().unwrap().recorded();
        assert!(!gate.stalled(app, 0));
        assert!(gate.enter(app, 0).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn when_no_lane_records_a_failure_is_the_whole_stores() {
        let gate = ShardGate::new(Duration::from_secs(1));
        gate.enter("bot", 1).unwrap().recorded();
        let hung: Vec<Pass> = (0..3).map(|shard| gate.enter("bot", shard).unwrap()).collect();
        tokio::time::advance(Duration::from_millis(1500)).await;
        for pass in hung {
            assert!(!pass.failed_alone(), "every lane stalled: the store, not one shard");
        }
    }
}
