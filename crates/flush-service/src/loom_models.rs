//! Loom models of the wake-up and request-swap protocols (`cargo xtask loom`).
//! Loom ignores wait timeouts, so a lost wake-up shows up as a deadlock.

use loom::thread;

use crate::clock::SystemClock;
use crate::group_commit::{GroupCommit, GroupCommitConfig};
use crate::service::ServiceState;
use crate::sync::{Arc, AtomicBool, Ordering};
use crate::testing::MemoryTarget;
use crate::FlushTarget;

#[test]
fn loom_wakeup_is_never_lost() {
    loom::model(|| {
        let state = ServiceState::new();
        let work = Arc::new(AtomicBool::new(false));
        let waker = {
            let (state, work) = (Arc::clone(&state), Arc::clone(&work));
            thread::spawn(move || {
                work.store(true, Ordering::Release);
                state.wakeup();
            })
        };
        // The service waits until it sees the work; every wake-up must reach it.
        while !work.load(Ordering::Acquire) {
            state.wait_for_running(std::time::Duration::from_secs(3600), || {});
        }
        waker.join().unwrap();
    });
}

/// Two producers append, submit and wait for durability the way `SyncFlush` does
/// (queue the request, wake the service), while the flusher runs the service
/// thread's loop (`wait_for_running`, then `run_round`) until both are
/// acknowledged. Checks: nothing is acknowledged above the flushed offset, the
/// flushed offset never moves back, and every waiter is answered (a lost wake-up
/// deadlocks).
fn two_producers_and_the_service_loop(preemption_bound: usize) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemption_bound);
    builder.check(move || {
        let target = MemoryTarget::new();
        let state = ServiceState::new();
        let gc = Arc::new(GroupCommit::new(
            target.clone(),
            Arc::new(SystemClock::new()),
            GroupCommitConfig::default(),
            None,
        ));
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (gc, target, state) = (Arc::clone(&gc), target.clone(), Arc::clone(&state));
                thread::spawn(move || {
                    let end = target.append(10);
                    let handle = gc.put_request(end);
                    state.wakeup();
                    handle.wait().unwrap();
                    assert!(target.flushed_where() >= end, "acknowledged before flushed");
                })
            })
            .collect();
        let mut last_flushed = 0;
        while gc.stats().acknowledged < 2 {
            state.wait_for_running(std::time::Duration::from_secs(3600), || {});
            gc.run_round();
            let flushed = target.flushed_where();
            assert!(flushed >= last_flushed, "flushed offset went backwards");
            last_flushed = flushed;
        }
        for p in producers {
            p.join().unwrap();
        }
    });
}

#[test]
fn loom_group_commit_acknowledges_only_flushed_offsets() {
    two_producers_and_the_service_loop(3);
}
