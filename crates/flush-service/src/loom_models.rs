//! Loom models of the wake-up, request-swap and write-group protocols
//! (`cargo xtask loom`).
//! Loom ignores wait timeouts, so a lost wake-up shows up as a deadlock.

use loom::thread;

use crate::clock::SystemClock;
use crate::group_commit::{GroupCommit, GroupCommitConfig};
use crate::service::ServiceState;
use crate::sync::{lock, Arc, AtomicBool, Mutex, Ordering};
use crate::testing::MemoryTarget;
use crate::write_group::{Answer, Member, Turn, WriteGroups};

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

/// Two producers each do work and call `wakeup_unless_napping`, while the
/// service loops as a napping service does: takes the work there is, naps
/// after a round that found some (a nap ends by time: here a yield, since
/// loom ignores timeouts), and before a long wait ends its naps and looks
/// again if it napped. Work a napping service was not woken for must be
/// found by that look; a lost wake-up deadlocks in the long wait.
#[test]
fn loom_a_napping_service_misses_no_work() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let state = ServiceState::new();
        let work = Arc::new(crate::sync::AtomicU64::new(0));
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (state, work) = (Arc::clone(&state), Arc::clone(&work));
                thread::spawn(move || {
                    work.fetch_add(1, Ordering::Release);
                    state.wakeup_unless_napping();
                })
            })
            .collect();
        let mut taken = 0;
        while taken < 2 {
            let there = work.load(Ordering::Acquire);
            if there > taken {
                taken = there;
                state.begin_nap();
                thread::yield_now();
                continue;
            }
            if state.end_nap() {
                continue;
            }
            state.wait_for_running(std::time::Duration::from_secs(3600), || {});
        }
        for p in producers {
            p.join().unwrap();
        }
    });
}

/// Two producers append, submit and wait for durability the way `SyncFlush` does
/// (queue the request, wake the service), while the flusher runs the service
/// thread's loop (`wait_for_running`, then `run_round`) until both are
/// acknowledged. Checks: nothing is acknowledged above the flushed offset, the
/// flushed offset never moves back, and every waiter is answered (a lost wake-up
/// deadlocks).
/// A memory target, a service's state and the group commit over them.
fn group_commit_service() -> (Arc<MemoryTarget>, Arc<ServiceState>, Arc<GroupCommit>) {
    let target = MemoryTarget::new();
    let gc =
        Arc::new(GroupCommit::new(target.clone(), Arc::new(SystemClock::new()), GroupCommitConfig::default(), None));
    (target, ServiceState::new(), gc)
}

fn two_producers_and_the_service_loop(preemption_bound: usize) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemption_bound);
    builder.check(move || {
        let (target, state, gc) = group_commit_service();
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

/// Two producers submit and wait the way `SyncFlush` does by default
/// (`group_commit_in_waiter`): each `wait` runs the round itself when no
/// round runs and wakes the service otherwise, and the service thread runs
/// its loop until stopped. Checks: nothing is acknowledged above the
/// flushed offset, and every waiter is answered (a waiter that neither ran
/// a round nor woke the service, or a service round lost behind a waiter's,
/// deadlocks: loom ignores the waits' time bounds).
#[test]
fn loom_waiters_running_rounds_beside_the_service_answer_everyone() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let (target, state, gc) = group_commit_service();
        let service = {
            let (gc, state) = (Arc::clone(&gc), Arc::clone(&state));
            thread::spawn(move || {
                while !state.is_stopped() {
                    state.wait_for_running(std::time::Duration::from_secs(3600), || {});
                    gc.run_round();
                }
            })
        };
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (gc, target, state) = (Arc::clone(&gc), target.clone(), Arc::clone(&state));
                thread::spawn(move || {
                    let end = target.append(10);
                    let handle = gc.put_request(end).with_rounds(&gc, &state);
                    handle.wait().unwrap();
                    assert!(target.flushed_where() >= end, "acknowledged before flushed");
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        state.stop();
        service.join().unwrap();
        assert_eq!(gc.stats().acknowledged, 2);
    });
}

/// One writer through write groups: leads at once and writes its own data,
/// or queues and is written by a leader, or is handed the lead and writes a
/// group with its own first; a leader writes what queued before it lets the
/// lead go.
fn write_through_groups(groups: &WriteGroups<usize, ()>, written: &Mutex<Vec<usize>>, writing: &AtomicBool, id: usize) {
    let write = |group: &[usize]| {
        assert!(!writing.swap(true, Ordering::SeqCst), "two leaders write at once");
        lock(written).extend_from_slice(group);
        writing.store(false, Ordering::SeqCst);
    };
    let write_members = |group: &[Arc<Member<usize, ()>>]| {
        write(&group.iter().map(|m| *m.payload()).collect::<Vec<_>>());
        for member in group {
            member.answer(Answer::Done(()));
        }
    };
    let lead = match groups.try_lead() {
        Some(lead) => {
            write(&[id]);
            lead
        }
        None => {
            let member = Member::new(id);
            match groups.join(&member) {
                Turn::Lead(lead) => {
                    write(&[id]);
                    lead
                }
                Turn::LeadGroup(lead) => {
                    write_members(&groups.take(&lead, Some(Arc::clone(&member)), 8, usize::MAX, |_| 1));
                    assert!(matches!(member.take_answer(), Answer::Done(())), "the leader's own data not written");
                    lead
                }
                Turn::Answered(Answer::Done(())) => return,
                Turn::Answered(other) => panic!("a member answered {other:?}"),
            }
        }
    };
    let group = groups.take(&lead, None, 8, usize::MAX, |_| 1);
    if !group.is_empty() {
        write_members(&group);
    }
    drop(lead);
}

/// Three writers through write groups: every writer's data is written
/// exactly once, by itself or by a leader; two leaders never write at once;
/// the lead is let go at the end (a hand-off or an answer lost deadlocks).
#[test]
fn loom_write_groups_write_every_writer_once() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let groups = Arc::new(WriteGroups::<usize, ()>::default());
        let written = Arc::new(Mutex::new(Vec::new()));
        let writing = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..3)
            .map(|id| {
                let (groups, written, writing) = (Arc::clone(&groups), Arc::clone(&written), Arc::clone(&writing));
                thread::spawn(move || write_through_groups(&groups, &written, &writing, id))
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let mut written = lock(&written).clone();
        written.sort_unstable();
        assert_eq!(written, vec![0, 1, 2], "each writer's data once");
        assert!(groups.is_idle(), "the lead was not let go");
    });
}
