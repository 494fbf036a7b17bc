//! The command line: `slackgate run` and `slackgate check`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch, UnixShutdownSignalWatch};
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::admin::Admin;
use crate::config::{Config, Overrides, RedisTarget};
use crate::delivery::DeliveryService;
use crate::embedded::EmbeddedRedis;
use crate::ingress::Ingress;

mod ops;

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

/// Hide a password in a Redis URL.
fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

fn run(opts: RunOpts) -> anyhow::Result<()> {
    crate::init_tracing(opts.log_format == "json");
    // One rustls provider for the whole process: Pingora's upstream TLS and `rediss://` alike.
    pingora::tls::install_default_crypto_provider();
    let overrides = Overrides { listen: opts.listen, admin_listen: opts.admin_listen, redis_url: opts.redis_url };
    let config = Arc::new(Config::from_file(&opts.config.config, &overrides)?);
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

    let mut ingress =
        pingora::proxy::http_proxy_service(&server.configuration, Ingress::new(config.clone(), redis_url.clone()));
    ingress.add_tcp(&config.server.listen);
    server.add_service(ingress);
    server.add_service(background_service("delivery", DeliveryService::new(config.clone(), redis_url.clone())));
    if let Some(addr) = &config.server.admin_listen {
        let mut admin = Service::new("admin".into(), Admin::new(config.clone(), redis_url.clone()));
        admin.add_tcp(addr);
        server.add_service(admin);
    }
    let handed_over = Arc::new(AtomicBool::new(false));
    server.run(RunArgs {
        shutdown_signal: Box::new(Signals { handed_over: handed_over.clone(), grace: config.server.shutdown_grace }),
    });
    match embedded {
        // The successor adopted the embedded Redis: leave it running.
        Some(_) if handed_over.load(Ordering::Relaxed) => {}
        Some(e) => e.stop(),
        None => {}
    }
    Ok(())
}

/// Pingora's Unix signals (SIGTERM graceful, SIGINT at once, SIGQUIT hand the sockets to a
/// successor started with `--upgrade`), remembering a hand-over.
struct Signals {
    handed_over: Arc<AtomicBool>,
    grace: std::time::Duration,
}

#[async_trait::async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let signal = UnixShutdownSignalWatch.recv().await;
        match signal {
            ShutdownSignal::GracefulUpgrade => self.handed_over.store(true, Ordering::Relaxed),
            ShutdownSignal::GracefulTerminate => {
                tracing::info!(grace = ?self.grace, "SIGTERM: draining");
                if !crate::drain::drain(self.grace).await {
                    tracing::warn!("grace period over with work in flight; leases and Slack's retries cover it");
                }
            }
            ShutdownSignal::FastShutdown => {}
        }
        signal
    }
}
