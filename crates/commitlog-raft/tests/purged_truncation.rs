//! A follower whose index holds only purged entries truncates its conflicting
//! suffix (openraft does so when a new leader's log diverges after the
//! follower's snapshot): the last log id is the purged one, never read from a
//! purged entry whose record reclaim deleted, and the store reopens whole.

mod kv;

use commitlog_raft::RaftLogStore;
use kv::TypeConfig;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader};

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    let request = kv::Request { key: format!("k{index}"), value: "v".repeat(200) };
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(request) }
}

#[tokio::test]
async fn truncating_everything_above_the_purged_id_leaves_the_purged_id_last_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let config = kv::small_config(32 << 10);
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
    store.blocking_append((1..=500).map(|i| entry(1, i)).collect::<Vec<_>>()).await.unwrap();
    store.purge(log_id(1, 400)).await.unwrap();
    // Reclaim deletes the log's segments below entry 401.
    let engine = store.engine();
    tokio::task::spawn_blocking(move || engine.reclaim()).await.unwrap().unwrap();
    store.truncate(log_id(1, 401)).await.unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 400)));
    assert_eq!(state.last_log_id, Some(log_id(1, 400)), "the purged id is the last");
    assert!(store.try_get_log_entries(401..u64::MAX).await.unwrap().is_empty());
    // A new leader's entries go on from there.
    store.blocking_append((401..=410).map(|i| entry(2, i)).collect::<Vec<_>>()).await.unwrap();
    store.shutdown().unwrap();
    drop(store);
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 410)));
    let got: Vec<LogId<u64>> =
        store.try_get_log_entries(0..u64::MAX).await.unwrap().into_iter().map(|e| e.log_id).collect();
    assert_eq!(got, (401..=410).map(|i| log_id(2, i)).collect::<Vec<_>>());
    store.shutdown().unwrap();
}

#[tokio::test]
async fn a_store_left_with_only_purged_entries_in_its_index_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let config = kv::small_config(32 << 10);
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
    store.blocking_append((1..=500).map(|i| entry(1, i)).collect::<Vec<_>>()).await.unwrap();
    store.purge(log_id(1, 400)).await.unwrap();
    store.truncate(log_id(1, 401)).await.unwrap();
    let engine = store.engine();
    tokio::task::spawn_blocking(move || engine.reclaim()).await.unwrap().unwrap();
    store.shutdown().unwrap();
    drop(store);
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, 400)), Some(log_id(1, 400))));
    store.shutdown().unwrap();
}
