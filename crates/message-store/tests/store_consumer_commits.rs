//! A consumer's commits are staged under the group's lock and synced after
//! it: a commit is not answered, and nothing is handed out past an offset,
//! before that offset is durable, whoever staged it and whether or not its
//! first sync failed.

mod common;
#[path = "common/consumer.rs"]
mod consumer;

use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open};
use consumer::{block_on, bodies, bodies_of, drain, member, put, store_with};
use futures_core::Stream;
use message_store::{Consumer, ConsumerConfig, MessageStore, StartFrom, StoreError};
use store_io::sim::SimStorage;

/// A store under sync flush (its messages durable once put) with topic `t`.
fn sync_store(queues: u32) -> (SimStorage, MessageStore) {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", queues).unwrap();
    (sim, store)
}

/// A commit whose sync failed, tried again with `commit`: the retry writes
/// the table into a new journal and returns Ok, and the offset then survives
/// a power loss.
fn a_commit_retried_after_a_failed_sync(commit: impl Fn(&mut Consumer) -> Result<(), StoreError>) {
    let (sim, store) = sync_store(1);
    put(&store, "t", 1, 0, 3);
    let mut consumer = member(&store, "g", ConsumerConfig::default());
    assert_eq!(bodies(&drain(&mut consumer)), bodies_of(0..3));
    sim.fail_all_syncs(true);
    let failed = commit(&mut consumer);
    sim.fail_all_syncs(false);
    assert!(failed.is_err(), "the commit's sync failed: {failed:?}");
    commit(&mut consumer).expect("the retry writes the table into a new journal");
    let image = sim.snapshot().crash_image(|_| false);
    let reopened = open(&image, config(FlushDiskType::SyncFlush));
    assert_eq!(
        reopened.committed_offset("g", "t", 0).unwrap(),
        Some(3),
        "the retried commit returned Ok, and a power loss right after lost it"
    );
}

#[test]
fn a_commit_retried_after_a_failed_sync_is_not_ok_before_it_is_durable() {
    a_commit_retried_after_a_failed_sync(Consumer::commit);
}

#[test]
fn a_commit_async_retried_after_a_failed_sync_is_not_ok_before_it_is_durable() {
    a_commit_retried_after_a_failed_sync(|consumer| block_on(consumer.commit_async()));
}

/// A member's start (`StartFrom::Latest`) is staged and its sync under way
/// (a slow disk) when the queue moves to another member: that member reads
/// the start from the table, and hands out nothing after it before it is
/// durable. A power loss right after it handed out messages (the log's pages
/// written back, the journal's not) keeps the start, so the messages handed
/// out and never committed come again rather than being skipped.
#[test]
fn a_member_hands_out_nothing_after_another_members_start_before_it_is_durable() {
    let (sim, store) = store_with(1); // async flush: puts wait for no sync
    put(&store, "t", 1, 0, 3);
    let latest = ConsumerConfig::default().start_from(StartFrom::Latest);
    let mut first = member(&store, "g", latest.clone());
    sim.set_sync_delay(Duration::from_secs(3));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(Pin::new(&mut first).poll_next(&mut cx).is_pending(), "the start (3) staged, its sync under way");
    drop(first); // leaves the group; its queue goes to the next member
    let mut second = member(&store, "g", latest.clone());
    put(&store, "t", 1, 3, 2);
    let handed = second.poll(Duration::from_secs(1)).unwrap();
    let image = sim.snapshot().crash_image_with(|path, _| !path.starts_with("/store/config/offsets"));
    assert_eq!(bodies(&handed), bodies_of(3..5), "the second member handed out m3 and m4");
    sim.set_sync_delay(Duration::ZERO);
    let reopened = open(&image, config(FlushDiskType::AsyncFlush));
    assert_eq!(common::read_queue(&reopened, "t", 0).len(), 5, "the log kept m0..m4");
    let committed = reopened.committed_offset("g", "t", 0).unwrap();
    let mut after = member(&reopened, "g", latest);
    let again = bodies(&drain(&mut after));
    assert_eq!(
        (committed, again),
        (Some(3), bodies_of(3..5)),
        "m3 and m4 were handed out (never committed) after a start that was not durable: after the power loss they are skipped"
    );
}

/// A member's own start (`StartFrom::Latest`) whose sync failed: the poll
/// fails, and the next one hands out the messages after that start only
/// once it is durable (a power loss then keeps it).
#[test]
fn a_member_hands_out_nothing_after_its_own_start_whose_sync_failed() {
    let (sim, store) = store_with(1); // async flush: puts wait for no sync
    put(&store, "t", 1, 0, 3);
    let latest = ConsumerConfig::default().start_from(StartFrom::Latest);
    let mut member = member(&store, "g", latest.clone());
    sim.fail_all_syncs(true);
    let failed = member.poll(Duration::from_millis(10));
    sim.fail_all_syncs(false);
    assert!(failed.is_err(), "the start's sync failed: {failed:?}");
    put(&store, "t", 1, 3, 2);
    let handed = member.poll(Duration::from_secs(1)).unwrap();
    assert_eq!(bodies(&handed), bodies_of(3..5));
    let image = sim.snapshot().crash_image_with(|path, _| !path.starts_with("/store/config/offsets"));
    let reopened = open(&image, config(FlushDiskType::AsyncFlush));
    assert_eq!(
        reopened.committed_offset("g", "t", 0).unwrap(),
        Some(3),
        "m3 and m4 were handed out after a start whose sync failed; a power loss took it back"
    );
}
