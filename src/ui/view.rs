//! What every page is made with: the handler's context, the header's state, rendering, and
//! the page of words. The pages and the actions both take these; neither takes the other's.

use std::sync::Arc;

use askama::Template;
use http::StatusCode;

use super::auth::Viewer;
use super::{html, nav, Reply};
use crate::ops::Ops;
use crate::shared::Shared;

/// What every page handler gets.
pub struct Context<'a> {
    pub ops: &'a Ops,
    pub shared: &'a Arc<Shared>,
    pub viewer: &'a Viewer,
}

impl Context<'_> {
    pub fn can_act(&self) -> bool {
        self.viewer.role == super::auth::Role::Admin
    }
}

/// The header's state.
pub struct Nav<'a> {
    pub current: &'a str,
    pub csrf: &'a str,
    pub session: bool,
    pub read_only: bool,
}

#[derive(Template)]
#[template(path = "ui/message.html")]
struct MessagePage<'a> {
    nav: Nav<'a>,
    heading: &'a str,
    text: &'a str,
    back: &'a str,
    error: bool,
}

/// A page of words: `heading`, `text`, and where to go back to.
pub fn message(viewer: Option<&Viewer>, status: StatusCode, heading: &str, text: &str, back: &str) -> Reply {
    let error = !status.is_success();
    render(status, &MessagePage { nav: nav(viewer, ""), heading, text, back, error })
}

pub fn render(status: StatusCode, page: &impl Template) -> Reply {
    match page.render() {
        Ok(body) => html(status, body),
        Err(e) => {
            html(StatusCode::INTERNAL_SERVER_ERROR, format!("<!doctype html><p>the page could not be made: {e}</p>"))
        }
    }
}
