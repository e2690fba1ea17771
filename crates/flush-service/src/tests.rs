//! Deterministic tests of the services' cores: a manual clock, the in-memory
//! target, no sleeps. The same services over the real segment queue are tested
//! where the adapter lives, in the `commitlog` crate.

use std::future::Future;
use std::time::Duration;

use crate::sync::Arc;
use crate::testing::MemoryTarget;
use crate::*;

/// Bounded wait: a bug must fail a test, not hang it.
fn settle(handle: DurabilityHandle) -> FlushResult {
    handle.wait_timeout(Duration::from_secs(30)).expect("request never answered")
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new())
}

fn group_commit(target: Arc<dyn FlushTarget>, clock: Arc<ManualClock>, commit_before_flush: bool) -> GroupCommit {
    let config = GroupCommitConfig { commit_before_flush, ..GroupCommitConfig::default() };
    GroupCommit::new(target, clock, config, None)
}

/// Group commit whose default gather policy may wait up to 30 s (a wait that
/// should end early must, or the test fails on its bound).
fn gathering_group_commit(target: Arc<dyn FlushTarget>) -> GroupCommit {
    let config = GroupCommitConfig { gather: Duration::from_secs(30), ..GroupCommitConfig::default() };
    GroupCommit::new(target, clock(), config, None)
}

#[test]
fn concurrent_requests_are_batched_into_one_flush() {
    let target = MemoryTarget::new();
    let gc = Arc::new(group_commit(target.clone(), clock(), false));
    // 16 producers put 64 requests each, concurrently; nothing flushes meanwhile.
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (gc, target) = (Arc::clone(&gc), target.clone());
            std::thread::spawn(move || (0..64).map(|_| gc.put_request(target.append(100))).collect::<Vec<_>>())
        })
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(handles.len(), 1024);
    assert!(handles.iter().all(|h| !h.is_done()), "nothing acknowledged before a flush");
    gc.swap();
    assert_eq!(gc.flush_swapped(), 1024);
    assert_eq!(target.flushes(), 1, "one flush for 1024 requests");
    for h in handles {
        assert!(settle(h).is_ok());
    }
    assert_eq!(gc.stats().acknowledged, 1024);
}

#[test]
fn only_flushes_that_make_bytes_durable_count_as_syncs() {
    let target = MemoryTarget::new();
    let gc = group_commit(target.clone(), clock(), false);
    gc.run_round(); // nothing written: a round, no sync
    let written = gc.put_request(target.append(10));
    gc.run_round();
    assert!(settle(written).is_ok());
    gc.run_round(); // nothing new
    let stats = gc.stats();
    assert_eq!((stats.flushes, stats.syncing_flushes), (3, 1), "{stats:?}");
}

#[test]
fn a_flush_serves_every_request_it_covered_and_later_ones_wait_for_the_next_round() {
    let target = MemoryTarget::new();
    let gc = group_commit(target.clone(), clock(), false);
    let first = gc.put_request(target.append(10));
    gc.swap();
    // Queued after the swap, with its bytes in place before the flush: covered.
    let second = gc.put_request(target.append(10));
    assert_eq!(gc.flush_swapped(), 2, "one sync serves both");
    assert!(first.is_done() && second.is_done());
    assert_eq!(target.flushes(), 1);
    // Bytes appended after the flush: not covered, so not acknowledged by it.
    let third = gc.put_request(target.append(10));
    assert!(!third.is_done());
    gc.run_round();
    assert!(settle(third).is_ok());
    assert_eq!(gc.stats().acknowledged, 3);
}

#[test]
fn a_round_gathers_the_producers_the_last_round_served_but_a_lone_one_never_waits() {
    let target = MemoryTarget::new();
    let gc = Arc::new(gathering_group_commit(target.clone()));
    // A lone producer: the last round served one, so gather returns at once.
    drop(gc.put_request(target.append(10)));
    gc.run_round();
    let started = std::time::Instant::now();
    gc.gather();
    assert!(started.elapsed() < Duration::from_secs(10), "gather waited for nobody");
    // Four served; the next round waits until four are queued again.
    for _ in 0..4 {
        drop(gc.put_request(target.append(10)));
    }
    assert_eq!(gc.run_round(), 4);
    drop(gc.put_request(target.append(10)));
    let late = {
        let (gc, target) = (Arc::clone(&gc), target.clone());
        std::thread::spawn(move || {
            // Late on purpose: a gather that did not wait would start the round
            // with one request.
            std::thread::sleep(Duration::from_millis(50));
            (0..3).map(|_| gc.put_request(target.append(10))).collect::<Vec<_>>()
        })
    };
    gc.gather();
    let late = late.join().unwrap();
    assert_eq!(gc.run_round(), 4, "the round waited for the three that came late");
    assert!(late.iter().all(DurabilityHandle::is_done));
}

#[test]
fn a_round_with_producers_still_in_flight_gathers_the_ones_the_last_round_served() {
    // Four producers fall into two groups of two: each round's sync covers the
    // group whose bytes were in place, the other group appends during it. The
    // round after found nothing newly queued and synced for the two in flight
    // alone, while the two just served were on their way back: two groups for
    // good, half the records per sync.
    let target = MemoryTarget::new();
    let gc = Arc::new(gathering_group_commit(target.clone()));
    let served: Vec<_> = (0..2).map(|_| gc.put_request(target.append(10))).collect();
    // Bytes not written yet when the round flushes: not covered, left in flight.
    let end = target.append(0);
    let in_flight: Vec<_> = [end + 10, end + 20].map(|o| gc.put_request(o)).into();
    assert_eq!(gc.run_round(), 2);
    assert!(served.iter().all(DurabilityHandle::is_done) && !in_flight.iter().any(DurabilityHandle::is_done));
    target.append(20);
    let back = {
        let (gc, target) = (Arc::clone(&gc), target.clone());
        std::thread::spawn(move || {
            // Late on purpose: a gather that did not wait would serve two.
            std::thread::sleep(Duration::from_millis(50));
            (0..2).map(|_| gc.put_request(target.append(10))).collect::<Vec<_>>()
        })
    };
    gc.gather();
    let acknowledged = gc.run_round();
    let back = back.join().unwrap();
    assert_eq!(acknowledged, 4, "one round for both groups");
    assert!(back.iter().chain(&in_flight).all(DurabilityHandle::is_done));
}

#[test]
fn a_request_past_its_deadline_times_out_never_silently() {
    let target = MemoryTarget::with_write_buffer(); // bytes never become flushable: nobody commits
    let clock = clock();
    let gc = group_commit(target.clone(), clock.clone(), false);
    let handle = gc.put_request(target.append(4096));
    gc.swap();
    gc.flush_swapped();
    assert!(!handle.is_done());
    clock.advance(Duration::from_millis(4999));
    assert_eq!(gc.expire(), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(gc.expire(), 1, "the watcher answers at the deadline");
    assert!(matches!(settle(handle), Err(FlushError::Timeout { offset: 4096, timeout_ms: 5000 })));
    assert_eq!(gc.pending(), 0);
    assert_eq!(gc.stats().timeouts, 1);
}

#[test]
fn the_watcher_also_times_out_requests_not_yet_swapped() {
    let target = MemoryTarget::new();
    let clock = clock();
    let gc = group_commit(target.clone(), clock.clone(), false);
    let handle = gc.put_request(target.append(1));
    clock.advance(Duration::from_secs(6)); // the flusher is stuck: it never swapped
    assert_eq!(gc.expire(), 1);
    assert!(matches!(settle(handle), Err(FlushError::Timeout { .. })));
}

#[test]
fn without_commit_before_flush_a_write_buffer_times_out_every_request() {
    // RocketMQ #7523 (https://github.com/apache/rocketmq/issues/7523): the flush target is the
    // committed position; flushing without committing first covers nothing.
    let target = MemoryTarget::with_write_buffer();
    let clock = clock();
    let broken = group_commit(target.clone(), clock.clone(), false);
    let handle = broken.put_request(target.append(100));
    broken.swap();
    broken.flush_swapped();
    assert!(!handle.is_done());

    let fixed = group_commit(target.clone(), clock, true);
    let handle = fixed.put_request(target.append(100));
    fixed.swap();
    assert_eq!(fixed.flush_swapped(), 1);
    assert!(settle(handle).is_ok());
    assert_eq!(target.flushed_where(), 200);
}

#[test]
fn a_flush_error_fails_every_waiter_and_every_later_request() {
    let target = MemoryTarget::new();
    let gc = group_commit(target.clone(), clock(), false);
    let ok = gc.put_request(target.append(10));
    gc.swap();
    gc.flush_swapped();
    assert!(settle(ok).is_ok());

    let waiting: Vec<_> = (0..5).map(|_| gc.put_request(target.append(10))).collect();
    target.fail_flushes();
    gc.swap();
    assert_eq!(gc.flush_swapped(), 0);
    for h in waiting {
        assert!(matches!(settle(h), Err(FlushError::Failed { .. })), "never Ok after a failed flush");
    }
    assert!(matches!(settle(gc.put_request(target.append(10))), Err(FlushError::Failed { .. })), "latched");
    assert!(gc.failure().is_some());
    assert_eq!(gc.stats().acknowledged, 1);
}

#[test]
fn shutdown_drains_pending_requests_and_then_rejects() {
    let target = MemoryTarget::new();
    let flush =
        SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &FlushConfig::default(), false, None).unwrap();
    let handles: Vec<_> = (0..100).map(|_| flush.submit(target.append(64))).collect();
    flush.shutdown();
    for h in handles {
        assert!(settle(h).is_ok(), "pending requests are flushed, not dropped");
    }
    assert_eq!(target.flushed_where(), 6400);
    assert!(matches!(settle(flush.submit(target.append(1))), Err(FlushError::Stopped { .. })));
    flush.shutdown(); // idempotent
}

#[test]
fn sync_flush_threads_acknowledge_many_producers() {
    let target = MemoryTarget::new();
    let flush = Arc::new(
        SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &FlushConfig::default(), false, None).unwrap(),
    );
    let producers: Vec<_> = (0..8)
        .map(|_| {
            let (flush, target) = (Arc::clone(&flush), target.clone());
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let end = target.append(128);
                    settle(flush.submit(end)).unwrap();
                    assert!(target.flushed_where() >= end, "acknowledged before durable");
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let stats = flush.stats().group_commit;
    assert_eq!(stats.acknowledged, 1600);
    flush.shutdown();
}

fn periodic_flusher(target: Arc<MemoryTarget>, clock: Arc<ManualClock>) -> Periodic {
    let policy = RocketMqPolicy::new(4, Duration::from_secs(10));
    Periodic::flusher(
        target,
        clock,
        PeriodicConfig { interval: Duration::from_millis(500), timed: true },
        Box::new(policy),
        None,
    )
}

#[test]
fn async_flush_honours_least_pages_and_the_thorough_interval() {
    let target = MemoryTarget::new();
    let clock = clock();
    let flusher = periodic_flusher(target.clone(), clock.clone());
    target.append(100);
    assert_eq!(
        flusher.run_once().unwrap(),
        RunOutcome::Ran { least_pages: 0, from: 0, to: 100 },
        "first run is thorough"
    );
    target.append(3 * 4096);
    clock.advance(Duration::from_millis(500));
    assert_eq!(
        flusher.run_once().unwrap(),
        RunOutcome::Ran { least_pages: 4, from: 100, to: 100 },
        "3 pages < 4: nothing moves"
    );
    target.append(4096);
    clock.advance(Duration::from_millis(500));
    assert!(matches!(flusher.run_once().unwrap(), RunOutcome::Ran { least_pages: 4, to, .. } if to == 100 + 4 * 4096));
    target.append(10);
    clock.advance(Duration::from_secs(9));
    assert!(matches!(flusher.run_once().unwrap(), RunOutcome::Ran { least_pages: 0, .. }), "thorough after 10 s");
    assert_eq!(target.unflushed_bytes(), 0);
}

#[test]
fn async_flush_reports_the_checkpoint_data() {
    let target = MemoryTarget::new();
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&reports);
    let callback: FlushedCallback = Arc::new(move |r| sink.lock().unwrap().push(r));
    let policy = Box::new(RocketMqPolicy::new(0, Duration::from_secs(10)));
    let flusher = Periodic::flusher(
        target.clone(),
        clock(),
        PeriodicConfig { interval: Duration::from_millis(500), timed: true },
        policy,
        Some(callback),
    );
    target.append(77);
    flusher.run_once().unwrap();
    flusher.run_once().unwrap(); // nothing moved: no report
    assert_eq!(
        *reports.lock().unwrap(),
        vec![FlushedReport { flushed_where: 77, store_timestamp: 77, requests_acknowledged: 0 }]
    );
}

#[test]
fn commit_service_wakes_the_flusher_only_when_data_moved() {
    let target = MemoryTarget::with_write_buffer();
    let wakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&wakes);
    let committer = Periodic::committer(
        target.clone(),
        clock(),
        PeriodicConfig { interval: Duration::from_millis(200), timed: false },
        Box::new(RocketMqPolicy::new(4, Duration::from_millis(200))),
        Some(Box::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })),
    );
    target.append(10);
    committer.run_once().unwrap();
    assert_eq!(target.committed_where(), 10);
    committer.run_once().unwrap();
    assert_eq!(wakes.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_custom_policy_decides_when_to_flush() {
    let target = MemoryTarget::new();
    let clock = clock();
    let policy = DirtyBytesOrAgePolicy { max_dirty_bytes: 10_000, max_age: Duration::from_millis(300) };
    let flusher = Periodic::flusher(
        target.clone(),
        clock.clone(),
        PeriodicConfig { interval: Duration::from_millis(100), timed: true },
        Box::new(policy),
        None,
    );
    target.append(100);
    assert_eq!(flusher.run_once().unwrap(), RunOutcome::Skipped, "little and fresh");
    clock.advance(Duration::from_millis(200));
    assert_eq!(flusher.run_once().unwrap(), RunOutcome::Skipped, "200 ms old < 300 ms");
    clock.advance(Duration::from_millis(100));
    assert_eq!(flusher.run_once().unwrap(), RunOutcome::Ran { least_pages: 0, from: 0, to: 100 }, "too old");
    target.append(10_000);
    assert_eq!(flusher.run_once().unwrap(), RunOutcome::Ran { least_pages: 0, from: 100, to: 10_100 }, "too much");
}

#[test]
fn async_flush_shutdown_commits_and_flushes_everything() {
    let target = MemoryTarget::with_write_buffer();
    let flush =
        AsyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &FlushConfig::default(), true, None).unwrap();
    for _ in 0..10 {
        assert!(settle(flush.submit(target.append(1000))).is_ok(), "async handles are resolved at once");
    }
    flush.shutdown();
    assert_eq!(target.committed_where(), 10_000);
    assert_eq!(target.flushed_where(), 10_000, "final retries drained everything");
    assert!(!flush.is_sync());
}

#[test]
fn async_flush_failure_is_reported() {
    let target = MemoryTarget::new();
    let flush =
        AsyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &FlushConfig::default(), false, None).unwrap();
    target.append(10);
    target.fail_flushes();
    flush.shutdown();
    assert!(flush.failure().is_some());
}

/// A sync that takes far longer than the waiters' bounds; `in_waiter`:
/// `group_commit_in_waiter`.
fn slow_sync_flush(latency: Duration, sync_flush_timeout_ms: u64, in_waiter: bool) -> (Arc<MemoryTarget>, SyncFlush) {
    let target = MemoryTarget::new();
    target.set_flush_latency(latency);
    let config = FlushConfig { sync_flush_timeout_ms, group_commit_in_waiter: in_waiter, ..FlushConfig::default() };
    let flush = SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &config, false, None).unwrap();
    (target, flush)
}

#[test]
fn wait_timeout_returns_by_its_timeout_during_a_slow_sync() {
    // A waiter once led the group-commit round itself and sat in the 3 s sync,
    // returning `Some(Ok)` after 3 s from a 100 ms wait.
    let (target, flush) = slow_sync_flush(Duration::from_secs(3), 60_000, true);
    let submitted = std::time::Instant::now();
    let handle = flush.submit(target.append(100));
    assert!(handle.wait_timeout(Duration::from_millis(100)).is_none(), "the sync cannot be done yet");
    let waited = submitted.elapsed();
    assert!(waited < Duration::from_millis(1500), "a 100 ms wait took {waited:?}");
    assert!(settle(handle).is_ok(), "the request itself completes once the sync is done");
    flush.shutdown();
}

#[test]
fn without_rounds_in_waiters_wait_returns_timeout_at_the_deadline_during_a_slow_sync() {
    // RocketMQ answers FLUSH_DISK_TIMEOUT after syncFlushTimeout at most; with
    // `group_commit_in_waiter = false` the waiter is never held by a flush.
    let (target, flush) = slow_sync_flush(Duration::from_secs(3), 200, false);
    let submitted = std::time::Instant::now();
    let result = flush.submit(target.append(100)).wait();
    let waited = submitted.elapsed();
    assert!(matches!(result, Err(FlushError::Timeout { timeout_ms: 200, .. })), "{result:?}");
    assert!(waited < Duration::from_millis(1500), "a 200 ms deadline answered after {waited:?}");
    flush.shutdown();
}

#[test]
fn only_a_run_of_single_request_rounds_makes_waiters_spin_and_a_spinning_wait_still_gets_its_answer() {
    let target = MemoryTarget::new();
    let gc = Arc::new(group_commit(target.clone(), clock(), false));
    assert!(gc.spin().is_zero());
    for _ in 0..crate::LONE_ROUNDS {
        let handle = gc.put_request(target.append(10));
        gc.run_round();
        assert!(settle(handle).is_ok());
    }
    let spin = gc.spin();
    assert!(!spin.is_zero() && spin <= GroupCommitConfig::default().spin, "eight rounds of one request each: {spin:?}");
    // A spinning wait whose answer comes late (past the spin) still gets it.
    let handle = gc.put_request(target.append(10));
    let round = {
        let gc = Arc::clone(&gc);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            gc.run_round()
        })
    };
    assert!(handle.wait().is_ok());
    assert_eq!(round.join().unwrap(), 1);
    // Two producers in one round: no more spinning.
    let (first, second) = (gc.put_request(target.append(10)), gc.put_request(target.append(10)));
    assert_eq!(gc.run_round(), 2);
    assert!(settle(first).is_ok() && settle(second).is_ok());
    assert!(gc.spin().is_zero());
}

#[test]
fn a_truncation_between_a_rounds_flush_and_its_answers_acknowledges_nothing_unsynced() {
    // The round's flush returns E; before it answers, the tail is cut to T < E and
    // a record T..T+100 is appended with a request for T+100 <= E. That request
    // must wait for a flush that covers its bytes (the old round panicked here,
    // killing the service thread, or would have acknowledged unsynced bytes).
    let inner = MemoryTarget::new();
    let target = crate::testing::HookAfterFlush::new(inner.clone());
    let gc = Arc::new(group_commit(target.clone(), clock(), false));
    let early = gc.put_request(inner.append(1000)); // E = 1000
    let late = Arc::new(std::sync::Mutex::new(None));
    {
        let (gc, inner, late) = (Arc::clone(&gc), inner.clone(), Arc::clone(&late));
        target.arm(move || {
            inner.truncate(400);
            let next = inner.append(100);
            assert_eq!(next, 500);
            *late.lock().unwrap() = Some(gc.put_request(next));
        });
    }
    gc.swap();
    let acknowledged = gc.flush_swapped();
    let late = late.lock().unwrap().take().expect("the hook ran");
    assert!(!late.is_done(), "bytes written after the truncation were acknowledged by a flush before it");
    assert_eq!(acknowledged, 0, "the request for the cut bytes is not answered as durable either");
    assert_eq!(inner.flushed_where(), 400);
    // The next round syncs them and answers.
    gc.run_round();
    assert!(settle(late).is_ok());
    assert_eq!(inner.flushed_where(), 500);
    // The request for the cut bytes ends by its deadline, not as durable.
    assert!(!early.is_done());
}

#[test]
fn the_acknowledged_count_includes_a_request_once_its_waiter_wakes() {
    let target = MemoryTarget::new();
    let gc = Arc::new(group_commit(target.clone(), clock(), false));
    for round in 1..=200u64 {
        let handle = gc.put_request(target.append(10));
        let gc2 = Arc::clone(&gc);
        let flusher = std::thread::spawn(move || gc2.run_round());
        assert!(settle(handle).is_ok());
        assert!(gc.stats().acknowledged >= round, "woken before the count included this request (round {round})");
        flusher.join().unwrap();
    }
}

/// A target whose flush panics: a planted defect.
struct Panics;

impl FlushTarget for Panics {
    fn flush(&self, _: usize) -> Result<u64, TargetError> {
        panic!("a planted defect in the target");
    }
    fn state(&self) -> TargetState {
        TargetState::default()
    }
    fn failure(&self) -> Option<TargetError> {
        None
    }
}

#[test]
fn a_panicking_round_answers_every_waiter_and_rejects_later_requests() {
    let config = FlushConfig { sync_flush_timeout_ms: 60_000, ..FlushConfig::default() };
    let sync = SyncFlush::start(Arc::new(Panics), Arc::new(SystemClock::new()), &config, false, None).unwrap();
    let first = sync.submit(10);
    // Answered at once (not after the 60 s deadline): the service stopped.
    let answer = first.wait_timeout(Duration::from_secs(10)).expect("answered when the round died");
    assert!(matches!(answer, Err(FlushError::Stopped { .. })), "{answer:?}");
    let later = sync.submit(20);
    let answer = later.wait_timeout(Duration::from_secs(10)).expect("rejected at once");
    assert!(matches!(answer, Err(FlushError::Stopped { .. })), "{answer:?}");
    sync.shutdown();
}

#[test]
fn a_custom_gather_policy_decides_every_round_and_its_waits_and_spins_take_effect() {
    #[derive(Debug, Default)]
    struct Seen {
        before: std::sync::atomic::AtomicUsize,
        rounds: std::sync::atomic::AtomicUsize,
    }
    struct Always3(Arc<Seen>);
    impl GatherPolicy for Always3 {
        fn before_sync(&mut self, _: &GatherInput) -> GatherDecision {
            self.0.before.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            GatherDecision::WaitFor { queued: 3, within: Duration::from_secs(30) }
        }
        fn after_round(&mut self, report: &RoundReport) -> Duration {
            self.0.rounds.fetch_add(report.acknowledged, std::sync::atomic::Ordering::SeqCst);
            Duration::from_micros(77)
        }
    }
    let seen = Arc::new(Seen::default());
    let target = MemoryTarget::new();
    let gc =
        Arc::new(group_commit(target.clone(), clock(), false).with_gather_policy(Box::new(Always3(Arc::clone(&seen)))));
    drop(gc.put_request(target.append(10)));
    let late = {
        let (gc, target) = (Arc::clone(&gc), target.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            (0..2).map(|_| gc.put_request(target.append(10))).collect::<Vec<_>>()
        })
    };
    gc.gather();
    let late = late.join().unwrap();
    assert_eq!(gc.run_round(), 3, "the policy's wait for three was kept");
    assert!(late.iter().all(DurabilityHandle::is_done));
    assert_eq!(seen.before.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(seen.rounds.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(gc.spin(), Duration::from_micros(77), "the policy's spin reaches new requests");
}

/// A lone waiter's spin that runs out before its answer keeps the next waits
/// from spinning (counted by `spins_lost`): 8 after a first miss, 16 after
/// a second in a row; a caught answer brings the penalty back. Counted, not
/// timed: no round runs while the waits spin, so each full spin misses.
#[test]
fn spins_that_run_out_bow_out_for_the_next_waits() {
    struct Spin;
    impl GatherPolicy for Spin {
        fn before_sync(&mut self, _: &GatherInput) -> GatherDecision {
            GatherDecision::Go
        }
        fn after_round(&mut self, _: &RoundReport) -> Duration {
            Duration::from_micros(50)
        }
    }
    let target = MemoryTarget::new();
    let gc = group_commit(target.clone(), clock(), false).with_gather_policy(Box::new(Spin));
    drop(gc.put_request(target.append(10)));
    gc.run_round();
    assert_eq!(gc.spin(), Duration::from_micros(50));
    // Each wait may spin its 50 µs in full (its own bound is longer).
    let miss = |gc: &GroupCommit| gc.put_request(target.append(10)).wait_timeout(Duration::from_millis(1));
    assert!(miss(&gc).is_none());
    assert_eq!(gc.stats().spins_lost, 1);
    for _ in 0..8 {
        assert!(miss(&gc).is_none());
    }
    assert_eq!(gc.stats().spins_lost, 1, "the 8 waits after a miss did not spin");
    assert!(miss(&gc).is_none());
    assert_eq!(gc.stats().spins_lost, 2, "the next one tried");
    for _ in 0..16 {
        assert!(miss(&gc).is_none());
    }
    assert_eq!(gc.stats().spins_lost, 2, "16 waits without a spin after a second miss in a row");
    // A spin that catches its answer (answered before the wait) resets the
    // penalty: the next miss keeps 8 waits from spinning again.
    let caught = gc.put_request(target.append(10));
    gc.run_round();
    assert!(caught.wait_timeout(Duration::from_millis(1)).is_some());
    assert!(miss(&gc).is_none());
    assert_eq!(gc.stats().spins_lost, 3);
    for _ in 0..8 {
        assert!(miss(&gc).is_none());
    }
    assert!(miss(&gc).is_none());
    assert_eq!(gc.stats().spins_lost, 4, "8 waits, not 32, after a miss that followed a hit");
    gc.run_round();
}

/// A target without write buffers, written as a user would: `flush`, `state`
/// and `failure` only, the latch ready-made; `commit` is the trait's default.
#[derive(Default)]
struct Plain {
    written: std::sync::atomic::AtomicU64,
    durable: std::sync::atomic::AtomicU64,
    fail_next: std::sync::atomic::AtomicBool,
    syncs: std::sync::atomic::AtomicU64,
    latch: FailureLatch,
}

#[derive(Debug)]
struct DiskGone;
impl std::fmt::Display for DiskGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("disk gone")
    }
}
impl std::error::Error for DiskGone {}

impl FlushTarget for Plain {
    fn flush(&self, _least_pages: usize) -> Result<u64, TargetError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.latch.guard(|| {
            self.syncs.fetch_add(1, SeqCst);
            if self.fail_next.swap(false, SeqCst) {
                return Err(Arc::new(DiskGone) as TargetError);
            }
            self.durable.store(self.written.load(SeqCst), SeqCst);
            Ok(self.durable.load(SeqCst))
        })
    }
    fn state(&self) -> TargetState {
        use std::sync::atomic::Ordering::SeqCst;
        let (written, durable) = (self.written.load(SeqCst), self.durable.load(SeqCst));
        TargetState {
            flushed_where: durable,
            committed_where: written,
            unflushed_bytes: written - durable,
            ..TargetState::default()
        }
    }
    fn failure(&self) -> Option<TargetError> {
        self.latch.get()
    }
}

#[test]
fn a_target_of_three_methods_with_the_ready_made_latch_runs_group_commit_and_stays_failed() {
    use std::sync::atomic::Ordering::SeqCst;
    let target = Arc::new(Plain::default());
    let flush =
        SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &FlushConfig::default(), false, None).unwrap();
    target.written.store(100, SeqCst);
    assert!(settle(flush.submit(100)).is_ok());
    assert_eq!(target.commit(0).unwrap(), 100, "the default commit: everything written is committed");
    target.written.store(200, SeqCst);
    target.fail_next.store(true, SeqCst);
    assert!(matches!(settle(flush.submit(200)), Err(FlushError::Failed { .. })));
    // Latched: nothing later runs a sync, the default commit fails too, and the
    // error kept is the first one.
    let syncs = target.syncs.load(SeqCst);
    assert!(target.flush(0).is_err() && target.commit(0).is_err());
    assert_eq!(target.syncs.load(SeqCst), syncs, "a latched target syncs no more");
    assert_eq!(target.latch.record(Arc::new(crate::testing::InjectedFailure)).to_string(), "disk gone");
    assert!(matches!(settle(flush.submit(200)), Err(FlushError::Failed { .. })));
    flush.shutdown();
}

#[test]
fn a_waiter_never_waits_inside_a_sync_another_thread_runs() {
    // The first waiter runs the (slow) round itself; a second one, whose
    // bytes the running sync may not cover, must be answered at its own
    // deadline, not held until that sync returns.
    let (target, flush) = slow_sync_flush(Duration::from_secs(2), 200, true);
    let flush = Arc::new(flush);
    let first = {
        let (flush, end) = (Arc::clone(&flush), target.append(100));
        std::thread::spawn(move || flush.submit(end).wait())
    };
    until("the first waiter's round never began", || target.flushes() > 0);
    let submitted = std::time::Instant::now();
    let second = flush.submit(target.append(100)).wait();
    let waited = submitted.elapsed();
    assert!(matches!(second, Err(FlushError::Timeout { timeout_ms: 200, .. })), "{second:?}");
    assert!(waited < Duration::from_millis(1500), "held {waited:?} by another thread's sync");
    // The one that ran the sync is answered when it returns: past its deadline.
    let first = first.join().unwrap();
    assert!(matches!(first, Err(FlushError::Timeout { timeout_ms: 200, .. })), "{first:?}");
    flush.shutdown();
}

/// Yields until `done` says so; fails saying `what` after 10 s.
fn until(what: &str, done: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::yield_now();
    }
}

/// Sync flush whose service never wakes by its timer (an hour): only a
/// wake-up or a waiter's own round serves a request.
fn sync_flush_without_timer(target: Arc<dyn FlushTarget>, in_waiter: bool) -> SyncFlush {
    let config = FlushConfig {
        group_commit_interval_ms: 3_600_000,
        group_commit_in_waiter: in_waiter,
        ..FlushConfig::default()
    };
    SyncFlush::start(target, Arc::new(SystemClock::new()), &config, false, None).unwrap()
}

/// `inner`, running `before` at the start of every flush.
struct BeforeFlush<F> {
    inner: Arc<MemoryTarget>,
    before: F,
}

impl<F: Fn() + Send + Sync + 'static> FlushTarget for BeforeFlush<F> {
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError> {
        (self.before)();
        self.inner.flush(least_pages)
    }
    fn state(&self) -> TargetState {
        self.inner.state()
    }
    fn failure(&self) -> Option<TargetError> {
        self.inner.failure()
    }
}

/// A target over `memory` that records the threads that ran its flushes.
fn recording_flush_threads(
    memory: &Arc<MemoryTarget>,
) -> (Arc<dyn FlushTarget>, Arc<std::sync::Mutex<Vec<std::thread::ThreadId>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let before = move || record.lock().unwrap().push(std::thread::current().id());
    (Arc::new(BeforeFlush { inner: Arc::clone(memory), before }), seen)
}

#[test]
fn a_lone_waiter_runs_its_rounds_in_its_own_thread_by_default() {
    let memory = MemoryTarget::new();
    let (target, seen) = recording_flush_threads(&memory);
    let flush = sync_flush_without_timer(target, FlushConfig::default().group_commit_in_waiter);
    for _ in 0..20 {
        assert!(flush.submit(memory.append(64)).wait().is_ok());
    }
    let me = std::thread::current().id();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 20, "one round per request, no other: {seen:?}");
    assert!(seen.iter().all(|t| *t == me), "rounds ran in another thread: {seen:?}");
    assert_eq!(flush.core().stats().acknowledged, 20);
    flush.shutdown();
}

#[test]
fn without_rounds_in_waiters_the_service_runs_every_round() {
    let memory = MemoryTarget::new();
    let (target, seen) = recording_flush_threads(&memory);
    let flush = sync_flush_without_timer(target, false);
    for _ in 0..5 {
        assert!(flush.submit(memory.append(64)).wait().is_ok());
    }
    let me = std::thread::current().id();
    assert!(seen.lock().unwrap().iter().all(|t| *t != me), "a waiter ran a round");
    flush.shutdown();
}

#[test]
fn a_request_dropped_polled_or_waited_on_with_a_bound_wakes_the_service() {
    // Only the waiter's `wait` runs rounds; every other use of a pending
    // handle must wake the service, which here never wakes by its timer.
    let target = MemoryTarget::new();
    let flush = sync_flush_without_timer(target.clone(), true);
    let durable = |end: u64| until(&format!("no round made {end} durable"), || target.flushed_where() >= end);
    let end = target.append(10);
    drop(flush.submit(end));
    durable(end);
    let end = target.append(10);
    let mut polled = flush.submit(end);
    let waker = std::task::Waker::noop();
    let _ = std::pin::Pin::new(&mut polled).poll(&mut std::task::Context::from_waker(waker));
    durable(end);
    assert!(settle(polled).is_ok());
    let end = target.append(10);
    assert!(settle(flush.submit(end)).is_ok(), "wait_timeout runs no round: the service must");
    let end = target.append(10);
    let asked = flush.submit(end);
    let _ = asked.try_result();
    durable(end);
    flush.shutdown();
}

#[test]
fn a_waiter_runs_a_round_only_when_the_policy_would_not_gather() {
    struct Wants(usize);
    impl GatherPolicy for Wants {
        fn before_sync(&mut self, _: &GatherInput) -> GatherDecision {
            GatherDecision::WaitFor { queued: self.0, within: Duration::from_secs(30) }
        }
        fn after_round(&mut self, _: &RoundReport) -> Duration {
            Duration::ZERO
        }
    }
    let target = MemoryTarget::new();
    let gc = group_commit(target.clone(), clock(), false).with_gather_policy(Box::new(Wants(2)));
    assert!(!gc.try_run_round(), "nothing waits: no round");
    let first = gc.put_request(target.append(10));
    assert!(!gc.try_run_round(), "the policy gathers two: left to the service");
    assert_eq!(target.flushes(), 0);
    let second = gc.put_request(target.append(10));
    assert!(gc.try_run_round(), "both it would gather are queued: no reason to wait");
    assert_eq!(target.flushes(), 1);
    assert!(settle(first).is_ok() && settle(second).is_ok());
}

#[test]
fn a_round_that_panics_in_a_waiter_answers_it_stopped_and_stops_the_service() {
    let flush = sync_flush_without_timer(Arc::new(Panics), true);
    let answer = flush.submit(10).wait();
    assert!(matches!(answer, Err(FlushError::Stopped { .. })), "{answer:?}");
    let later = flush.submit(20).wait();
    assert!(matches!(later, Err(FlushError::Stopped { .. })), "{later:?}");
    flush.shutdown();
}

/// A gather policy that holds the service thread's first gather for a while
/// (so a waiter's round can end meanwhile) and records every round.
#[derive(Debug, Default)]
struct SlowFirstGather {
    reports: std::sync::Mutex<Vec<(Option<String>, RoundReport)>>,
    held: std::sync::atomic::AtomicBool,
}

impl GatherPolicyFactory for Arc<SlowFirstGather> {
    fn gather_policy(&self, _: &GroupCommitConfig) -> Box<dyn GatherPolicy> {
        Box::new(Arc::clone(self))
    }
}

impl GatherPolicy for Arc<SlowFirstGather> {
    fn before_sync(&mut self, _: &GatherInput) -> GatherDecision {
        if std::thread::current().name() == Some("GroupCommitService")
            && !self.held.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return GatherDecision::WaitFor { queued: 100, within: Duration::from_millis(300) };
        }
        GatherDecision::Go
    }
    fn after_round(&mut self, report: &RoundReport) -> Duration {
        self.reports.lock().unwrap().push((std::thread::current().name().map(str::to_string), *report));
        Duration::ZERO
    }
}

#[test]
fn the_service_runs_no_empty_round_behind_a_waiters_round() {
    // A runs its round (held in the sync); B finds it running and wakes the
    // service, which gathers (300 ms); A's sync answers both; the service
    // then finds nothing to do and must not run an empty round, which would
    // tell the policy that rounds serve no one.
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let memory = MemoryTarget::new();
    // Flushes wait until the gate opens (at most 10 s).
    let (entered, open) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let before = {
        let (entered, open) = (Arc::clone(&entered), Arc::clone(&open));
        move || {
            entered.store(true, SeqCst);
            let started = std::time::Instant::now();
            while !open.load(SeqCst) && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    let target = Arc::new(BeforeFlush { inner: memory.clone(), before });
    let policy = Arc::new(SlowFirstGather::default());
    let config = FlushConfig {
        group_commit_interval_ms: 3_600_000,
        gather_policy: GatherChoice::Custom(std::sync::Arc::new(Arc::clone(&policy))),
        ..FlushConfig::default()
    };
    let flush = Arc::new(SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &config, false, None).unwrap());
    let waiter = |end: u64| {
        let flush = Arc::clone(&flush);
        std::thread::spawn(move || flush.submit(end).wait())
    };
    let a = waiter(memory.append(10));
    until("A's round never began", || entered.load(SeqCst));
    let b = waiter(memory.append(10));
    until("the service never began its gather", || policy.held.load(SeqCst));
    open.store(true, SeqCst);
    assert!(a.join().unwrap().is_ok() && b.join().unwrap().is_ok());
    // The service's gather ends within 300 ms; then its round (or none).
    std::thread::sleep(Duration::from_millis(800));
    let reports = policy.reports.lock().unwrap().clone();
    assert!(reports.iter().all(|(_, r)| r.acknowledged > 0), "a round served no one: {reports:?}");
    flush.shutdown();
}

#[test]
fn a_gather_policy_that_panics_in_a_waiters_round_answers_it_stopped() {
    #[derive(Debug)]
    struct Panicky;
    impl GatherPolicyFactory for Panicky {
        fn gather_policy(&self, _: &GroupCommitConfig) -> Box<dyn GatherPolicy> {
            Box::new(Panicky)
        }
    }
    impl GatherPolicy for Panicky {
        fn before_sync(&mut self, _: &GatherInput) -> GatherDecision {
            panic!("a planted defect in the gather policy");
        }
        fn after_round(&mut self, _: &RoundReport) -> Duration {
            Duration::ZERO
        }
    }
    let target = MemoryTarget::new();
    let config = FlushConfig {
        group_commit_interval_ms: 3_600_000,
        gather_policy: GatherChoice::Custom(std::sync::Arc::new(Panicky)),
        ..FlushConfig::default()
    };
    let flush = SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &config, false, None).unwrap();
    let handle = flush.submit(target.append(10));
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.wait()));
    assert!(matches!(answer, Ok(Err(FlushError::Stopped { .. }))), "the waiter got {answer:?}");
    flush.shutdown();
}
