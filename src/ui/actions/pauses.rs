//! The overview's pause and resume buttons: an admin's write (CSRF, as every write), acting
//! once per form (a pause or resume posted twice acts once), through the same operations as
//! `slackgate pause` and the admin API.

use http::StatusCode;

use super::once::Done;
use super::{already, form_field, known, nonce_of, once, ops_failure, stale_form};
use crate::ops::Scope;
use crate::ui::view::{message, Context};
use crate::ui::{redirect, Failure, Reply, Request};

/// `POST /ui/pause` or `/ui/resume`: the form's `app`, `team` and `channel` (empty: any).
pub async fn pause_or_resume(ctx: &Context<'_>, req: &Request, pause: bool) -> Result<Reply, Failure> {
    let app = form_field(req, "app").unwrap_or_default();
    known(ctx, &app)?;
    let Some(nonce) = nonce_of(req, "nonce") else {
        return Ok(stale_form(ctx));
    };
    let mut once = once(ctx);
    if let Some(done) = once.claim(&nonce).await? {
        return Ok(already(ctx, &nonce, &done, "nothing more was done"));
    }
    let (team, channel) = (form_field(req, "team"), form_field(req, "channel"));
    let scope = Scope { app: Some(&app), team: team.as_deref(), channel: channel.as_deref() };
    let by = req.client.map_or_else(|| "the pages".to_string(), |ip| format!("the pages ({ip})"));
    let result = match pause {
        true => ctx.ops.pause(scope, &by).await.map(|(p, new)| match new {
            true => ("Paused", format!("Paused {}: its deliveries are held until it is resumed.", p.describe())),
            false => ("Paused already", format!("{} was paused already, by {}; nothing changed.", p.describe(), p.by)),
        }),
        false => ctx.ops.resume(scope, &by).await.map(|ended| match ended {
            Some(p) => ("Resumed", format!("Resumed {}: what it held is delivered within seconds.", p.describe())),
            None => ("Not paused", "There was no such pause; nothing changed.".to_string()),
        }),
    };
    let (heading, text) = match result {
        Ok(r) => r,
        Err(crate::ops::OpsError::BadScope(why)) => {
            once.release(&nonce).await;
            return Ok(message(Some(ctx.viewer), StatusCode::BAD_REQUEST, "Not paused", &why, "/ui/"));
        }
        Err(e) => {
            once.release(&nonce).await;
            return Err(ops_failure(e));
        }
    };
    let at_ms = crate::clock::now_ms();
    let links = vec![("/ui/".to_string(), "the overview".to_string())];
    once.finish(&nonce, &Done { at_ms, heading: heading.into(), text, links, ..Done::default() }).await?;
    Ok(redirect(&format!("/ui/done/{nonce}")))
}
