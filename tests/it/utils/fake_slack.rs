//! A fake Slack Web API on a loopback port: it records every call, answers `auth.test`, keeps
//! the messages the bot writes (posts and streams, see the [`messages`] module for what each
//! message method does, as Slack does it) and serves them back from `conversations.history`
//! and `conversations.replies`, and can be told how to answer the next writes: late (after
//! recording), not at all (the connection dropped after recording), with an error, or 429 —
//! any write in order ([`FakeSlack::push`]), or the next calls of one method
//! ([`FakeSlack::push_for`]); how to answer the next looks into history; and who each token is
//! (`auth.test`). A write answered late or not at all has had its effect (a post kept, a
//! stream's text appended): the answer is lost, not the call. Every answer carries Slack's
//! headers (`X-Slack-Req-Id`, the OAuth scopes); `test.large` answers a read of any size.
//! `assistant.threads.setStatus`, `.setSuggestedPrompts` and `.setTitle` answer ok.
//!
//! Slack's rate-limit tiers for the history reads can be taught ([`FakeSlack::tier`]): per
//! method and per token (one app), so many calls in any 60 s, each page at most so many
//! messages; past it, 429 with the `Retry-After` until the oldest call leaves the minute.
//! Messages of people ([`FakeSlack::add_message`]) show in history beside the posts.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

#[path = "fake_slack_messages.rs"]
pub mod messages;

use messages::{Args, BotMessage, Reply};

pub const TEAM: &str = "T1";
pub const BOT_USER: &str = "UBOT";
pub const BOT_ID: &str = "BBOT";

/// How the fake answers one write (or, by [`FakeSlack::push_for`], one call of a method).
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Answer as Slack would: a place in a script that leaves one call alone.
    Normal,
    /// Record it and do it, then answer after this long.
    Late(Duration),
    /// Record it and do it, then drop the connection without an answer.
    Drop,
    /// Drop the connection without recording it (it never reached "Slack").
    DropBefore,
    /// Answer this status (and `{"ok":false}`) without recording.
    Status(u16),
    /// `{"ok": false, "error": …}` with 200, not recorded.
    NotOk(&'static str),
    /// 429 with this `Retry-After`, not recorded.
    RateLimited(u64),
    /// 429 with this `Retry-After` text as it is (a hostile or odd value), not recorded.
    RateLimitedRaw(&'static str),
}

/// How the fake answers one look into history (`conversations.history` or `.replies`).
#[derive(Clone, Debug)]
pub enum Look {
    /// `{"ok": true, "messages": []}`: nothing there (yet).
    Empty,
    /// 429 with this `Retry-After`.
    RateLimited(u64),
    /// `{"ok": false, "error": …}` with 200.
    NotOk(&'static str),
}

#[derive(Clone, Debug)]
pub struct ApiCall {
    pub method: String,
    /// The HTTP method and query the call came with.
    pub verb: hyper::Method,
    pub query: Option<String>,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    calls: Mutex<Vec<ApiCall>>,
    /// The messages posted, streamed or added, as history shows them.
    messages: Mutex<messages::Store>,
    /// How the next writes are answered, any method (in order).
    script: Mutex<VecDeque<Behaviour>>,
    /// How the next calls of one method are answered (in order), before [`State::script`].
    scripts_for: Mutex<HashMap<String, VecDeque<Behaviour>>>,
    seq: Mutex<u64>,
    /// How the next looks into history are answered (in order); then from the posts.
    looks: Mutex<VecDeque<Look>>,
    /// `auth.test` per token: user id, bot id (else [`BOT_USER`], [`BOT_ID`]).
    identities: Mutex<HashMap<String, (String, String)>>,
    /// Per method: calls a minute, messages a page.
    tiers: Mutex<HashMap<String, (usize, usize)>>,
    /// Per (token, method): when each call within the last minute came.
    tier_calls: Mutex<HashMap<(String, String), VecDeque<Instant>>>,
}

pub struct FakeSlack {
    pub port: u16,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeSlack {
    pub async fn start() -> FakeSlack {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        FakeSlack { port, state, task }
    }

    /// The Web API base URL to configure: `http://127.0.0.1:<port>/api/`.
    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/", self.port)
    }

    /// The next write gets this behaviour (in order), unless [`FakeSlack::push_for`] scripted
    /// its method.
    pub fn push(&self, b: Behaviour) {
        self.state.script.lock().unwrap().push_back(b);
    }

    /// The next call of `method` gets this behaviour (in order; [`Behaviour::Normal`] leaves
    /// one alone), before anything [`FakeSlack::push`] scripted: e.g. `Normal, Normal, Drop`
    /// for `chat.appendStream` loses the answer of the third append, and no other write's.
    pub fn push_for(&self, method: &str, b: Behaviour) {
        self.state.scripts_for.lock().unwrap().entry(method.into()).or_default().push_back(b);
    }

    /// A stream takes appends this long after its start (5 min by default, as Slack's); then
    /// it no longer streams and keeps the text it had.
    pub fn stream_expiry(&self, lifetime: Duration) {
        self.state.messages.lock().unwrap().expiry = lifetime;
    }

    /// The next look into history gets this answer (in order).
    pub fn push_look(&self, l: Look) {
        self.state.looks.lock().unwrap().push_back(l);
    }

    /// `auth.test` with `token` says this user and bot id (another app, or a user token with
    /// an empty bot id).
    pub fn identity(&self, token: &str, user_id: &str, bot_id: &str) {
        self.state.identities.lock().unwrap().insert(token.into(), (user_id.into(), bot_id.into()));
    }

    /// `method` (`conversations.history`, `.replies`) takes `per_minute` calls in any 60 s per
    /// token, and answers at most `page` messages; Slack's tier 1 is `(1, 15)`.
    pub fn tier(&self, method: &str, per_minute: usize, page: usize) {
        self.state.tiers.lock().unwrap().insert(method.into(), (per_minute, page));
    }

    /// A message of someone else's (`{ts, user, text, thread_ts?}`) that history shows in
    /// `channel`, beside the posts.
    pub fn add_message(&self, channel: &str, message: Value) {
        let mut kept = message;
        kept["channel"] = Value::String(channel.into());
        self.state.messages.lock().unwrap().keep(kept);
    }

    pub fn calls(&self) -> Vec<ApiCall> {
        self.state.calls.lock().unwrap().clone()
    }

    pub fn calls_of(&self, method: &str) -> Vec<ApiCall> {
        self.calls().into_iter().filter(|c| c.method == method).collect()
    }

    /// The arguments (JSON or form body, then the query) of every call of `method`, in order.
    pub fn args_of(&self, method: &str) -> Vec<serde_json::Map<String, Value>> {
        self.calls_of(method)
            .iter()
            .map(|c| {
                let mut f = fields(&c.headers, &c.body);
                for (k, v) in form_urlencoded::parse(c.query.as_deref().unwrap_or("").as_bytes()) {
                    f.entry(k.into_owned()).or_insert(Value::String(v.into_owned()));
                }
                f
            })
            .collect()
    }

    /// The text each call of `method` carried (`markdown_text`, then its markdown chunks), in
    /// order: what a stream call asked to append.
    pub fn stream_texts(&self, method: &str) -> Vec<String> {
        self.args_of(method).iter().map(messages::stream_text).collect()
    }

    /// The bot's messages (posted or streamed, and not deleted), each `{channel, ts,
    /// thread_ts, text, …}` as history shows it; not those of [`FakeSlack::add_message`].
    pub fn posts(&self) -> Vec<Value> {
        self.state.messages.lock().unwrap().posts()
    }

    /// The bot's messages (posted or streamed, and not deleted), with where each stream stands
    /// now.
    pub fn messages(&self) -> Vec<BotMessage> {
        self.state.messages.lock().unwrap().bot_messages(Instant::now())
    }

    /// The bot's message at `ts` in `channel`, if the fake keeps it.
    pub fn message(&self, channel: &str, ts: &str) -> Option<BotMessage> {
        self.messages().into_iter().find(|m| m.channel == channel && m.ts == ts)
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

fn is_write(method: &str) -> bool {
    method.starts_with("chat.")
        || method.starts_with("reactions.")
        || method.starts_with("views.")
        || method.starts_with("assistant.threads.")
}

/// When `method` has a tier and this token has used it up in the last minute: the seconds
/// until its oldest call leaves the minute (a call within the tier is counted).
fn over_tier(st: &State, headers: &hyper::HeaderMap, f: &serde_json::Map<String, Value>, method: &str) -> Option<u64> {
    let (per_minute, _) = *st.tiers.lock().unwrap().get(method)?;
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|b| b.strip_prefix("Bearer "));
    let token = bearer.or_else(|| f.get("token").and_then(Value::as_str)).unwrap_or_default().to_string();
    let now = Instant::now();
    let minute = Duration::from_secs(60);
    let mut calls = st.tier_calls.lock().unwrap();
    let used = calls.entry((token, method.to_string())).or_default();
    while used.front().is_some_and(|t| now.duration_since(*t) >= minute) {
        used.pop_front();
    }
    if used.len() < per_minute {
        used.push_back(now);
        return None;
    }
    let frees = minute.saturating_sub(now.duration_since(used[0]));
    Some(frees.as_secs_f64().ceil().max(1.0) as u64)
}

/// The ts of the next message "Slack" makes.
fn next_ts(st: &State) -> String {
    let mut seq = st.seq.lock().unwrap();
    *seq += 1;
    format!("{}.{:06}", 1_800_000_000 + *seq, *seq)
}

/// A JSON or form body's fields.
fn fields(headers: &hyper::HeaderMap, body: &[u8]) -> serde_json::Map<String, Value> {
    let json = headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("json"));
    if json {
        return serde_json::from_slice::<Value>(body).ok().and_then(|v| v.as_object().cloned()).unwrap_or_default();
    }
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), Value::String(v.into_owned()))).collect()
}

fn answer(status: u16, body: Value, retry_after: Option<u64>) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(status).header("content-type", "application/json; charset=utf-8");
    if let Some(s) = retry_after {
        r = r.header("retry-after", s.to_string());
    }
    r.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// Slack's own answer headers on every answer (as the real Web API sends them): a request id
/// per call and the token's scopes, which `@slack/web-api` reads.
async fn handle(st: Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let n = st.calls.lock().unwrap().len() + 1;
    let mut resp = answer_call(st, req).await?;
    let h = resp.headers_mut();
    if !h.contains_key("x-slack-req-id") {
        h.insert("x-slack-req-id", format!("req-{n}").parse().unwrap());
    }
    h.insert("x-oauth-scopes", "chat:write,channels:history".parse().unwrap());
    h.insert("x-accepted-oauth-scopes", "chat:write".parse().unwrap());
    Ok(resp)
}

/// `test.large?bytes=N`: a read whose answer is a JSON document of about N bytes.
fn large(query: Option<&str>) -> Response<Full<Bytes>> {
    let n: usize = query
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "bytes"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body = format!("{{\"ok\":true,\"pad\":\"{}\"}}", "x".repeat(n));
    Response::builder()
        .status(200)
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// How the next call of `method` is answered: the next of its own script, else (a write) the
/// next of the script for any write.
fn next_behaviour(st: &State, method: &str) -> Option<Behaviour> {
    let own = st.scripts_for.lock().unwrap().get_mut(method).and_then(VecDeque::pop_front);
    own.or_else(|| is_write(method).then(|| st.script.lock().unwrap().pop_front()).flatten())
}

/// An answer that never reaches "Slack": the behaviour's, if it is one.
fn refused(behaviour: Option<&Behaviour>) -> Option<Result<Response<Full<Bytes>>, std::io::Error>> {
    let refusal = match behaviour? {
        Behaviour::Status(s) => answer(*s, json!({"ok": false, "error": "fatal_error"}), None),
        Behaviour::NotOk(e) => answer(200, json!({"ok": false, "error": e}), None),
        Behaviour::RateLimitedRaw(v) => {
            let mut r = answer(429, json!({"ok": false, "error": "ratelimited"}), None);
            r.headers_mut().insert("retry-after", v.parse().unwrap());
            r
        }
        Behaviour::RateLimited(s) => answer(429, json!({"ok": false, "error": "ratelimited"}), Some(*s)),
        Behaviour::DropBefore => return Some(Err(std::io::Error::other("dropped"))),
        Behaviour::Normal | Behaviour::Late(_) | Behaviour::Drop => return None,
    };
    Some(Ok(refusal))
}

async fn answer_call(st: Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let method = parts.uri.path().trim_start_matches("/api/").to_string();
    st.calls.lock().unwrap().push(ApiCall {
        method: method.clone(),
        verb: parts.method.clone(),
        query: parts.uri.query().map(String::from),
        headers: parts.headers.clone(),
        body: body.clone(),
        at: Instant::now(),
    });
    if method == "test.large" {
        return Ok(large(parts.uri.query()));
    }
    let mut f = fields(&parts.headers, &body);
    // Arguments may come in the query too, as Slack takes them.
    for (k, v) in form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        f.entry(k.into_owned()).or_insert(Value::String(v.into_owned()));
    }
    let behaviour = next_behaviour(&st, &method);
    if let Some(refusal) = refused(behaviour.as_ref()) {
        return refusal;
    }
    if let Some(after) = over_tier(&st, &parts.headers, &f, &method) {
        return Ok(answer(429, json!({"ok": false, "error": "ratelimited"}), Some(after)));
    }
    if method.starts_with("conversations.") {
        let look = st.looks.lock().unwrap().pop_front();
        match look {
            Some(Look::Empty) => return Ok(answer(200, json!({"ok": true, "messages": []}), None)),
            Some(Look::RateLimited(s)) => {
                return Ok(answer(429, json!({"ok": false, "error": "ratelimited"}), Some(s)))
            }
            Some(Look::NotOk(e)) => return Ok(answer(200, json!({"ok": false, "error": e}), None)),
            None => {}
        }
    }
    let answered = match method.as_str() {
        "auth.test" => answer(200, who_is(&st, &parts.headers), None),
        "conversations.history" | "conversations.replies" => answer(200, history(&st, &method, &f), None),
        // Reads echo what they were given, so a test can compare bytes.
        m if !is_write(m) => echo(m, &body),
        m => answer(200, write(&st, m, &f).unwrap_or_else(|error| json!({"ok": false, "error": error})), None),
    };
    // The call has had its effect; only its answer is late or lost.
    match behaviour {
        Some(Behaviour::Late(d)) => tokio::time::sleep(d).await,
        Some(Behaviour::Drop) => return Err(std::io::Error::other("dropped after recording")),
        _ => {}
    }
    Ok(answered)
}

/// `auth.test`: who the call's token is.
fn who_is(st: &State, headers: &hyper::HeaderMap) -> Value {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = bearer.strip_prefix("Bearer ").unwrap_or_default();
    let (user, bot) =
        st.identities.lock().unwrap().get(token).cloned().unwrap_or_else(|| (BOT_USER.to_string(), BOT_ID.to_string()));
    json!({"ok": true, "team_id": TEAM, "user_id": user, "bot_id": bot, "team": "Test"})
}

/// `conversations.history` or `.replies` (`ts`: the thread's), at most a page of the tier.
fn history(st: &State, method: &str, f: &Args) -> Value {
    let arg = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let thread = (method == "conversations.replies").then(|| arg("ts"));
    let mut messages = st.messages.lock().unwrap().history(&arg("channel"), thread.as_deref());
    let page = st.tiers.lock().unwrap().get(method).map_or(usize::MAX, |t| t.1);
    let has_more = messages.len() > page;
    messages.truncate(page);
    json!({"ok": true, "messages": messages, "has_more": has_more})
}

/// A read the fake does not know: its method and body, echoed.
fn echo(method: &str, body: &[u8]) -> Response<Full<Bytes>> {
    Response::builder()
        .status(200)
        .header("content-type", "application/json; charset=utf-8")
        .header("x-fake-echo", "1")
        .body(Full::new(Bytes::from(
            json!({"ok": true, "method": method, "echo": String::from_utf8_lossy(body)}).to_string(),
        )))
        .unwrap()
}

/// A write's effect on the kept messages, and its answer; writes the fake does not model
/// (reactions, views, the assistant threads' status, prompts and title) answer ok.
fn write(st: &State, method: &str, f: &Args) -> Reply {
    let now = Instant::now();
    let mut messages = st.messages.lock().unwrap();
    match method {
        "chat.postMessage" => Ok(messages.post(f, &next_ts(st))),
        "chat.startStream" => Ok(messages.start_stream(f, &next_ts(st), now)),
        "chat.appendStream" => messages.append_stream(f, now, false),
        "chat.stopStream" => messages.append_stream(f, now, true),
        "chat.update" => messages.update(f, now),
        "chat.delete" => messages.delete(f),
        _ => Ok(json!({"ok": true})),
    }
}
