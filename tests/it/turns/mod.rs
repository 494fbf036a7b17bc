//! Issue 18, turns: one turn at a time per conversation, with real, unmodified Bolt bots
//! (`tests/bolt/python/turns_app.py`, `tests/bolt/js/turns_app.js`) that answer in thread after
//! a "model call" (`ANSWER_DELAY`) through the gateway's egress, against the fake Slack Web API.
//! Each scenario runs for both frameworks; where the way the bot answers Slack matters, both
//! ack-first (Bolt's default; `end = "reply"`) and process-before-response (`end = "answer"`).
//!
//! What a test asserts on: the bot's `HANDLED start|answered|withheld|… <ts>` lines, in the order
//! the bot printed them (one process, so one order), the posts the fake Slack kept (channel,
//! `thread_ts`, text `answer to <ts>`), and the gateway's metrics and admin API.
//!
//! The bot's Web API client reaches the egress through a [`Relay`] (a stable address across a
//! gateway's restart, which binds new ports, and in front of two replicas).

use std::time::Duration;

use serde_json::Value;

use crate::utils::*;

pub(crate) mod rig;
use rig::*;

// ---------------------------------------------------------------------------------------------
// 1. queue: the second message of a thread reaches the bot only after the first's reply.

async fn queue_delivers_a_thread_one_turn_at_a_time(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "queue", turns("queue", "post", "1s", ack), 1.5).await;
    let (a, b) = (rig.top(1, "how do I deploy?"), rig.reply(1, 2, "also, for staging"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    // The follow-up comes while the first turn runs: it waits for it.
    rig.send(0, &b).await;
    rig.held_reaches(1).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer()], "in order, in the thread\n{}", rig.logs());
    rig.ended_reaches(ack.end(), 2.0).await;
}

// ---------------------------------------------------------------------------------------------
// 2. latest: of the messages waiting when a turn ends only the newest is delivered.

async fn latest_delivers_only_the_newest_waiting(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "latest", turns("latest", "post", "1s", ack), 1.5).await;
    let (a, b, c) = (rig.top(1, "summarize this"), rig.reply(1, 2, "in French"), rig.reply(1, 3, "no, in German"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    rig.held_reaches(1).await;
    rig.send(0, &c).await;
    rig.held_reaches(2).await;
    rig.wait("answered", &c, Duration::from_secs(20)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &c]), "the bot ran twice: first and newest\n{}", rig.logs());
    // Both turns are over: nothing more is coming for this thread.
    rig.ended_reaches(ack.end(), 2.0).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &c]), "{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), c.answer()], "{}", rig.logs());
    let admin = rig.gws[0].admin_port;
    assert_eq!(series(admin, "slackgate_turn_superseded_total", &[("app", "bot")]).await, 1.0, "{}", rig.logs());
    let (status, listed) = admin_get(admin, "/superseded?app=bot").await;
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap_or_else(|e| panic!("{e}: {listed}"));
    let listed: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap_or_else(|| panic!("a list: {listed}"))
        .iter()
        .map(|d| (d["ts"].as_str().unwrap_or_default(), d["thread"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(listed, [(b.ts.as_str(), a.ts.as_str())], "the superseded delivery, and only it, is listed");
}

// ---------------------------------------------------------------------------------------------
// 3. on_newer = "withhold": an answer to a question the thread moved past is withheld.

async fn withhold_answers_only_the_newest(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "withhold", turns("queue", "withhold", "1s", ack), 2.0).await;
    let (a, b) = (rig.top(1, "which region?"), rig.reply(1, 2, "the one in Europe"));
    rig.send(0, &a).await;
    let started = rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    rig.held_reaches(1).await;
    let next = rig.wait("start", &b, Duration::from_secs(20)).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    // B waits for A's turn, which its withheld write ends: B's delivery and the bot's
    // `withheld` line for A then race, so they may come in either order.
    let held = next - started;
    assert!(held >= Duration::from_millis(1500), "B reached the bot {held:?} after A, while A ran\n{}", rig.logs());
    let mut seen = rig.bot.seen();
    seen[1..3].sort();
    let expected = [format!("start {}", a.ts), format!("start {}", b.ts), format!("withheld {}", a.ts)];
    assert_eq!(seen, [&expected[..], &[format!("answered {}", b.ts)]].concat(), "{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [b.answer()], "exactly one answer, to B\n{}", rig.logs());
    let withheld = series(
        rig.gws[0].admin_port,
        "slackgate_egress_calls_total",
        &[("class", "write"), ("outcome", "withheld_superseded")],
    )
    .await;
    assert_eq!(withheld, 1.0, "{}", rig.logs());
    rig.ended_reaches("superseded", 1.0).await;
}

// ---------------------------------------------------------------------------------------------
// 4. Two threads of one channel: neither waits for the other.

async fn two_threads_run_at_once(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "threads", turns("queue", "post", "1s", ack), 1.5).await;
    let (a, b) = (rig.top(1, "first question"), rig.top(2, "another topic"));
    rig.send(0, &a).await;
    rig.send(0, &b).await;
    rig.wait("answered", &a, Duration::from_secs(20)).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    let seen = rig.bot.seen();
    let first_answer = seen.iter().position(|l| l.starts_with("answered ")).unwrap();
    let mut starts = seen[..first_answer].to_vec();
    starts.sort();
    assert_eq!(starts, [format!("start {}", a.ts), format!("start {}", b.ts)], "both started\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer()]);
    assert_eq!(rig.posts_in("C1", Some(&b.ts)), [b.answer()]);
}

// ---------------------------------------------------------------------------------------------
// 5. A DM is one conversation, and the bot's say() there (no thread_ts) belongs to the turn.

async fn a_dm_is_one_conversation(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "dm", turns("queue", "post", "1s", ack), 1.5).await;
    let (a, b) = (rig.dm(1, "hi"), rig.dm(2, "are you there?"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    rig.held_reaches(1).await;
    rig.wait("answered", &b, Duration::from_secs(20)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("D1", None), [a.answer(), b.answer()], "said in the channel\n{}", rig.logs());
    // Each turn ended by the bot's answer, not by waiting out pass_after or the timeout.
    rig.ended_reaches(ack.end(), 2.0).await;
    assert_eq!(rig.ended("passed").await + rig.ended("timeout").await, 0.0, "{}", rig.logs());
}

// ---------------------------------------------------------------------------------------------
// 6. A message the bot does not answer holds the thread only until pass_after.

async fn an_unanswered_message_passes_after_pass_after(kind: Bolt, ack: Ack) {
    let rig = Rig::start(kind, ack, "pass", turns("queue", "post", "1s", ack), 0.5).await;
    let (a, b) = (rig.top(1, "ignore this, just a note"), rig.reply(1, 2, "now a question"));
    rig.send(0, &a).await;
    let started = rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    rig.held_reaches(1).await;
    let next = rig.wait("start", &b, Duration::from_secs(20)).await;
    let held = next - started;
    // pass_after is 3 s, the timeout 8 s.
    assert!(held >= Duration::from_millis(2500), "held {held:?}, less than pass_after\n{}", rig.logs());
    assert!(held < Duration::from_secs(6), "held {held:?}: until the timeout, not pass_after\n{}", rig.logs());
    rig.wait("answered", &b, Duration::from_secs(10)).await;
    let ignored = [format!("start {}", a.ts), format!("ignored {}", a.ts)];
    assert_eq!(rig.bot.seen()[..2], ignored, "{}", rig.logs());
    assert_eq!(rig.bot.seen()[2..], one_at_a_time(&[&b]), "{}", rig.logs());
    rig.ended_reaches("passed", 1.0).await;
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [b.answer()]);
}

// ---------------------------------------------------------------------------------------------
// 7. A bot stuck mid-turn (it keeps editing its placeholder) holds the thread until timeout.

async fn a_stalled_turn_ends_at_the_timeout(kind: Bolt, ack: Ack) {
    // It edits every second: a quiet of 3 s never comes.
    let rig = Rig::start(kind, ack, "stall", turns("queue", "post", "3s", ack), 0.5).await;
    let (a, b) = (rig.top(1, "stall on this one"), rig.reply(1, 2, "hello?"));
    rig.send(0, &a).await;
    let started = rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.wait("stalling", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    rig.held_reaches(1).await;
    let next = rig.wait("start", &b, Duration::from_secs(25)).await;
    let held = next - started;
    assert!(held >= Duration::from_secs(7), "held {held:?}, less than the 8 s timeout\n{}", rig.logs());
    assert!(rig.slack.calls_of("chat.update").len() >= 5, "the bot kept writing\n{}", rig.logs());
    rig.wait("answered", &b, Duration::from_secs(10)).await;
    rig.ended_reaches("timeout", 1.0).await;
    // The placeholder, edited (Slack keeps the last edit), then B's answer.
    let posts = rig.posts_in("C1", Some(&a.ts));
    let edited = posts.first().is_some_and(|p| p.starts_with("still thinking ("));
    assert!(edited && posts[1..] == [b.answer()], "{posts:?}\n{}", rig.logs());
}

// ---------------------------------------------------------------------------------------------
// 8. A gateway killed mid-turn and restarted, and two gateways on one Redis: order holds.

/// kill -9 while A's turn runs and B is held (`held_first`), or at once after B's ack (B may
/// then be in the killed gateway's hands: read from the stream, leased, not yet put to wait);
/// the same config comes back on new ports and C comes to it. Order holds: A, B, C, one at a
/// time — also when B's lease has to run out before anyone sees it again.
async fn order_holds_across_a_gateway_killed(kind: Bolt, ack: Ack, held_first: bool) {
    let name = if held_first { "killheld" } else { "killacked" };
    let mut rig = Rig::start(kind, ack, name, turns("queue", "post", "1s", ack), 2.0).await;
    let (a, b, c) = (rig.top(1, "deploy it"), rig.reply(1, 2, "to staging"), rig.reply(1, 3, "and tell me"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    if held_first {
        let admin = rig.gws[0].admin_port;
        let held = until(Duration::from_secs(10), async || outbox_stats(admin, None).await[0]["held"] == 1).await;
        assert!(held, "B is held while A's turn runs\n{}", rig.logs());
    }
    rig.gws[0].restart().await;
    rig.relay.point_at(&[rig.gws[0].egress_port]);
    rig.send(0, &c).await;
    rig.wait("answered", &b, Duration::from_secs(40)).await;
    rig.wait("answered", &c, Duration::from_secs(40)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b, &c]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer(), c.answer()], "{}", rig.logs());
}

async fn order_holds_across_a_gateway_killed_mid_turn(kind: Bolt, ack: Ack) {
    order_holds_across_a_gateway_killed(kind, ack, true).await
}

async fn order_holds_across_a_gateway_killed_right_after_an_ack(kind: Bolt, ack: Ack) {
    order_holds_across_a_gateway_killed(kind, ack, false).await
}

async fn order_holds_across_two_gateways(kind: Bolt, ack: Ack) {
    let rig = Rig::start_n(kind, ack, "replicas", turns("queue", "post", "1s", ack), 1.5, 2).await;
    let (a, b, c) = (rig.top(1, "one"), rig.reply(1, 2, "two"), rig.reply(1, 3, "three"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(1, &b).await;
    rig.held_reaches(1).await;
    rig.send(0, &c).await;
    rig.held_reaches(2).await;
    rig.wait("answered", &c, Duration::from_secs(30)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b, &c]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer(), c.answer()], "{}", rig.logs());
    rig.ended_reaches(ack.end(), 3.0).await;
}

// ---------------------------------------------------------------------------------------------
// 9. Redis restarts mid-turn (an operator's restart, which loses nothing Redis acknowledged):
// order holds and nothing is lost.

async fn order_holds_across_a_redis_restart(kind: Bolt, ack: Ack) {
    let mut rig = Rig::start(kind, ack, "redis", turns("queue", "post", "1s", ack), 2.0).await;
    let (a, b) = (rig.top(1, "what broke?"), rig.reply(1, 2, "since the restart"));
    rig.send(0, &a).await;
    rig.wait("start", &a, Duration::from_secs(10)).await;
    rig.send(0, &b).await;
    rig.redis.restart_graceful();
    rig.wait("answered", &b, Duration::from_secs(40)).await;
    assert_eq!(rig.bot.seen(), one_at_a_time(&[&a, &b]), "one turn at a time\n{}", rig.logs());
    assert_eq!(rig.posts_in("C1", Some(&a.ts)), [a.answer(), b.answer()], "each answered once\n{}", rig.logs());
}

/// One `#[tokio::test]` per (framework, ack mode) of a scenario.
macro_rules! scenario {
    ($scenario:ident: $($test:ident => $kind:ident, $ack:ident;)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                $scenario(Bolt::$kind, Ack::$ack).await
            }
        )+
    };
}

scenario!(queue_delivers_a_thread_one_turn_at_a_time:
    python_queue_ack_first => Python, First;
    python_queue_after_work => Python, AfterWork;
    js_queue_ack_first => Js, First;
    js_queue_after_work => Js, AfterWork;
);
scenario!(latest_delivers_only_the_newest_waiting:
    python_latest_ack_first => Python, First;
    python_latest_after_work => Python, AfterWork;
    js_latest_ack_first => Js, First;
    js_latest_after_work => Js, AfterWork;
);
scenario!(withhold_answers_only_the_newest:
    python_withhold_ack_first => Python, First;
    python_withhold_after_work => Python, AfterWork;
    js_withhold_ack_first => Js, First;
    js_withhold_after_work => Js, AfterWork;
);
scenario!(two_threads_run_at_once:
    python_two_threads_ack_first => Python, First;
    python_two_threads_after_work => Python, AfterWork;
    js_two_threads_ack_first => Js, First;
    js_two_threads_after_work => Js, AfterWork;
);
scenario!(a_dm_is_one_conversation:
    python_dm_ack_first => Python, First;
    python_dm_after_work => Python, AfterWork;
    js_dm_ack_first => Js, First;
    js_dm_after_work => Js, AfterWork;
);
// pass_after and the timeout are how the turns of an ack-first bot end without an answer (a
// bot that answers after its work ends its turn with that answer).
scenario!(an_unanswered_message_passes_after_pass_after:
    python_pass_after_ack_first => Python, First;
    js_pass_after_ack_first => Js, First;
);
scenario!(a_stalled_turn_ends_at_the_timeout:
    python_stall_ack_first => Python, First;
    js_stall_ack_first => Js, First;
);
// Killed mid-turn: an ack-first bot's delivery is done and its turn is all that is left in
// flight (a bot that answers after its work would see its delivery again, as any delivery).
scenario!(order_holds_across_a_gateway_killed_mid_turn:
    python_gateway_killed_ack_first => Python, First;
    js_gateway_killed_ack_first => Js, First;
);
scenario!(order_holds_across_a_gateway_killed_right_after_an_ack:
    python_gateway_killed_after_an_ack_ack_first => Python, First;
    js_gateway_killed_after_an_ack_ack_first => Js, First;
);
scenario!(order_holds_across_two_gateways:
    python_two_gateways_ack_first => Python, First;
    python_two_gateways_after_work => Python, AfterWork;
    js_two_gateways_ack_first => Js, First;
    js_two_gateways_after_work => Js, AfterWork;
);
scenario!(order_holds_across_a_redis_restart:
    python_redis_restart_ack_first => Python, First;
    js_redis_restart_ack_first => Js, First;
);
