//! The deliveries filter as a form carries it (the list's GET, the bulk replay's POST), and
//! as the history's query wants it.

use std::time::Duration;

use http::StatusCode;

use crate::config::{parse_duration, Config};
use crate::history::query::Filter;
use crate::ui::{Failure, Request};

/// The filter's fields, as typed.
#[derive(Debug, Clone, Default)]
pub struct FormFilter {
    pub app: String,
    pub team: String,
    pub channel: String,
    pub kind: String,
    pub status: String,
    pub since: String,
    pub never: String,
    pub q: String,
    /// Older than this arrival (ms): the next page.
    pub until: String,
    /// `1`: an operator's replays too (left out otherwise, so a replay is not replayed again).
    pub replays: String,
}

/// The names the form uses, in the order a query string lists them.
const NAMES: [&str; 10] = ["app", "team", "channel", "kind", "status", "since", "never", "q", "until", "replays"];

impl FormFilter {
    pub fn from_request(req: &Request) -> FormFilter {
        let get = |k: &str| req.param(k).map(|v| v.trim().to_string()).unwrap_or_default();
        FormFilter {
            app: get("app"),
            team: get("team"),
            channel: get("channel"),
            kind: get("kind"),
            status: get("status"),
            since: get("since"),
            never: get("never"),
            q: get("q"),
            until: get("until"),
            replays: if get("replays").is_empty() { String::new() } else { "1".into() },
        }
    }

    fn values(&self) -> [&str; 10] {
        [
            &self.app,
            &self.team,
            &self.channel,
            &self.kind,
            &self.status,
            &self.since,
            &self.never,
            &self.q,
            &self.until,
            &self.replays,
        ]
    }

    /// Something narrows the list.
    pub fn any(&self) -> bool {
        self.values().iter().any(|v| !v.is_empty())
    }

    /// The filter as a query string (without `until`: the first page).
    pub fn query_string(&self) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in NAMES.iter().zip(self.values()).filter(|(k, v)| !v.is_empty() && **k != "until") {
            s.append_pair(k, v);
        }
        s.finish()
    }

    /// In words, for the confirmation.
    pub fn described(&self) -> String {
        let parts: Vec<String> = NAMES
            .iter()
            .zip(self.values())
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| match *k {
                "replays" => "an operator's replays included".to_string(),
                k => format!("{k} = {v}"),
            })
            .collect();
        if parts.is_empty() {
            "everything in the history".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The filter's non-empty fields, for a form's hidden inputs.
pub fn filter_fields(f: &FormFilter) -> Vec<(&'static str, String)> {
    NAMES.iter().zip(f.values()).filter(|(_, v)| !v.is_empty()).map(|(k, v)| (*k, v.to_string())).collect()
}

fn bad(text: String) -> Failure {
    Failure { status: StatusCode::BAD_REQUEST, text }
}

/// An app the config does not name: a page that is not there.
pub fn no_app(app: &str) -> Failure {
    Failure { status: StatusCode::NOT_FOUND, text: format!("There is no app named {app}.") }
}

/// A duration in ms, saturating (a query string can ask for any number of days).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn time_ms(key: &str, v: &str) -> Result<Option<u64>, Failure> {
    match v {
        "" => Ok(None),
        v => v.parse().map(Some).map_err(|_| bad(format!("{key}: `{v}` is not a time in ms"))),
    }
}

fn duration(key: &str, v: &str) -> Result<Option<Duration>, Failure> {
    if v.is_empty() {
        return Ok(None);
    }
    parse_duration(v).map(Some).map_err(|e| bad(format!("{key}: {e}")))
}

/// The history's query for `f` at `now` (ms); a field that does not parse is a 400.
pub fn filter_of(config: &Config, f: &FormFilter, now: u64) -> Result<Filter, Failure> {
    let apps = match f.app.as_str() {
        "" => config.apps.iter().map(|a| a.name.clone()).collect(),
        a if config.apps.iter().any(|c| c.name == a) => vec![a.to_string()],
        a => return Err(no_app(a)),
    };
    Ok(Filter {
        apps,
        team: f.team.clone(),
        channel: f.channel.clone(),
        kind: f.kind.clone(),
        status: f.status.clone(),
        since_ms: duration("since", &f.since)?.map(|d| now.saturating_sub(millis(d))),
        until_ms: time_ms("until", &f.until)?,
        search: f.q.clone(),
        never_answered: duration("never", &f.never)?,
        replays: !f.replays.is_empty(),
    })
}

/// Narrow `f` to arrivals after `after` (ms, exclusive): the live list's poll asks only for
/// rows newer than the ones it has, so one poll reads only the index entries past them.
pub fn newer_than(f: &mut Filter, after: &str) -> Result<(), Failure> {
    if let Some(after) = time_ms("after", after)? {
        f.since_ms = Some(f.since_ms.unwrap_or(0).max(after.saturating_add(1)));
    }
    Ok(())
}
