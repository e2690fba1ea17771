//! The store under an async runtime: thousands of tasks put and await their
//! durability while the members of a group, each a task, consume the topic
//! as streams; nothing blocks a runtime thread waiting for a message.

mod common;
#[path = "common/consumer.rs"]
mod consumer;

use std::collections::BTreeSet;
use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open};
use consumer::next;
use message_store::{ConsumerConfig, Message, StoredMessage, TagFilter};
use store_io::sim::SimStorage;

const TASKS: u32 = 2_000;
const MEMBERS: usize = 4;

#[test]
fn thousands_of_tasks_put_and_await_durability_while_a_groups_streams_consume_them() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 8).unwrap();
    // Two runtime threads: a blocking wait in a task would stall half the
    // runtime, and a wait for a message that blocked both would hang it.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    let received: Vec<StoredMessage> = runtime.block_on(async {
        let (done_tx, _) = tokio::sync::broadcast::channel::<()>(1);
        // Every member joins before any reads: the queues are shared once
        // (a member joining later takes queues over from their committed
        // offsets, and what was handed out of them uncommitted comes again).
        let consumers: Vec<_> = (0..MEMBERS)
            .map(|_| {
                let mut consumer = store.consumer("g", ConsumerConfig::default()).unwrap();
                consumer.subscribe("t", TagFilter::All).unwrap();
                consumer
            })
            .collect();
        let handed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut members = Vec::new();
        for mut consumer in consumers {
            let mut done = done_tx.subscribe();
            let handed = std::sync::Arc::clone(&handed);
            members.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    tokio::select! {
                        item = next(&mut consumer) => {
                            got.push(item.expect("the topic lives").unwrap());
                            handed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        _ = done.recv() => break,
                    }
                }
                consumer.commit().unwrap();
                // Kept until every member has committed: one leaving moves
                // queues, and what the others handed out of those and had
                // not committed would come again.
                (got, consumer)
            }));
        }
        let puts: Vec<_> = (0..TASKS)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let put = store.put_message(&Message::new("t", i % 8, format!("m{i}"))).unwrap();
                    put.durability.await.unwrap(); // awaited, not blocked on
                })
            })
            .collect();
        for put in puts {
            tokio::time::timeout(Duration::from_secs(60), put).await.expect("every put durable in time").unwrap();
        }
        // Every message durable: wait until the members have handed out as
        // many as were put between them, then stop them.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while handed.load(std::sync::atomic::Ordering::SeqCst) < TASKS as usize {
            assert!(tokio::time::Instant::now() < deadline, "the streams did not hand out every message");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = done_tx.send(());
        let mut all = Vec::new();
        let mut stopped = Vec::new();
        for member in members {
            let (got, consumer) = member.await.unwrap();
            all.extend(got);
            stopped.push(consumer);
        }
        drop(stopped);
        all
    });
    let bodies: BTreeSet<String> = received.iter().map(|m| String::from_utf8(m.body.to_vec()).unwrap()).collect();
    let expected: BTreeSet<String> = (0..TASKS).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, expected, "every message handed out to one of the group's streams");
    let mut seen = std::collections::BTreeMap::new();
    for m in &received {
        *seen.entry((m.queue_id, m.queue_offset)).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert_eq!(received.len(), TASKS as usize, "none twice: no member left, nothing moved: {twice:?}");
    for q in 0..8 {
        assert_eq!(store.committed_offset("g", "t", q).unwrap(), Some(u64::from(TASKS / 8)), "queue {q}");
    }
    store.shutdown().unwrap();
}
