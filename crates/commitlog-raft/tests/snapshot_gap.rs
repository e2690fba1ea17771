//! A follower that installs a snapshot far ahead of its log: its old entries stay
//! in the log's last segment below the snapshot, new ones follow far above them.
//! Opening must cost the same whatever the gap, and the index must never hold
//! entries for the indexes in between.

mod kv;

use commitlog_raft::{RaftLogStore, QUEUE_INDEX_DIR, RAFT_DIR};
use kv::TypeConfig;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader};

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    let request = kv::Request { key: format!("k{index}"), value: "v".repeat(100) };
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(request) }
}

/// Files and bytes of the index directory.
fn index_files(dir: &std::path::Path) -> (usize, u64) {
    let index = dir.join(RAFT_DIR).join(QUEUE_INDEX_DIR);
    std::fs::read_dir(index)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .fold((0, 0), |(n, bytes), m| (n + 1, bytes + m.len()))
}

#[tokio::test]
async fn a_snapshot_a_billion_entries_ahead_costs_every_open_nothing_for_the_gap() {
    const GAP: u64 = 1_000_000_000;
    let dir = tempfile::tempdir().unwrap();
    let config = kv::small_config(64 << 10);
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
    store.blocking_append((1..=50).map(|i| entry(1, i)).collect::<Vec<_>>()).await.unwrap();
    // The snapshot's last entry is far past the log's: everything is purged, but
    // the log keeps its last segment, with entries 1..=50 in it.
    let snapshot = 50 + GAP;
    store.purge(log_id(2, snapshot)).await.unwrap();
    store.blocking_append((snapshot + 1..=snapshot + 20).map(|i| entry(2, i)).collect::<Vec<_>>()).await.unwrap();
    // A run of a few entries is a few hundred bytes, whatever the gap.
    let small = 4096;
    let after_appends = index_files(dir.path());
    assert!(after_appends.1 <= small, "the index materialised the gap: {after_appends:?}");
    store.shutdown().unwrap();
    drop(store);

    for round in 0..2 {
        let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
        let files = index_files(dir.path());
        assert!(files.0 <= 4 && files.1 <= small, "open {round} wrote the gap: {files:?}");
        assert_eq!(store.indexed().start, snapshot + 1, "open {round}");
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(2, snapshot)));
        let last = snapshot + 20 + round;
        assert_eq!(state.last_log_id.map(|id| id.index), Some(last), "open {round}");
        let entries = store.try_get_log_entries(0..u64::MAX).await.unwrap();
        let got: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, (snapshot + 1..=last).collect::<Vec<_>>(), "open {round}");
        if round == 0 {
            store.blocking_append(vec![entry(3, snapshot + 21)]).await.unwrap();
        }
        store.shutdown().unwrap();
    }
}
