use proptest::prelude::*;

use super::*;
use crate::outbox::Change;

#[test]
fn key_kinds_keep_their_audit_labels() {
    let labels = [KeyKind::None, KeyKind::Key, KeyKind::Retry].map(KeyKind::as_label);
    assert_eq!(labels, ["none", "key", "retry"]);
}

#[test]
fn the_layer_follows_the_token_and_the_key() {
    let cases = [
        ((false, false), Layer::Plain),
        ((false, true), Layer::Plain),
        ((true, true), Layer::Keyed),
        ((true, false), Layer::Fingerprint),
    ];
    for ((token, key), want) in cases {
        assert_eq!(layer(token, key), want, "token {token}, key {key}");
    }
}

#[test]
fn a_keys_claim_says_refuse_replay_reconcile_or_send() {
    let answer = Cached {
        status: 200,
        content_type: "application/json".into(),
        body: bytes::Bytes::from_static(b"{}"),
        retry_after: None,
        headers: Vec::new(),
    };
    let cases = [
        (None, KeyStep::Refuse(Error::StoreUnavailable)),
        (Some(IdemClaim::InFlight), KeyStep::Refuse(Error::KeyInFlight)),
        (Some(IdemClaim::Reused), KeyStep::Refuse(Error::KeyReused)),
        (Some(IdemClaim::Done(answer.clone())), KeyStep::Replay(answer)),
        (Some(IdemClaim::Claimed), KeyStep::Send),
        (Some(IdemClaim::Unsettled { sent_ms: 9 }), KeyStep::Reconcile { sent_ms: 9 }),
    ];
    for (claim, want) in cases {
        assert_eq!(on_key(claim), want);
    }
}

#[test]
fn a_fingerprint_says_wait_replay_reconcile_or_send() {
    let cases = [
        (FpSeen::StoreFailed, true, FpStep::Send),
        (FpSeen::New, true, FpStep::SendTracked),
        (FpSeen::Busy(Twin::Alive), true, FpStep::Send),
        (FpSeen::Busy(Twin::Unsure), true, FpStep::Poll(Duration::from_millis(25))),
        (FpSeen::Busy(Twin::Unsure), false, FpStep::Poll(Duration::from_millis(25))),
        (FpSeen::Wait, true, FpStep::Poll(Duration::from_millis(50))),
        (FpSeen::Wait, false, FpStep::GiveUp),
        (FpSeen::Replay(()), false, FpStep::Replay(())),
        (FpSeen::Unsettled { sent_ms: 7 }, true, FpStep::Reconcile { sent_ms: 7 }),
    ];
    for (seen, before_deadline, want) in cases {
        let said = format!("{seen:?}, before deadline {before_deadline}");
        assert_eq!(on_fingerprint(seen, before_deadline), want, "{said}");
    }
}

#[test]
fn a_twin_is_alive_once_its_lease_is_seen_renewed_and_never_waited_for_long() {
    let t0 = Instant::now();
    let mut live = BusyWatch::new(t0);
    assert_eq!(live.saw(3, t0), Twin::Unsure);
    let t = t0 + Duration::from_millis(100);
    assert_eq!(live.saw(4, t), Twin::Unsure, "within the grace its client may still be going");
    assert_eq!(live.saw(4, t + BUSY_GRACE), Twin::Alive, "renewed, past the grace");
    // A dead call's beats never move; its lease lapses first (fp_begin says unsettled), and
    // in any case the watch ends one renewal after a lease.
    let mut dead = BusyWatch::new(t0);
    assert_eq!(dead.saw(7, t0), Twin::Unsure);
    assert_eq!(dead.saw(7, t0 + LEASE), Twin::Unsure);
    assert_eq!(dead.saw(7, t0 + LEASE + LEASE_RENEW_EVERY), Twin::Alive);
}

#[test]
fn only_a_deleted_or_withheld_edited_source_withholds() {
    use SourceState::*;
    let cases = [
        (None, true, None),
        (Some(Current), true, None),
        (Some(Deleted), false, Some(Gone::Deleted)),
        (Some(Deleted), true, Some(Gone::Deleted)),
        (Some(Edited), false, None),
        (Some(Edited), true, Some(Gone::Edited)),
    ];
    for (state, withhold_edited, want) in cases {
        assert_eq!(
            withhold(state, withhold_edited, "chat.postMessage"),
            want,
            "{state:?}, withhold_edited {withhold_edited}"
        );
        assert_eq!(withhold(state, withhold_edited, "chat.appendStream"), want, "an append is judged as a post");
        // The bot's own stop, update and delete of its message always go.
        for own in ["chat.update", "chat.delete", "chat.stopStream"] {
            assert_eq!(withhold(state, withhold_edited, own), None, "{own}");
        }
    }
    assert_eq!((Gone::Deleted.outcome(), Gone::Edited.outcome()), (Outcome::WithheldDeleted, Outcome::WithheldEdited));
}

#[test]
fn a_rerun_replays_only_an_earlier_runs_write() {
    assert!(rerun_applies(true, "chat.postMessage", true));
    assert!(!rerun_applies(true, "chat.update", true), "an update is the bot's own correction");
    assert!(!rerun_applies(false, "chat.postMessage", true), "opt-in");
    assert!(!rerun_applies(true, "chat.postMessage", false), "unattributed");
    let cases = [
        (None, 2, Rerun::Record(1)),
        (Some((1, "a")), 2, Rerun::Replay("a")),
        (Some((2, "a")), 2, Rerun::Record(1)),
        (Some((3, "a")), 2, Rerun::Record(1)),
    ];
    for (earlier, run, want) in cases {
        assert_eq!(rerun(1, earlier, run), want, "{earlier:?} in run {run}");
    }
}

#[test]
fn pacing_and_slacks_429s() {
    assert!(is_paced("chat.postMessage") && records_its_post("chat.postMessage"));
    for m in ["chat.update", "chat.postEphemeral", "reactions.add"] {
        assert!(!is_paced(m) && !records_its_post(m), "{m}");
    }
    assert_eq!(pace_per(2.0), Duration::from_millis(500));
    assert_eq!(paced_out_after(pace_per(2.0)), 1, "never a Retry-After of 0");
    assert_eq!(paced_out_after(pace_per(0.25)), 4);
    let s = Duration::from_secs;
    let cases = [
        (None, s(0), s(10), Some(s(1))),
        (Some(s(0)), s(0), s(10), Some(s(1))),
        (Some(s(3)), s(5), s(10), Some(s(3))),
        (Some(s(30)), s(0), s(10), Some(s(10))),
        (Some(s(3)), s(8), s(10), None),
        (None, s(0), s(0), None),
    ];
    for (after, elapsed, max_wait, want) in cases {
        assert_eq!(retry_wait(after, elapsed, max_wait), want, "{after:?} after {elapsed:?} of {max_wait:?}");
    }
}

#[test]
fn an_outcome_settles_its_record() {
    let cases = [
        (Outcome::Forwarded, true, Settle::Keep),
        (Outcome::Forwarded, false, Settle::Drop),
        (Outcome::Reconciled, true, Settle::Keep),
        (Outcome::RateLimited, false, Settle::Drop),
        (Outcome::Unknown, false, Settle::Unknown),
        (Outcome::Failed, false, Settle::Drop),
        (Outcome::WithheldDeleted, false, Settle::Drop),
    ];
    for (outcome, ok, want) in cases {
        assert_eq!(settles(outcome, ok), want, "{outcome:?}, ok {ok}");
    }
}

#[test]
fn only_harmless_writes_are_repeated_and_only_posts_looked_for() {
    assert_eq!(recovery("chat.postMessage"), Recovery::LookFor);
    for m in ["chat.update", "chat.delete", "reactions.add", "views.update", "pins.remove"] {
        assert_eq!(recovery(m), Recovery::SendAgain, "{m}");
    }
    for m in [
        "chat.postEphemeral",
        "chat.scheduleMessage",
        "chat.meMessage",
        "views.open",
        "views.push",
        "files.completeUploadExternal",
        "custom.write",
    ] {
        assert_eq!(recovery(m), Recovery::Unknown, "{m}");
    }
}

#[test]
fn an_unsettled_writes_window_starts_at_its_timeout_and_never_in_the_future() {
    let timeout = Duration::from_secs(10);
    assert_eq!(unsettled_from(1_000, 5_000, timeout), (1_000, 11_000));
    assert_eq!(unsettled_from(9_000, 5_000, timeout), (5_000, 15_000), "a send time from the future");
}

#[test]
fn only_a_channel_the_gateway_sees_says_not_posted_and_only_after_the_window() {
    let w = Window::new(1_000, Duration::from_secs(3));
    assert_eq!(w.end(), 4_000);
    assert_eq!(from_events(true, false, &w, 0), FromEvents::Found);
    assert_eq!(from_events(false, true, &w, 4_000), FromEvents::NotPosted);
    assert_eq!(from_events(false, true, &w, 3_999), FromEvents::AskHistory, "read before the window's end");
    assert_eq!(from_events(false, false, &w, 9_000), FromEvents::AskHistory, "a channel it does not see");
}

fn any_state() -> impl Strategy<Value = Option<SourceState>> {
    prop_oneof![
        Just(None),
        Just(Some(SourceState::Current)),
        Just(Some(SourceState::Deleted)),
        Just(Some(SourceState::Edited))
    ]
}

proptest! {
    /// A write is never withheld without a recorded deletion, or an edit when edits withhold.
    #[test]
    fn never_withheld_without_a_recorded_deletion_or_edit(state in any_state(), edited in any::<bool>()) {
        if let Some(gone) = withhold(state, edited, "chat.postMessage") {
            let recorded = match gone {
                Gone::Deleted => state == Some(SourceState::Deleted),
                Gone::Edited => edited && state == Some(SourceState::Edited),
                // Only a turn withholds for a newer message, never the source's state.
                Gone::Superseded => false,
            };
            prop_assert!(recorded, "{state:?} withheld as {gone:?}");
        }
    }

    /// Whatever a record holds, only a stored deletion (or an edit, when edits withhold)
    /// withholds the write: a value this version does not know posts it.
    #[test]
    fn only_a_stored_deletion_or_edit_withholds(stored in "(deleted|edited|)|[a-z]{0,8}", edited in any::<bool>()) {
        let withheld = withhold(Some(SourceState::from(Change::from_stored(&stored))), edited, "chat.postMessage").is_some();
        prop_assert_eq!(withheld, stored == "deleted" || (edited && stored == "edited"));
    }

    /// A fingerprint's answer is replayed only when one is stored, and this call tracks the
    /// fingerprint only when it is new: a busy twin or a failed store sends as a write of its own.
    #[test]
    fn a_fingerprint_replays_only_a_stored_answer(seen in 0usize..7, before_deadline in any::<bool>()) {
        let seen = [
            FpSeen::StoreFailed,
            FpSeen::New,
            FpSeen::Busy(Twin::Unsure),
            FpSeen::Busy(Twin::Alive),
            FpSeen::Wait,
            FpSeen::Replay(42),
            FpSeen::Unsettled { sent_ms: 1 },
        ][seen]
            .clone();
        let step = on_fingerprint(seen.clone(), before_deadline);
        prop_assert_eq!(matches!(step, FpStep::Replay(42)), seen == FpSeen::Replay(42));
        prop_assert_eq!(step == FpStep::SendTracked, seen == FpSeen::New);
        prop_assert!(step != FpStep::GiveUp || (seen == FpSeen::Wait && !before_deadline));
    }

    /// An answer is kept (and replayed) only when Slack said ok, and never for an unknown write.
    #[test]
    fn an_outcome_is_kept_only_when_slack_said_ok(i in 0..Outcome::ALL.len(), ok in any::<bool>()) {
        let outcome = Outcome::ALL[i];
        if settles(outcome, ok) == Settle::Keep {
            prop_assert!(ok && outcome != Outcome::Unknown);
        }
        prop_assert_eq!(settles(outcome, ok) == Settle::Unknown, outcome == Outcome::Unknown);
    }

    /// A 429 is waited out at least a second, and never past `max_wait` since the write began.
    #[test]
    fn a_429_wait_is_bounded(
        after in proptest::option::of(0u64..100_000),
        elapsed in 0u64..100_000,
        max in 0u64..100_000,
    ) {
        let ms = Duration::from_millis;
        if let Some(wait) = retry_wait(after.map(ms), ms(elapsed), ms(max)) {
            prop_assert!(wait >= MIN_RETRY_WAIT);
            prop_assert!(ms(elapsed) + wait <= ms(max));
        }
    }

    /// "Not posted" only from evidence read at or after the window's end, and only where the
    /// gateway sees the app's posts.
    #[test]
    fn not_posted_needs_the_whole_window_and_a_channel_it_sees(
        from in 0u64..1u64 << 40,
        window in 0u64..120_000,
        read_at in 0u64..1u64 << 41,
        sees: bool,
    ) {
        let w = Window::new(from, Duration::from_millis(window));
        let said = from_events(false, sees, &w, read_at);
        prop_assert_eq!(said == FromEvents::NotPosted, sees && read_at >= from + window);
        prop_assert_eq!(from_events(true, sees, &w, read_at), FromEvents::Found);
    }
}

#[test]
fn a_streams_calls_to_its_turn_and_slacks_answers_to_its_stream() {
    use crate::outbox::WriteKind;
    assert_eq!(turn_write("chat.startStream", None), Some(WriteKind::Start));
    assert_eq!(turn_write("chat.appendStream", None), Some(WriteKind::Append));
    assert_eq!(turn_write("chat.stopStream", None), Some(WriteKind::Close));
    assert_eq!(turn_write("assistant.threads.setStatus", Some("is thinking…")), Some(WriteKind::Status));
    assert_eq!(turn_write("assistant.threads.setStatus", Some("")), Some(WriteKind::Continue));
    for passing in ["assistant.threads.setTitle", "assistant.threads.setSuggestedPrompts", "reactions.add"] {
        assert_eq!(turn_write(passing, None), None, "{passing}");
    }
    let answer = |body: &str| Cached {
        status: 200,
        content_type: "application/json".into(),
        body: bytes::Bytes::from(body.to_string()),
        retry_after: None,
        headers: Vec::new(),
    };
    assert_eq!(stream_answer(Some(&answer(r#"{"ok":true,"ts":"1.5"}"#))), StreamAnswer::Taken);
    let expired = answer(r#"{"ok":false,"error":"message_not_in_streaming_state"}"#);
    assert_eq!(stream_answer(Some(&expired)), StreamAnswer::Expired);
    assert_eq!(stream_answer(Some(&answer(r#"{"ok":false,"error":"invalid_auth"}"#))), StreamAnswer::Refused);
    assert_eq!(stream_answer(None), StreamAnswer::Lost);
    assert_eq!(recovery("chat.startStream"), Recovery::LookFor);
}
