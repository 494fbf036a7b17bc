//! Issue 16, the egress's claims and retries: a claim whose call died is settled, never refused
//! for a day; a key is bound to its request; query arguments count; unknown stays unknown; a
//! hostile `Retry-After` is bounded.

use std::time::Duration;

use crate::egress_common::*;
use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_call_died_is_settled_not_refused() {
    let mut s = setup("ekeydied", "timeout = \"2s\"\nevidence_window = \"600ms\"").await;
    let key = [("idempotency-key", "k-died")];
    let post = "channel=C1&text=landed+before+the+crash";
    // Slack takes the post; the gateway is killed before its answer comes.
    s.slack.push(Behaviour::Late(Duration::from_secs(30)));
    let port = s.gw.egress_port;
    let first = tokio::spawn(async move { try_call(port, "chat.postMessage", post, &key).await });
    assert!(eventually(Duration::from_secs(5), || s.slack.posts().len() == 1).await);
    s.gw.restart().await;
    assert!(first.await.unwrap().is_err(), "the first call died with its gateway");
    // A 409 while the claim's lease may still run (3 s), then the key is settled: found.
    let (a, refused_for) =
        call_past(s.gw.egress_port, "chat.postMessage", post, &key, 409, Duration::from_secs(20)).await;
    assert!(a.status == 200 && a.ok(), "{} {}\n{}", a.status, a.body, s.gw.log());
    assert!(refused_for < Duration::from_secs(8), "409 for {refused_for:?}");
    assert_eq!(s.slack.posts().len(), 1, "posted once");
    assert_eq!(a.json()["ts"], s.slack.posts()[0]["ts"], "the post Slack took is the answer");
    assert_eq!(outcomes(s.gw.admin_port, "reconciled").await, 1.0);
    // Settled: the key replays from now on.
    let again = call(s.gw.egress_port, "chat.postMessage", post, &key).await;
    assert_eq!(again.headers.get("idempotent-replayed").map(|v| v.to_str().unwrap()), Some("true"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_write_whose_call_died_is_reconciled_not_posted_again() {
    let mut s = setup("eretrydied", "timeout = \"2s\"\nevidence_window = \"600ms\"").await;
    let post = "channel=C1&text=did+the+crash+lose+it";
    s.slack.push(Behaviour::Late(Duration::from_secs(30)));
    let port = s.gw.egress_port;
    let first = tokio::spawn(async move { try_call(port, "chat.postMessage", post, &[]).await });
    assert!(eventually(Duration::from_secs(5), || s.slack.posts().len() == 1).await);
    s.gw.restart().await;
    assert!(first.await.unwrap().is_err());
    // The client's retry: the dead call's fingerprint lapses and is settled by a look.
    let a = call(s.gw.egress_port, "chat.postMessage", post, &[]).await;
    assert!(a.status == 200 && a.ok(), "{} {}\n{}", a.status, a.body, s.gw.log());
    assert_eq!(s.slack.posts().len(), 1, "not posted a second time");
    assert_eq!(a.json()["ts"], s.slack.posts()[0]["ts"]);
    assert!(!s.slack.calls_of("conversations.history").is_empty(), "looked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_first_client_gave_up_before_the_crash_is_not_held() {
    let mut s = setup("egaveupdied", "timeout = \"2s\"\nevidence_window = \"600ms\"").await;
    // The first call's client gave up before the crash (its answer is awaited for a retry):
    // the retry does not wait for a result that will never come, nor post again.
    let post = "channel=C1&text=given+up+then+crashed";
    s.slack.push(Behaviour::Late(Duration::from_secs(30)));
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), call(s.gw.egress_port, "chat.postMessage", post, &[])).await;
    assert!(gave_up.is_err());
    let lost = || {
        let mut c = s.redis.conn();
        s.redis.keys("*:f:chat.postMessage:*").iter().filter(|k| !k.ends_with(":lease")).any(|k| {
            redis::cmd("HGET").arg(k).arg("lost").query::<Option<String>>(&mut c).ok().flatten().as_deref() == Some("1")
        })
    };
    assert!(eventually(Duration::from_secs(5), lost).await, "the first call's answer is awaited for its retry");
    s.gw.restart().await;
    let a = call(s.gw.egress_port, "chat.postMessage", post, &[]).await;
    assert!(a.status == 200 && a.ok(), "{} {}\n{}", a.status, a.body, s.gw.log());
    assert_eq!(s.slack.posts().iter().filter(|p| p["text"] == "given up then crashed").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_for_another_request_gets_422() {
    let s = setup("ekeyreused", "").await;
    let port = s.gw.egress_port;
    let key = [("idempotency-key", "k-reused")];
    let first = call(port, "chat.postMessage", "channel=C1&text=a", &key).await;
    assert!(first.ok(), "{}", first.body);
    let reused = serde_json::json!({"ok": false, "error": "idempotency_key_reused"});
    let other_body = call(port, "chat.postMessage", "channel=C1&text=b", &key).await;
    assert_eq!((other_body.status, other_body.json()), (422, reused.clone()));
    let other_query = call(port, "chat.postMessage?unfurl_links=false", "channel=C1&text=a", &key).await;
    assert_eq!((other_query.status, other_query.json()), (422, reused));
    let same = call(port, "chat.postMessage", "channel=C1&text=a", &key).await;
    assert_eq!((same.status, same.body), (200, first.body), "the same request replays");
    assert_eq!(s.slack.posts().len(), 1);
    assert_eq!(outcomes(s.gw.admin_port, "key_reused").await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_in_the_query_count() {
    let s = setup("equery", "timeout = \"500ms\"\nevidence_window = \"600ms\"").await;
    let port = s.gw.egress_port;
    // The first post's client gives up before its answer: a retry of it would get its result.
    s.slack.push(Behaviour::Late(Duration::from_millis(1200)));
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), call(port, "chat.postMessage?channel=C1&text=one", "", &[]))
            .await;
    assert!(gave_up.is_err());
    // Another post, its arguments in the query too, with the same (empty) body: not a retry.
    let two = call(port, "chat.postMessage?channel=C1&text=two", "", &[]).await;
    assert!(two.ok(), "{}", two.body);
    assert_eq!(two.json()["message"]["text"], "two", "its own answer: {}", two.body);
    assert!(eventually(Duration::from_secs(5), || s.slack.posts().len() == 2).await, "{:?}", s.slack.posts());
    // The fields come from the query: an uncertain post is looked for in its channel.
    s.slack.push(Behaviour::Drop);
    let three = call(port, "chat.postMessage?channel=C1&text=three", "", &[]).await;
    assert!(three.status == 200 && three.ok(), "{} {}", three.status, three.body);
    assert_eq!(s.slack.posts().iter().filter(|p| p["text"] == "three").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_ephemeral_or_modal_is_never_sent_again() {
    let s = setup("eunknown2", "timeout = \"400ms\"").await;
    let port = s.gw.egress_port;
    let writes =
        [("chat.postEphemeral", "channel=C1&user=U1&text=psst"), ("views.open", "trigger_id=1.2.3&view=%7B%7D")];
    for (method, body) in writes {
        s.slack.push(Behaviour::Drop);
        for attempt in ["first", "retry"] {
            let a = call(port, method, body, &[]).await;
            assert_eq!(a.status, 503, "{method} {attempt}: {}", a.body);
            assert_eq!(a.json()["error"], "slackgate_uncertain", "{method} {attempt}");
            assert!(a.headers.get("retry-after").is_some(), "{method} {attempt}: Retry-After");
        }
        assert_eq!(s.slack.calls_of(method).len(), 1, "{method} sent once, never again");
    }
    assert!(s.slack.calls_of("conversations.history").is_empty(), "an ephemeral is not looked for");
    assert_eq!(outcomes(s.gw.admin_port, "unknown").await, 4.0);
    let (status, _, listed) = notes(s.gw.admin_port, "").await;
    assert_eq!((status, listed["unknown_total"].as_u64()), (200, Some(4)), "{listed}");
    let methods: Vec<_> = listed["unknown"].as_array().unwrap().iter().map(|n| n["method"].clone()).collect();
    assert_eq!(methods, ["views.open", "views.open", "chat.postEphemeral", "chat.postEphemeral"], "newest first");
    let cli = egress_cli(&s.gw);
    assert_eq!((cli["unknown_total"].as_u64(), cli["unknown"][0]["method"].as_str()), (Some(4), Some("views.open")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_retry_after_is_bounded() {
    let s = setup("eretryafter", "max_wait = \"3500ms\"").await;
    let port = s.gw.egress_port;
    // A huge value after a second's wait (the sum overflowed): the 429 goes back to the bot,
    // the gateway lives.
    s.slack.push(Behaviour::RateLimited(1));
    s.slack.push(Behaviour::RateLimited(u64::MAX));
    let a = call(port, "chat.postMessage", "channel=C1&text=huge", &[]).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert!(a.headers.get("retry-after").is_some());
    assert_eq!(s.slack.calls_of("chat.postMessage").len(), 2, "not held for a value past max_wait");
    // `0`: the egress waits at least a second between re-sends, so 3.5 s holds at most four.
    for _ in 0..8 {
        s.slack.push(Behaviour::RateLimited(0));
    }
    let a = call(port, "chat.postMessage", "channel=C1&text=zero", &[]).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.headers.get("retry-after").unwrap(), "0", "Slack's value goes to the bot");
    let sent = s.slack.calls_of("chat.postMessage").len() - 2;
    assert!((2..=4).contains(&sent), "{sent} sends");
}
