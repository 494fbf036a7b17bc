//! The reader of one app shard: it takes attempt slots first, then at most as many entries
//! (new ones, or ones whose lease ran out), and runs one attempt per entry — sent only while the
//! lease is its own, kept alive while the attempt runs, finished through the fence (each attempt
//! in [`super::leased`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit};
use tracing::{debug, info, info_span, warn, Instrument};

use super::leased::{run_attempt, NO_BOT_POLL};
use super::reach::Turn;
use super::Shard;
use crate::drain::Work;
use crate::outbox::{self, Finish, Lease, Loaded, StoreOp, Stored};
use crate::upstream::Transport;

/// How long one blocking read waits for new entries.
const READ_BLOCK: Duration = Duration::from_secs(1);
/// At most this many entries per read.
const BATCH: usize = 64;
/// While yielding to acks with every allowed attempt running, look again this often.
const YIELD_POLL: Duration = Duration::from_millis(10);
/// The stream of versions before carried deliveries is read this often (see `legacy`).
const LEGACY_POLL: Duration = Duration::from_millis(250);

pub(super) async fn read_loop(s: Arc<Shard>, redis: outbox::Endpoint, mut stop: watch::Receiver<bool>) {
    // A store of its own: a blocking XREADGROUP would stall a shared multiplexed connection.
    let own = outbox::LazyStore::outbox(&redis, READ_BLOCK + Duration::from_secs(2));
    let reads = match own.get() {
        Ok(store) => store.clone(),
        Err(e) => return warn!(error = %e, "reader cannot connect"),
    };
    let mut pause = Duration::from_millis(100);
    // The group is created once, and again after an error (a Redis that lost its data).
    let mut group_ready = false;
    let mut chores = Chores::new(&s);
    // With turns: the entry the next read waits to come after (see `read`).
    let mut after: Option<String> = None;
    let _running = s.shared.drain.enter(Work::Reader);
    while !*stop.borrow() && !s.shared.drain.draining() {
        let probe = match gate(&s, &mut stop).await {
            Gate::Stop => break,
            Gate::Again => continue,
            Gate::Go { probe } => probe,
        };
        let Some(mut permits) = take_permits(&s, &mut stop).await else { break };
        if probe {
            permits = permits.split(1).expect("at least one permit");
        }
        let Some(permits) = chores.run(&s, &reads, permits).await else { continue };
        let count = permits.num_permits();
        let read = async {
            if !group_ready {
                s.store.ensure_group(&s.keys).await?;
                group_ready = true;
            }
            read(&s, &reads, count, &mut after).await
        };
        let leases = tokio::select! {
            r = read => r,
            _ = stop.changed() => break,
        };
        match leases {
            Ok(leases) => {
                pause = Duration::from_millis(100);
                if !s.is_lane() && count > 1 && leases.len() >= count {
                    s.shared.live_busy();
                }
                spawn_attempts(&s, leases, permits).await;
            }
            Err(e) => {
                group_ready = false;
                s.store_error(StoreOp::Read);
                warn!(app = %s.app.name, error = %e, "outbox read failed");
                drop(permits);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Whether a reader reads now.
enum Gate {
    Stop,
    /// Look again (a wait is over).
    Again,
    /// Read; one entry only when `probe`.
    Go {
        probe: bool,
    },
}

/// A Socket Mode app's reader waits while no bot of it is connected here. A shadow's lane waits
/// while the ack path is pressed (the live bot's acks come first), and backs off from a bot it
/// cannot reach, one probe at a time. Any other reader goes at once.
async fn gate(s: &Shard, stop: &mut watch::Receiver<bool>) -> Gate {
    if !s.reaches_a_bot() {
        return tokio::select! {
            _ = tokio::time::sleep(NO_BOT_POLL) => Gate::Again,
            _ = stop.changed() => Gate::Stop,
        };
    }
    if !s.is_lane() {
        return Gate::Go { probe: false };
    }
    if !super::shadow::yield_to_acks(&s.shared, stop).await {
        return Gate::Stop;
    }
    match s.reach.as_ref().map(|r| r.turn()) {
        Some(Turn::Wait(wait)) => tokio::select! {
            _ = tokio::time::sleep(wait) => Gate::Again,
            _ = stop.changed() => Gate::Stop,
        },
        turn => Gate::Go { probe: turn == Some(Turn::Probe) },
    }
}

/// What a reader does now and then before it reads: reclaim the leases that ran out, and read
/// the stream of versions before (`legacy`).
struct Chores {
    reclaim_every: Duration,
    last_reclaim: tokio::time::Instant,
    last_legacy: tokio::time::Instant,
}

impl Chores {
    fn new(s: &Shard) -> Self {
        let now = tokio::time::Instant::now();
        Chores {
            reclaim_every: (s.app.delivery.lease / 4).max(Duration::from_millis(250)),
            last_reclaim: now,
            last_legacy: now - LEGACY_POLL,
        }
    }

    /// The chores that are due, each given the permits the last left; `None` when they took
    /// them all.
    async fn run(
        &mut self,
        s: &Arc<Shard>,
        reads: &outbox::Store,
        mut permits: OwnedSemaphorePermit,
    ) -> Option<OwnedSemaphorePermit> {
        if self.last_reclaim.elapsed() >= self.reclaim_every {
            self.last_reclaim = tokio::time::Instant::now();
            permits = reclaim(s, permits).await?;
        }
        if self.last_legacy.elapsed() >= LEGACY_POLL {
            self.last_legacy = tokio::time::Instant::now();
            permits = legacy(s, reads, permits).await?;
        }
        Some(permits)
    }
}

/// Up to `count` new entries, each with its delivery loaded, on `reads` (a store of the
/// reader's own). Without turns: a blocking read, then the loads in one round trip, no script
/// on either ([`outbox::Store::read_then_load`]). With turns the read and the load are one
/// step, one round trip a batch with no fence to check after it: an entry is never loaded and
/// left out of its conversation's turn by a reader that dies. That step cannot block, so after
/// a read that found less than it asked for it first waits for an entry `after` the last one it
/// saw (at once when there is one); after a full read it reads again at once.
async fn read(
    s: &Shard,
    reads: &outbox::Store,
    count: usize,
    after: &mut Option<String>,
) -> Result<Vec<(Lease, Loaded)>, outbox::StoreError> {
    if s.turns.is_none() {
        return reads.read_then_load(&s.keys, &s.consumer, count, READ_BLOCK, false).await;
    }
    if let Some(id) = after.take() {
        reads.wait_for_new(&s.keys, &id, READ_BLOCK).await?;
    }
    let read = reads.read_loaded(&s.keys, &s.consumer, count, s.turns.as_ref(), false).await?;
    *after = match read.leased.last() {
        // A full read: more may be there already.
        Some(_) if read.leased.len() >= count => None,
        Some((lease, _)) => Some(lease.entry.clone()),
        // Nothing new (other readers took it): wait after the group's last.
        None => Some(read.last_delivered),
    };
    Ok(read.leased)
}

/// Attempt slots for the next read: at least one (waiting for it), then as many more as are
/// free, up to this shard's share. An entry read is leased, and its lease must not run while it
/// waits for a slot. `None` when told to stop.
///
/// Acks come first: while the ingress is pressed ([`crate::pressure`]) the reader pauses
/// between reads and the app keeps fewer attempts in flight (down to one), and it is back to
/// `max_in_flight` once the ingress is calm.
async fn take_permits(s: &Shard, stop: &mut watch::Receiver<bool>) -> Option<OwnedSemaphorePermit> {
    let max = s.app.delivery.max_in_flight;
    let share = (max / usize::from(s.shards.max(1))).clamp(1, BATCH);
    // (attempts allowed now, attempts in flight)
    let look = || {
        let allowed = s.shared.pressure.allowed(max);
        s.shared.metrics.overload.delivery_allowed.with_label_values(&[&s.app.name]).set(allowed as i64);
        (allowed, max.saturating_sub(s.permits.available_permits()))
    };
    let allowed = loop {
        let (allowed, in_flight) = look();
        let Some(wait) = yield_for(allowed, in_flight, max, s.shared.pressure.pause()) else { break allowed };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return None,
        }
        let (allowed, in_flight) = look();
        if in_flight < allowed {
            break allowed;
        }
    };
    let mut permits = tokio::select! {
        p = s.permits.clone().acquire_owned() => p.expect("semaphore is never closed"),
        _ = stop.changed() => return None,
    };
    let in_flight = max.saturating_sub(s.permits.available_permits());
    let more = s.permits.available_permits().min(share - 1).min(allowed.saturating_sub(in_flight)) as u32;
    if let Ok(extra) = s.permits.clone().try_acquire_many_owned(more) {
        permits.merge(extra);
    }
    Some(permits)
}

/// How long the reader yields to acks before it takes a slot: `None` at once. Calm, with every
/// attempt allowed, the slot's semaphore is the only wait — a poll there held a backlog's drain
/// to one read per poll (10 ms), half its speed.
fn yield_for(allowed: usize, in_flight: usize, max: usize, pause: Duration) -> Option<Duration> {
    match (pause.is_zero(), in_flight < allowed) {
        (true, true) => None,
        (true, false) if allowed >= max => None,
        (_, true) => Some(pause),
        (_, false) => Some(pause.max(YIELD_POLL)),
    }
}

/// Take over entries whose lease ran out, on both streams, as many as `permits` allow; returns
/// the permits left for reading new entries (`None`: all were used).
async fn reclaim(s: &Arc<Shard>, mut permits: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
    for legacy in [false, true] {
        let how = (s.app.delivery.lease, permits.num_permits());
        match s.store.reclaim_loaded(&s.keys, &s.consumer, how, s.turns.as_ref(), legacy).await {
            Ok(leases) if !leases.is_empty() => {
                info!(app = %s.app.name, count = leases.len(), "re-claimed expired leases");
                permits = spawn_some(s, leases, permits).await?;
            }
            Ok(_) => {}
            Err(e) => {
                s.store_error(StoreOp::Reclaim);
                debug!(app = %s.app.name, error = %e, "reclaim failed");
            }
        }
    }
    Some(permits)
}

/// New entries on the stream of versions before carried deliveries (`…:outbox`): what a
/// gateway of such a version recorded, or scheduled, during a rolling upgrade. Read without
/// blocking, every [`LEGACY_POLL`], as the app reads its own stream; returns the permits left.
async fn legacy(s: &Arc<Shard>, reads: &outbox::Store, permits: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
    let count = permits.num_permits();
    let read = match s.turns {
        None => reads.read_then_load(&s.keys, &s.consumer, count, Duration::ZERO, true).await,
        Some(_) => reads.read_loaded(&s.keys, &s.consumer, count, s.turns.as_ref(), true).await.map(|r| r.leased),
    };
    match read {
        Ok(leased) if !leased.is_empty() => spawn_some(s, leased, permits).await,
        Ok(_) => Some(permits),
        Err(e) => {
            s.store_error(StoreOp::Read);
            debug!(app = %s.app.name, error = %e, "cannot read the stream of versions before");
            Some(permits)
        }
    }
}

/// Spawn `leases` with as many of `permits`; the permits left (`None`: all were used).
async fn spawn_some(
    s: &Arc<Shard>,
    leases: Vec<(Lease, Loaded)>,
    mut permits: OwnedSemaphorePermit,
) -> Option<OwnedSemaphorePermit> {
    let Some(used) = permits.split(leases.len().min(permits.num_permits())) else { return Some(permits) };
    spawn_attempts(s, leases, used).await;
    (permits.num_permits() > 0).then_some(permits)
}

/// One task per lease (its delivery loaded with it), each with one of `permits` (taken before
/// the entries were read).
async fn spawn_attempts(s: &Arc<Shard>, leases: Vec<(Lease, Loaded)>, mut permits: OwnedSemaphorePermit) {
    for (lease, loaded) in leases {
        let Some(permit) = permits.split(1) else {
            // Never more entries than permits; if Redis returned more, the rest wait for a
            // reclaim after their lease.
            return warn!(app = %s.app.name, "more entries than permits");
        };
        let Some(stored) = usable(s, &lease, loaded).await else { continue };
        let s = s.clone();
        let in_flight = s.shared.drain.enter(Work::Attempt);
        let span = info_span!("delivery", app = %s.app.name, delivery = %lease.delivery, token = lease.token);
        tokio::spawn(
            async move {
                run_attempt(&s, lease, stored, permit).await;
                drop(in_flight);
            }
            .instrument(span),
        );
    }
}

impl Shard {
    /// How this shard's attempts reach the app's bot, when all go to the app's own upstream.
    fn transport(&self) -> Transport<'_> {
        self.transport_to(&self.app.upstream)
    }

    /// Whether this shard is a shadow's lane (`bot.shadow`).
    fn is_lane(&self) -> bool {
        crate::config::live_of_lane(&self.app.name).is_some()
    }

    /// Whether the reader takes deliveries here now: a Socket Mode bot's deliveries are taken
    /// only by a process its socket is on (the others' attempts could only fail). With an
    /// entry of `upstreams` going over HTTP, every process reads.
    fn reaches_a_bot(&self) -> bool {
        !self.app.all_socket() || self.transport().reaches(&self.app.name)
    }
}

/// The delivery behind a lease, when the lease is still this worker's.
async fn usable(s: &Shard, lease: &Lease, loaded: Loaded) -> Option<Box<Stored>> {
    match loaded {
        Loaded::Stored(d) => Some(d),
        Loaded::Gone => {
            // The delivery's record is gone (cancelled or already completed): drop the entry.
            let _ = s.store.finish(&s.keys, &s.consumer, lease, Finish::Done).await;
            None
        }
        Loaded::Held => {
            info!(target: "slackgate::audit", app = %s.app.name, delivery = %lease.delivery, "turn held");
            s.shared.history.step(&s.app.name, &lease.delivery, || crate::history::What::Held);
            None
        }
        Loaded::LeaseLost => {
            // Taken over while this worker waited: the new holder sends it.
            s.shared.metrics.fence_rejections.with_label_values(&[&s.app.name]).inc();
            debug!(delivery = %lease.delivery, "lease lost before the attempt; not sent");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calm_reader_waits_on_its_slots_and_a_pressed_one_yields() {
        let ms = Duration::from_millis;
        assert_eq!(yield_for(64, 10, 64, Duration::ZERO), None);
        assert_eq!(yield_for(64, 64, 64, Duration::ZERO), None, "all slots busy, calm: wait on the semaphore, no poll");
        assert_eq!(yield_for(8, 8, 64, Duration::ZERO), Some(YIELD_POLL), "pressed down to 8: yield");
        assert_eq!(yield_for(8, 2, 64, ms(20)), Some(ms(20)), "paused between reads");
        assert_eq!(yield_for(64, 64, 64, ms(1)), Some(YIELD_POLL));
    }
}
