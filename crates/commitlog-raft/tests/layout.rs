//! What a group costs on disk (nothing of its own), what the state file holds
//! and what happens without it, and the conversion of a directory of the
//! earlier layout (a consume queue and a meta file per group).

mod kv;

use std::path::Path;

use commitlog_raft::{RaftLogEngine, RaftLogStore, RaftStoreError, QUEUE_INDEX_DIR, RAFT_DIR, STATE_FILE};
use kv::TypeConfig;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, Vote};

const SEGMENT: usize = 64 << 10;

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(group: u64, term: u64, index: u64) -> Entry<TypeConfig> {
    big_entry(group, term, index, 0)
}

fn big_entry(group: u64, term: u64, index: u64, bytes: usize) -> Entry<TypeConfig> {
    let request =
        kv::Request { key: format!("k{index}"), value: format!("{group}:{term}:{index}:{}", "v".repeat(bytes)) };
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(request) }
}

/// Files under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

async fn indexes(store: &mut RaftLogStore<TypeConfig>) -> Vec<u64> {
    store.try_get_log_entries(0..u64::MAX).await.unwrap().iter().map(|e| e.log_id.index).collect()
}

#[tokio::test]
async fn a_thousand_groups_make_no_file_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = kv::small_config(1 << 20);
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
    for g in 0..1000u64 {
        let mut store = engine.open_group(g).unwrap();
        store.save_vote(&Vote::new(1, 1)).await.unwrap();
        store.blocking_append(vec![entry(g, 1, 1)]).await.unwrap();
    }
    engine.shutdown().unwrap();
    drop(engine);
    // The lock, the state file, the queue index's run(s) and table: however many groups.
    let raft: Vec<_> = files_under(&dir.path().join(RAFT_DIR));
    assert!(raft.len() <= 5, "{raft:?}");
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config).unwrap();
    assert_eq!(engine.groups().len(), 1000);
    assert_eq!(engine.recovery().records_replayed, 0, "a clean shutdown leaves nothing to replay");
    let mut store = engine.open_group(777).unwrap();
    assert_eq!((store.read_vote().await.unwrap(), indexes(&mut store).await), (Some(Vote::new(1, 1)), vec![1]));
    engine.shutdown().unwrap();
}

#[tokio::test]
async fn without_its_state_file_an_engine_rebuilds_the_state_while_the_log_is_whole_and_refuses_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = kv::small_config(SEGMENT);
    config.groups.checkpoint_interval_ms = 3_600_000;
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
    let mut store = engine.open_group(5).unwrap();
    store.save_vote(&Vote::new(4, 1)).await.unwrap();
    // Several segments' worth.
    store.blocking_append((1..=200).map(|i| big_entry(5, 4, i, 2000)).collect::<Vec<_>>()).await.unwrap();
    store.save_committed(Some(log_id(4, 150))).await.unwrap();
    engine.shutdown().unwrap();
    drop((engine, store));
    let state = dir.path().join(RAFT_DIR).join(STATE_FILE);

    // Damaged, with every record still in the log: rebuilt from the records
    // (the committed id, which has none, is forgotten).
    let mut bytes = std::fs::read(&state).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x20;
    std::fs::write(&state, &bytes).unwrap();
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
    assert!(engine.recovery().state_rebuilt);
    let mut store = engine.open_group(5).unwrap();
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(4, 1)));
    assert_eq!(store.read_committed().await.unwrap(), None);
    assert_eq!(indexes(&mut store).await, (1..=200).collect::<Vec<_>>());
    // Once segments are reclaimed, the log cannot say it all again.
    store.purge(log_id(4, 190)).await.unwrap();
    let reclaimer = engine.clone();
    tokio::task::spawn_blocking(move || reclaimer.reclaim()).await.unwrap().unwrap();
    assert!(engine.commit_log().min_offset() > 0);
    engine.shutdown().unwrap();
    drop((engine, store));
    std::fs::remove_file(&state).unwrap();
    match RaftLogEngine::<TypeConfig>::open(dir.path(), config) {
        Err(err @ RaftStoreError::StateLost { .. }) => {
            assert!(err.to_string().contains("restore this node from its peers"), "{err}")
        }
        other => panic!("opened without its state: {:?}", other.map(|e| e.groups())),
    }
}

/// Writes, by hand, what the earlier layout left: the log's records (a
/// 17-byte header and a JSON entry), `raft/groups.json`, a meta file and a
/// consume queue per group.
fn write_earlier_layout(dir: &Path, config: &commitlog_raft::RaftStoreConfig) {
    let log = commitlog::CommitLog::open(dir.join(commitlog_raft::LOG_DIR), config.log.clone()).unwrap();
    let record = |kind: u8, group: u64, index: u64, payload: &[u8]| {
        let mut body = vec![kind];
        body.extend_from_slice(&group.to_le_bytes());
        body.extend_from_slice(&index.to_le_bytes());
        body.extend_from_slice(payload);
        body
    };
    for i in 1..=30u64 {
        for g in [3u64, 8] {
            let json = serde_json::to_vec(&entry(g, 1, i)).unwrap();
            log.append(&record(1, g, i, &json)).unwrap().durability.wait().unwrap();
        }
    }
    // Group 8's suffix from 26 cut, then entries of term 2.
    log.append(&record(2, 8, 26, &[])).unwrap().durability.wait().unwrap();
    for i in 26..=28u64 {
        let json = serde_json::to_vec(&entry(8, 2, i)).unwrap();
        log.append(&record(1, 8, i, &json)).unwrap().durability.wait().unwrap();
    }
    log.shutdown().unwrap();
    let raft = dir.join(RAFT_DIR);
    std::fs::create_dir_all(raft.join("groups/3/index")).unwrap();
    std::fs::create_dir_all(raft.join("groups/8/index")).unwrap();
    std::fs::write(raft.join("groups.json"), br#"{"groups":{"3":0,"8":0},"dropping":[]}"#).unwrap();
    std::fs::write(raft.join("dispatched"), br#"{"offset":0}"#).unwrap();
    let meta = |vote_term: u64, purged: Option<u64>| {
        let meta = serde_json::json!({
            "vote": Vote::new(vote_term, 1),
            "committed": log_id(1, 20),
            "purged": purged.map(|p| log_id(1, p)),
        });
        serde_json::to_vec(&meta).unwrap()
    };
    std::fs::write(raft.join("groups/3/meta"), meta(1, Some(10))).unwrap();
    std::fs::write(raft.join("groups/8/meta"), meta(2, None)).unwrap();
    for g in [3, 8] {
        std::fs::write(raft.join(format!("groups/{g}/index/00000000000000000000")), vec![0u8; 4096]).unwrap();
    }
}

#[tokio::test]
async fn a_directory_of_the_file_per_group_layout_is_converted() {
    let dir = tempfile::tempdir().unwrap();
    let config = kv::small_config(SEGMENT);
    write_earlier_layout(dir.path(), &config);
    for open in 0..2 {
        let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
        assert_eq!(engine.recovery().converted, open == 0);
        assert_eq!(engine.groups(), vec![3, 8]);
        let mut three = engine.open_group(3).unwrap();
        let state = three.get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, 10)), Some(log_id(1, 30))));
        assert_eq!(three.read_vote().await.unwrap(), Some(Vote::new(1, 1)));
        assert_eq!(three.read_committed().await.unwrap(), Some(log_id(1, 20)));
        assert_eq!(indexes(&mut three).await, (11..=30).collect::<Vec<_>>());
        let mut eight = engine.open_group(8).unwrap();
        let got = eight.try_get_log_entries(0..u64::MAX).await.unwrap();
        let last = if open == 0 { 28 } else { 29 };
        let want: Vec<(u64, u64)> = (1..=25).map(|i| (1, i)).chain((26..=last).map(|i| (2, i))).collect();
        assert_eq!(got.iter().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect::<Vec<_>>(), want);
        assert_eq!(eight.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
        if open == 0 {
            eight.blocking_append(vec![entry(8, 2, 29)]).await.unwrap();
        } else {
            assert_eq!(eight.get_log_state().await.unwrap().last_log_id, Some(log_id(2, 29)));
        }
        engine.shutdown().unwrap();
        // Only the new layout's files are left (the old directories stay, empty).
        let left: Vec<String> = files_under(&dir.path().join(RAFT_DIR))
            .iter()
            .map(|p| p.strip_prefix(dir.path().join(RAFT_DIR)).unwrap().display().to_string())
            .filter(|p| !p.starts_with(QUEUE_INDEX_DIR))
            .collect();
        let mut left = left;
        left.sort();
        assert_eq!(left, vec!["lock".to_string(), STATE_FILE.to_string()], "open {open}");
    }
}
