//! Puts, gets, statuses, filters, validation, batches, long polling and
//! consumer offsets.

mod common;
#[path = "common/consumer.rs"]
mod consumer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog::FlushDiskType;
use common::{config, open, read_queue};
use consumer::block_on;
use message_store::{
    DispatchLimit, GetRequest, GetStatus, Message, MessageError, StoreError, TagFilter, TimeBound, Waited,
};
use store_io::sim::SimStorage;
use store_io::Storage;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn messages_get_dense_offsets_per_queue_and_read_back_by_them() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("orders", 3).unwrap();
    for i in 0..30u32 {
        let put = store.put_message(&Message::new("orders", i % 3, format!("m{i}").into_bytes())).unwrap();
        assert_eq!(put.queue_offset, u64::from(i / 3), "dense from 0 in each queue");
        put.durability.wait().unwrap();
    }
    for queue in 0..3 {
        assert!(store.wait_for("orders", queue, 9, WAIT).unwrap().arrived());
        let read = read_queue(&store, "orders", queue);
        let expected: Vec<(u64, Vec<u8>)> =
            (0..10u32).map(|k| (u64::from(k), format!("m{}", k * 3 + queue).into_bytes())).collect();
        assert_eq!(read, expected);
        assert_eq!(store.queue_range("orders", queue).unwrap(), 0..10);
    }
    store.shutdown().unwrap();
}

#[test]
fn statuses_follow_rocketmqs_order_of_checks() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 2).unwrap();
    let get = |queue, offset| {
        store.get_messages(&GetRequest::new("t", queue, offset).max_count(8).max_bytes(u64::MAX)).unwrap()
    };
    let empty = get(0, 0);
    assert_eq!((empty.status, empty.next_offset), (GetStatus::NoMessageInQueue, 0));
    for i in 0..5u8 {
        store.put_message(&Message::new("t", 0, vec![i; 10])).unwrap();
    }
    assert!(store.wait_for("t", 0, 4, WAIT).unwrap().arrived());
    let found = get(0, 1);
    assert_eq!(found.status, GetStatus::Found);
    assert_eq!(found.messages.iter().map(|m| m.queue_offset).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert_eq!((found.next_offset, found.min_offset, found.max_offset), (5, 0, 5));
    let at_end = get(0, 5);
    assert_eq!((at_end.status, at_end.next_offset), (GetStatus::NoNewMessage, 5));
    let past = get(0, 9);
    assert_eq!((past.status, past.next_offset), (GetStatus::OffsetOverflow, 5));
    // At most max_count, and max_bytes once one message is in.
    let two = store.get_messages(&GetRequest::new("t", 0, 0).max_count(2).max_bytes(u64::MAX)).unwrap();
    assert_eq!((two.messages.len(), two.next_offset), (2, 2));
    let one = store.get_messages(&GetRequest::new("t", 0, 0).max_count(8).max_bytes(1)).unwrap();
    assert_eq!((one.messages.len(), one.next_offset), (1, 1), "one message even over max_bytes");
    assert!(matches!(
        store.get_messages(&GetRequest::new("t", 2, 0).max_count(8).max_bytes(1)),
        Err(StoreError::UnknownQueue { queue_id: 2, queues: 2, .. })
    ));
    assert!(matches!(
        store.get_messages(&GetRequest::new("nope", 0, 0).max_count(8).max_bytes(1)),
        Err(StoreError::UnknownTopic { .. })
    ));
    store.shutdown().unwrap();
}

#[test]
fn tag_filters_compare_strings_after_hashes_so_collisions_never_leak() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 1).unwrap();
    // "Aa" and "BB" have the same Java hash (the tags code in the queue).
    assert_eq!(message_store::tags_code("Aa"), message_store::tags_code("BB"));
    for tag in ["Aa", "BB", "C", "Aa"] {
        store.put_message(&Message::new("t", 0, tag.as_bytes().to_vec()).with_tags(tag)).unwrap();
    }
    store.put_message(&Message::new("t", 0, &b"untagged"[..])).unwrap();
    assert!(store.wait_for("t", 0, 4, WAIT).unwrap().arrived());
    let aa = store
        .get_messages(
            &GetRequest::new("t", 0, 0).max_count(10).max_bytes(u64::MAX).filter(TagFilter::parse("Aa").unwrap()),
        )
        .unwrap();
    assert_eq!(aa.messages.iter().map(|m| m.queue_offset).collect::<Vec<_>>(), vec![0, 3]);
    assert_eq!(aa.next_offset, 5, "filtered entries advance the next offset");
    let either = store
        .get_messages(
            &GetRequest::new("t", 0, 0)
                .max_count(10)
                .max_bytes(u64::MAX)
                .filter(TagFilter::parse(" BB || C ").unwrap()),
        )
        .unwrap();
    assert_eq!(either.messages.iter().map(|m| m.queue_offset).collect::<Vec<_>>(), vec![1, 2]);
    let none = store
        .get_messages(
            &GetRequest::new("t", 0, 4).max_count(10).max_bytes(u64::MAX).filter(TagFilter::parse("Z").unwrap()),
        )
        .unwrap();
    assert_eq!((none.status, none.next_offset), (GetStatus::NoMatchedMessage, 5));
    assert_eq!(TagFilter::parse("*").unwrap(), TagFilter::All);
    store.shutdown().unwrap();
}

/// A malformed subscription expression is refused, never turned into a filter
/// that matches none of the tags the writer meant (which would move a group's
/// offset past every message).
#[test]
fn a_malformed_tag_expression_is_refused_and_a_good_one_parses() {
    use message_store::FilterError;
    for all in ["", "  ", "*", " * "] {
        assert_eq!(TagFilter::parse(all).unwrap(), TagFilter::All, "{all:?}");
    }
    let tags = |t: &[&str]| TagFilter::Tags(t.iter().map(|s| s.to_string()).collect());
    assert_eq!(TagFilter::parse("a").unwrap(), tags(&["a"]));
    assert_eq!(TagFilter::parse(" a || b ||c ").unwrap(), tags(&["a", "b", "c"]));
    assert_eq!(TagFilter::parse("a || a").unwrap(), tags(&["a"]), "a tag once");
    assert_eq!("a||b".parse::<TagFilter>().unwrap(), tags(&["a", "b"]), "FromStr");
    for bad in ["a ||| b", "a | b", "|a", "a || *", "*a", "a||b||*"] {
        let err = TagFilter::parse(bad).unwrap_err();
        assert!(matches!(err, FilterError::BadTag { .. }), "{bad:?}: {err:?}");
        assert!(err.to_string().contains(bad), "the error names the expression: {err}");
    }
    for empty in ["a ||", "|| a", "a || || b", "||"] {
        assert!(matches!(TagFilter::parse(empty), Err(FilterError::EmptyTag { .. })), "{empty:?}");
    }
    let err: StoreError = TagFilter::parse("a ||| b").unwrap_err().into();
    assert!(matches!(err, StoreError::Filter(FilterError::BadTag { bad: '|', .. })), "{err:?}");
}

#[test]
fn refused_messages_append_nothing_and_use_no_offset() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 2).unwrap();
    let end = store.log().max_offset();
    let refusals = [
        store.put_message(&Message::new("unknown", 0, &b"x"[..])).unwrap_err(),
        store.put_message(&Message::new("t", 2, &b"x"[..])).unwrap_err(),
        store.put_message(&Message::new("bad/topic", 0, &b"x"[..])).unwrap_err(),
        store.put_message(&Message::new("t", 0, vec![0u8; 4000])).unwrap_err(),
        store.put_message(&Message::new("t", 0, &b"x"[..]).with_property("p", "v".repeat(600))).unwrap_err(),
        store.put_messages(&[]).unwrap_err(),
        store.put_messages(&[Message::new("t", 0, &b"x"[..]), Message::new("t", 1, &b"x"[..])]).unwrap_err(),
    ];
    assert!(matches!(refusals[0], StoreError::UnknownTopic { .. }));
    assert!(matches!(refusals[1], StoreError::UnknownQueue { .. }));
    assert!(matches!(refusals[2], StoreError::Message(MessageError::Topic(_))));
    assert!(matches!(refusals[3], StoreError::Message(MessageError::BodyTooLarge { .. })));
    assert!(matches!(refusals[4], StoreError::Message(MessageError::PropertiesTooLarge { .. })));
    assert!(matches!(refusals[5], StoreError::BadBatch { .. }));
    assert!(matches!(refusals[6], StoreError::BadBatch { .. }));
    assert_eq!(store.log().max_offset(), end, "nothing appended");
    assert_eq!(store.put_message(&Message::new("t", 0, &b"ok"[..])).unwrap().queue_offset, 0);
    store.shutdown().unwrap();
}

#[test]
fn auto_created_topics_get_the_default_queue_count() {
    let sim = SimStorage::new();
    let store = open(&sim, {
        let mut config = config(FlushDiskType::AsyncFlush);
        config.auto_create_topics = true;
        config
    });
    store.put_message(&Message::new("fresh", 7, &b"x"[..])).unwrap();
    assert_eq!(store.topics(), vec![("fresh".to_string(), 8)]);
    assert!(matches!(store.put_message(&Message::new("fresh", 8, &b"x"[..])), Err(StoreError::UnknownQueue { .. })));
    store.shutdown().unwrap();
}

#[test]
fn a_batch_takes_consecutive_offsets_in_one_append() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, &b"first"[..])).unwrap().durability.wait().unwrap();
    let batch: Vec<Message> = (0..5u8).map(|i| Message::new("t", 0, vec![i; 3]).with_key(format!("k{i}"))).collect();
    let put = store.put_messages(&batch).unwrap();
    put.durability.wait().unwrap();
    assert_eq!(put.first_queue_offset, 1);
    assert_eq!(put.log_offsets.len(), 5);
    assert!(store.wait_for("t", 0, 5, WAIT).unwrap().arrived());
    let got = store.get_messages(&GetRequest::new("t", 0, 1).max_count(10).max_bytes(u64::MAX)).unwrap();
    assert_eq!(got.messages.iter().map(|m| m.log_offset).collect::<Vec<_>>(), put.log_offsets);
    assert_eq!(got.messages[2].keys, vec!["k2".to_string()]);
    store.shutdown().unwrap();
}

#[test]
fn concurrent_producers_on_one_queue_get_offsets_in_log_order() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    let threads: Vec<_> = (0..4u8)
        .map(|p| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..50u8 {
                    let put = store.put_message(&Message::new("t", 0, vec![p, i])).unwrap();
                    put.durability.wait().unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert!(store.wait_for("t", 0, 199, WAIT).unwrap().arrived());
    let got = store.get_messages(&GetRequest::new("t", 0, 0).max_count(200).max_bytes(u64::MAX)).unwrap();
    assert_eq!(got.messages.len(), 200);
    for (k, pair) in got.messages.windows(2).enumerate() {
        assert_eq!(pair[0].queue_offset, k as u64);
        assert!(pair[0].log_offset < pair[1].log_offset, "queue order is log order");
    }
    store.shutdown().unwrap();
}

#[test]
fn dispatch_under_the_durable_limit_waits_for_the_flush_and_is_woken_by_it() {
    let sim = SimStorage::new();
    let mut config = config(FlushDiskType::AsyncFlush);
    config.dispatch_limit = Some(DispatchLimit::Durable);
    config.log.flush.flush_interval_commit_log_ms = 3_600_000; // no periodic flush in this test
    let store = open(&sim, config);
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, &b"not durable yet"[..])).unwrap();
    store.dispatch_now().unwrap();
    assert_eq!(store.queue_range("t", 0).unwrap(), 0..0, "nothing dispatched before the flush");
    assert!(!store.wait_for("t", 0, 0, Duration::from_millis(50)).unwrap().arrived());
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.wait_for("t", 0, 0, WAIT).unwrap().arrived())
    };
    std::thread::sleep(Duration::from_millis(20));
    store.log().flush_all().unwrap();
    assert!(waiter.join().unwrap(), "the flush woke dispatch, and dispatch the waiter");
    store.shutdown().unwrap();
}

#[test]
fn under_async_flush_a_message_someone_waits_for_is_readable_when_its_put_returns() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 4).unwrap();
    // With no one waiting, dispatch indexes (beside the producers).
    for i in 0..100u32 {
        store.put_message(&Message::new("t", i % 4, format!("m{i}").into_bytes()).with_tags("a")).unwrap();
    }
    store.dispatch_now().unwrap();
    assert_eq!(store.stats().entries_indexed_on_put, 0, "no one waited");
    // A consumer waiting for each queue's next message (a future, polled
    // once: registered), then the puts: each indexes its own message and
    // wakes the consumer; the message is readable when the put returns.
    let mut cx = Context::from_waker(Waker::noop());
    for round in 0..50u64 {
        for queue in 0..4u32 {
            let offset = 25 + round;
            let mut arrival = store.arrival("t", queue, offset).unwrap();
            assert!(std::pin::Pin::new(&mut arrival).poll(&mut cx).is_pending());
            let tags = if round % 2 == 0 { "a" } else { "b" };
            let put =
                store.put_message(&Message::new("t", queue, format!("w{round}").into_bytes()).with_tags(tags)).unwrap();
            assert_eq!(put.queue_offset, offset);
            let polled = std::pin::Pin::new(&mut arrival).poll(&mut cx);
            assert!(
                matches!(polled, Poll::Ready(Waited::Arrived)),
                "round {round} queue {queue}: the waiter is woken by the put: {polled:?} {:?} range {:?}",
                store.stats().entries_indexed_on_put,
                store.queue_range("t", queue)
            );
            let got =
                store.get_messages(&GetRequest::new("t", queue, offset).max_count(1).max_bytes(u64::MAX)).unwrap();
            assert_eq!(got.messages.len(), 1, "not readable when its put returned: {:?}", got.status);
            assert_eq!(got.messages[0].body, format!("w{round}").into_bytes());
        }
    }
    assert!(store.stats().entries_indexed_on_put > 0, "{:?}", store.stats());
    // Dispatch passes every record and finds the entries the puts made: the
    // same entries (a different one would stop it with an error).
    store.dispatch_now().unwrap();
    let stats = store.stats();
    assert_eq!((stats.dispatch_error.clone(), stats.dispatch_point), (None, stats.log_max_offset));
    let filtered = store
        .get_messages(
            &GetRequest::new("t", 0, 0).max_count(200).max_bytes(u64::MAX).filter(TagFilter::parse("a").unwrap()),
        )
        .unwrap();
    assert_eq!(filtered.messages.len(), 50, "tags hashed on the put path as dispatch hashes them");
    store.shutdown().unwrap();
    // Reopened: the same queues, from the log.
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    assert_eq!(store.queue_range("t", 1).unwrap(), 0..75);
    store.shutdown().unwrap();
}

#[test]
fn under_sync_flush_or_the_durable_limit_puts_index_nothing_themselves() {
    let sim = SimStorage::new();
    let mut durable = config(FlushDiskType::AsyncFlush);
    durable.dispatch_limit = Some(DispatchLimit::Durable);
    for config in [config(FlushDiskType::SyncFlush), durable] {
        let store = open(&sim, config);
        store.create_topic("t", 1).unwrap_or(());
        let mut arrival = store.arrival("t", 0, store.queue_range("t", 0).unwrap().end).unwrap();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::future::Future::poll(std::pin::Pin::new(&mut arrival), &mut cx).is_pending());
        store.put_message(&Message::new("t", 0, &b"x"[..])).unwrap().durability.wait().unwrap();
        assert_eq!(store.stats().entries_indexed_on_put, 0, "an entry a crash can take back would be readable");
        store.shutdown().unwrap();
    }
}

#[test]
fn written_dispatch_under_sync_flush_is_refused() {
    let mut config = config(FlushDiskType::SyncFlush);
    config.dispatch_limit = Some(DispatchLimit::Written);
    let sim = SimStorage::new();
    let storage: Arc<dyn commitlog::Storage> = Arc::new(sim);
    let err = message_store::MessageStore::open_with_storage(common::ROOT, config, storage).unwrap_err();
    assert!(matches!(err, StoreError::InvalidConfig { .. }), "{err}");
}

#[test]
fn long_polls_wake_on_arrival_and_time_out_otherwise() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 2).unwrap();
    let started = Instant::now();
    assert!(!store.wait_for("t", 0, 0, Duration::from_millis(100)).unwrap().arrived(), "nothing came");
    assert!(started.elapsed() >= Duration::from_millis(100));
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            (store.wait_for("t", 1, 0, WAIT).unwrap().arrived(), started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    store.put_message(&Message::new("t", 1, &b"hello"[..])).unwrap();
    let (arrived, waited) = waiter.join().unwrap();
    assert!(arrived);
    assert!(waited < Duration::from_secs(5), "woken by the arrival, not the timeout ({waited:?})");
    // The future: ready at once when a message is there; woken later otherwise.
    assert!(block_on(store.arrival("t", 1, 0).unwrap()).arrived());
    let future = store.arrival("t", 0, 0).unwrap();
    let putter = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store.put_message(&Message::new("t", 0, &b"later"[..])).unwrap();
        })
    };
    assert!(block_on(future).arrived());
    putter.join().unwrap();
    // Shutdown releases waiters.
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.wait_for("t", 0, 5, WAIT).unwrap().arrived())
    };
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    store.shutdown().unwrap();
    assert!(!waiter.join().unwrap());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn one_wait_covers_many_queues_and_says_which_have_messages() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 4).unwrap();
    let watches = [("t", 0, 0), ("t", 1, 0), ("t", 2, 0), ("t", 3, 0)];
    let started = Instant::now();
    assert!(store.wait_for_any(&watches, Duration::from_millis(100)).unwrap().is_empty(), "nothing came");
    assert!(started.elapsed() >= Duration::from_millis(100));
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            (store.wait_for_any(&watches, WAIT).unwrap(), started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    store.put_message(&Message::new("t", 2, &b"hello"[..])).unwrap();
    let (ready, waited) = waiter.join().unwrap();
    assert_eq!(ready, vec![2]);
    assert!(waited < Duration::from_secs(5), "woken by the arrival, not the timeout ({waited:?})");
    // Ready at once for every watch below its queue's end; a watch at the end
    // of a queue with messages still waits.
    store.put_message(&Message::new("t", 0, &b"hello"[..])).unwrap();
    assert!(store.wait_for("t", 0, 0, WAIT).unwrap().arrived());
    assert_eq!(store.wait_for_any(&[("t", 2, 1), ("t", 0, 0), ("t", 2, 0)], WAIT).unwrap(), vec![1, 2]);
    assert!(store.wait_for_any(&[("t", 2, 1), ("t", 0, 1)], Duration::from_millis(20)).unwrap().is_empty());
    assert!(store.wait_for_any(&[], WAIT).unwrap().is_empty(), "no watch: at once");
    assert!(matches!(store.wait_for_any(&[("t", 9, 0)], WAIT), Err(StoreError::UnknownQueue { .. })));
    // The future, woken by a put to the last of its queues.
    let future = store.arrivals(&[("t", 1, 0), ("t", 3, 0)]).unwrap();
    let putter = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store.put_message(&Message::new("t", 3, &b"later"[..])).unwrap();
        })
    };
    assert_eq!(block_on(future), vec![1]);
    putter.join().unwrap();
    // Shutdown releases the waiter, with nothing ready.
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.wait_for_any(&[("t", 1, 0), ("t", 2, 5)], WAIT).unwrap())
    };
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    store.shutdown().unwrap();
    assert!(waiter.join().unwrap().is_empty());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn consumer_offsets_are_durable_and_never_beyond_the_queue() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    for _ in 0..3 {
        store.put_message(&Message::new("t", 1, &b"x"[..])).unwrap().durability.wait().unwrap();
    }
    assert!(store.wait_for("t", 1, 2, WAIT).unwrap().arrived());
    store.commit_offset("g", "t", 1, 2).unwrap();
    store.commit_offset("g", "t", 1, 3).unwrap();
    assert!(matches!(store.commit_offset("g", "t", 1, 4), Err(StoreError::OffsetBeyondQueue { max: 3, .. })));
    assert!(matches!(store.commit_offset("bad group", "t", 1, 0), Err(StoreError::Name(_))));
    assert!(matches!(store.commit_offset("g", "t", 5, 0), Err(StoreError::UnknownQueue { .. })));
    assert_eq!(store.committed_offset("g", "t", 1).unwrap(), Some(3));
    // A power cut right after the commit returned: it survives.
    let image = sim.snapshot().crash_image(|_| false);
    store.shutdown().unwrap();
    let reopened = open(&image, config(FlushDiskType::SyncFlush));
    assert_eq!(reopened.committed_offset("g", "t", 1).unwrap(), Some(3));
    assert_eq!(reopened.committed_offset("g", "t", 0).unwrap(), None);
    reopened.shutdown().unwrap();
}

#[test]
fn offsets_by_store_time_pick_the_bounds() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 1).unwrap();
    let mut times = Vec::new();
    for i in 0..6u8 {
        times.push(store.put_message(&Message::new("t", 0, vec![i])).unwrap().store_timestamp_ms);
        std::thread::sleep(Duration::from_millis(3));
    }
    assert!(store.wait_for("t", 0, 5, WAIT).unwrap().arrived());
    let lower = |ts| store.offset_by_time("t", 0, ts, TimeBound::Lower).unwrap();
    let upper = |ts| store.offset_by_time("t", 0, ts, TimeBound::Upper).unwrap();
    assert_eq!(lower(0), 0);
    assert_eq!(lower(u64::MAX), 6, "after every message: the end");
    assert_eq!(upper(u64::MAX), 5);
    for (k, &t) in times.iter().enumerate() {
        let first_at = times.iter().position(|&x| x >= t).unwrap() as u64;
        let last_at = times.iter().rposition(|&x| x <= t).unwrap() as u64;
        assert_eq!(lower(t), first_at, "message {k}");
        assert_eq!(upper(t), last_at, "message {k}");
    }
    store.shutdown().unwrap();
}

#[test]
fn many_queues_cost_no_file_each_and_idle_ones_leave_memory() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(FlushDiskType::AsyncFlush);
    let store = message_store::MessageStore::open(dir.path(), config.clone()).unwrap();
    store.create_topic("wide", 1000).unwrap();
    for round in 0..3u8 {
        for queue in 0..1000u32 {
            store.put_message(&Message::new("wide", queue, vec![round; 8])).unwrap();
        }
    }
    for queue in 0..1000u32 {
        assert!(store.wait_for("wide", queue, 2, WAIT).unwrap().arrived());
        let got = store.get_messages(&GetRequest::new("wide", queue, 0).max_count(10).max_bytes(u64::MAX)).unwrap();
        let bodies: Vec<Vec<u8>> = got.messages.iter().map(|m| m.body.to_vec()).collect();
        assert_eq!(bodies, vec![vec![0u8; 8], vec![1; 8], vec![2; 8]], "queue {queue}");
    }
    let files = |dir: &std::path::Path| std::fs::read_dir(dir).map_or(0, |d| d.count());
    assert!(
        files(&dir.path().join("queueindex")) <= 2 + 3000 * 30 / (64 << 10),
        "a run per log segment, no file per queue"
    );
    assert!(!dir.path().join("consumequeue").exists());
    // Idle queues (nothing put past the index, no waiter) leave memory at the next thorough flush.
    let deadline = std::time::Instant::now() + WAIT;
    while store.stats().queues_in_use > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(store.stats().queues_in_use, 0, "{:?}", store.stats());
    assert_eq!(store.stats().indexed_queues, 1000);
    // A queue dropped from memory goes on from the index's end.
    assert_eq!(store.put_message(&Message::new("wide", 7, vec![3; 8])).unwrap().queue_offset, 3);
    store.shutdown().unwrap();
    let reopened = message_store::MessageStore::open(dir.path(), config).unwrap();
    assert_eq!(reopened.open_report().redispatched, 0, "sealed to the end at shutdown");
    for queue in (0..1000u32).step_by(7) {
        assert_eq!(reopened.queue_range("wide", queue).unwrap(), 0..if queue == 7 { 4 } else { 3 });
    }
    reopened.shutdown().unwrap();
}

#[test]
fn the_files_of_a_store_read_back_as_its_queues_without_opening_it() {
    use message_store::inspect;
    let dir = tempfile::tempdir().unwrap();
    let store = message_store::MessageStore::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    store.create_topic("t", 2).unwrap();
    for i in 0..6u32 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        let put = store.put_message(&Message::new("t", 1, format!("m{i}").into_bytes()).with_tags(tag)).unwrap();
        put.durability.wait().unwrap();
    }
    store.shutdown().unwrap();
    let root = dir.path();
    let all = inspect::read_queue(root, "t", 1, 0, 100, &TagFilter::All).unwrap();
    let bodies: Vec<&[u8]> = all.messages.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [&b"m0"[..], b"m1", b"m2", b"m3", b"m4", b"m5"]);
    assert_eq!((all.next_offset, all.skipped_to), (6, None));
    let odd = inspect::read_queue(root, "t", 1, 2, 100, &TagFilter::parse("odd").unwrap()).unwrap();
    let offsets: Vec<u64> = odd.messages.iter().map(|m| m.queue_offset).collect();
    assert_eq!((offsets, odd.next_offset), (vec![3, 5], 6), "filtered ones are passed over");
    let two = inspect::read_queue(root, "t", 1, 0, 2, &TagFilter::All).unwrap();
    assert_eq!((two.messages.len(), two.next_offset), (2, 2));
    assert!(inspect::read_queue(root, "t", 0, 0, 100, &TagFilter::All).unwrap().messages.is_empty());

    // A damaged run is not trusted: the log is read instead, and the check says so.
    let runs: Vec<_> = std::fs::read_dir(root.join("queueindex"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().len() == 20)
        .collect();
    assert_eq!(runs.len(), 1, "the shutdown sealed one run");
    let mut bytes = std::fs::read(&runs[0]).unwrap();
    let last = bytes.len() - 30;
    bytes[last] ^= 0x55;
    std::fs::write(&runs[0], &bytes).unwrap();
    let read = inspect::read_queue(root, "t", 1, 0, 100, &TagFilter::All).unwrap();
    assert_eq!((read.messages.len(), read.next_offset, read.damaged), (6, 6, None));
    let problems = inspect::check(root).unwrap().problems;
    assert!(problems.iter().any(|p| p.kind == inspect::Derived::QueueIndex && p.path == runs[0]), "{problems:?}");
}

#[test]
fn reading_the_files_skips_what_the_log_deleted_and_ends_quietly_at_an_entry_past_the_recorded_end() {
    use message_store::inspect;
    let dir = tempfile::tempdir().unwrap();
    let store = message_store::MessageStore::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    store.create_topic("t", 1).unwrap();
    let body = vec![3u8; 2000];
    let mut puts = Vec::new();
    for _ in 0..100u32 {
        let put = store.put_message(&Message::new("t", 0, body.clone())).unwrap();
        put.durability.wait().unwrap();
        puts.push(put.log_offset);
    }
    assert!(store.wait_for("t", 0, 99, WAIT).unwrap().arrived());
    // The log's cleaning deletes its first segments (once the queue index
    // sealed their entries: the log keeps them until then).
    common::wait_sealed_past(&store, puts[60]);
    assert!(store.log().delete_segments_before(puts[60], usize::MAX).unwrap() > 0);
    let front = store.log().min_offset();
    let first_live = puts.iter().position(|&o| o >= front).unwrap() as u64;
    store.shutdown().unwrap();
    let root = dir.path();
    let read = inspect::read_queue(root, "t", 0, 0, 1000, &TagFilter::All).unwrap();
    assert_eq!(read.skipped_to, Some(first_live), "on from the first live message");
    assert_eq!(read.messages.first().map(|m| m.queue_offset), Some(first_live));
    assert_eq!((read.next_offset, read.messages.len() as u64, read.damaged), (100, 100 - first_live, None));
}

#[test]
fn every_queue_expires_with_the_log_and_its_runs_go_with_their_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(FlushDiskType::AsyncFlush);
    let store = message_store::MessageStore::open(dir.path(), config.clone()).unwrap();
    store.create_topic("t", 8).unwrap();
    for run in 0..22u32 {
        for queue in 0..8u32 {
            for k in 0..100u32 {
                store.put_message(&Message::new("t", queue, (run * 100 + k).to_le_bytes().to_vec())).unwrap();
            }
        }
    }
    for queue in 0..8u32 {
        assert!(store.wait_for("t", queue, 2199, WAIT).unwrap().arrived(), "{:?}", store.stats());
    }
    store.log().flush_all().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while store.stats().index_runs < 10 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(store.stats().index_runs >= 10, "a run per log segment: {:?}", store.stats());
    // The log's cleaning deletes its older 60 %; the next thorough flush expires the index.
    let cut = store.log().max_offset() / 10 * 6;
    common::wait_sealed_past(&store, cut); // the log keeps the segments of unsealed entries
    assert!(store.log().delete_segments_before(cut, usize::MAX).unwrap() > 0);
    let front = store.log().min_offset();
    for queue in 0..8u32 {
        let deadline = std::time::Instant::now() + WAIT;
        while store.queue_range("t", queue).unwrap().start < 1000 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let std::ops::Range { start: min, end: max } = store.queue_range("t", queue).unwrap();
        assert!(min > 1000 && max == 2200, "queue {queue}: [{min}, {max}) after the log's front moved to {front}");
        let got = store.get_messages(&GetRequest::new("t", queue, 0).max_count(1).max_bytes(u64::MAX)).unwrap();
        assert_eq!((got.status, got.next_offset), (GetStatus::OffsetTooSmall, min), "queue {queue}");
        let first = store.get_messages(&GetRequest::new("t", queue, min).max_count(1).max_bytes(u64::MAX)).unwrap();
        assert_eq!(first.messages[0].queue_offset, min);
    }
    store.shutdown().unwrap();
    // Every run below the log's front is deleted, none above it.
    let mut starts: Vec<u64> = std::fs::read_dir(dir.path().join("queueindex"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().unwrap().parse::<u64>().ok())
        .collect();
    starts.sort_unstable();
    assert!(starts.len() >= 2, "{starts:?}");
    let segment = 64u64 << 10;
    assert!(starts[0] <= front && starts[1] > front - front % segment, "runs {starts:?}, front {front}");
    let view = message_store::inspect::queue(dir.path(), "t", 3).unwrap();
    assert!(view.min_offset > 1000, "{view:?}");
}

#[test]
fn a_wait_without_a_deadline_returns_on_arrival() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.wait_for("t", 0, 0, Duration::MAX))
    };
    store.put_message(&Message::new("t", 0, &b"x"[..])).unwrap().durability.wait().unwrap();
    assert!(waiter.join().unwrap().unwrap().arrived());
    store.shutdown().unwrap();
}

#[test]
fn a_waiter_is_woken_by_a_message_whose_dispatch_was_retried() {
    let sim = SimStorage::new();
    // One key a file: every keyed message rolls the index, which needs a new file.
    let config = {
        let mut config = config(FlushDiskType::SyncFlush);
        config.index = message_store::IndexConfig::new(4, 1);
        config
    };
    let store = open(&sim, config);
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, &b"first"[..]).with_key("a")).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("t", 0, 0, WAIT).unwrap().arrived());
    // A full disk: no new file fits (the log and the queue have room in theirs).
    let used = {
        use store_io::Storage;
        sim.set_disk_size(Some(u64::MAX));
        let space = sim.disk_space(std::path::Path::new(common::ROOT)).unwrap().unwrap();
        space.total - space.free
    };
    sim.set_disk_size(Some(used));
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.wait_for("t", 0, 1, WAIT))
    };
    store.put_message(&Message::new("t", 0, &b"second"[..]).with_key("b")).unwrap().durability.wait().unwrap();
    // Dispatch wrote the entry, then failed to roll the index: it retries.
    let deadline = std::time::Instant::now() + WAIT;
    while store.dispatch_error().is_none() {
        assert!(std::time::Instant::now() < deadline, "dispatch never failed: {:?}", store.stats());
        std::thread::yield_now();
    }
    sim.set_disk_size(None);
    assert!(waiter.join().unwrap().unwrap().arrived(), "the waiter hears of the message once its dispatch succeeds");
    assert_eq!(store.query_by_key("t", "b", 0, u64::MAX, 4).unwrap().len(), 1);
    store.shutdown().unwrap();
}

#[test]
fn a_deleted_topic_stays_deleted_and_one_made_again_under_its_name_starts_empty() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("old", 2).unwrap();
    store.create_topic("kept", 1).unwrap();
    for i in 0..10u32 {
        store.put_message(&Message::new("old", i % 2, &b"gone"[..])).unwrap().durability.wait().unwrap();
    }
    store.put_message(&Message::new("kept", 0, &b"kept"[..])).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("old", 1, 4, WAIT).unwrap().arrived());
    store.commit_offset("g", "old", 0, 3).unwrap();
    store.seal_index().unwrap(); // some of its entries in a sealed run, the rest in memory
    store.put_message(&Message::new("old", 0, &b"gone too"[..])).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("old", 0, 5, WAIT).unwrap().arrived());

    // A consumer waiting on it returns when it goes.
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || store.wait_for("old", 1, 5, WAIT))
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(store.delete_topic("old").unwrap());
    let waited = waiter.join().unwrap();
    assert!(matches!(waited, Ok(Waited::Closed)), "no message arrived, the topic is gone: {waited:?}");
    assert!(!store.delete_topic("old").unwrap(), "deleted once");
    assert!(
        matches!(store.queue_range("old", 0), Err(StoreError::UnknownTopic { .. })),
        "{:?}",
        store.queue_range("old", 0)
    );
    assert_eq!(store.committed_offset("g", "old", 0).unwrap(), None);

    store.create_topic("old", 2).unwrap();
    let check = |store: &message_store::MessageStore| {
        for queue in 0..2 {
            assert_eq!(store.queue_range("old", queue).unwrap(), 0..0, "queue {queue} starts empty");
            assert!(read_queue(store, "old", queue).is_empty());
        }
        assert_eq!(read_queue(store, "kept", 0), vec![(0, b"kept".to_vec())]);
    };
    check(&store);
    let put = store.put_message(&Message::new("old", 0, &b"new"[..])).unwrap();
    assert_eq!(put.queue_offset, 0);
    put.durability.wait().unwrap();
    assert!(store.wait_for("old", 0, 0, WAIT).unwrap().arrived());
    store.shutdown().unwrap();

    // An open replays the log, old messages of the name included: they stay out.
    let reopened = open(&sim, config(FlushDiskType::SyncFlush));
    assert_eq!(read_queue(&reopened, "old", 0), vec![(0, b"new".to_vec())]);
    assert!(read_queue(&reopened, "old", 1).is_empty());
    assert_eq!(reopened.put_message(&Message::new("old", 1, &b"next"[..])).unwrap().queue_offset, 0);
    reopened.shutdown().unwrap();
    // And so does a power cut that loses the queue index whole.
    let image = sim.snapshot().crash_image(|_| true);
    let index_dir = std::path::Path::new(common::ROOT).join("queueindex");
    for file in image.list(&index_dir).unwrap() {
        image.remove(&index_dir.join(&file.name)).unwrap();
    }
    let rebuilt = open(&image, config(FlushDiskType::SyncFlush));
    assert_eq!(read_queue(&rebuilt, "old", 0), vec![(0, b"new".to_vec())]);
    assert_eq!(read_queue(&rebuilt, "old", 1).len(), 1);
    rebuilt.shutdown().unwrap();
}

#[test]
fn puts_racing_a_topic_deleted_and_made_again_never_reach_the_new_topic_with_old_offsets() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", 1).unwrap();
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let puts = Arc::new(AtomicU64::new(0));
    let producers: Vec<_> = (0..3)
        .map(|_| {
            let (store, stop, puts) = (store.clone(), Arc::clone(&stop), Arc::clone(&puts));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match store.put_message(&Message::new("t", 0, &b"m"[..])) {
                        Ok(_) => _ = puts.fetch_add(1, Ordering::Relaxed),
                        Err(StoreError::UnknownTopic { .. }) => {}
                        Err(err) => panic!("put: {err}"),
                    }
                }
            })
        })
        .collect();
    for _ in 0..300 {
        // Some puts between each deletion and the next (or a moment's wait).
        let (seen, since) = (puts.load(Ordering::Relaxed), Instant::now());
        while puts.load(Ordering::Relaxed) < seen + 3 && since.elapsed() < Duration::from_millis(20) {
            std::thread::yield_now();
        }
        assert!(store.delete_topic("t").unwrap());
        store.create_topic("t", 1).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    producers.into_iter().for_each(|p| p.join().unwrap());
    assert!(puts.load(Ordering::Relaxed) > 0);
    // The topic made last is dense from 0, and dispatch follows it.
    let last = store.put_message(&Message::new("t", 0, &b"last"[..])).unwrap();
    assert!(store.wait_for("t", 0, last.queue_offset, WAIT).unwrap().arrived(), "{:?}", store.stats().dispatch_error);
    assert_eq!(store.stats().dispatch_error, None);
    let read = read_queue(&store, "t", 0);
    assert_eq!(read.len() as u64, last.queue_offset + 1);
    assert!(read.iter().enumerate().all(|(i, (offset, _))| *offset == i as u64));
    store.shutdown().unwrap();
    let reopened = open(&sim, config(FlushDiskType::AsyncFlush));
    assert_eq!(reopened.queue_range("t", 0).unwrap(), 0..last.queue_offset + 1);
    reopened.shutdown().unwrap();
}
