//! The fake Slack's streams (`chat.startStream`, `.appendStream`, `.stopStream`) kept as Slack
//! keeps them: against raw calls in both body kinds, and against unmodified Bolt apps
//! (`stream_app`) that stream with their SDK's own helper straight to the fake, no gateway —
//! including the stream that expires under a slow bot, the problem the gateway is to fix.

use std::time::Duration;

use serde_json::{json, Value};

use crate::utils::*;

/// Each test's whole run stays well under this.
const LIMIT: Duration = Duration::from_secs(10);
/// The SDK helpers' default buffer: they call Slack once this many characters wait.
const BUFFER: usize = 256;

/// A raw call's body: JSON (as slack_sdk sends) or a form (as @slack/web-api sends).
enum Body {
    Json(Value),
    Form(Vec<(&'static str, String)>),
}

/// One Web API call to the fake; its answer (`Err`: the connection closed without one).
async fn try_call(fake: &FakeSlack, method: &str, body: Body) -> Result<Value, String> {
    let (body, content_type) = match body {
        Body::Json(v) => (v.to_string().into_bytes(), "application/json; charset=utf-8"),
        Body::Form(pairs) => {
            let form = form_urlencoded::Serializer::new(String::new()).extend_pairs(&pairs).finish();
            (form.into_bytes(), "application/x-www-form-urlencoded")
        }
    };
    let req = Req { method: "POST", path: format!("/api/{method}"), body, content_type, headers: Vec::new() };
    let (status, answer) = try_send(fake.port, req).await?;
    assert_eq!(status, 200, "{method}");
    Ok(serde_json::from_slice(&answer).unwrap())
}

async fn call(fake: &FakeSlack, method: &str, body: Body) -> Value {
    try_call(fake, method, body).await.unwrap()
}

/// The answer `stream_app` streams to the message at `ts` (its `answer()`).
fn answer(ts: &str, len: usize) -> String {
    let mut text = format!("answer to {ts}: ");
    let mut i = 0;
    while text.len() < len {
        i += 1;
        text.push_str(&format!("{i:04} "));
    }
    text.truncate(len);
    text
}

#[tokio::test]
async fn the_fake_appends_to_a_stream_until_it_stops_and_refuses_it_after() {
    let fake = FakeSlack::start().await;
    let start = json!({"channel": "C1", "thread_ts": "1.1", "chunks": [
        {"type": "markdown_text", "text": "one "}, {"type": "task_update", "id": "t1", "title": "look"}]});
    let ts = call(&fake, "chat.startStream", Body::Json(start)).await["ts"].as_str().unwrap().to_string();
    let on = |rest: Value| {
        let mut v = json!({"channel": "C1", "ts": ts});
        v.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
        Body::Json(v)
    };
    // A form carries `chunks` as a JSON string.
    let chunks = r#"[{"type":"markdown_text","text":"two "}]"#;
    let form = vec![("channel", "C1".to_string()), ("ts", ts.clone()), ("chunks", chunks.to_string())];
    assert_eq!(call(&fake, "chat.appendStream", Body::Form(form)).await["ok"], true);
    assert_eq!(call(&fake, "chat.appendStream", on(json!({"markdown_text": "three "}))).await["ok"], true);
    let m = fake.message("C1", &ts).unwrap();
    assert_eq!((m.text.as_str(), m.streaming, m.stopped), ("one two three ", true, false));
    // Still streaming: not to be updated.
    let refused = call(&fake, "chat.update", on(json!({"text": "edited"}))).await;
    assert_eq!(refused["error"], "cant_update_message");
    let stopped = call(&fake, "chat.stopStream", on(json!({"chunks": [{"type": "markdown_text", "text": "four"}]})));
    assert_eq!(stopped.await["message"]["text"], "one two three four");
    let m = fake.message("C1", &ts).unwrap();
    assert_eq!(m, BotMessage { thread_ts: Some("1.1".into()), streaming: false, stopped: true, ..m.clone() });
    for method in ["chat.appendStream", "chat.stopStream"] {
        let late = call(&fake, method, on(json!({"markdown_text": "five"}))).await;
        assert_eq!(late, json!({"ok": false, "error": "message_not_in_streaming_state"}));
        let unknown = call(&fake, method, Body::Json(json!({"channel": "C1", "ts": "9.9", "markdown_text": "x"})));
        assert_eq!(unknown.await["error"], "message_not_found");
    }
    assert_eq!(fake.message("C1", &ts).unwrap().text, "one two three four", "refused calls leave it");
    // Stopped, it is a message like any other.
    let updated = call(&fake, "chat.update", on(json!({"text": "whole"}))).await;
    assert_eq!((&updated["ok"], &updated["text"]), (&json!(true), &json!("whole")));
    assert_eq!(fake.message("C1", &ts).unwrap().text, "whole");
    assert_eq!(call(&fake, "chat.delete", on(json!({}))).await["ok"], true);
    assert_eq!(call(&fake, "chat.delete", on(json!({}))).await["error"], "message_not_found");
    assert!(fake.messages().is_empty() && fake.posts().is_empty());
    for method in ["assistant.threads.setStatus", "assistant.threads.setSuggestedPrompts", "assistant.threads.setTitle"]
    {
        assert_eq!(call(&fake, method, Body::Json(json!({"channel_id": "C1", "thread_ts": "1.1"}))).await["ok"], true);
    }
}

#[tokio::test]
async fn a_stream_past_its_lifetime_keeps_its_text_and_takes_only_an_update() {
    let fake = FakeSlack::start().await;
    fake.stream_expiry(Duration::from_millis(300));
    let start = json!({"channel": "C1", "thread_ts": "1.1", "markdown_text": "half an"});
    let ts = call(&fake, "chat.startStream", Body::Json(start)).await["ts"].as_str().unwrap().to_string();
    assert!(fake.message("C1", &ts).unwrap().streaming);
    assert!(eventually(LIMIT, || !fake.message("C1", &ts).unwrap().streaming).await);
    let append = json!({"channel": "C1", "ts": ts, "markdown_text": " answer"});
    let refused = call(&fake, "chat.appendStream", Body::Json(append)).await;
    assert_eq!(refused["error"], "message_not_in_streaming_state");
    let m = fake.message("C1", &ts).unwrap();
    assert_eq!((m.text.as_str(), m.streamed, m.stopped), ("half an", true, false));
    // The way out a bot has: the stream's ts to chat.update.
    let update = json!({"channel": "C1", "ts": ts, "markdown_text": "half an answer"});
    assert_eq!(call(&fake, "chat.update", Body::Json(update)).await["ok"], true);
    assert_eq!(fake.message("C1", &ts).unwrap().text, "half an answer");
}

#[tokio::test]
async fn a_behaviour_for_one_method_loses_the_third_append_and_no_other_write() {
    let fake = FakeSlack::start().await;
    for b in [Behaviour::Normal, Behaviour::Normal, Behaviour::Drop] {
        fake.push_for("chat.appendStream", b);
    }
    let start = json!({"channel": "C1", "thread_ts": "1.1", "markdown_text": "0"});
    let ts = call(&fake, "chat.startStream", Body::Json(start)).await["ts"].as_str().unwrap().to_string();
    let append = |text: &str| Body::Json(json!({"channel": "C1", "ts": ts, "markdown_text": text}));
    let status = Body::Json(json!({"channel_id": "C1", "thread_ts": "1.1", "status": "is thinking…"}));
    assert_eq!(call(&fake, "assistant.threads.setStatus", status).await["ok"], true);
    assert_eq!(call(&fake, "chat.appendStream", append("1")).await["ok"], true);
    assert_eq!(call(&fake, "chat.appendStream", append("2")).await["ok"], true);
    assert!(try_call(&fake, "chat.appendStream", append("3")).await.is_err(), "the third's answer is lost");
    assert_eq!(fake.message("C1", &ts).unwrap().text, "0123", "... after its text was appended");
    assert_eq!(call(&fake, "chat.appendStream", append("4")).await["ok"], true, "the script is spent");
    // `push` still scripts any write in turn.
    fake.push(Behaviour::NotOk("fatal_error"));
    assert_eq!(call(&fake, "chat.stopStream", append("5")).await["error"], "fatal_error");
    assert_eq!(call(&fake, "chat.stopStream", append("5")).await["ok"], true);
    assert_eq!(fake.message("C1", &ts).unwrap().text, "012345");
}

/// A human's message in channel C1 at `ts`, as Slack sends it to the app.
fn message_event(ts: &str) -> Vec<u8> {
    json!({
        "token": "verification-token", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": format!("Ev{}", ts.replace('.', "")), "event_time": unix_now(),
        "event": {"type": "message", "user": "U1", "text": "tell me", "ts": ts, "team": "T1", "channel": "C1",
                  "channel_type": "channel", "event_ts": ts, "blocks": []},
        "authorizations": [{"enterprise_id": null, "team_id": "T1", "user_id": "UBOT", "is_bot": true,
                            "is_enterprise_install": false}],
        "is_ext_shared_channel": false, "event_context": "4-eyJldCI6Im1lc3NhZ2UifQ"
    })
    .to_string()
    .into_bytes()
}

/// `stream_app` of `kind` straight at `fake`, asked the message at `ts`; it has printed
/// `HANDLED streamed` or `HANDLED error` when this returns.
async fn ask(kind: Bolt, fake: &FakeSlack, ts: &str, env: &[(&str, &str)]) -> BoltProcess {
    let mut all = vec![("SLACK_API_URL", fake.api_url())];
    all.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
    let bot = BoltProcess::start(kind, "stream_app", &all).await;
    let (status, _) = send(bot.port, Req::signed("/slack/events", message_event(ts), SECRET)).await;
    assert_eq!(status, 200, "{}", bot.logs());
    let done = || !bot.handled_lines(&format!("streamed {ts}")).is_empty() || !bot.handled_lines("error").is_empty();
    assert!(eventually(LIMIT, done).await, "{}", bot.logs());
    bot
}

async fn streams_its_whole_answer_in_few_calls(kind: Bolt) {
    let (ts, len, piece) = ("1700000001.000100", 1000, 40);
    let fake = FakeSlack::start().await;
    let env = [("STATUS_FIRST", "1"), ("ANSWER_LEN", "1000"), ("CHUNK", "40"), ("CHUNK_EVERY", "0.01")];
    let bot = ask(kind, &fake, ts, &env).await;
    let thread: Vec<BotMessage> = fake.messages().into_iter().filter(|m| m.thread_ts.as_deref() == Some(ts)).collect();
    assert_eq!(thread.len(), 1, "{thread:?}");
    let m = &thread[0];
    assert!(m.stopped && m.text == answer(ts, len), "{m:?}\n{}", bot.logs());
    assert_eq!(bot.handled_lines("streamed"), [format!("HANDLED streamed {ts} {}", m.ts)]);
    let status = &fake.args_of("assistant.threads.setStatus")[0];
    assert_eq!(
        (&status["channel_id"], &status["thread_ts"], &status["status"]),
        (&json!("C1"), &json!(ts), &json!("is thinking…"))
    );
    let start = &fake.args_of("chat.startStream")[0];
    assert_eq!((&start["recipient_team_id"], &start["recipient_user_id"]), (&json!("T1"), &json!("U1")));
    // Buffered: a call each time 256 characters wait (7 pieces of 40), the rest with the stop.
    let flush = piece * BUFFER.div_ceil(piece);
    let (starts, appends) = (fake.stream_texts("chat.startStream"), fake.stream_texts("chat.appendStream"));
    assert_eq!((starts.len(), appends.len()), (1, len / flush - 1), "{appends:?}");
    assert!(starts.iter().chain(&appends).all(|t| t.len() == flush));
    assert_eq!(fake.stream_texts("chat.stopStream"), [answer(ts, len)[len / flush * flush..].to_string()]);
    // slack_sdk sends JSON, `chunks` an array; @slack/web-api a form, `chunks` a JSON string.
    let sent = &fake.calls_of("chat.appendStream")[0];
    let json = sent.headers["content-type"].to_str().unwrap().starts_with("application/json");
    assert_eq!(json, kind == Bolt::Python);
    assert_eq!(start["chunks"].is_array(), kind == Bolt::Python);
    assert_eq!(start["chunks"].is_string(), kind == Bolt::Js);
}

#[tokio::test]
async fn python_bolt_streams_its_whole_answer_in_few_calls() {
    streams_its_whole_answer_in_few_calls(Bolt::Python).await;
}

#[tokio::test]
async fn js_bolt_streams_its_whole_answer_in_few_calls() {
    streams_its_whole_answer_in_few_calls(Bolt::Js).await;
}

/// A bot that pauses (a tool call) past the stream's lifetime: its next append is refused and
/// the message keeps the half it had, never stopped.
async fn a_slow_bot_loses_the_rest_of_its_answer(kind: Bolt) {
    let (ts, len) = ("1700000002.000100", 600);
    let fake = FakeSlack::start().await;
    fake.stream_expiry(Duration::from_secs(1));
    let env = [("ANSWER_LEN", "600"), ("CHUNK", "40"), ("CHUNK_EVERY", "0.01"), ("TOOL_PAUSE", "1.5")];
    let bot = ask(kind, &fake, ts, &env).await;
    let error = format!("HANDLED error {ts} message_not_in_streaming_state");
    assert_eq!(bot.handled_lines("error"), [error], "{}", bot.logs());
    let m = fake.messages().into_iter().find(|m| m.thread_ts.as_deref() == Some(ts)).unwrap();
    // Started with the first 280 characters (7 pieces); the pause came after 320.
    assert_eq!(m.text, answer(ts, len)[..280], "{m:?}");
    assert!(m.streamed && !m.streaming && !m.stopped, "{m:?}");
    assert_eq!(fake.calls_of("chat.appendStream").len(), 1, "refused");
    assert!(fake.calls_of("chat.stopStream").is_empty());
}

#[tokio::test]
async fn python_bolt_loses_the_rest_of_an_answer_whose_stream_expired() {
    a_slow_bot_loses_the_rest_of_its_answer(Bolt::Python).await;
}

#[tokio::test]
async fn js_bolt_loses_the_rest_of_an_answer_whose_stream_expired() {
    a_slow_bot_loses_the_rest_of_its_answer(Bolt::Js).await;
}
