//! Issue 16, the egress's bounds: a look that could not finish is not a "not found"; a frozen
//! Redis costs a write one timeout; notes are capped and paged; pacing is per app.

use std::time::{Duration, Instant};

use crate::egress_common::*;
use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_that_could_not_finish_is_unknown_not_posted_again() {
    let s = setup("elookrefused", "timeout = \"500ms\"\nevidence_window = \"600ms\"").await;
    let port = s.gw.egress_port;
    // Slack took the post, but its one look is refused: unknown, with Slack's Retry-After.
    s.slack.push(Behaviour::Drop);
    s.slack.push_look(Look::RateLimited(7));
    let a = call(port, "chat.postMessage", "channel=C1&text=landed+late", &[]).await;
    assert_eq!(a.status, 503, "{}", a.body);
    assert_eq!(a.headers["retry-after"], "7", "Slack's wait, not a guess");
    assert_eq!(s.slack.posts().len(), 1, "not posted a second time");
    assert_eq!(s.slack.calls_of("conversations.history").len(), 1, "one look, never a loop");
    // Its retry before Slack's wait is over takes no look: unknown again.
    let again = call(port, "chat.postMessage", "channel=C1&text=landed+late", &[]).await;
    assert_eq!(again.status, 503, "{}", again.body);
    assert_eq!(s.slack.calls_of("conversations.history").len(), 1, "no look before Slack's Retry-After");
    // A post that never landed whose look is refused: unknown; the bot's retry after Slack's
    // wait looks again, does not find it, and posts it once.
    let s = setup("elookwaits", "timeout = \"500ms\"\nevidence_window = \"600ms\"").await;
    s.slack.push(Behaviour::DropBefore);
    s.slack.push_look(Look::RateLimited(1));
    let a = call(s.gw.egress_port, "chat.postMessage", "channel=C1&text=never+landed", &[]).await;
    assert_eq!(a.status, 503, "{} {}", a.status, a.body);
    let mut retried = a;
    until(Duration::from_secs(10), async || {
        retried = call(s.gw.egress_port, "chat.postMessage", "channel=C1&text=never+landed", &[]).await;
        retried.status == 200
    })
    .await;
    assert!(retried.ok(), "{} {}", retried.status, retried.body);
    let looks = s.slack.calls_of("conversations.history");
    assert_eq!(looks.len(), 2, "one look per try past Slack's wait");
    assert!(looks[1].at.duration_since(looks[0].at) >= Duration::from_secs(1), "Retry-After honoured");
    assert_eq!(s.slack.posts().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_costs_a_write_one_store_timeout() {
    let s = setup("efrozen", "").await;
    let port = s.gw.egress_port;
    // Warm: the token's hash key, its identity, the connection.
    assert!(call(port, "chat.postMessage", "channel=C1&text=warm", &[]).await.ok());
    s.redis.freeze();
    let started = Instant::now();
    let a = call(port, "chat.postMessage", "channel=C1&thread_ts=1700000000.000100&text=frozen", &[]).await;
    let took = started.elapsed();
    s.redis.thaw();
    assert!(a.status == 200 && a.ok(), "posted without the store: {}", a.body);
    // The first step (the retry fingerprint) waits the store's timeout (2 s); the thread's
    // lookup and the pacing are skipped, not waited for again. The bound on time is generous
    // on purpose (the count is the test): two more timeouts would make it 6 s.
    let skipped = metric(s.gw.admin_port, "slackgate_egress_store_skipped_total").await;
    assert_eq!(skipped, 2.0, "took {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(call(port, "users.info", "user=U1", &[]).await.status, 200, "reads untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notes_are_capped_and_paged() {
    let s = setup("enotes", "").await;
    deliver_mention(&s, "EvNotes1", "1700000300.000100").await;
    delete_message(&s, "EvNotes2", "1700000300.000100").await;
    let port = s.gw.egress_port;
    let thread = "channel=C1&thread_ts=1700000300.000100&text=late";
    let withheld = || async move { call(port, "chat.postMessage", thread, &[]).await.body.contains("source_deleted") };
    // The deletion is marked in the background.
    assert!(until(Duration::from_secs(5), async || withheld().await).await, "never withheld");
    // 1,100 more, eight at a time.
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(tokio::spawn(async move {
            for j in 0..138 {
                let body = format!("channel=C1&thread_ts=1700000300.000100&text=late+{i}+{j}");
                assert!(call(port, "chat.postMessage", &body, &[]).await.body.contains("source_deleted"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (status, bytes, page) = notes(s.gw.admin_port, "").await;
    assert_eq!(status, 200);
    assert_eq!(page["withheld_total"], 1000, "capped by count");
    assert_eq!(page["withheld"].as_array().unwrap().len(), 100, "a page");
    assert!(bytes < 40_000, "{bytes} bytes");
    // Walk the pages: every kept note once.
    let (mut seen, mut cursor) = (0, page["withheld_next"].as_str().map(String::from));
    seen += page["withheld"].as_array().unwrap().len();
    while let Some(c) = cursor {
        let (_, _, p) = notes(s.gw.admin_port, &format!("?limit=300&withheld_cursor={c}")).await;
        seen += p["withheld"].as_array().unwrap().len();
        cursor = p["withheld_next"].as_str().map(String::from);
    }
    assert_eq!(seen, 1000);
    assert_eq!(notes(s.gw.admin_port, "?limit=5").await.2["withheld"].as_array().unwrap().len(), 5);
    assert_eq!(notes(s.gw.admin_port, "?withheld_cursor=bogus").await.0, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_is_per_app() {
    // Two posts at once per app and channel, then one per 100 s: a third is refused at once.
    let s = setup("epaceapp", "pace_per_second = 0.01\npace_burst = 2\nmax_wait = \"1s\"").await;
    let other = "xoxb-another-app-token";
    s.slack.identity(other, "UOTHER", "BOTHER");
    let port = s.gw.egress_port;
    let auth = format!("Bearer {other}");
    let as_other = [("authorization", auth.as_str())];
    for i in 0..2 {
        assert!(call(port, "chat.postMessage", &format!("channel=CPACE&text=a{i}"), &[]).await.ok());
    }
    for i in 0..2 {
        let a = call(port, "chat.postMessage", &format!("channel=CPACE&text=b{i}"), &as_other).await;
        assert!(a.ok(), "another app's posts have a pace of their own: {} {}", a.status, a.body);
    }
    let third = call(port, "chat.postMessage", "channel=CPACE&text=a2", &[]).await;
    assert_eq!(third.status, 429, "the first app is still paced: {}", third.body);
    assert_eq!(s.slack.posts().len(), 4);
}
