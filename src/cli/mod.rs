//! The command line: `slackgate run` and `slackgate check`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, Overrides};
use crate::out::out;

mod history;
mod ops;
mod run;
mod signals;
mod ui;

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
    Check {
        #[command(flatten)]
        config: ConfigOpt,
        /// The gateway processes that will run this config: Socket Mode's sockets per app add
        /// up across them (Slack allows 10).
        #[arg(long, default_value_t = 1)]
        replicas: u16,
    },
    /// Per app: deliveries ready, in flight, scheduled, dead; oldest age; delivered last minute.
    Stats(ops::Target),
    /// Re-read gateway.toml and its included app files in the running gateway (SIGHUP).
    Reload {
        /// The running gateway's data dir (its pid file is there with the embedded Redis).
        #[arg(long, env = "SLACKGATE_DATA_DIR", default_value = "data")]
        data_dir: PathBuf,
        /// The pid file given to `run --pid-file`.
        #[arg(long, env = "SLACKGATE_PID_FILE")]
        pid_file: Option<PathBuf>,
    },
    /// Load-test a deployment: `sim send` behaves like Slack, `sim receive` like a bot.
    Sim {
        #[command(subcommand)]
        command: crate::sim::SimCommand,
    },
    /// The egress's writes of the last day that were withheld (source deleted or edited) or
    /// whose outcome is unknown.
    Egress(ops::Target),
    /// The delivery history, newest first, filtered (what the pages at /ui/ show).
    Deliveries(history::DeliveriesOpts),
    /// One delivery's whole life: Slack's retries, the ack, each attempt, the bot's replies.
    Show(history::ShowOpts),
    /// The dead-letter stream: list, show, replay, purge.
    Dlq {
        #[command(subcommand)]
        action: ops::DlqAction,
        #[command(flatten)]
        target: ops::Target,
    },
    /// The operator's pages: `ui sessions` counts who is logged in, `--revoke-all` ends it.
    Ui {
        #[command(subcommand)]
        command: ui::UiCommand,
    },
    /// Stop delivering an app's deliveries (or a team's, or a channel's) until `resume`: Slack
    /// is still acked and every delivery recorded; they wait, and arrive on resume.
    Pause(ops::PauseOpts),
    /// End a pause: what it held is delivered within seconds, in the order Slack sent it.
    Resume(ops::PauseOpts),
    /// The pauses in force: what, who, since when.
    Pauses(ops::Target),
}

#[derive(Args)]
pub struct ConfigOpt {
    /// Path to gateway.toml.
    #[arg(long, short, env = "SLACKGATE_CONFIG", default_value = "gateway.toml", global = true)]
    pub config: PathBuf,
}

#[derive(Args)]
pub(crate) struct RunOpts {
    #[command(flatten)]
    pub(crate) config: ConfigOpt,
    /// Slack-facing address (beats [server] listen).
    #[arg(long, env = "SLACKGATE_LISTEN")]
    pub(crate) listen: Option<String>,
    /// Admin address, or "off" (beats [server] admin_listen).
    #[arg(long, env = "SLACKGATE_ADMIN_LISTEN")]
    pub(crate) admin_listen: Option<String>,
    /// Web API egress address, or "off" (beats [egress] listen).
    #[arg(long, env = "SLACKGATE_EGRESS_LISTEN")]
    pub(crate) egress_listen: Option<String>,
    /// Redis URL or "embedded" (beats [redis] url).
    #[arg(long, env = "SLACKGATE_REDIS_URL")]
    pub(crate) redis_url: Option<String>,
    /// Where the embedded Redis keeps its data (with a Redis URL, nothing is written here
    /// unless --upgrade needs its socket).
    #[arg(long, env = "SLACKGATE_DATA_DIR", default_value = "data")]
    pub(crate) data_dir: PathBuf,
    /// Write the process id here (default: <data-dir>/slackgate.pid with the embedded Redis,
    /// none with a Redis URL). `slackgate reload` reads it.
    #[arg(long, env = "SLACKGATE_PID_FILE")]
    pub(crate) pid_file: Option<PathBuf>,
    /// Take over the listening sockets (and the embedded Redis) of a running gateway with the
    /// same --data-dir, which is then sent SIGQUIT: a restart that refuses no connection.
    #[arg(long)]
    pub(crate) upgrade: bool,
    /// Log lines as `pretty` text or `json` objects.
    #[arg(long, env = "SLACKGATE_LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub(crate) log_format: String,
}

pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config, replicas } => check(&config, replicas),
        Command::Run(opts) => run::run(opts),
        Command::Stats(target) => ops::stats(&target),
        Command::Egress(target) => ops::egress(&target),
        Command::Reload { data_dir, pid_file } => {
            run::reload(&pid_file.unwrap_or_else(|| data_dir.join(crate::embedded::PID_FILE)))
        }
        Command::Sim { command } => crate::sim::run(command),
        Command::Dlq { action, target } => ops::dlq(&target, action),
        Command::Deliveries(o) => history::deliveries(&o),
        Command::Show(o) => history::show(&o),
        Command::Ui { command } => ui::ui(command),
        Command::Pause(o) => ops::pause(&o, true),
        Command::Resume(o) => ops::pause(&o, false),
        Command::Pauses(target) => ops::pauses(&target),
    }
}

fn check(opt: &ConfigOpt, replicas: u16) -> anyhow::Result<()> {
    let config = Config::from_file(&opt.config, &Overrides::default())?;
    out!("{}: ok", opt.config.display());
    out!("listen {}  admin {}", config.server.listen, config.server.admin_listen.as_deref().unwrap_or("off"));
    out!("redis {}", config.redis.target.describe());
    out!("  {}", config.redis.describe_access());
    for app in &config.apps {
        out!("app {} -> {}", app.name, app.upstream.url);
        let mut slack = vec![&app.events_path, &app.commands_path, &app.interactivity_path];
        slack.dedup();
        for p in slack {
            out!("  POST {p}  (verified, recorded, acked, delivered)");
        }
        for p in &app.passthrough {
            out!("  *    {p}  (passthrough)");
        }
        if let Some(s) = &app.socket_mode {
            out!(
                "  socket mode: {} connections to Slack per process, apps.connections.open at {}",
                s.connections,
                s.api_url.url
            );
        }
        if app.any_socket() {
            out!("  the bot connects in over Socket Mode at ws://{}", config.server.socket_listen);
        }
        print_routes(app);
        let t = &app.turns;
        if t.is_on() {
            let newer = if t.withhold_on_newer { "withhold" } else { "post" };
            out!(
                "  turns: order {}, end {}, on_newer {newer}, quiet {:?}, pass_after {:?}, timeout {:?}",
                t.order.as_str(),
                t.end.as_str(),
                t.quiet,
                t.pass_after,
                t.timeout
            );
        }
        if let Some(r) = app.run_rules() {
            out!(
                "  lost runs run again: {} (at most {} re-run{} a delivery); a run ends {:?} after the bot's last write, \
                 {:?} after a silent answer, by {:?}",
                app.runs.lost.as_str(),
                app.runs.limit,
                if app.runs.limit == 1 { "" } else { "s" },
                r.quiet,
                r.pass_after,
                r.timeout
            );
        }
    }
    for w in crate::config::socket_warnings(&config.apps, replicas.max(1)) {
        out!("warning: {w}");
    }
    Ok(())
}

/// `check`'s lines for an app's `upstreams` entries and its shadow.
fn print_routes(app: &crate::config::AppConfig) {
    for r in &app.upstreams {
        let d = &r.delivery;
        let slots = if r.own_slots { format!(", max_in_flight {}", d.max_in_flight) } else { String::new() };
        out!(
            "  {}: {} -> {}  (timeout {:?}, retry {:?}..{:?}, give up after {:?}{slots})",
            r.label,
            r.matcher.describe(),
            r.upstream.url,
            d.timeout,
            d.retry_initial,
            d.retry_max,
            d.give_up_after
        );
    }
    if !app.upstreams.is_empty() {
        out!("  otherwise -> {} (the app's upstream)", app.upstream.url);
    }
    if let Some(s) = &app.shadow {
        out!(
            "  shadow: {} -> {}  (share {}, max_backlog {}; its writes are kept at the egress's /shadow/api/, never posted)",
            s.matcher.describe(),
            s.upstream.url,
            s.share,
            s.max_backlog
        );
    }
}
