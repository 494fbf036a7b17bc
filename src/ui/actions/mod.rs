//! What the pages' buttons do: log out, replay or purge one delivery, and replay what a
//! filter matched (after a page that states the count). Every one passes [`auth`]'s rule
//! for writes first, then acts once per form ([`once`]): the result is a 303 to the page
//! that shows it, and the same form sent again does nothing more and says so.
//!
//! A dead letter is replayed in place (back on the outbox, same id). A delivered one is sent
//! to the bot again as a new delivery, recorded from the body the history kept, marked as an
//! operator's replay (`via = "replay"`): its page links the two, and filters leave replays out
//! unless asked, so a replay is never replayed again by accident.

use askama::Template;
use http::StatusCode;

use super::auth::{self, UiAuth, WriteRefused};
use super::view::{message, render, Context, Nav};
use super::{nav, redirect, Failure, Reply, Request};
use crate::clock::hms;
use crate::history::query::{self, Detail};
use crate::history::{Arrival, Note, What};
use crate::ops::Redelivery;

pub mod listing;
pub mod once;
mod pauses;

use listing::{filter_of, no_app, FormFilter};
use once::{Done, Once, Taken};

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
        ["d", app, id, "replay"] => replay_one(ctx, req, app, id).await,
        ["d", app, id, "purge"] => purge_one(ctx, req, app, id).await,
        ["replay"] => bulk(ctx, req).await,
        ["sessions", "revoke"] => end_sessions(ui_auth, req).await,
        ["pause"] => pauses::pause_or_resume(ctx, req, true).await,
        ["resume"] => pauses::pause_or_resume(ctx, req, false).await,
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

fn known(ctx: &Context<'_>, app: &str) -> Result<(), Failure> {
    match ctx.ops.config().apps.iter().any(|a| a.name == app) {
        true => Ok(()),
        false => Err(no_app(app)),
    }
}

async fn load(ctx: &Context<'_>, app: &str, id: &str) -> Result<Option<Detail>, Failure> {
    let config = ctx.ops.config();
    // With the history off nothing kept can be acted on (the writer deletes it within seconds).
    if !config.ui.keeps_history() || !config.apps.iter().any(|a| a.name == app) {
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
            Err(crate::ops::OpsError::NotDead(_)) => {
                Ok(Replayed::Not("it is no longer a dead letter (replayed or purged already)".into()))
            }
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

fn once(ctx: &Context<'_>) -> Once {
    Once::new(ctx.ops.conn(), &ctx.ops.config().redis.key_prefix)
}

/// The form's nonce, when it carries one this module made.
fn nonce_of(req: &Request, field: &str) -> Option<String> {
    form_field(req, field).filter(|n| once::valid(n))
}

/// The page for a form without a nonce (a page made before them, or a hand-made POST).
fn stale_form(ctx: &Context<'_>) -> Reply {
    message(
        Some(ctx.viewer),
        StatusCode::BAD_REQUEST,
        "Reload the page",
        "This form is out of date (it carries no one-time token): nothing was done. Reload the page and try again.",
        "/ui/deliveries",
    )
}

/// The page for a form sent again: what it did the first time, and that nothing more was.
fn already(ctx: &Context<'_>, nonce: &str, done: &Done, nothing: &str) -> Reply {
    let what = match done.finished {
        true => format!(" It did this: {}", done.text),
        false => " It has not recorded its result (still at work, or its gateway stopped).".into(),
    };
    let text = format!("Already done: this form was sent at {} UTC; {nothing}.{what}", hms(done.at_ms));
    message(Some(ctx.viewer), StatusCode::CONFLICT, "Already done", &text, &format!("/ui/done/{nonce}"))
}

async fn replay_one(ctx: &Context<'_>, req: &Request, app: &str, id: &str) -> Result<Reply, Failure> {
    known(ctx, app)?;
    let Some(nonce) = nonce_of(req, "nonce") else {
        return Ok(stale_form(ctx));
    };
    let mut once = once(ctx);
    if let Some(done) = once.claim(&nonce).await? {
        return Ok(already(ctx, &nonce, &done, "nothing was replayed again"));
    }
    let result = match load(ctx, app, id).await {
        Ok(Some(d)) => replay(ctx, app, id, &d).await.map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    let replayed = match result {
        Ok(r) => r,
        Err(e) => {
            once.release(&nonce).await;
            return Err(e);
        }
    };
    let (done, reply) = told(ctx, (app, id), replayed);
    once.finish(&nonce, &done).await?;
    Ok(reply)
}

/// What a replay did, as the form's record and the page it answers.
fn told(ctx: &Context<'_>, (app, id): (&str, &str), replayed: Option<Replayed>) -> (Done, Reply) {
    let at_ms = crate::clock::now_ms();
    let back = format!("/ui/d/{app}/{id}");
    match replayed {
        Some(Replayed::Dead) => {
            let text = format!("The dead letter {id} went back to the outbox.");
            (
                Done {
                    at_ms,
                    heading: "Replayed".into(),
                    text,
                    links: vec![(back.clone(), id.into())],
                    ..Done::default()
                },
                redirect(&back),
            )
        }
        Some(Replayed::Again(new_id)) => {
            let to = format!("/ui/d/{app}/{new_id}");
            let text = format!("{id} was sent to the bot again as {new_id}.");
            (
                Done { at_ms, heading: "Replayed".into(), text, links: vec![(to.clone(), new_id)], ..Done::default() },
                redirect(&to),
            )
        }
        Some(Replayed::Not(why)) => {
            let text = format!("Not replayed: {why}.");
            let page = message(Some(ctx.viewer), StatusCode::CONFLICT, "Not replayed", &text, &back);
            (
                Done {
                    at_ms,
                    heading: "Not replayed".into(),
                    text,
                    links: vec![(back.clone(), id.into())],
                    ..Done::default()
                },
                page,
            )
        }
        None => {
            let text = "No such delivery in the history.".to_string();
            let page = message(Some(ctx.viewer), StatusCode::NOT_FOUND, "Not found", &text, "/ui/deliveries");
            (Done { at_ms, heading: "Not found".into(), text, ..Done::default() }, page)
        }
    }
}

async fn purge_one(ctx: &Context<'_>, req: &Request, app: &str, id: &str) -> Result<Reply, Failure> {
    known(ctx, app)?;
    let Some(nonce) = nonce_of(req, "nonce") else {
        return Ok(stale_form(ctx));
    };
    let mut once = once(ctx);
    if let Some(done) = once.claim(&nonce).await? {
        return Ok(already(ctx, &nonce, &done, "nothing was purged again"));
    }
    let at_ms = crate::clock::now_ms();
    let dead = "/ui/deliveries?status=dead".to_string();
    match ctx.ops.purge(Some(app), id).await {
        Ok(()) => {
            let text = format!("The dead letter {id} and its body are gone from the outbox.");
            let done = Done {
                at_ms,
                heading: "Purged".into(),
                text,
                links: vec![(dead, "Dead letters".into())],
                ..Done::default()
            };
            once.finish(&nonce, &done).await?;
            Ok(redirect(&format!("/ui/done/{nonce}")))
        }
        Err(crate::ops::OpsError::NotDead(_)) => {
            let text = format!("Already done: {id} is not a dead letter any more (it was purged or replayed already); nothing was purged.");
            let back = format!("/ui/d/{app}/{id}");
            let done = Done {
                at_ms,
                heading: "Not purged".into(),
                text: text.clone(),
                links: vec![(back.clone(), id.into())],
                ..Done::default()
            };
            once.finish(&nonce, &done).await?;
            Ok(message(Some(ctx.viewer), StatusCode::CONFLICT, "Not purged", &text, &back))
        }
        Err(e) => {
            once.release(&nonce).await;
            Err(ops_failure(e))
        }
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
    nonce: String,
    replays_left_out: bool,
    back: String,
}

/// A bulk replay: first the count to confirm (its ids kept with a nonce), then the replay of
/// exactly those.
async fn bulk(ctx: &Context<'_>, req: &Request) -> Result<Reply, Failure> {
    match form_field(req, "confirm") {
        None => confirm(ctx, req).await,
        Some(_) => match nonce_of(req, "confirm") {
            Some(nonce) => bulk_replay(ctx, &nonce).await,
            None => Ok(stale_form(ctx)),
        },
    }
}

async fn confirm(ctx: &Context<'_>, req: &Request) -> Result<Reply, Failure> {
    let config = ctx.ops.config();
    let form = FormFilter::from_request(req);
    let f = filter_of(config, &form, crate::clock::now_ms())?;
    let cap = config.ui.history_max;
    let page = match config.ui.keeps_history() {
        true => query::list(&mut ctx.ops.conn(), &config.redis.key_prefix, &f, cap * f.apps.len().max(1), cap)
            .await
            .map_err(Failure::redis)?,
        false => query::Page::default(),
    };
    let is = |s: &str| page.rows.iter().filter(|r| r.get("status") == s).count();
    let (dead, delivered) = (is("dead"), is("delivered"));
    let ids: Vec<(String, String)> = page
        .rows
        .iter()
        .filter(|r| matches!(r.get("status"), "dead" | "delivered"))
        .map(|r| (r.app.clone(), r.id.clone()))
        .collect();
    let nonce = once::nonce();
    if !ids.is_empty() {
        once(ctx).stash(&nonce, &ids).await?;
    }
    let confirm = ConfirmPage {
        nav: nav(Some(ctx.viewer), "deliveries"),
        count: ids.len(),
        dead,
        delivered,
        skipped: page.rows.len() - ids.len(),
        described: form.described(),
        nonce,
        replays_left_out: !f.replays,
        back: format!("/ui/deliveries?{}", form.query_string()),
    };
    Ok(render(StatusCode::OK, &confirm))
}

/// Links a result page lists at most.
const MAX_LINKS: usize = 100;

async fn bulk_replay(ctx: &Context<'_>, nonce: &str) -> Result<Reply, Failure> {
    let mut once = once(ctx);
    let ids = match once.take(nonce).await? {
        Taken::Ids(ids) => ids,
        Taken::Done(done) => return Ok(already(ctx, nonce, &done, "nothing was replayed again")),
        Taken::Gone => {
            return Ok(message(
                Some(ctx.viewer),
                StatusCode::GONE,
                "Out of date",
                "This confirmation is over an hour old (or was never made): nothing was replayed. Go back to the list and confirm again.",
                "/ui/deliveries",
            ))
        }
    };
    let mut done = Done { at_ms: crate::clock::now_ms(), heading: "Replayed".into(), ..Done::default() };
    let (mut replayed, mut not, mut stopped) = (0, 0, None);
    for (app, id) in &ids {
        let result = match load(ctx, app, id).await {
            Ok(Some(d)) => replay(ctx, app, id, &d).await,
            Ok(None) => Ok(Replayed::Not("gone from the history".into())),
            Err(e) => Err(e),
        };
        let link = match result {
            Ok(Replayed::Dead) => (format!("/ui/d/{app}/{id}"), id.clone()),
            Ok(Replayed::Again(new_id)) => (format!("/ui/d/{app}/{new_id}"), format!("{id} again as {new_id}")),
            Ok(Replayed::Not(_)) => {
                not += 1;
                continue;
            }
            Err(e) => {
                stopped = Some(e.text);
                break;
            }
        };
        replayed += 1;
        if done.links.len() < MAX_LINKS {
            done.links.push(link);
        }
    }
    done.text = format!("Replayed {replayed} of the {} deliveries confirmed", ids.len());
    if not > 0 {
        done.text += &format!("; {not} had changed meanwhile and were left alone");
    }
    if let Some(why) = stopped {
        done.text += &format!("; it stopped there: {why}");
    }
    done.text.push('.');
    once.finish(nonce, &done).await?;
    Ok(redirect(&format!("/ui/done/{nonce}")))
}

#[derive(Template)]
#[template(path = "ui/done.html")]
struct DonePage<'a> {
    nav: Nav<'a>,
    done: Done,
    at: String,
}

/// What a form did, by its nonce: the page a POST sends the browser to (a reload of it sends
/// nothing).
pub async fn result(ctx: &Context<'_>, nonce: &str) -> Result<Reply, Failure> {
    let found = match once::valid(nonce) {
        true => once(ctx).read(nonce).await?,
        false => None,
    };
    let Some(mut done) = found else {
        let text = "No such result (results are kept for a day).";
        return Ok(message(Some(ctx.viewer), StatusCode::NOT_FOUND, "Not found", text, "/ui/deliveries"));
    };
    if !done.finished {
        done.heading = "At work".into();
        done.text = "It has not recorded its result yet (still at work, or its gateway stopped).".into();
    }
    let at = hms(done.at_ms);
    Ok(render(StatusCode::OK, &DonePage { nav: nav(Some(ctx.viewer), "deliveries"), done, at }))
}
