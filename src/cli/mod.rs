//! The command line: `slackgate run` and `slackgate check`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server};
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::admin::Admin;
use crate::config::{redact_url, Config, Overrides, RedisTarget};
use crate::delivery::DeliveryService;
use crate::embedded::EmbeddedRedis;
use crate::ingress::{Guarded, Ingress};
use crate::live::Live;

mod ops;
mod signals;

#[derive(Parser)]
#[command(name = "slackgate", version, about = "Durable, deduplicating gateway in front of Slack bots")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Run(RunOpts),
    /// Validate the config and print each app's routes and upstream.
    Check(ConfigOpt),
    /// Per app: deliveries ready, in flight, scheduled, dead; oldest age; delivered last minute.
    Stats(ops::Target),
    /// Re-read gateway.toml and its included app files in the running gateway (SIGHUP).
    Reload {
        /// The running gateway's data dir (its pid file is there).
        #[arg(long, env = "SLACKGATE_DATA_DIR", default_value = "data")]
        data_dir: PathBuf,
    },
    /// Load-test a deployment: `sim send` behaves like Slack, `sim receive` like a bot.
    Sim {
        #[command(subcommand)]
        command: crate::sim::SimCommand,
    },
    /// The dead-letter stream: list, show, replay, purge.
    Dlq {
        #[command(subcommand)]
        action: ops::DlqAction,
        #[command(flatten)]
        target: ops::Target,
    },
}

#[derive(Args)]
pub struct ConfigOpt {
    /// Path to gateway.toml.
    #[arg(long, short, env = "SLACKGATE_CONFIG", default_value = "gateway.toml", global = true)]
    pub config: PathBuf,
}

#[derive(Args)]
struct RunOpts {
    #[command(flatten)]
    config: ConfigOpt,
    /// Slack-facing address (beats [server] listen).
    #[arg(long, env = "SLACKGATE_LISTEN")]
    listen: Option<String>,
    /// Admin address, or "off" (beats [server] admin_listen).
    #[arg(long, env = "SLACKGATE_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Redis URL or "embedded" (beats [redis] url).
    #[arg(long, env = "SLACKGATE_REDIS_URL")]
    redis_url: Option<String>,
    /// Where the embedded Redis keeps its data.
    #[arg(long, env = "SLACKGATE_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
    /// Take over the listening sockets (and the embedded Redis) of a running gateway with the
    /// same --data-dir, which is then sent SIGQUIT: a restart that refuses no connection.
    #[arg(long)]
    upgrade: bool,
    /// Log lines as `pretty` text or `json` objects.
    #[arg(long, env = "SLACKGATE_LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    log_format: String,
}

pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(opt) => check(&opt),
        Command::Run(opts) => run(opts),
        Command::Stats(target) => ops::stats(&target),
        Command::Reload { data_dir } => reload(&data_dir),
        Command::Sim { command } => crate::sim::run(command),
        Command::Dlq { action, target } => ops::dlq(&target, action),
    }
}

fn check(opt: &ConfigOpt) -> anyhow::Result<()> {
    let config = Config::from_file(&opt.config, &Overrides::default())?;
    println!("{}: ok", opt.config.display());
    println!("listen {}  admin {}", config.server.listen, config.server.admin_listen.as_deref().unwrap_or("off"));
    match &config.redis.target {
        RedisTarget::Embedded => println!("redis embedded (private redis-server under --data-dir)"),
        RedisTarget::Url(u) => println!("redis {}", redact_url(u)),
    }
    for app in &config.apps {
        println!("app {} -> {}", app.name, app.upstream.url);
        let mut slack = vec![&app.events_path, &app.commands_path, &app.interactivity_path];
        slack.dedup();
        for p in slack {
            println!("  POST {p}  (verified, recorded, acked, delivered)");
        }
        for p in &app.passthrough {
            println!("  *    {p}  (passthrough)");
        }
    }
    Ok(())
}

fn run(opts: RunOpts) -> anyhow::Result<()> {
    crate::init_tracing(opts.log_format == "json");
    // One rustls provider for the whole process: Pingora's upstream TLS and `rediss://` alike.
    pingora::tls::install_default_crypto_provider();
    let overrides = Overrides {
        listen: opts.listen,
        admin_listen: opts.admin_listen,
        redis_url: opts.redis_url,
        secrets_optional: false,
    };
    let config = Arc::new(Config::from_file(&opts.config.config, &overrides)?);
    let live = Arc::new(Live::new(config.clone(), opts.config.config.clone(), overrides));
    let embedded = match &config.redis.target {
        RedisTarget::Embedded => Some(EmbeddedRedis::start(&opts.data_dir, opts.upgrade).context("embedded Redis")?),
        RedisTarget::Url(_) => None,
    };
    let redis_url = match (&embedded, &config.redis.target) {
        (Some(e), _) => e.url(),
        (None, RedisTarget::Url(u)) => u.clone(),
        (None, RedisTarget::Embedded) => unreachable!("embedded target always starts a server"),
    };
    tracing::info!(config = %opts.config.config.display(), apps = config.apps.len(), listen = %config.server.listen, "starting");

    std::fs::create_dir_all(&opts.data_dir).with_context(|| format!("data dir {}", opts.data_dir.display()))?;
    let upgrade_sock = opts.data_dir.canonicalize()?.join("upgrade.sock").display().to_string();
    let conf = ServerConf {
        threads: config.server.threads,
        upgrade_sock,
        grace_period_seconds: Some(0),
        // Draining happens before Pingora hears of the signal (see `drain`).
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let opt = pingora::server::configuration::Opt { upgrade: opts.upgrade, ..Default::default() };
    let mut server = Server::new_with_opt_and_conf(Some(opt), conf);
    server.bootstrap();

    let proxy = pingora::proxy::http_proxy(&server.configuration, Ingress::new(live.clone(), redis_url.clone()));
    let mut ingress = Service::new("ingress".into(), Guarded::new(proxy, config.server.limits));
    ingress.add_tcp(&config.server.listen);
    server.add_service(ingress);
    server.add_service(background_service("delivery", DeliveryService::new(live.clone(), redis_url.clone())));
    if let Some(addr) = &config.server.admin_listen {
        let mut admin = Service::new("admin".into(), Admin::new(live.clone(), redis_url.clone()));
        admin.add_tcp(addr);
        server.add_service(admin);
    }
    server.add_service(background_service("reload", signals::Reloader::new(live)));
    let pid_file = opts.data_dir.join("slackgate.pid");
    std::fs::write(&pid_file, std::process::id().to_string()).with_context(|| format!("{}", pid_file.display()))?;
    let handed_over = Arc::new(AtomicBool::new(false));
    server.run(RunArgs {
        shutdown_signal: Box::new(signals::Signals {
            handed_over: handed_over.clone(),
            grace: config.server.shutdown_grace,
        }),
    });
    let handed_over = handed_over.load(Ordering::Relaxed);
    if !handed_over {
        // The successor of an upgrade owns the pid file (and the embedded Redis) now.
        let _ = std::fs::remove_file(&pid_file);
    }
    match embedded {
        Some(_) if handed_over => {}
        Some(e) => e.stop(),
        None => {}
    }
    Ok(())
}

/// `slackgate reload`: SIGHUP to the gateway whose pid file is under `data_dir`.
fn reload(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let pid_file = data_dir.join("slackgate.pid");
    let pid = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("no running gateway: cannot read {}", pid_file.display()))?;
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
