//! The store under an async runtime: thousands of tasks put and await their
//! durability while the members of a group, each a task, consume the topic
//! as streams; nothing blocks a runtime thread waiting for a message or for
//! an offset commit's sync.

mod common;
#[path = "common/consumer.rs"]
mod consumer;

use std::collections::BTreeSet;
use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open};
use consumer::{member, next, put, store_with};
use futures_core::Stream;
use message_store::{ConsumerConfig, Message, StoredMessage};
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
        let consumers: Vec<_> = (0..MEMBERS).map(|_| member(&store, "g", ConsumerConfig::default())).collect();
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
                consumer.commit_async().await.unwrap();
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

/// Thousands of tasks on one runtime thread commit offsets: each commit's
/// sync is awaited, not run in the task, so they share a handful of syncs
/// (a commit that synced in the polling thread would cost one each, the
/// tasks taking turns on the one thread). Syncs take 20 ms here, so every
/// commit is staged long before the sync service could sync once per commit,
/// however the two threads are scheduled.
#[test]
fn thousands_of_offset_commits_awaited_on_one_thread_share_syncs() {
    const COMMITS: usize = 2_000;
    let (sim, store) = store_with(1);
    put(&store, "t", 1, 0, 1);
    sim.set_sync_delay(Duration::from_millis(20));
    let before = store.stats().consumer_offset_syncs;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    runtime.block_on(async {
        let commits: Vec<_> = (0..COMMITS)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.commit_offset_async(&format!("g{i}"), "t", 0, 1).await })
            })
            .collect();
        for commit in commits {
            tokio::time::timeout(Duration::from_secs(60), commit).await.expect("committed in time").unwrap().unwrap();
        }
    });
    let syncs = store.stats().consumer_offset_syncs - before;
    sim.set_sync_delay(Duration::ZERO);
    assert!(syncs <= COMMITS as u64 / 20, "{COMMITS} commits took {syncs} syncs");
    for i in [0, COMMITS / 2, COMMITS - 1] {
        assert_eq!(store.committed_offset(&format!("g{i}"), "t", 0).unwrap(), Some(1));
    }
    store.shutdown().unwrap();
}

/// A member's stream hands out nothing before the start it committed is
/// durable, and waits for that sync as a future: the first poll is pending
/// (the sync is the service's), and the waker it left is woken.
#[test]
fn a_streams_start_commit_is_awaited_not_synced_in_poll_next() {
    let (_sim, store) = store_with(1);
    put(&store, "t", 1, 0, 3);
    let mut consumer = member(&store, "g", ConsumerConfig::default());
    let woken = std::sync::Arc::new(Woken::default());
    let waker = std::task::Waker::from(std::sync::Arc::clone(&woken));
    let mut cx = std::task::Context::from_waker(&waker);
    let first = std::pin::Pin::new(&mut consumer).poll_next(&mut cx);
    assert!(first.is_pending(), "the start's sync is not run inside poll_next: {first:?}");
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(0), "the start is committed (not yet synced)");
    woken.wait();
    let std::task::Poll::Ready(Some(Ok(message))) = std::pin::Pin::new(&mut consumer).poll_next(&mut cx) else {
        panic!("the first message once the start is durable")
    };
    assert_eq!(&message.body[..], b"m0");
    drop(consumer);
    store.shutdown().unwrap();
}

/// A waker that counts its wakes, for a test to wait on.
#[derive(Default)]
struct Woken(parking_lot::Mutex<u32>, parking_lot::Condvar);

impl Woken {
    fn wait(&self) {
        let mut count = self.0.lock();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while *count == 0 {
            assert!(!self.1.wait_until(&mut count, deadline).timed_out(), "never woken");
        }
    }
}

impl std::task::Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        *self.0.lock() += 1;
        self.1.notify_all();
    }
}
