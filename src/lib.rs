//! slackgate: a gateway in front of unmodified Slack bots. It verifies each Slack delivery,
//! records it durably in Redis, acks Slack in milliseconds and forwards the delivery to the bot,
//! retrying until the bot answers 2xx. At-least-once, on purpose (see the README).
//!
//! # Layout
//! Data flows one way: ingress → outbox → delivery → upstream; the bot's replies go
//! bot → egress → Slack. The ingress and the delivery workers meet only at the outbox; both
//! send through [`attempt`] (one send-once step) and conclude there (one conclusion, what
//! follows decided by [`policy`]).
//! - [`cli`]: the command line; `run` wires the services together and hands each the
//!   [`shared`] state. [`out`]: the commands' `println!` (the CLI's and the simulator's).
//! - [`config`]: `gateway.toml` → one validated [`config::Config`]; [`live`]: the running
//!   config, reloaded on SIGHUP.
//! - [`slack`]: pure rules — signatures, request classification, receipt and message keys,
//!   filters, where a late reply may go. Depends on no other module.
//! - [`ingress`]: Pingora `ProxyHttp` — route, verify, classify, record, ack; inline answers for
//!   commands and interactions; passthrough; per-connection deadlines.
//! - [`store`]: the connection to Redis (where it is, one cheap connection, and [`store::Lazy`],
//!   the one way a service gets a store of its own), shared by the outbox and the egress.
//! - [`outbox`]: Redis scripts and streams — record, lease, fenced finish, retries, dead letters;
//!   and the conversation records where the inbound side and the egress meet. Knows no HTTP
//!   and no workers.
//! - [`delivery`]: the background workers (reader, housekeeping).
//! - [`attempt`]: one attempt toward the bot over its transport, and the one conclusion after
//!   it for the workers and the inline path alike (policy step, fenced finish, counts, audit,
//!   history, the late reply to `response_url`).
//! - [`policy`]: what to do after an attempt (retry, backoff, give up, dead-letter).
//! - [`socket`]: Socket Mode both ways — the gateway's sockets to Slack (each envelope recorded
//!   by the ingress before it is acked) and a Socket Mode bot's socket to the gateway.
//! - [`upstream`]: the pooled client that re-signs and sends a delivery to the bot (and, for
//!   the egress, calls Slack); the bot's transport, HTTP or a Socket Mode socket
//!   ([`upstream::Transport`]).
//! - [`egress`]: the Web API egress the bots' clients point at — reads streamed through,
//!   writes made once (keys, a client's own retries, uncertain posts), paced, and withheld when
//!   their source message is gone. It reads what the inbound side recorded (delivered,
//!   deleted and edited messages) from Redis, never from memory.
//! - [`shared`]: what one process's services share — [`metrics`], [`drain`] (graceful stop and
//!   in-flight counts), [`pressure`] (how pressed the ack path is: the ingress publishes it, the
//!   workers yield to it), whether the workers run, and handles: the Socket Mode bots'
//!   ([`upstream::SocketBots`]) and the writers' [`queue`]s.
//! - [`queue`]: bounded queues into the background writers, which never wait (a full one drops
//!   and counts), and the one loop those writers run.
//! - [`history`]: each delivery's life for the operator's pages, written off the ack path by
//!   one writer task per process.
//! - [`seen`]: what the inbound side saw of conversations (own posts, threads), written off
//!   the ack path for the egress.
//! - [`ui`]: the operator's pages on the admin listener (`/ui/`), over the history and [`ops`].
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz`, stats and the dead-letter API; [`ops`]:
//!   operator actions for the CLI and the admin API.
//! - [`serve`]: steps shared by the gateway's own HTTP/1 listeners (the egress, admin).
//! - [`telemetry`]: each delivery's trace over OpenTelemetry (`[telemetry]`), its ids derived
//!   from the delivery's id, its spans queued for an exporting thread that never blocks a caller.
//! - [`clock`]: wall time from tokio's clock (pausable in tests); [`secret`]: secret values.
//! - [`sim`]: `slackgate sim`, Slack's side and a bot's for load tests; [`embedded`]: the
//!   private `redis-server` for laptops.
#![forbid(unsafe_code)]

pub mod admin;
pub mod attempt;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod drain;
pub mod egress;
pub mod embedded;
pub mod history;
pub mod ingress;
pub mod live;
pub mod metrics;
pub mod ops;
pub mod out;
pub mod outbox;
pub mod pauses;
pub mod policy;
pub mod pressure;
pub mod queue;
pub mod secret;
pub mod seen;
pub mod serve;
pub mod shared;
pub mod sim;
pub mod slack;
pub mod socket;
pub mod store;
pub mod telemetry;
pub mod ui;
pub mod upstream;

/// Logs to stderr, `pretty` (human) or `json` (one object per line); `RUST_LOG` picks the
/// level (default `info`). Audit lines use the target `slackgate::audit`.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // Colour codes only on a terminal: a log file or a collector gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = if json { builder.json().try_init() } else { builder.with_ansi(colour).with_target(false).try_init() };
}
