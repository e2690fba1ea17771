//! The consumer: a group's members following topics, sharing their queues,
//! handing out messages as a batch, an iterator and a stream, committing
//! what they handed out; and a property test of members joining and leaving.

mod common;
#[path = "common/consumer.rs"]
mod consumer;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use consumer::{block_on, bodies, bodies_of, drain, member, next, put, store_with, Unpark, SHORT};
use futures_core::Stream;
use message_store::{Consumer, ConsumerConfig, Message, MessageStore, StartFrom, StoreError, TagFilter};
use proptest::prelude::*;

#[test]
fn a_consumer_reads_every_queue_of_its_topics_and_a_commit_moves_the_group_on() {
    let (_sim, store) = store_with(4);
    put(&store, "t", 4, 0, 10);
    let mut consumer = member(&store, "g", ConsumerConfig::default().max_batch(3));
    let first = consumer.poll(SHORT).unwrap();
    assert!(!first.is_empty() && first.len() <= 3, "a batch of at most max_batch: {}", first.len());
    let mut all = first;
    all.extend(drain(&mut consumer));
    assert_eq!(bodies(&all), bodies_of(0..10));
    assert_eq!(consumer.assignment().len(), 4, "one member owns every queue");
    consumer.commit().unwrap();
    for q in 0..4 {
        assert_eq!(store.committed_offset("g", "t", q).unwrap(), Some(if q < 2 { 3 } else { 2 }));
    }
    drop(consumer);
    let mut again = member(&store, "g", ConsumerConfig::default());
    assert!(drain(&mut again).is_empty(), "the group's committed messages are not handed out again");
    let mut other = member(&store, "h", ConsumerConfig::default());
    assert_eq!(drain(&mut other).len(), 10, "another group reads them all");
    drop((again, other));
    store.shutdown().unwrap();
}

#[test]
fn uncommitted_messages_are_handed_out_again_and_filters_move_the_offset_past_what_they_skip() {
    let (_sim, store) = store_with(1);
    for i in 0..6u32 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        store.put_message(&Message::new("t", 0, format!("m{i}")).with_tags(tag)).unwrap();
    }
    store.dispatch_now().unwrap();
    let mut consumer = store.consumer("g", ConsumerConfig::default()).unwrap();
    consumer.subscribe("t", TagFilter::parse("odd").unwrap()).unwrap();
    assert_eq!(bodies(&drain(&mut consumer)), ["m1", "m3", "m5"]);
    drop(consumer); // no commit
    let mut again = store.consumer("g", ConsumerConfig::default()).unwrap();
    again.subscribe("t", TagFilter::parse("odd").unwrap()).unwrap();
    assert_eq!(bodies(&drain(&mut again)), ["m1", "m3", "m5"], "at least once: handed out again");
    again.commit().unwrap();
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(6), "past what the filter skipped");
    drop(again);
    store.shutdown().unwrap();
}

#[test]
fn a_group_without_offsets_starts_where_start_from_says_and_commits_that_start() {
    let (_sim, store) = store_with(2);
    put(&store, "t", 2, 0, 4);
    let mut latest = member(&store, "late", ConsumerConfig::default().start_from(StartFrom::Latest));
    assert!(latest.poll(SHORT).unwrap().is_empty(), "nothing before the group came");
    assert_eq!(store.committed_offset("late", "t", 0).unwrap(), Some(2), "the start is committed");
    put(&store, "t", 2, 4, 2);
    assert_eq!(bodies(&drain(&mut latest)), ["m4", "m5"]);
    let mut by_time = member(&store, "timed", ConsumerConfig::default().start_from(StartFrom::Time(u64::MAX)));
    assert!(drain(&mut by_time).is_empty(), "nothing stored after the end of time");
    drop((latest, by_time));
    store.shutdown().unwrap();
}

#[test]
fn members_of_a_group_share_the_queues_and_take_them_over_when_one_leaves() {
    let (_sim, store) = store_with(5);
    put(&store, "t", 5, 0, 20);
    let mut a = store.consumer("g", ConsumerConfig::default()).unwrap();
    let mut b = store.consumer("g", ConsumerConfig::default()).unwrap();
    a.subscribe("t", TagFilter::All).unwrap();
    b.subscribe("t", TagFilter::All).unwrap();
    let from_a = drain(&mut a);
    let from_b = drain(&mut b);
    let (owned_a, owned_b) = (a.assignment(), b.assignment());
    assert_eq!((owned_a.len(), owned_b.len()), (3, 2), "averagely, the first member one more");
    assert!(owned_a.iter().all(|q| !owned_b.contains(q)), "{owned_a:?} {owned_b:?}");
    let mut both = from_a.clone();
    both.extend(from_b);
    assert_eq!(bodies(&both), bodies_of(0..20), "each message once between them");
    a.commit().unwrap();
    drop(b); // leaves without committing: its queues go to a, from their offsets
    let again = drain(&mut a);
    assert_eq!(again.len(), 8, "b's uncommitted messages handed out again, a's not");
    assert_eq!(a.assignment().len(), 5);
    drop(a);
    store.shutdown().unwrap();
}

#[test]
fn a_waiting_member_is_woken_by_a_put_and_by_a_share_it_gains() {
    let (_sim, store) = store_with(2);
    let mut a = member(&store, "g", ConsumerConfig::default());
    let mut b = member(&store, "g", ConsumerConfig::default());
    assert!(b.poll(SHORT).unwrap().is_empty());
    let putter = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store.put_message(&Message::new("t", 0, "woke")).unwrap();
        })
    };
    // a owns queue 0: its wait ends with the put, long before its bound.
    let got = a.poll(Duration::from_secs(30)).unwrap();
    assert_eq!(bodies(&got), ["woke"]);
    putter.join().unwrap();
    store.put_message(&Message::new("t", 1, "for b")).unwrap();
    let leaver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(b);
    });
    // Queue 1 was b's: a, waiting on queue 0 only, takes it when b leaves.
    let got = a.poll(Duration::from_secs(30)).unwrap();
    assert_eq!(bodies(&got), ["for b"]);
    leaver.join().unwrap();
    drop(a);
    store.shutdown().unwrap();
}

#[test]
fn a_deleted_topic_ends_the_iterator_and_the_stream_and_a_shutdown_is_an_error_once() {
    let (_sim, store) = store_with(2);
    put(&store, "t", 2, 0, 2);
    let mut consumer = member(&store, "g", ConsumerConfig::default());
    assert_eq!(drain(&mut consumer).len(), 2);
    let deleter = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store.delete_topic("t").unwrap();
        })
    };
    let rest: Vec<_> = consumer.messages(Duration::from_secs(30)).collect();
    assert!(rest.is_empty(), "ended cleanly: {rest:?}");
    assert!(consumer.subscriptions().is_empty());
    deleter.join().unwrap();
    assert!(block_on(next(&mut consumer)).is_none(), "the stream too");

    store.create_topic("u", 1).unwrap();
    let mut other = store.consumer("g", ConsumerConfig::default()).unwrap();
    other.subscribe("u", TagFilter::All).unwrap();
    assert!(matches!(other.subscribe("t", TagFilter::All), Err(StoreError::UnknownTopic { .. })));
    store.shutdown().unwrap();
    let mut after = other.messages(SHORT);
    assert!(matches!(after.next(), Some(Err(StoreError::Shutdown))));
    assert!(after.next().is_none(), "once");
    drop((consumer, other));
}

#[test]
fn the_stream_waits_without_blocking_and_is_woken_by_a_put() {
    let (_sim, store) = store_with(3);
    let mut consumer = member(&store, "g", ConsumerConfig::default());
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut consumer).poll_next(&mut cx).is_pending(), "no message: pending, not blocked");
    let putter = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..6u32 {
                store.put_message(&Message::new("t", i % 3, format!("m{i}"))).unwrap();
            }
        })
    };
    let mut got = Vec::new();
    while got.len() < 6 {
        got.push(block_on(next(&mut consumer)).unwrap().unwrap());
    }
    putter.join().unwrap();
    assert_eq!(bodies(&got), bodies_of(0..6));
    drop(consumer);
    store.shutdown().unwrap();
}

/// What one step of the model does.
#[derive(Debug, Clone)]
enum Op {
    /// Puts this many messages, round-robin from a rotating queue.
    Put(u8),
    /// A new member joins.
    Join,
    /// The member at this index (modulo the members) leaves, without committing.
    Leave(u8),
    /// The member polls once (a batch of at most 3).
    Poll(u8),
    /// The member commits.
    Commit(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u8..6).prop_map(Op::Put),
        1 => Just(Op::Join),
        1 => any::<u8>().prop_map(Op::Leave),
        4 => any::<u8>().prop_map(Op::Poll),
        2 => any::<u8>().prop_map(Op::Commit),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Members join, leave, poll and commit while messages are put: no
    /// message is handed out after the group committed past it, and every
    /// message is handed out (a last member drains what the others left).
    #[test]
    fn members_joining_and_leaving_never_skip_a_message_nor_repeat_a_committed_one(
        queues in 1u32..4,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let (_sim, store) = store_with(queues);
        let config = ConsumerConfig::default().max_batch(3);
        let mut members: Vec<Consumer> = Vec::new();
        let mut delivered: BTreeMap<(u32, u64), usize> = BTreeMap::new();
        let mut put_count = 0u32;
        let mut check = |store: &MessageStore, messages: &[message_store::StoredMessage]| -> Result<(), TestCaseError> {
            for m in messages {
                let committed = store.committed_offset("g", "t", m.queue_id).unwrap().unwrap_or(0);
                prop_assert!(
                    m.queue_offset >= committed,
                    "queue {} offset {} handed out after the group committed {}", m.queue_id, m.queue_offset, committed
                );
                *delivered.entry((m.queue_id, m.queue_offset)).or_default() += 1;
            }
            Ok(())
        };
        for op in ops {
            match op {
                Op::Put(n) => {
                    put(&store, "t", queues, put_count, u32::from(n));
                    put_count += u32::from(n);
                }
                Op::Join => {
                    members.push(member(&store, "g", config.clone()));
                }
                Op::Leave(i) if !members.is_empty() => {
                    let at = usize::from(i) % members.len();
                    drop(members.remove(at));
                }
                Op::Poll(i) if !members.is_empty() => {
                    let at = usize::from(i) % members.len();
                    let got = members[at].poll(Duration::ZERO).unwrap();
                    check(&store, &got)?;
                }
                Op::Commit(i) if !members.is_empty() => {
                    let at = usize::from(i) % members.len();
                    members[at].commit().unwrap();
                }
                _ => {}
            }
        }
        members.clear();
        let mut last = member(&store, "g", config);
        loop {
            let got = last.poll(Duration::ZERO).unwrap();
            if got.is_empty() {
                break;
            }
            check(&store, &got)?;
            last.commit().unwrap();
        }
        for q in 0..queues {
            let end = store.queue_range("t", q).unwrap().end;
            for offset in 0..end {
                prop_assert!(delivered.contains_key(&(q, offset)), "queue {} offset {} never handed out", q, offset);
            }
        }
        drop(last);
        store.shutdown().unwrap();
    }
}

#[test]
fn an_offset_whose_messages_expired_goes_on_from_the_first_or_fails_as_configured() {
    use message_store::OutOfRange;
    let (_sim, store) = store_with(1);
    for i in 0..300u32 {
        store.put_message(&Message::new("t", 0, format!("{i:04}{}", "x".repeat(1000)))).unwrap();
    }
    store.dispatch_now().unwrap();
    let mut going_on = store.consumer("on", ConsumerConfig::default().max_batch(1)).unwrap();
    let mut failing =
        store.consumer("fail", ConsumerConfig::default().max_batch(1).out_of_range(OutOfRange::Fail)).unwrap();
    for consumer in [&mut going_on, &mut failing] {
        consumer.subscribe("t", TagFilter::All).unwrap();
        assert_eq!(consumer.poll(SHORT).unwrap()[0].queue_offset, 0);
        consumer.commit().unwrap();
    }
    store.log().flush_all().unwrap();
    let cut = store.log().max_offset() / 2;
    common::wait_sealed_past(&store, cut);
    assert!(store.log().delete_segments_before(cut, usize::MAX).unwrap() > 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.queue_range("t", 0).unwrap().start == 0 {
        assert!(std::time::Instant::now() < deadline, "the index did not expire");
        std::thread::sleep(Duration::from_millis(10));
    }
    let first = store.queue_range("t", 0).unwrap().start;
    assert_eq!(going_on.poll(SHORT).unwrap()[0].queue_offset, first, "on from the queue's first");
    let failed = failing.poll(SHORT);
    assert!(matches!(failed, Err(StoreError::OffsetOutOfRange { offset: 1, min, .. }) if min == first), "{failed:?}");
    drop((going_on, failing));
    store.shutdown().unwrap();
}
