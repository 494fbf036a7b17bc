//! The completions of one app shard's delivered entries, gathered: each attempt that ends in a
//! 2xx hands its lease to the shard's finisher and waits for its answer, and the finisher
//! finishes what is waiting in one fenced script call (`FINISH_DONE_MANY`), as many as came
//! meanwhile (no window: under load the queue fills batches by itself, and alone an entry is
//! finished at once). Each entry is fenced on its own, so a lease taken over is refused
//! exactly as a single completion's would be. Retries, dead letters and the apps that take
//! turns finish one by one (their scripts do more).

use tokio::sync::{mpsc, oneshot};

use crate::outbox::{Delivered, ShardKeys, Store, StoreError};

/// At most this many completions per call (the script holds Redis while it runs).
const BATCH: usize = 64;

type Answer = oneshot::Sender<Result<bool, StoreError>>;

pub(super) struct Finisher {
    tx: mpsc::UnboundedSender<(Delivered, Answer)>,
}

impl Finisher {
    /// The finisher of the shard `keys`, read by `consumer`; it runs until the shard is gone.
    pub fn spawn(store: Store, keys: ShardKeys, consumer: String) -> Finisher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, store, keys, consumer));
        Finisher { tx }
    }

    /// Finish a delivered entry: `true` done, `false` fenced out (another worker holds it).
    pub async fn done(&self, entry: Delivered) -> Result<bool, StoreError> {
        let (answer, answered) = oneshot::channel();
        let gone = || StoreError::Protocol("the shard's finisher is gone".into());
        self.tx.send((entry, answer)).map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
    }
}

async fn run(mut rx: mpsc::UnboundedReceiver<(Delivered, Answer)>, store: Store, keys: ShardKeys, consumer: String) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        // One call a stream (the live one; the stream of versions before, while it has entries).
        let (legacy, live): (Vec<_>, Vec<_>) = batch.drain(..).partition(|(entry, _)| entry.lease.legacy);
        for part in [live, legacy].into_iter().filter(|p| !p.is_empty()) {
            finish_part(&store, &keys, &consumer, part).await;
        }
    }
}

async fn finish_part(store: &Store, keys: &ShardKeys, consumer: &str, part: Vec<(Delivered, Answer)>) {
    let entries: Vec<&Delivered> = part.iter().map(|(entry, _)| entry).collect();
    match store.finish_done_many(keys, consumer, &entries).await {
        Ok(done) => {
            for ((_, answer), done) in part.into_iter().zip(done) {
                let _ = answer.send(Ok(done));
            }
        }
        Err(e) => {
            let e = e.to_string();
            for (_, answer) in part {
                let _ = answer.send(Err(StoreError::Protocol(e.clone())));
            }
        }
    }
}
