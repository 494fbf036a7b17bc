//! The loop of a background writer, written once: take what queued, gather what comes
//! meanwhile, write the batch, tend between batches, and stop with the process. What a batch
//! becomes in Redis is the writer's ([`Batches`]); a failed batch is dropped by it, never
//! retried (these are views and evidence; the outbox is the record).

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

/// How a writer takes its queue.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// At most this many items per batch.
    pub batch: usize,
    /// How long a batch gathers after its first item; zero: written as it came.
    pub window: Duration,
    /// How often [`Batches::tend`] runs (the first time at once).
    pub tend: Duration,
}

/// What one writer does with a batch, and between batches.
#[async_trait]
pub trait Batches: Send {
    type Item: Send;

    /// Write one batch; what fails is counted (and dropped) here.
    async fn write(&mut self, batch: &[Self::Item]);

    /// Between batches: read the switches again after a reload, trim.
    async fn tend(&mut self);
}

/// Run `writer` over `rx` until the queue closes or `stop` changes.
pub async fn run<B: Batches>(
    writer: &mut B,
    mut rx: mpsc::Receiver<B::Item>,
    pace: Pace,
    stop: &mut watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(pace.tend);
    let mut batch = Vec::with_capacity(pace.batch);
    loop {
        tokio::select! {
            n = rx.recv_many(&mut batch, pace.batch) => if n == 0 { return },
            _ = tick.tick() => {
                writer.tend().await;
                continue;
            }
            _ = stop.changed() => return,
        }
        if !pace.window.is_zero() {
            gather(&mut rx, &mut batch, pace).await;
        }
        writer.write(&batch).await;
        batch.clear();
    }
}

/// The window: what else comes within `pace.window` of the first item, so that things a few
/// milliseconds apart (a delivery's arrival and its attempt) make one write. The writer sleeps
/// through it rather than waiting on the queue, so the items that come meanwhile wake no one
/// (a wake is a cross-thread syscall per item, paid on the ack path). A full batch (a backlog)
/// is written at once.
async fn gather<T>(rx: &mut mpsc::Receiver<T>, batch: &mut Vec<T>, pace: Pace) {
    if batch.len() < pace.batch {
        tokio::time::sleep(pace.window).await;
    }
    while batch.len() < pace.batch {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it was given.
    #[derive(Default)]
    struct Recorder {
        batches: Vec<Vec<u32>>,
        tended: usize,
    }

    #[async_trait]
    impl Batches for Recorder {
        type Item = u32;

        async fn write(&mut self, batch: &[u32]) {
            self.batches.push(batch.to_vec());
        }

        async fn tend(&mut self) {
            self.tended += 1;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_gathers_what_comes_and_a_closed_queue_ends_the_writer() {
        let (tx, rx) = mpsc::channel(16);
        let (_stop_tx, mut stop) = watch::channel(false);
        let pace = Pace { batch: 3, window: Duration::from_millis(100), tend: Duration::from_secs(3600) };
        let mut w = Recorder::default();
        for i in 0..4 {
            tx.send(i).await.unwrap();
        }
        drop(tx);
        run(&mut w, rx, pace, &mut stop).await;
        assert_eq!(w.batches, vec![vec![0, 1, 2], vec![3]], "at most `batch` at a time, in order");
    }

    #[tokio::test(start_paused = true)]
    async fn the_writer_stops_with_the_process() {
        let (_tx, rx) = mpsc::channel::<u32>(16);
        let (stop_tx, mut stop) = watch::channel(false);
        let pace = Pace { batch: 3, window: Duration::ZERO, tend: Duration::from_secs(1) };
        let mut w = Recorder::default();
        let stopping = async {
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            stop_tx.send(true).unwrap();
        };
        tokio::join!(run(&mut w, rx, pace, &mut stop), stopping);
        assert_eq!(w.tended, 3, "at 0, 1 s and 2 s");
        assert!(w.batches.is_empty());
    }
}
