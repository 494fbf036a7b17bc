//! The admission's unit tests, on tokio's paused clock.
use super::*;

fn admission(max_pending: usize, wait_ms: u64) -> Arc<Admission> {
    let g = |n: &str| IntGauge::new(n, n).unwrap();
    let gauges = Gauges { limit: g("limit"), pending: g("pending"), waiting: g("waiting") };
    let settings = Settings {
        max_pending,
        wait: Duration::from_millis(wait_ms),
        slow: Duration::from_millis(250),
        floor: Duration::from_millis(20),
    };
    Admission::new(settings, Arc::new(Pressure::default()), gauges)
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(2)
}

#[tokio::test(start_paused = true)]
async fn a_stalled_store_shrinks_the_queue_to_the_limit() {
    // Records took 1 ms, so a 20 ms wait could serve 80 waiters: until nothing finishes.
    let a = admission(4, 20);
    a.lock().short_us = 1_000.0;
    let slots: Vec<_> = futures_slots(&a, 4).await;
    assert_eq!(a.lock().queue_cap(&a.settings), 64, "16 x max_pending at most");
    tokio::time::advance(Duration::from_millis(10)).await;
    assert_eq!(a.lock().queue_cap(&a.settings), 8, "4 slots x 20 ms / 10 ms stalled");
    tokio::time::advance(Duration::from_millis(90)).await;
    assert_eq!(a.lock().queue_cap(&a.settings), 4, "never below the limit");
    drop(slots);
    assert_eq!(a.lock().queue_cap(&a.settings), 4, "the slow records now show in the window's mean");
}

async fn futures_slots(a: &Arc<Admission>, n: usize) -> Vec<Slot> {
    let mut slots = Vec::new();
    for _ in 0..n {
        slots.push(a.admit(far()).await.unwrap());
    }
    slots
}

#[tokio::test(start_paused = true)]
async fn slots_up_to_the_limit_then_a_bounded_queue_then_shed_at_once() {
    // Records take 10 ms and a request may wait 20 ms: two rounds of four slots can serve
    // eight waiters in time, so eight may wait.
    let a = admission(4, 20);
    a.lock().short_us = 10_000.0;
    assert_eq!(a.limit(), 4);
    let mut slots = Vec::new();
    for _ in 0..4 {
        slots.push(a.admit(far()).await.unwrap());
    }
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn({
                let a = a.clone();
                async move { a.admit(far()).await.map(|_| ()) }
            })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(a.lock().waiting.len(), 8);
    assert!(!a.has_room());
    assert_eq!(a.admit(far()).await.err(), Some(Shed::Full), "the ninth is refused without waiting");
    // Nobody frees a slot: each waiter gives up after `admission_wait`.
    tokio::time::advance(Duration::from_millis(21)).await;
    for w in waiters {
        assert_eq!(w.await.unwrap(), Err(Shed::Waited));
    }
    assert!(a.has_room(), "the ones that gave up no longer hold places");
    drop(slots);
    assert_eq!(a.lock().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn a_standing_queue_waits_briefly_and_a_burst_waits_long() {
    let a = admission(4, 500);
    let mut held = futures_slots(&a, 4).await;
    let waiter = |a: &Arc<Admission>| {
        let a = a.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            (a.admit(far()).await.err(), t.elapsed())
        })
    };
    // The first to wait meets an empty queue: a burst, so the full admission_wait.
    let first = waiter(&a);
    tokio::task::yield_now().await;
    tokio::time::advance(STANDING + Duration::from_millis(50)).await;
    // The queue has not emptied since: overload, so a short wait.
    let second = waiter(&a);
    assert_eq!(second.await.unwrap(), (Some(Shed::Waited), STANDING_WAIT));
    assert_eq!(first.await.unwrap(), (Some(Shed::Waited), Duration::from_millis(500)));
    // Once the queue is empty again, a burst is a burst.
    held.pop();
    held.push(a.admit(far()).await.unwrap());
    assert_eq!(waiter(&a).await.unwrap(), (Some(Shed::Waited), Duration::from_millis(500)));
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_goes_to_the_newest_waiter_and_none_is_lost() {
    let a = admission(2, 1_000);
    let first = a.admit(far()).await.unwrap();
    let _second = a.admit(far()).await.unwrap();
    let older = tokio::spawn({
        let a = a.clone();
        async move { a.admit(far()).await.is_ok() }
    });
    tokio::task::yield_now().await;
    let newer = tokio::spawn({
        let a = a.clone();
        async move { a.admit(far()).await.is_ok() }
    });
    tokio::task::yield_now().await;
    drop(first);
    assert!(newer.await.unwrap(), "newest first");
    // The grant went to a live waiter and was released again when it was dropped: the
    // older one is served next.
    assert!(older.await.unwrap());
    assert_eq!(a.lock().pending, 1);
}

#[tokio::test(start_paused = true)]
async fn no_wait_outlasts_the_deadline() {
    let a = admission(1, 10_000);
    let _held = a.admit(far()).await.unwrap();
    let deadline = Instant::now() + Duration::from_millis(30);
    let t = Instant::now();
    assert_eq!(a.admit(deadline).await.err(), Some(Shed::Waited));
    assert_eq!(t.elapsed(), Duration::from_millis(30));
}

#[tokio::test(start_paused = true)]
async fn the_limit_starts_at_its_ceiling_halves_when_slow_and_grows_back_while_used() {
    let a = admission(256, 100);
    assert_eq!(a.limit(), 256);
    // Records slower than `slow`: halved per window, down to the floor.
    for _ in 0..12 {
        let slot = a.take(&mut a.lock());
        tokio::time::advance(Duration::from_millis(300)).await;
        drop(slot);
    }
    assert_eq!(a.limit(), MIN_LIMIT);
    // Faster records, the limit fully used: it grows.
    for _ in 0..40 {
        let slots: Vec<_> = (0..a.limit()).map(|_| a.take(&mut a.lock())).collect();
        tokio::time::advance(Duration::from_millis(10)).await;
        drop(slots);
        tokio::time::advance(WINDOW).await;
    }
    assert!(a.limit() > 2 * MIN_LIMIT, "{}", a.limit());
}

#[tokio::test(start_paused = true)]
async fn latency_rising_past_the_floor_shrinks_it_and_an_unused_limit_does_not_grow() {
    let a = admission(256, 100);
    // 10 ms records: under the 20 ms floor, so no shrinking however they compare.
    for _ in 0..20 {
        let slot = a.take(&mut a.lock());
        tokio::time::advance(Duration::from_millis(10)).await;
        drop(slot);
        tokio::time::advance(WINDOW).await;
    }
    assert_eq!(a.limit(), 256, "unused, and under the floor");
    // 100 ms records: well past 1.5 × the baseline, so it shrinks (though under `slow`).
    for _ in 0..20 {
        let slot = a.take(&mut a.lock());
        tokio::time::advance(Duration::from_millis(100)).await;
        drop(slot);
    }
    assert!(a.limit() < 128, "{}", a.limit());
}

#[tokio::test(start_paused = true)]
async fn waiting_and_shedding_press_the_workers() {
    let a = admission(1, 10);
    assert_eq!(a.pressure.level(), 0.0);
    let _held = a.admit(far()).await.unwrap();
    for _ in 0..5 {
        let _ = a.admit(far()).await;
    }
    assert!(a.pressure.level() > 0.5, "{}", a.pressure.level());
}

#[tokio::test(start_paused = true)]
async fn a_slot_given_back_unsampled_teaches_the_limit_nothing() {
    let a = admission(64, 20);
    let before = a.limit();
    // Records that hung for 2 s each, given back unsampled (one dead shard's timeouts), over
    // several windows: the limit stays.
    for _ in 0..5 {
        let slots = futures_slots(&a, 8).await;
        tokio::time::advance(Duration::from_secs(2)).await;
        slots.into_iter().for_each(Slot::unsampled);
    }
    assert_eq!(a.limit(), before);
    // The same records sampled (the whole store that slow): it halves.
    let slots = futures_slots(&a, 8).await;
    tokio::time::advance(Duration::from_secs(2)).await;
    drop(slots);
    assert!(a.limit() <= before / 2, "{} of {before}", a.limit());
}
