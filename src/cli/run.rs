//! `slackgate run`: load the config, check that its addresses are free, start the embedded
//! Redis when no URL is set, wire the services into Pingora and run until a signal.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use pingora::server::{RunArgs, Server};
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use super::{signals, RunOpts};
use crate::admin::Admin;
use crate::config::{BoundPorts, Config, ListenerLimits, Overrides, RedisTarget};
use crate::delivery::DeliveryService;
use crate::egress::Egress;
use crate::embedded::EmbeddedRedis;
use crate::ingress::{Guarded, Ingress, Proxy};
use crate::live::Live;
use crate::metrics::FixedLabels;
use crate::outbox::Endpoint;
use crate::shared::Shared;
use crate::socket::{BotListener, BotSockets, SlackSockets};

pub(crate) fn run(opts: RunOpts) -> anyhow::Result<()> {
    crate::init_tracing(opts.log_format == "json");
    // The Socket Mode bots' sockets: served by their listener, a handle to everyone else.
    let bots = Arc::new(BotSockets::default());
    let shared = Shared::new(bots.clone());
    // One rustls provider for the whole process: Pingora's TLS and `rediss://` alike.
    pingora::tls::install_default_crypto_provider();
    let overrides = Overrides {
        listen: opts.listen.clone(),
        admin_listen: opts.admin_listen.clone(),
        redis_url: opts.redis_url.clone(),
        egress_listen: opts.egress_listen.clone(),
        secrets_optional: false,
    };
    let mut config = Config::from_file(&opts.config.config, &overrides)?;
    // Pingora retries a taken port in the background while the rest runs; fail here instead.
    // (An upgrade takes its sockets over from the running gateway.)
    let bound = if opts.upgrade { BoundPorts::default() } else { preflight(&mut config)? };
    let config = Arc::new(config);
    let live = Arc::new(Live::new(config.clone(), opts.config.config.clone(), overrides).with_bound(bound));
    init_series(&shared, &config);
    start_telemetry(&shared, &config)?;
    let (embedded, redis) = redis(&config, &opts)?;
    // With a Redis URL nothing is written to disk (a read-only root filesystem is fine): the data
    // dir holds the embedded Redis, and the upgrade socket only when --upgrade needs it.
    let pid_file =
        opts.pid_file.clone().or_else(|| embedded.as_ref().map(|_| opts.data_dir.join(crate::embedded::PID_FILE)));
    if opts.upgrade {
        std::fs::create_dir_all(&opts.data_dir).with_context(|| format!("data dir {}", opts.data_dir.display()))?;
    }
    let upgrade_sock = absolute(&opts.data_dir).join("upgrade.sock");
    let opt = pingora::server::configuration::Opt { upgrade: opts.upgrade, ..Default::default() };
    let mut server = Server::new_with_opt_and_conf(Some(opt), config.pingora_conf(&upgrade_sock));
    server.bootstrap();
    add_services(&mut server, &config, &live, &shared, &bots, &redis);
    if let Some(p) = &pid_file {
        std::fs::write(p, std::process::id().to_string()).with_context(|| format!("pid file {}", p.display()))?;
    }
    announce(&config, &opts.config.config, embedded.as_ref());
    warn_if_short_of_files(&config);
    let handed_over = Arc::new(AtomicBool::new(false));
    server.run(RunArgs {
        shutdown_signal: Box::new(signals::Signals {
            handed_over: handed_over.clone(),
            grace: config.server.shutdown_grace,
            drain: shared.drain.clone(),
        }),
    });
    // The successor of an upgrade owns the pid file (and the embedded Redis) now.
    if !handed_over.load(Ordering::Relaxed) {
        if let Some(p) = &pid_file {
            let _ = std::fs::remove_file(p);
        }
        if let Some(e) = embedded {
            e.stop();
        }
    }
    Ok(())
}

/// The Redis to use: the configured URL, or a private server started (or, on `--upgrade`,
/// adopted) under the data dir.
fn redis(config: &Config, opts: &RunOpts) -> anyhow::Result<(Option<EmbeddedRedis>, Endpoint)> {
    let auth = config.redis.auth.clone();
    Ok(match &config.redis.target {
        RedisTarget::Embedded => {
            let e = EmbeddedRedis::start(&opts.data_dir, opts.upgrade).context("embedded Redis")?;
            let endpoint = Endpoint::new(RedisTarget::Url(e.url()), auth);
            (Some(e), endpoint)
        }
        target => (None, Endpoint::new(target.clone(), auth)),
    })
}

/// Probes, a scraper and an operator: the admin listener needs few connections, and a flood of
/// them must not take the file descriptors the Slack listener needs.
const ADMIN_MAX_CONNECTIONS: usize = 64;
/// Socket Mode bots hold a few sockets each (Slack's own limit is 10 per app).
const SOCKET_BOTS_MAX_CONNECTIONS: usize = 256;

/// The Slack listener, the egress and the admin listener (each behind its connection guard),
/// the delivery workers and the reloader, all sharing `shared`; `bots` is served by the socket
/// listener.
fn add_services(
    server: &mut Server,
    config: &Config,
    live: &Arc<Live>,
    shared: &Arc<Shared>,
    bots: &Arc<BotSockets>,
    redis: &Endpoint,
) {
    let ingress = Arc::new(Ingress::new(live.clone(), shared.clone(), redis.clone()));
    let proxy = pingora::proxy::http_proxy(&server.configuration, Proxy(ingress.clone()));
    let mut service = Service::new("ingress".into(), Guarded::new(proxy, config.server.limits, shared.clone()));
    service.add_tcp(&config.server.listen);
    server.add_service(service);
    let delivery = DeliveryService::new(live.clone(), shared.clone(), redis.clone());
    server.add_service(background_service("delivery", delivery));
    add_writers(server, config, live, shared, redis);
    // The other listeners get the Slack listener's deadlines: a half-sent request or an idle
    // socket on them holds memory and file descriptors just the same.
    if let Some(addr) = &config.server.admin_listen {
        let admin = Admin::new(live.clone(), shared.clone(), redis.clone());
        let limits = ListenerLimits {
            max_connections: config.server.limits.max_connections.min(ADMIN_MAX_CONNECTIONS),
            ..config.server.limits
        };
        let mut admin = Service::new("admin".into(), Guarded::uncounted(admin, limits));
        admin.add_tcp(addr);
        server.add_service(admin);
    }
    if let Some(addr) = &config.egress.listen {
        let egress = Egress::new(Arc::new(config.clone()), live.clone(), shared.clone(), redis.clone());
        let mut service = Service::new("egress".into(), Guarded::uncounted(egress, config.server.limits));
        service.add_tcp(addr);
        server.add_service(service);
    }
    // Idle until an app has socket_mode (a reload may add one).
    let sockets = SlackSockets::new(live.clone(), shared.clone(), ingress.clone());
    server.add_service(background_service("socket mode", sockets));
    if config.socket_bots() {
        let listener = BotListener {
            addr: config.server.socket_listen.clone(),
            bots: bots.clone(),
            shared: shared.clone(),
            max_connections: SOCKET_BOTS_MAX_CONNECTIONS,
            upgrade_deadline: config.server.limits.header_timeout,
        };
        server.add_service(background_service("socket bots", listener));
    }
    let on_reload = {
        let shared = shared.clone();
        move |config: &Config| init_series(&shared, config)
    };
    server.add_service(background_service("reload", signals::Reloader::new(live.clone(), Box::new(on_reload))));
}

/// The writers off the ack path: the delivery history, and what the gateway saw.
fn add_writers(server: &mut Server, config: &Config, live: &Arc<Live>, shared: &Arc<Shared>, redis: &Endpoint) {
    // On from the first request when the config keeps a history; the writer follows reloads.
    shared.history.set(config.ui.keeps_history(), config.ui.history_rate);
    let history = crate::history::writer::Writer::new(live.clone(), shared.clone(), redis.clone());
    server.add_service(background_service("history", history));
    // What the egress reconciles and answers from; on from the first request with an egress.
    let on = config.egress.listen.is_some();
    shared.seen.set(on, on && config.egress.replies_fallback);
    let seen = crate::seen::writer::Writer::new(live.clone(), shared.clone(), redis.clone());
    server.add_service(background_service("seen", seen));
}

/// Every series with a fixed label set, for every app, at zero: the label values come from
/// the enums that decide them.
/// Traces, when `[telemetry]` is on: the exporting thread, started once for the process.
fn start_telemetry(shared: &Shared, config: &Config) -> anyhow::Result<()> {
    let counts = shared.metrics.trace_spans.clone();
    shared.telemetry.start(&config.telemetry, counts).map_err(|e| anyhow::anyhow!("[telemetry] {e}"))
}

pub(crate) fn init_series(shared: &Shared, config: &Config) {
    let labels = fixed_labels();
    for outcome in ["exported", "failed", "dropped"] {
        shared.metrics.trace_spans.with_label_values(&[outcome]);
    }
    // Which directions of Socket Mode an app uses: its sockets to Slack, a bot's to us.
    let socket = |app: &crate::config::AppConfig| {
        (app.socket_mode.as_ref().is_some_and(|s| s.connections > 0), app.any_socket())
    };
    for app in &config.apps {
        shared.metrics.init_app(&app.name, &labels);
        let routes: Vec<&str> = std::iter::once(crate::config::DEFAULT_ROUTE)
            .chain(app.upstreams.iter().map(|r| r.label.as_str()))
            .collect();
        shared.metrics.init_routes(&app.name, &routes, &labels.delivery_outcomes);
        // Every app's shadow series at zero (its dashboard panels read 0 without a shadow); the
        // shadow's lane, an app of its own to the delivery series, when it has one.
        shared.metrics.init_shadow(&app.name);
        if app.shadow.is_some() {
            shared.metrics.init_app(&crate::config::shadow_lane_name(&app.name), &labels);
        }
        shared.metrics.init_socket(&app.name, socket(app), &labels);
    }
    shared.metrics.forget_sockets(|name, direction| {
        config.apps.iter().find(|a| a.name == name).is_some_and(|a| match direction {
            "slack" => socket(a).0,
            _ => socket(a).1,
        })
    });
    if config.egress.listen.is_some() {
        shared.metrics.init_egress(&labels);
    }
}

fn fixed_labels() -> FixedLabels {
    use crate::attempt::InlineOutcome;
    use crate::ingress::{counted_requests, Closed};
    use crate::outbox::{Eviction, StoreOp};
    use crate::policy::Outcome;
    use crate::slack::{IgnoreReason, ReplyOutcome, RetryReason};
    let inline_kinds = ["command", "interactivity"];
    FixedLabels {
        requests: counted_requests(),
        retry_reasons: RetryReason::ALL.map(RetryReason::as_label).to_vec(),
        delivery_outcomes: Outcome::ALL.map(Outcome::as_label).to_vec(),
        store_operations: StoreOp::ALL.map(StoreOp::as_label).to_vec(),
        ignore_reasons: IgnoreReason::ALL.map(IgnoreReason::as_label).to_vec(),
        inline: inline_kinds.iter().flat_map(|k| InlineOutcome::ALL.map(|o| (*k, o.as_label()))).collect(),
        reply_outcomes: ReplyOutcome::ALL.map(ReplyOutcome::as_label).to_vec(),
        eviction_reasons: Eviction::ALL.map(Eviction::as_label).to_vec(),
        close_reasons: Closed::ALL.map(Closed::as_label).to_vec(),
        shed_reasons: crate::ingress::Shed::ALL.map(crate::ingress::Shed::as_label).to_vec(),
        egress: ["read", "write"]
            .iter()
            .flat_map(|c| crate::egress::Outcome::ALL.map(|o| (*c, o.as_label())))
            .collect(),
        turn_ends: crate::outbox::TurnEnd::ALL.map(crate::outbox::TurnEnd::as_label).to_vec(),
        rerun_reasons: crate::outbox::RerunReason::ALL.map(crate::outbox::RerunReason::as_label).to_vec(),
        envelope_types: crate::socket::envelope::EnvelopeType::ALL
            .map(crate::socket::envelope::EnvelopeType::as_label)
            .to_vec(),
        // Slack's disconnect reasons, and ours: no frame within the ping deadline.
        socket_reconnects: crate::socket::envelope::Disconnect::ALL
            .map(crate::socket::envelope::Disconnect::as_label)
            .into_iter()
            .chain(["ping_timeout"])
            .collect(),
        history_methods: crate::egress::HISTORY_METHODS.to_vec(),
    }
}

/// Both listening addresses must be free now: a gateway that cannot take its Slack port
/// must not run on as if it could. An address with port 0 gets a free port, which the startup
/// line names.
fn preflight(config: &mut Config) -> anyhow::Result<BoundPorts> {
    let bind = |key: &str, addr: &str| -> anyhow::Result<(std::net::TcpListener, Option<(String, String)>)> {
        let listener = bind_free(addr)
            .with_context(|| format!("cannot listen on {addr} ({key} in {})", config.source.display()))?;
        let resolved = addr.ends_with(":0").then(|| listener.local_addr().map(|a| (addr.to_string(), a.to_string())));
        Ok((listener, resolved.transpose()?))
    };
    // Both held until both are bound, so two port-0 addresses get two ports.
    let (_slack, listen) = bind("server.listen", &config.server.listen)?;
    let optional = |key: &str, addr: &Option<String>| addr.as_deref().map(|a| bind(key, a)).transpose();
    let admin = optional("server.admin_listen", &config.server.admin_listen)?;
    let egress = optional("egress.listen", &config.egress.listen)?;
    let sockets = config.socket_bots().then(|| config.server.socket_listen.clone());
    let socket = optional("server.socket_listen", &sockets)?;
    let bound = BoundPorts {
        listen,
        admin_listen: admin.and_then(|(_, b)| b),
        egress_listen: egress.and_then(|(_, b)| b),
        socket_listen: socket.and_then(|(_, b)| b),
    };
    config.resolve_ports(&bound);
    Ok(bound)
}

/// Bind `addr`; port 0 takes a free port below Linux's ephemeral range (32768–60999), so that
/// no outgoing connection (which takes its local port from that range) can take the port in
/// the moment between this check and Pingora's own bind. The kernel's choice when none is free.
fn bind_free(addr: &str) -> std::io::Result<std::net::TcpListener> {
    if let Some(host) = addr.strip_suffix(":0") {
        for _ in 0..64 {
            let port = 20_000 + rand::random::<u16>() % 12_000;
            if let Ok(l) = std::net::TcpListener::bind(format!("{host}:{port}")) {
                return Ok(l);
            }
        }
    }
    std::net::TcpListener::bind(addr)
}

/// The connections all listeners may hold at once, each one a file descriptor.
fn connection_caps(config: &Config) -> usize {
    let cap = config.server.limits.max_connections;
    let admin = config.server.admin_listen.as_ref().map_or(0, |_| cap.min(ADMIN_MAX_CONNECTIONS));
    let egress = config.egress.listen.as_ref().map_or(0, |_| cap);
    cap + admin + egress
}

/// Warn when the process may open fewer files than its listeners may hold connections: past
/// the limit every `accept` fails, on the Slack listener too, whichever listener took them.
fn warn_if_short_of_files(config: &Config) {
    let caps = connection_caps(config);
    // Linux says it in /proc; elsewhere nothing is checked.
    let Some(limit) = std::fs::read_to_string("/proc/self/limits").ok().as_deref().and_then(open_files_limit) else {
        return;
    };
    // Redis connections, the pooled clients and the process's own files need some too.
    if limit < caps as u64 + 256 {
        tracing::warn!(
            open_files = limit,
            connections = caps,
            "the listeners may hold more connections than this process may open files: raise its limit \
             (ulimit -n, systemd LimitNOFILE=) or lower server.max_connections"
        );
    }
}

/// The soft `Max open files` of a `/proc/<pid>/limits` text; `None` when unlimited or absent.
fn open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
}

/// The one line a user needs at start: where Slack and the admin API are served, which Redis,
/// and each app's routes and bot.
fn announce(config: &Config, path: &Path, embedded: Option<&EmbeddedRedis>) {
    let s = &config.server;
    let redis = match embedded {
        Some(e) => format!("embedded at {}", e.url()),
        None => config.redis.target.describe(),
    };
    let apps: Vec<String> = config
        .apps
        .iter()
        .map(|a| {
            let mut routes = vec![a.events_path.as_str(), a.commands_path.as_str(), a.interactivity_path.as_str()];
            routes.dedup();
            let passthrough = if a.passthrough.is_empty() {
                String::new()
            } else {
                format!(" passthrough {}", a.passthrough.join(","))
            };
            let socket = match &a.socket_mode {
                Some(s) if s.connections > 0 => format!(" + {} Socket Mode connections", s.connections),
                _ => String::new(),
            };
            format!("{} [{}{passthrough}]{socket} -> {}", a.name, routes.join(","), a.upstream.url)
        })
        .collect();
    tracing::info!(
        config = %path.display(),
        listen = %s.listen,
        admin = s.admin_listen.as_deref().unwrap_or("off"),
        egress = config.egress.listen.as_deref().unwrap_or("off"),
        socket_bots = if config.socket_bots() { s.socket_listen.as_str() } else { "off" },
        redis = %redis,
        apps = %apps.join("; "),
        "slackgate started: point Slack at http(s)://<this host><path> for each app"
    );
}

fn absolute(dir: &Path) -> PathBuf {
    if dir.is_absolute() {
        return dir.to_path_buf();
    }
    std::env::current_dir().map(|c| c.join(dir)).unwrap_or_else(|_| dir.to_path_buf())
}

/// `slackgate reload`: SIGHUP to the gateway whose pid is in `pid_file`.
pub(crate) fn reload(pid_file: &Path) -> anyhow::Result<()> {
    let pid = std::fs::read_to_string(pid_file).with_context(|| {
        format!(
            "no running gateway: cannot read {} (with a Redis URL the gateway writes no pid file unless run with \
             --pid-file; or send it SIGHUP: kill -HUP <pid>)",
            pid_file.display()
        )
    })?;
    let pid = pid.trim();
    anyhow::ensure!(
        !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
        "{} is not a pid file",
        pid_file.display()
    );
    let status = std::process::Command::new("kill").args(["-HUP", pid]).status()?;
    anyhow::ensure!(status.success(), "cannot signal process {pid}");
    println!("sent SIGHUP to {pid}; the gateway's log says whether the new config was taken");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_is_read_from_proc() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63432                63432                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(open_files_limit(limits), Some(1024));
        assert_eq!(open_files_limit("Max open files            unlimited            unlimited            files"), None);
        assert_eq!(open_files_limit(""), None);
    }
}
