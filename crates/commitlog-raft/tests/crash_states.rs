//! The states a crash in the middle of a truncation or a purge can leave, and
//! what the store makes of them at the next open: always a contiguous log that
//! openraft accepts, never a hole.

mod kv;

use commitlog_raft::{RaftLogStore, RaftStoreConfig, LOG_DIR, SINGLE_GROUP};
use kv::TypeConfig;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader};
use test_support::copy_dir;

fn config() -> RaftStoreConfig {
    kv::small_config(64 << 10)
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    let request = kv::Request { key: format!("k{index}"), value: "v".repeat(300) };
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(request) }
}

/// Appends and waits for the durability callback.
async fn append(store: &mut RaftLogStore<TypeConfig>, entries: Vec<Entry<TypeConfig>>) {
    store.blocking_append(entries).await.unwrap();
}

async fn indexes(store: &mut RaftLogStore<TypeConfig>) -> Vec<(u64, u64)> {
    let entries = store.try_get_log_entries(0..u64::MAX).await.unwrap();
    entries.iter().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect()
}

#[tokio::test]
async fn a_log_cut_whose_index_was_not_cut_yet_reopens_as_the_cut_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config()).unwrap();
    append(&mut store, (1..=300).map(|i| entry(1, i)).collect()).await;
    let cut_at = store.entry_offset(200).unwrap();
    store.shutdown().unwrap();
    drop(store);
    // The crash point: the log cut (its own step is crash-safe), the index not.
    let log = commitlog::CommitLog::open(dir.path().join(LOG_DIR), config().log).unwrap();
    log.truncate_from(cut_at).unwrap();
    log.shutdown().unwrap();
    drop(log);

    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config()).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 199)));
    let got = indexes(&mut store).await;
    assert_eq!(got, (1..200).map(|i| (1, i)).collect::<Vec<_>>());
    // The new leader's entries take the freed indexes.
    append(&mut store, (200..=210).map(|i| entry(2, i)).collect()).await;
    assert_eq!(indexes(&mut store).await.last(), Some(&(2, 210)));
}

#[tokio::test]
async fn truncation_and_purge_survive_a_restart_and_purged_entries_stay_purged() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config()).unwrap();
    append(&mut store, (1..=500).map(|i| entry(1, i)).collect()).await;
    store.truncate(log_id(1, 401)).await.unwrap();
    append(&mut store, (401..=450).map(|i| entry(3, i)).collect()).await;
    // Purged up to 120: whole segments go; the rest of those entries stay on disk.
    store.purge(log_id(1, 120)).await.unwrap();
    let want: Vec<(u64, u64)> = (121..=400).map(|i| (1, i)).chain((401..=450).map(|i| (3, i))).collect();
    assert_eq!(indexes(&mut store).await, want);
    // The files as a killed process leaves them (no shutdown): the same state.
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), crashed.path());
    drop(store);
    let dir = crashed;
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config()).unwrap();
    assert!(!store.commit_log().recovery_report().clean_shutdown);
    let state = store.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, 120)), Some(log_id(3, 450))));
    assert_eq!(indexes(&mut store).await, want);
    // A purge beyond the last entry (an installed snapshot): appends go on after it.
    store.purge(log_id(3, 900)).await.unwrap();
    append(&mut store, (901..=905).map(|i| entry(4, i)).collect()).await;
    drop(store);
    let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config()).unwrap();
    assert_eq!(indexes(&mut store).await, (901..=905).map(|i| (4, i)).collect::<Vec<_>>());
    let state = store.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(3, 900)), Some(log_id(4, 905))));
}

#[tokio::test]
async fn a_purge_recorded_whose_reclaim_did_not_run_yet_reopens_as_the_purged_log() {
    // A second group's entry at the log's front keeps every segment until it
    // is dropped, so the maintenance thread's reclaim (which a purge wakes)
    // cannot run before the crash image is taken.
    const PIN: u64 = SINGLE_GROUP + 1;
    for purged in [400u64, 600] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = RaftLogStore::<TypeConfig>::open(dir.path(), config()).unwrap();
        let mut pin = store.engine().open_group(PIN).unwrap();
        append(&mut pin, vec![entry(1, 1)]).await;
        append(&mut store, (1..=500).map(|i| entry(1, i)).collect()).await;
        // The crash point: the purged id durable in the log, no reclaim yet
        // (the files as a killed process leaves them).
        store.purge(log_id(1, purged)).await.unwrap();
        let crashed = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), crashed.path());
        drop((store, pin));
        let front = crashed.path().join(LOG_DIR).join("commitlog").join(format!("{:020}", 0));
        assert!(front.exists(), "purged {purged}: the crash image holds the log's first segment");

        let mut store = RaftLogStore::<TypeConfig>::open(crashed.path(), config()).unwrap();
        // Reclaim deletes the segments of the purged entries the index still
        // names, once the pinning group is gone.
        let engine = store.engine();
        engine.drop_group(PIN).await.unwrap();
        let reclaimed = tokio::task::spawn_blocking(move || engine.reclaim()).await.unwrap().unwrap();
        assert!(reclaimed.segments_deleted > 0, "purged {purged}: {reclaimed:?}");
        assert!(!front.exists(), "purged {purged}: the log's first segment reclaimed");
        let state = store.get_log_state().await.unwrap();
        let last = purged.max(500);
        assert_eq!(state.last_purged_log_id, Some(log_id(1, purged)), "purged {purged}");
        assert_eq!(state.last_log_id, Some(log_id(1, last)), "purged {purged}");
        let live: Vec<(u64, u64)> = (purged + 1..=500).map(|i| (1, i)).collect();
        let got = store.try_get_log_entries(purged + 1..u64::MAX).await.unwrap();
        assert_eq!(got.iter().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect::<Vec<_>>(), live);
        // The conflicting suffix goes; the next leader's entries follow.
        store.truncate(log_id(1, purged + 1)).await.unwrap();
        append(&mut store, (purged + 1..=purged + 5).map(|i| entry(2, i)).collect()).await;
        store.shutdown().unwrap();
        drop(store);
        let mut store = RaftLogStore::<TypeConfig>::open(crashed.path(), config()).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id(2, purged + 5)), "purged {purged}");
        store.shutdown().unwrap();
    }
}
