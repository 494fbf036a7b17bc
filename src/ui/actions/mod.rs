//! What the pages' buttons do: log out, replay or purge one delivery, and replay everything a
//! filter matches (after a page that states the count). Every one passes [`auth`]'s rule
//! for writes first; the result is a 303 to the page that shows it.
//!
//! A dead letter is replayed in place (back on the outbox, same id). A delivered one is sent
//! to the bot again as a new delivery, recorded from the body the history kept: its page
//! links the two.

use askama::Template;
use http::StatusCode;

use super::auth::{self, UiAuth, WriteRefused};
use super::pages::{message, render, Context, Nav};
use super::{nav, redirect, Failure, Reply, Request};
use crate::history::query::{self, Detail};
use crate::history::{Arrival, Note, What};
use crate::ops::Redelivery;

pub mod listing;

use listing::{filter_fields, filter_of, FormFilter};

/// A form's own field (never the query's: the CSRF token comes in the body).
fn form_field(req: &Request, key: &str) -> Option<String> {
    form_urlencoded::parse(&req.body).find(|(k, _)| k == key).map(|(_, v)| v.into_owned())
}

fn refused(ctx: &Context<'_>, why: WriteRefused) -> Reply {
    message(Some(ctx.viewer), why.status(), "Refused", &why.to_string(), "/ui/")
}

pub async fn post(ctx: &Context<'_>, ui_auth: &UiAuth, req: &Request) -> Result<Reply, Failure> {
    let csrf = form_field(req, "csrf");
    let parts: Vec<&str> = req.path.trim_end_matches('/').split('/').skip(2).collect();
    if parts.as_slice() == ["logout"] {
        if let Err(why) = auth::check_form(&req.method, &req.headers, ctx.viewer, csrf.as_deref()) {
            return Ok(refused(ctx, why));
        }
        let cookie = ui_auth.logout(&req.headers, req.tls()).await.map_err(Failure::store)?;
        let mut r = redirect("/ui/login");
        r.headers_mut().insert(http::header::SET_COOKIE, cookie.parse().map_err(|_| Failure::internal())?);
        return Ok(r);
    }
    if let Err(why) = auth::check_write(&req.method, &req.headers, ctx.viewer, csrf.as_deref()) {
        return Ok(refused(ctx, why));
    }
    match parts.as_slice() {
        ["d", app, id, "replay"] => replay_one(ctx, app, id).await,
        ["d", app, id, "purge"] => purge_one(ctx, app, id).await,
        ["replay"] => bulk(ctx, req).await,
        ["sessions", "revoke"] => end_sessions(ui_auth, req).await,
        _ => Ok(message(Some(ctx.viewer), StatusCode::NOT_FOUND, "Not found", "There is no such action.", "/ui/")),
    }
}

/// "End all sessions": the admin's own ends too, so the answer is the login, saying how many.
async fn end_sessions(ui_auth: &UiAuth, req: &Request) -> Result<Reply, Failure> {
    let (n, cookie) = ui_auth.end_all(req.tls()).await.map_err(Failure::store)?;
    let mut r = redirect(&format!("/ui/login?ended={n}"));
    r.headers_mut().insert(http::header::SET_COOKIE, cookie.parse().map_err(|_| Failure::internal())?);
    Ok(r)
}

fn ops_failure(e: crate::ops::OpsError) -> Failure {
    Failure { status: StatusCode::SERVICE_UNAVAILABLE, text: e.to_string() }
}

async fn load(ctx: &Context<'_>, app: &str, id: &str) -> Result<Option<Detail>, Failure> {
    let config = ctx.ops.config();
    if !config.apps.iter().any(|a| a.name == app) {
        return Ok(None);
    }
    query::show(&mut ctx.ops.conn(), &config.redis.key_prefix, app, id).await.map_err(Failure::redis)
}

/// What one replay did: the page that shows it, or why it could not be done.
enum Replayed {
    Dead,
    Again(String),
    Not(String),
}

async fn replay(ctx: &Context<'_>, app: &str, id: &str, d: &Detail) -> Result<Replayed, Failure> {
    let status = d.summary.get("status");
    let replayed = |as_id: String| ctx.shared.history.step(app, id, || What::Replayed { as_id });
    match (status, &d.body) {
        ("dead", _) => match ctx.ops.replay(Some(app), id).await {
            Ok(()) => {
                replayed(String::new());
                Ok(Replayed::Dead)
            }
            Err(crate::ops::OpsError::NotDead(_)) => Ok(Replayed::Not("it is no longer a dead letter".into())),
            Err(e) => Err(ops_failure(e)),
        },
        ("delivered", Some(body)) => {
            let s = &d.summary;
            let again = Redelivery {
                body: body.as_bytes(),
                path: s.get("path"),
                content_type: s.get("content_type"),
                kind: s.get("kind"),
                detail: s.get("detail"),
            };
            let new_id = ctx.ops.redeliver(app, id, again).await.map_err(ops_failure)?;
            replayed(new_id.clone());
            ctx.shared.history.note(arrival_of_replay(app, &new_id, d, body));
            Ok(Replayed::Again(new_id))
        }
        (other, _) => Ok(Replayed::Not(format!("it is {other}: only dead letters and delivered ones are replayed"))),
    }
}

/// The history's record of a redelivery: what the original was, sent by an operator.
fn arrival_of_replay(app: &str, new_id: &str, d: &Detail, body: &str) -> Note {
    let s = &d.summary;
    let arrival = Arrival {
        kind: crate::slack::Kind::parse(s.get("kind")).as_str(),
        detail: s.get("detail").into(),
        team: s.get("team").into(),
        channel: s.get("channel").into(),
        user: s.get("user").into(),
        ts: s.get("ts").into(),
        thread_ts: s.get("thread").into(),
        via: "replay",
        outcome: "accepted",
        reason: format!("sent again by an operator (first as {})", s.id),
        path: s.get("path").into(),
        content_type: s.get("content_type").into(),
        body: Some(bytes::Bytes::from(body.to_string())),
        ..Arrival::default()
    };
    Note {
        app: app.into(),
        delivery: new_id.into(),
        at_ms: crate::clock::now_ms(),
        what: What::Arrived(Box::new(arrival)),
    }
}

async fn replay_one(ctx: &Context<'_>, app: &str, id: &str) -> Result<Reply, Failure> {
    let Some(d) = load(ctx, app, id).await? else {
        return Ok(message(
            Some(ctx.viewer),
            StatusCode::NOT_FOUND,
            "Not found",
            "No such delivery in the history.",
            "/ui/deliveries",
        ));
    };
    Ok(match replay(ctx, app, id, &d).await? {
        Replayed::Dead => redirect(&format!("/ui/d/{app}/{id}")),
        Replayed::Again(new_id) => redirect(&format!("/ui/d/{app}/{new_id}")),
        Replayed::Not(why) => message(
            Some(ctx.viewer),
            StatusCode::CONFLICT,
            "Not replayed",
            &format!("Not replayed: {why}."),
            &format!("/ui/d/{app}/{id}"),
        ),
    })
}

async fn purge_one(ctx: &Context<'_>, app: &str, id: &str) -> Result<Reply, Failure> {
    let back = format!("/ui/d/{app}/{id}");
    match ctx.ops.purge(Some(app), id).await {
        Ok(()) => Ok(message(
            Some(ctx.viewer),
            StatusCode::OK,
            "Purged",
            &format!("The dead letter {id} and its body are gone from the outbox."),
            "/ui/deliveries?status=dead",
        )),
        Err(crate::ops::OpsError::NotDead(_)) => Ok(message(
            Some(ctx.viewer),
            StatusCode::CONFLICT,
            "Not purged",
            "It is not a dead letter (any more).",
            &back,
        )),
        Err(e) => Err(ops_failure(e)),
    }
}

#[derive(Template)]
#[template(path = "ui/confirm.html")]
struct ConfirmPage<'a> {
    nav: Nav<'a>,
    count: usize,
    dead: usize,
    delivered: usize,
    skipped: usize,
    described: String,
    filter_fields: Vec<(&'static str, String)>,
    back: String,
}

/// Everything the filter matches: first the count to confirm, then the replay.
async fn bulk(ctx: &Context<'_>, req: &Request) -> Result<Reply, Failure> {
    let config = ctx.ops.config();
    let form = FormFilter::from_request(req);
    let f = filter_of(config, &form, crate::clock::now_ms())?;
    let cap = config.ui.history_max;
    let page = query::list(&mut ctx.ops.conn(), &config.redis.key_prefix, &f, cap * f.apps.len().max(1), cap)
        .await
        .map_err(Failure::redis)?;
    let is = |s: &str| page.rows.iter().filter(|r| r.get("status") == s).count();
    let (dead, delivered) = (is("dead"), is("delivered"));
    let back = format!("/ui/deliveries?{}", form.query_string());
    if form_field(req, "confirm").is_none() {
        let confirm = ConfirmPage {
            nav: nav(Some(ctx.viewer), "deliveries"),
            count: dead + delivered,
            dead,
            delivered,
            skipped: page.rows.len() - dead - delivered,
            described: form.described(),
            filter_fields: filter_fields(&form),
            back,
        };
        return Ok(render(StatusCode::OK, &confirm));
    }
    let (mut done, mut not) = (0, 0);
    for r in page.rows.iter().filter(|r| matches!(r.get("status"), "dead" | "delivered")) {
        let replayed = match load(ctx, &r.app, &r.id).await? {
            Some(d) => replay(ctx, &r.app, &r.id, &d).await?,
            None => Replayed::Not("gone".into()),
        };
        match replayed {
            Replayed::Not(_) => not += 1,
            _ => done += 1,
        }
    }
    let text = format!(
        "Replayed {done} deliveries{}.",
        if not > 0 { format!("; {not} had changed meanwhile and were left alone") } else { String::new() }
    );
    Ok(message(Some(ctx.viewer), StatusCode::OK, "Replayed", &text, &back))
}
