//! The consumer beside topics deleted and made again, offsets reset, a
//! shutdown, and members in threads joining and leaving.

mod common;
#[path = "common/consumer.rs"]
mod consumer;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use consumer::{bodies, bodies_of, drain, member, put, store_with, SHORT};
use futures_core::Stream;
use message_store::{ConsumerConfig, Message, ResetTo, TagFilter};

/// Ten messages put in `t`'s queue 0 and a member of `g` that handed out
/// the first five (batches of 5), none committed.
fn five_of_ten_handed_out(store: &message_store::MessageStore) -> message_store::Consumer {
    put(store, "t", 1, 0, 10);
    let mut a = member(store, "g", ConsumerConfig::default().max_batch(5));
    assert_eq!(bodies(&a.poll(SHORT).unwrap()), bodies_of(0..5));
    a
}

/// A topic deleted and made again with more queues: the member that owned no
/// queue of the old topic takes its share of the new one (the creation moves
/// every group's generation), so every message is handed out.
#[test]
fn topic_made_again_with_more_queues_every_message_is_handed_out() {
    let (_sim, store) = store_with(1);
    let mut a = store.consumer("g", ConsumerConfig::default()).unwrap();
    let mut b = store.consumer("g", ConsumerConfig::default()).unwrap();
    a.subscribe("t", TagFilter::All).unwrap();
    b.subscribe("t", TagFilter::All).unwrap();
    assert!(a.poll(SHORT).unwrap().is_empty());
    assert!(b.poll(SHORT).unwrap().is_empty());
    assert_eq!(a.assignment(), [("t".to_string(), 0)]);
    assert!(b.assignment().is_empty(), "two members, one queue");
    store.delete_topic("t").unwrap();
    store.create_topic("t", 2).unwrap();
    put(&store, "t", 2, 0, 4); // m0, m2 on queue 0; m1, m3 on queue 1
    let mut got = Vec::new();
    for _ in 0..3 {
        got.extend(drain(&mut a));
        got.extend(drain(&mut b));
    }
    assert_eq!(
        bodies(&got),
        bodies_of(0..4),
        "a owns {:?}, b owns {:?}: queue 1 of the new topic is nobody's",
        a.assignment(),
        b.assignment()
    );
    drop((a, b));
    store.shutdown().unwrap();
}

/// `commit()` after the topic was deleted and made again commits nothing of
/// the old topic's positions into the new one (a commit names the topic id
/// its position was read from): the new topic's messages are all handed out.
#[test]
fn commit_after_topic_made_again_skips_none_of_the_new_topics_messages() {
    let (_sim, store) = store_with(1);
    put(&store, "t", 1, 0, 5);
    let mut a = member(&store, "g", ConsumerConfig::default());
    assert_eq!(drain(&mut a).len(), 5, "handed out, not committed");
    store.delete_topic("t").unwrap();
    store.create_topic("t", 1).unwrap();
    put(&store, "t", 1, 10, 8); // the new topic: m10..m17 at offsets 0..8
    let committed = a.commit();
    let new_offset = store.committed_offset("g", "t", 0).unwrap();
    let got = drain(&mut a);
    assert_eq!(
        bodies(&got),
        bodies_of(10..18),
        "commit() returned {committed:?}; the group's offset in the new topic became {new_offset:?}"
    );
    drop(a);
    store.shutdown().unwrap();
}

/// `commit()` after one of the followed topics was deleted commits what was
/// handed out of the others, leaving the deleted one out instead of failing.
#[test]
fn commit_after_a_followed_topic_is_deleted_commits_the_others() {
    let (_sim, store) = store_with(1);
    store.create_topic("u", 1).unwrap();
    put(&store, "t", 1, 0, 3);
    put(&store, "u", 1, 0, 3);
    let mut a = member(&store, "g", ConsumerConfig::default());
    a.subscribe("u", TagFilter::All).unwrap();
    assert_eq!(drain(&mut a).len(), 6);
    store.delete_topic("t").unwrap();
    let committed = a.commit();
    assert!(committed.is_ok(), "commit after t was deleted: {committed:?}");
    assert_eq!(store.committed_offset("g", "u", 0).unwrap(), Some(3), "u's hand-out committed");
    drop(a);
    store.shutdown().unwrap();
}

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A member that owns no queue (more members than queues) waits on the
/// group's changes only: a store shutdown and the deletion of the topic
/// wake its stream (they move every group's generation), which then yields
/// the shutdown error or ends.
#[test]
fn the_stream_of_a_member_without_queues_is_woken_by_shutdown_and_deletion() {
    let mut never_woken = Vec::new();
    for event in ["shutdown", "delete_topic"] {
        let (_sim, store) = store_with(1);
        let mut a = store.consumer("g", ConsumerConfig::default()).unwrap();
        let mut b = store.consumer("g", ConsumerConfig::default()).unwrap();
        a.subscribe("t", TagFilter::All).unwrap();
        b.subscribe("t", TagFilter::All).unwrap();
        assert!(a.poll(SHORT).unwrap().is_empty());
        assert!(b.poll(SHORT).unwrap().is_empty());
        assert!(b.assignment().is_empty());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut b).poll_next(&mut cx).is_pending());
        match event {
            "shutdown" => store.shutdown().unwrap(),
            _ => assert!(store.delete_topic("t").unwrap()),
        }
        let woken = count.0.load(Ordering::SeqCst);
        let next = Pin::new(&mut b).poll_next(&mut cx);
        if woken == 0 {
            never_woken.push(format!("{event}: b's stream never woken; polled anyway it gives {next:?}"));
        }
        drop((a, b));
        let _ = store.shutdown();
    }
    assert!(never_woken.is_empty(), "{never_woken:#?}");
}

/// `reset_consumer_offsets` while a member runs: the member starts again
/// from the reset offset, and its next commit does not overwrite the reset.
#[test]
fn a_reset_while_a_member_runs_is_not_undone_by_its_next_commit() {
    let (_sim, store) = store_with(1);
    let mut a = five_of_ten_handed_out(&store);
    a.commit().unwrap();
    store.reset_consumer_offsets("g", "t", None, ResetTo::Earliest).unwrap();
    let after = drain(&mut a);
    a.commit().unwrap();
    let committed = store.committed_offset("g", "t", 0).unwrap();
    assert!(
        after.iter().any(|m| m.queue_offset == 0),
        "reset to the earliest, but the member handed out {:?} and committed {committed:?}",
        after.iter().map(|m| m.queue_offset).collect::<Vec<_>>()
    );
    drop(a);
    store.shutdown().unwrap();
}

/// `clean_offsets_by_topic` while a member runs: the member starts again as
/// a new group would (from the earliest, by default), and its next commit
/// does not put back the offset the clean removed.
#[test]
fn a_topic_clean_while_a_member_runs_is_not_undone_by_its_next_commit() {
    let (_sim, store) = store_with(1);
    let mut a = five_of_ten_handed_out(&store);
    a.commit().unwrap();
    assert_eq!(store.clean_offsets_by_topic("t").unwrap(), 1);
    let after = drain(&mut a);
    a.commit().unwrap();
    let committed = store.committed_offset("g", "t", 0).unwrap();
    assert!(
        after.iter().any(|m| m.queue_offset == 0),
        "the group's offset in t was removed, but the member handed out {:?} and committed {committed:?}",
        after.iter().map(|m| m.queue_offset).collect::<Vec<_>>()
    );
    drop(a);
    store.shutdown().unwrap();
}

/// A commit from outside the group's members while one runs (a broker
/// taking a remote consumer's offset, an operator's commit): a lower offset
/// is a reset, as `commit_offset`'s doc says, so the member consumes again
/// from it, and its next commit does not overwrite it with the position it
/// had. The same through `commit_offsets_async`.
#[test]
fn an_outside_commit_while_a_member_runs_is_where_the_member_consumes_again() {
    for outside_async in [false, true] {
        let (_sim, store) = store_with(1);
        let mut a = five_of_ten_handed_out(&store);
        a.commit().unwrap();
        if outside_async {
            consumer::block_on(store.commit_offsets_async("g", &[("t", 0, 2)])).unwrap();
        } else {
            store.commit_offset("g", "t", 0, 2).unwrap();
        }
        let after = drain(&mut a);
        a.commit().unwrap();
        let offsets: Vec<u64> = after.iter().map(|m| m.queue_offset).collect();
        assert_eq!(
            offsets,
            (2..10).collect::<Vec<u64>>(),
            "offset 2 committed from outside (async: {outside_async}), the member then handed out {offsets:?} \
             and committed {:?}",
            store.committed_offset("g", "t", 0).unwrap()
        );
        assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(10));
        drop(a);
        store.shutdown().unwrap();
    }
}

/// Stress: members in threads poll and commit while others join and leave
/// and messages are put. A message handed out below the committed offset
/// read *before* the poll is a committed message handed out again (offsets
/// only grow here); at the end every message must have been handed out.
#[test]
fn stress_members_in_threads() {
    use std::collections::BTreeSet;
    use std::sync::atomic::AtomicBool;
    const QUEUES: u32 = 4;
    const MESSAGES: u32 = 4000;
    let (_sim, store) = store_with(QUEUES);
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(parking_lot::Mutex::new(BTreeSet::new()));
    let violations = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for index in 0..3 {
        let (store, stop, delivered, violations) =
            (store.clone(), Arc::clone(&stop), Arc::clone(&delivered), Arc::clone(&violations));
        threads.push(std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let mut c = member(&store, "g", ConsumerConfig::default().max_batch(7));
                for _ in 0..(20 + index * 7) {
                    let before: Vec<u64> =
                        (0..QUEUES).map(|q| store.committed_offset("g", "t", q).unwrap().unwrap_or(0)).collect();
                    let got = c.poll(Duration::from_millis(2)).unwrap();
                    for m in &got {
                        if m.queue_offset < before[m.queue_id as usize] {
                            violations.lock().push((m.queue_id, m.queue_offset, before[m.queue_id as usize]));
                        }
                        delivered.lock().insert((m.queue_id, m.queue_offset));
                    }
                    rounds += 1;
                    if rounds.is_multiple_of(3) {
                        c.commit().unwrap();
                    }
                }
                if rounds.is_multiple_of(2) {
                    c.commit().unwrap();
                }
                drop(c);
            }
        }));
    }
    for i in 0..MESSAGES {
        store.put_message(&Message::new("t", i % QUEUES, format!("m{i}"))).unwrap();
        if i % 200 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    store.dispatch_now().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let mut last = member(&store, "g", ConsumerConfig::default());
    loop {
        let got = last.poll(Duration::ZERO).unwrap();
        if got.is_empty() {
            break;
        }
        for m in &got {
            delivered.lock().insert((m.queue_id, m.queue_offset));
        }
        last.commit().unwrap();
    }
    let delivered = delivered.lock();
    let missing: Vec<(u32, u64)> = (0..QUEUES)
        .flat_map(|q| (0..store.queue_range("t", q).unwrap().end).map(move |o| (q, o)))
        .filter(|k| !delivered.contains(k))
        .collect();
    assert!(violations.lock().is_empty(), "handed out below the committed offset: {:?}", &violations.lock()[..]);
    assert!(missing.is_empty(), "never handed out: {missing:?}");
    drop(last);
    store.shutdown().unwrap();
}

/// A topic deleted and made again while a member polls: `poll` never fails
/// (the topic is either followed or dropped), though the start of a queue
/// is resolved beside the deletion; and the poll and the deletion do not
/// deadlock (a member commits under its group's lock, then the topics').
#[test]
fn poll_beside_topic_deleted_and_made_again_does_not_fail() {
    use std::sync::atomic::AtomicBool;
    let (_sim, store) = store_with(2);
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (store, stop) = (store.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            // Fails without auto-commit too (resolve_starts); with it, the commit's too.
            let mut c = store.consumer("g", ConsumerConfig::default()).unwrap();
            let mut errors = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if c.subscriptions().is_empty() && c.subscribe("t", TagFilter::All).is_err() {
                    continue;
                }
                if let Err(e) = c.poll(Duration::ZERO) {
                    errors.push(format!("{e:?}"));
                }
            }
            errors
        })
    };
    for i in 0..3000u32 {
        store.delete_topic("t").unwrap();
        store.create_topic("t", 2).unwrap();
        store.put_message(&Message::new("t", i % 2, format!("m{i}"))).unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let errors = poller.join().unwrap();
    assert!(errors.is_empty(), "{} polls failed, e.g. {:?}", errors.len(), &errors[..errors.len().min(3)]);
    store.shutdown().unwrap();
}

/// An outside commit that is refused (beyond the queue's end: nothing is
/// written) changes nothing for the group's members: the member keeps the
/// position it handed out, its `commit()` commits it, and it hands out what
/// follows (it once dropped its position and handed the messages out again).
#[test]
fn a_refused_outside_commit_leaves_a_members_progress() {
    let (_sim, store) = store_with(1);
    let mut a = five_of_ten_handed_out(&store);
    let refused = store.commit_offset("g", "t", 0, 100);
    assert!(matches!(refused, Err(message_store::StoreError::OffsetBeyondQueue { .. })), "{refused:?}");
    a.commit().unwrap();
    let committed = store.committed_offset("g", "t", 0).unwrap();
    let after: Vec<u64> = drain(&mut a).iter().map(|m| m.queue_offset).collect();
    assert_eq!(
        (committed, after.clone()),
        (Some(5), (5..10).collect::<Vec<u64>>()),
        "a refused commit changed nothing, yet the member's commit() committed {committed:?} and it then handed out {after:?}"
    );
    drop(a);
    store.shutdown().unwrap();
}

/// A broker's commit for the same group in another topic (a remote
/// consumer's offset) leaves the in-process member's position in its own
/// topic: its `commit()` right after commits what it handed out.
#[test]
fn an_outside_commit_in_another_topic_leaves_a_members_progress() {
    let (_sim, store) = store_with(1);
    store.create_topic("u", 1).unwrap();
    let mut a = five_of_ten_handed_out(&store);
    store.commit_offset("g", "u", 0, 0).unwrap();
    a.commit().unwrap();
    let committed = store.committed_offset("g", "t", 0).unwrap();
    let after: Vec<u64> = drain(&mut a).iter().map(|m| m.queue_offset).collect();
    assert_eq!(
        (committed, after.clone()),
        (Some(5), (5..10).collect::<Vec<u64>>()),
        "a commit in topic u; in t the member's commit() committed {committed:?} and it then handed out {after:?}"
    );
    drop(a);
    store.shutdown().unwrap();
}

/// `commit_offsets_async` does not block the thread that polls it on a
/// reset's journal sync: the group's lock, which an outside commit takes, is
/// held for a reset's staging only, its sync waited for after it.
#[test]
fn commit_offsets_async_does_not_block_its_poller_on_a_resets_sync() {
    let (sim, store) = store_with(1);
    put(&store, "t", 1, 0, 10);
    let _a = member(&store, "g", ConsumerConfig::default());
    sim.set_sync_delay(Duration::from_secs(2));
    let resetting = {
        let store = store.clone();
        std::thread::spawn(move || store.reset_consumer_offsets("g", "t", None, ResetTo::Earliest).unwrap())
    };
    std::thread::sleep(Duration::from_millis(300)); // the reset is in its sync
    let mut future = std::pin::pin!(store.commit_offsets_async("g", &[("t", 0, 3)]));
    let waker = Waker::noop();
    let started = std::time::Instant::now();
    let first = future.as_mut().poll(&mut Context::from_waker(waker));
    let blocked = started.elapsed();
    sim.set_sync_delay(Duration::ZERO);
    resetting.join().unwrap();
    assert!(
        blocked < Duration::from_millis(500),
        "the first poll of commit_offsets_async blocked its thread {blocked:?} (returned {first:?})"
    );
}

/// An outside commit is where the member owning the queue consumes again,
/// whether it differs from the member's last commit (6 below) or equals it
/// (5: the member once kept handing out past it and its next `commit()`
/// wrote its position over it).
#[test]
fn an_outside_commit_equal_to_the_members_last_commit_is_where_it_consumes_again() {
    for outside in [6u64, 5] {
        let (_sim, store) = store_with(1);
        let mut a = five_of_ten_handed_out(&store);
        a.commit().unwrap(); // committed 5
        assert_eq!(bodies(&a.poll(SHORT).unwrap()), bodies_of(5..10)); // handed out to 10
        store.commit_offset("g", "t", 0, outside).unwrap();
        let after: Vec<u64> = drain(&mut a).iter().map(|m| m.queue_offset).collect();
        a.commit().unwrap();
        assert_eq!(
            after,
            (outside..10).collect::<Vec<u64>>(),
            "offset {outside} committed from outside; the member then handed out {after:?} and committed {:?}",
            store.committed_offset("g", "t", 0).unwrap()
        );
        drop(a);
        store.shutdown().unwrap();
    }
}

/// A reset of the group's offsets in another topic, or a reset refused (no
/// such queue), leaves the member's position in its topic (it once dropped
/// it: its `commit()` committed nothing and it handed the messages out
/// again).
#[test]
fn a_reset_in_another_topic_or_refused_leaves_a_members_progress() {
    for case in ["other topic", "refused"] {
        let (_sim, store) = store_with(1);
        store.create_topic("u", 1).unwrap();
        let mut a = five_of_ten_handed_out(&store);
        if case == "other topic" {
            store.reset_consumer_offsets("g", "u", None, ResetTo::Earliest).unwrap();
        } else {
            assert!(store.reset_consumer_offsets("g", "t", Some(7), ResetTo::Earliest).is_err());
        }
        a.commit().unwrap();
        let committed = store.committed_offset("g", "t", 0).unwrap();
        let after: Vec<u64> = drain(&mut a).iter().map(|m| m.queue_offset).collect();
        assert_eq!(
            (committed, after.clone()),
            (Some(5), (5..10).collect::<Vec<u64>>()),
            "reset ({case}); in t the member's commit() committed {committed:?} and it then handed out {after:?}"
        );
        drop(a);
        store.shutdown().unwrap();
    }
}
