use proptest::prelude::*;

use super::*;

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
        assert_eq!(withhold(state, withhold_edited), want, "{state:?}, withhold_edited {withhold_edited}");
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
fn looks_spread_over_the_window_and_only_a_late_one_says_not_found() {
    let looks = Looks::new(1_000, Duration::from_secs(3));
    let ats: Vec<_> = (1..=LOOKS).map(|i| looks.at(i, 0)).collect();
    assert_eq!(ats, [Some(2_000), Some(3_000), Some(4_000), Some(4_000)]);
    assert_eq!(looks.at(2, 6_500), Some(6_500), "held by a refused look");
    assert_eq!(looks.at(2, 7_001), None, "past twice the window");
    assert!(!looks.not_found(3_999));
    assert!(looks.not_found(4_000));
    let s = Duration::from_secs;
    assert_eq!(looks.gap(LookGap::Ran), Duration::ZERO);
    assert_eq!(looks.gap(LookGap::RateLimited(None)), s(1));
    assert_eq!(looks.gap(LookGap::RateLimited(Some(s(60)))), s(3), "at most the window");
    assert_eq!(looks.gap(LookGap::Failed), s(1));
    assert_eq!(Looks::new(0, Duration::from_millis(200)).gap(LookGap::Failed), Duration::from_millis(200));
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
        if let Some(gone) = withhold(state, edited) {
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
        let withheld = withhold(Some(SourceState::from(Change::from_stored(&stored))), edited).is_some();
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

    /// "Not found" only from a look at or after the window's end; no look past twice the window,
    /// none before its turn, and the last spread look runs at the window's end.
    #[test]
    fn looks_cover_the_window_before_not_found(
        from in 0u64..1u64 << 40,
        window in 0u64..120_000,
        i in 1u64..=LOOKS,
        not_before in 0u64..1u64 << 41,
    ) {
        let looks = Looks::new(from, Duration::from_millis(window));
        if let Some(at) = looks.at(i, not_before) {
            prop_assert!(at <= from + 2 * window && at >= not_before && at >= from);
            prop_assert_eq!(looks.not_found(at), at >= from + window);
        }
        prop_assert_eq!(looks.at(3, 0), Some(from + window));
        if window > 0 {
            prop_assert!(!looks.not_found(from + window - 1), "a look before the window's end never says not found");
        }
    }
}
