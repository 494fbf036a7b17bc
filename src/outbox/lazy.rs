//! The outbox's store as a service gets it: through [`Lazy`], with the connections its
//! durability needs chosen here.

use std::time::Duration;

use super::{Endpoint, Store};
use crate::config::Durability;
use crate::store::{connect_lazy, Conn, Lazy};

/// Connections for records under `durability = "replicated"`: a `WAIT` holds its connection
/// until the replicas answer, so records waiting for replicas take turns over a few
/// connections instead of queueing behind one.
const RECORD_CONNECTIONS: usize = 8;

pub type LazyStore = Lazy<Store>;

impl Lazy<Store> {
    /// A store whose records are `local`: every service but the ingress.
    pub fn outbox(endpoint: &Endpoint, response_timeout: Duration) -> Self {
        Self::durable(endpoint, response_timeout, Durability::Local)
    }

    /// A store whose records are as durable as `durability` says (the ingress's).
    pub fn durable(endpoint: &Endpoint, response_timeout: Duration, durability: Durability) -> Self {
        Lazy::new(endpoint, response_timeout, move |endpoint, timeout| {
            let conn = connect_lazy(endpoint, timeout)?;
            let waiters = match durability {
                Durability::Replicated { .. } => {
                    (0..RECORD_CONNECTIONS).map(|_| connect_lazy(endpoint, timeout)).collect::<Result<Vec<_>, _>>()?
                }
                Durability::Local => Vec::new(),
            };
            warm(&waiters);
            Ok(Store::new(conn).durable(durability, waiters))
        })
    }
}

/// Connect the record connections now, in the background and one after another, rather than
/// under the records that come next: records take turns over them, so otherwise the first
/// burst after a start pays up to [`RECORD_CONNECTIONS`] connection set-ups (a TLS handshake to
/// every node of a cluster, each) inside its ack budget, all at once. A connection that fails
/// here connects again on its first record, as it would have anyway.
fn warm(conns: &[Conn]) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    let conns = conns.to_vec();
    runtime.spawn(async move {
        for mut conn in conns {
            let _: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        }
    });
}
