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

#[test]
fn loom_group_commit_acknowledges_only_flushed_offsets() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
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
        // The flusher: rounds until both are acknowledged; a lost wake-up deadlocks.
        let mut last_flushed = 0;
        while gc.stats().acknowledged < 2 {
            state.wait_for_running(std::time::Duration::from_secs(3600), || gc.swap());
            gc.do_commit();
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
fn loom_leading_waiters_are_always_answered() {
    // Waiters lead their own rounds (try-lock on the round), followers wake the
    // service thread; every waiter must be answered with its bytes flushed. A
    // missed hand-off shows up as a deadlock.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
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
                    let handle = gc.put_request_leading(end, Arc::clone(&state));
                    handle.wait().unwrap();
                    assert!(target.flushed_where() >= end, "acknowledged before flushed");
                    // Let the service loop below notice that everyone is done.
                    state.wakeup();
                })
            })
            .collect();
        while gc.stats().acknowledged < 2 {
            state.wait_for_running(std::time::Duration::from_secs(3600), || {});
            gc.run_round();
        }
        for p in producers {
            p.join().unwrap();
        }
    });
}
