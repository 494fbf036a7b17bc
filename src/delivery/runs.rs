//! The watcher of runs (one per process): it runs again the runs lost with a Socket Mode
//! bot's socket — queued by the socket's session as it closes, or by a worker whose run opened
//! on a socket that had just closed — and those lost with a whole gateway process. A process
//! that holds bot sockets beats in Redis every [`BEAT_EVERY`]; every process looks every
//! [`SWEEP_EVERY`] for one silent past [`crate::outbox::BEAT_STALE_MS`] and runs again the runs that were
//! open on its sockets. A run is run again once whoever notices first: the scripts check that
//! it is still open on the socket named.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::clock::now_ms;
use crate::config::Config;
use crate::live::Live;
use crate::outbox::{Rerun, ShardKeys, Store, TurnEnded};
use crate::queue::runs::LostRun;
use crate::shared::Shared;

/// How often a process holding bot sockets says so.
const BEAT_EVERY: Duration = Duration::from_secs(2);
/// How often a process looks for one that stopped beating.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Run the watcher until `stop` changes (the process stops). A process that stops gracefully
/// (draining) says it no longer holds sockets: the bots whose sockets it closes live on and
/// reconnect to another process, their runs going on there. One that stops at once says
/// nothing, and its open runs are left to the others' sweep.
pub(super) async fn watcher(live: Arc<Live>, shared: Arc<Shared>, store: Store, mut stop: watch::Receiver<bool>) {
    let Some(mut lost) = shared.lost_runs.take_receiver() else { return };
    let mut beat = tokio::time::interval(BEAT_EVERY);
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    loop {
        tokio::select! {
            run = lost.recv() => match run {
                Some(run) => rerun_lost(&live.get().config, &shared, &store, &run).await,
                None => return,
            },
            _ = beat.tick() => beat_if_holding(&live.get().config, &shared, &store).await,
            _ = sweep.tick() => sweep_silent(&live.get().config, &shared, &store).await,
            _ = stop.changed() => {
                if shared.drain.draining() {
                    let _ = store.beat_off(&live.get().config.redis.key_prefix, &shared.holder).await;
                }
                return;
            }
        }
    }
}

/// The shard keys of `app`'s delivery `delivery` (its shard is its id's prefix).
fn keys_of(config: &Config, app: &str, delivery: &str) -> ShardKeys {
    let shard = delivery.split_once('-').and_then(|(s, _)| s.parse::<u16>().ok()).unwrap_or(0);
    ShardKeys::new(&config.redis.key_prefix, app, shard)
}

async fn rerun_lost(config: &Config, shared: &Shared, store: &Store, run: &LostRun) {
    let Some(app) = config.apps.iter().find(|a| a.name == run.app) else { return };
    let Some(rules) = app.run_rules() else { return };
    let keys = keys_of(config, &app.name, &run.delivery);
    for pause in [100, 400, 1600] {
        match store.rerun_lost(&keys, &run.delivery, &run.socket, (&rules, &app.runs), now_ms()).await {
            Ok(Some((rerun, ended))) => return lost(shared, &app.name, &rerun, ended.as_ref()),
            Ok(None) => return debug!(delivery = %run.delivery, "its socket closed after its run ended"),
            Err(e) => {
                debug!(delivery = %run.delivery, error = %e, "cannot run a lost run again yet");
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }
    warn!(app = %app.name, delivery = %run.delivery, "cannot reach Redis to run a lost run again; it ends at its timeout");
}

/// Say in Redis that this process holds bot sockets, while it does.
async fn beat_if_holding(config: &Config, shared: &Shared, store: &Store) {
    let holding = config.apps.iter().any(|a| a.upstream.socket && shared.bots.connected(&a.name) > 0);
    if holding {
        beat(shared, store, &config.redis.key_prefix).await;
    }
}

/// Say in Redis that this process holds bot sockets now.
async fn beat(shared: &Shared, store: &Store, prefix: &str) {
    let now = now_ms();
    match store.beat(prefix, &shared.holder, now).await {
        Ok(()) => shared.last_beat_ms.store(now, Ordering::Relaxed),
        Err(e) => debug!(error = %e, "cannot say this process holds bot sockets"),
    }
}

/// Before a run is tracked on one of this process's sockets: this process has beaten lately
/// (else a process killed before its first beat would leave its runs to no one).
pub(super) async fn beaten(shared: &Shared, store: &Store, prefix: &str) {
    if now_ms().saturating_sub(shared.last_beat_ms.load(Ordering::Relaxed)) >= BEAT_EVERY.as_millis() as u64 / 2 {
        beat(shared, store, prefix).await;
    }
}

/// Run again the runs open on the sockets of processes that stopped beating.
async fn sweep_silent(config: &Config, shared: &Shared, store: &Store) {
    let apps: Vec<_> = config.apps.iter().filter(|a| a.upstream.socket && a.run_rules().is_some()).collect();
    if apps.is_empty() {
        return;
    }
    let prefix = &config.redis.key_prefix;
    let holders = match store.silent_holders(prefix, now_ms()).await {
        Ok(h) => h,
        Err(e) => return debug!(error = %e, "cannot look for gateway processes that stopped"),
    };
    for holder in holders {
        let mut swept = true;
        for app in &apps {
            let rules = app.run_rules().expect("filtered above");
            for shard in 0..config.redis.shards {
                let keys = ShardKeys::new(prefix, &app.name, shard);
                match store.rerun_orphaned(&keys, &holder, (&rules, &app.runs), now_ms()).await {
                    Ok(reruns) => {
                        for (rerun, ended) in &reruns {
                            lost(shared, &app.name, rerun, ended.as_ref());
                        }
                    }
                    Err(e) => {
                        swept = false;
                        debug!(error = %e, "cannot run again the runs of a gateway process that stopped");
                    }
                }
            }
        }
        if swept {
            info!(holder = %holder, "a gateway process holding bot sockets stopped beating: its open runs were run again");
            let _ = store.forget_holder(prefix, &holder).await;
        }
    }
}

/// A lost run, run again or ended past the limit.
fn lost(shared: &Shared, app: &str, rerun: &Rerun, ended: Option<&TurnEnded>) {
    if let Some(ended) = ended {
        crate::history::turns::ended(shared, app, ended);
    }
    noted(shared, app, rerun);
}

/// Count, audit and note in the delivery's history a lost run.
pub(super) fn noted(shared: &Shared, app: &str, rerun: &Rerun) {
    let reason = rerun.reason.as_label();
    let delivery = &rerun.delivery;
    if rerun.run > 0 {
        shared.metrics.turns.reruns.with_label_values(&[app, reason]).inc();
        info!(target: "slackgate::audit", app, delivery = %delivery, reason, run = rerun.run + 1, "run lost with the bot; running it again");
    } else {
        info!(target: "slackgate::audit", app, delivery = %delivery, reason, "run lost with the bot; rerun_limit reached, not run again");
    }
    let run = if rerun.run > 0 { rerun.run + 1 } else { 0 };
    shared.history.step(app, delivery, || crate::history::What::Rerun { reason, run });
}
