//! The one writer per process of what the gateway saw: it takes what queued (no gathering
//! window: the egress may read a thread a moment after its root arrived, and under load the
//! queue fills batches by itself), parses each event off the ack path, and writes the batch as
//! one pipeline. A failed batch is dropped (counted): this is evidence and a fallback, never
//! the record of a delivery; the outbox is.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tracing::{debug, warn};

use super::message::{self, Op};
use super::record::{self, Keep};
use super::{Keys, Sight};
use crate::clock::now_ms;
use crate::config::EgressConfig;
use crate::live::Live;
use crate::queue::writer::{self, Pace};
use crate::shared::Shared;
use crate::store::{connect_lazy, Conn, Endpoint};

/// At most this many sights per pipeline.
const BATCH: usize = 512;
/// How often the switches are read again (after a reload).
const RECHECK: Duration = Duration::from_secs(5);

pub struct Writer {
    live: Arc<Live>,
    shared: Arc<Shared>,
    redis: Endpoint,
}

impl Writer {
    pub fn new(live: Arc<Live>, shared: Arc<Shared>, redis: Endpoint) -> Self {
        Writer { live, shared, redis }
    }

    fn egress(&self) -> EgressConfig {
        self.live.get().config.egress.clone()
    }

    /// Own posts are kept when an egress runs; threads when it also answers from them.
    fn switch(&self) {
        let e = self.egress();
        let on = e.listen.is_some();
        self.shared.seen.set(on, on && e.replies_fallback);
    }
}

#[async_trait]
impl BackgroundService for Writer {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        self.switch();
        let Some(rx) = self.shared.seen.take_receiver() else { return };
        let conn = match connect_lazy(&self.redis, Duration::from_secs(2)) {
            Ok(c) => c,
            Err(e) => {
                self.shared.seen.set(false, false);
                return warn!(error = %e, "no Redis connection for what the gateway sees; uncertain posts fall back to history");
            }
        };
        let pace = Pace { batch: BATCH, window: Duration::ZERO, tend: RECHECK };
        writer::run(&mut Batches { writer: self, conn }, rx, pace, &mut shutdown).await;
    }
}

/// The writer's batches: each one pipeline, and the switches read again between them.
struct Batches<'a> {
    writer: &'a Writer,
    conn: Conn,
}

#[async_trait]
impl writer::Batches for Batches<'_> {
    type Item = Sight;

    async fn write(&mut self, batch: &[Sight]) {
        let p = self.writer.pipeline(batch);
        if let Err(e) = p.query_async::<()>(&mut self.conn).await {
            self.writer.shared.metrics.egress.seen_errors.inc();
            debug!(error = %e, "cannot write what the gateway saw; this batch is dropped");
        }
        self.writer.shared.seen.wrote(batch.len());
    }

    async fn tend(&mut self) {
        self.writer.switch();
    }
}

impl Writer {
    fn pipeline(&self, batch: &[Sight]) -> redis::Pipeline {
        let config = self.live.get().config.clone();
        let e = &config.egress;
        let keep = Keep { own: e.retry_window, recent: e.evidence_recent, thread: e.replies_keep };
        let (evidence, threads) = (e.listen.is_some(), e.listen.is_some() && e.replies_fallback);
        let mut p = redis::pipe();
        let now = now_ms();
        for sight in batch {
            let (team, channel, ops): (&str, &str, Vec<Op>) = match sight {
                Sight::Event { team, channel, own, body } => {
                    (team, channel, message::ops(body, *own, evidence, threads))
                }
                Sight::Posted { team, channel, message } if threads => (team, channel, message::posted(message)),
                Sight::Posted { .. } => continue,
            };
            if !ops.is_empty() {
                record::add(&mut p, &Keys::new(&config.redis.key_prefix, team, channel), &ops, keep, now);
            }
        }
        p
    }
}
