//! `slackgate ui sessions`: how many are logged in to the operator's pages, by role, and
//! `--revoke-all` to end every session (as the pages' "End all sessions" button does).

use clap::{Args, Subcommand};

use super::ops::{connect, print_json, runtime, Target};
use crate::out::out;
use crate::ui::auth::sessions::{self, Keys};

#[derive(Subcommand)]
pub enum UiCommand {
    /// The pages' sessions by role; `--revoke-all` ends them all.
    Sessions(SessionsOpts),
}

#[derive(Args)]
pub struct SessionsOpts {
    #[command(flatten)]
    target: Target,
    /// End every session (everyone logs in again); prints how many ended.
    #[arg(long)]
    revoke_all: bool,
}

pub fn ui(command: UiCommand) -> anyhow::Result<()> {
    let UiCommand::Sessions(o) = command;
    runtime()?.block_on(async {
        let ops = connect(&o.target).await?;
        let keys = Keys::new(&ops.config().redis.key_prefix);
        let mut conn = ops.conn();
        if o.revoke_all {
            let ended = sessions::end_all(&mut conn, &keys).await?;
            if o.target.json {
                return print_json(&serde_json::json!({ "ended": ended }));
            }
            out!("ended {ended} sessions");
            return Ok(());
        }
        let count = sessions::count(&mut conn, &keys).await?;
        if o.target.json {
            return print_json(&count);
        }
        out!("admin {}", count.admin);
        out!("read  {}", count.read);
        Ok(())
    })
}
