//! Only openraft deletes entries (`purge`): the commit log's cleaning service,
//! which deletes old segments by age or when the disk is short of space, must
//! never take entries openraft still needs.

mod kv;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog_raft::{RaftLogStore, RaftStoreConfig, RaftStoreError, LOG_DIR};
use kv::TypeConfig;
use mapped_file::{DiskSpace, SimStorage, Storage};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader};

const DIR: &str = "/raft";
const SEGMENT: usize = 64 << 10;

fn entry(index: u64) -> Entry<TypeConfig> {
    let request = kv::Request { key: format!("k{index}"), value: "v".repeat(1000) };
    Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal(request) }
}

use test_support::now_ms;

/// The store's defaults, small segments, a cleaning run every 2 ms.
fn config() -> RaftStoreConfig {
    let mut config = RaftStoreConfig::default();
    config.log.mapped_file_size_commit_log = SEGMENT;
    config.log.max_message_size = 16 << 10;
    config.log.clean_resource_interval_ms = 2;
    config
}

#[tokio::test]
async fn old_segments_on_a_disk_short_of_space_stay_until_openraft_purges_them() {
    let sim = SimStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let mut store =
        RaftLogStore::<TypeConfig>::open_with_storage(DIR, config(), Arc::clone(&storage), Arc::clone(&storage))
            .unwrap();
    store.blocking_append((1..=300).map(entry).collect::<Vec<_>>()).await.unwrap();
    store.shutdown().unwrap();
    drop(store);
    // Four segments, the first three a hundred hours old, on a disk 87 % full:
    // past the log's own ratios for deleting expired segments at any hour (75)
    // and for deleting unexpired ones (85), below its append guard (90).
    let segments = Path::new(DIR).join(LOG_DIR).join(commitlog::SEGMENT_DIR);
    for k in 0..3u64 {
        sim.set_modified_ms(&segments.join(mapped_file::file_name(k * SEGMENT as u64)), now_ms() - 100 * 3_600_000);
    }
    sim.set_disk_space(Some(DiskSpace { total: 1000 << 30, free: 130 << 30, available: 130 << 30 }));

    let mut store =
        RaftLogStore::<TypeConfig>::open_with_storage(DIR, config(), Arc::clone(&storage), Arc::clone(&storage))
            .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.commit_log().clean_stats().runs < 50 {
        assert!(Instant::now() < deadline, "the cleaning service does not run");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let stats = store.commit_log().clean_stats();
    assert_eq!((stats.expired_deleted, stats.forcibly_deleted), (0, 0), "{stats:?}");
    let entries = store.try_get_log_entries(1..301).await.unwrap();
    assert_eq!(entries.len(), 300, "every entry openraft did not purge is there");
    // A purge deletes them (at the engine's next reclaim round), and only it.
    store.purge(LogId::new(CommittedLeaderId::new(1, 1), 250)).await.unwrap();
    let engine = store.engine();
    tokio::task::spawn_blocking(move || engine.reclaim()).await.unwrap().unwrap();
    assert!(store.commit_log().min_offset() > 0);
    assert_eq!(store.try_get_log_entries(251..301).await.unwrap().len(), 50);
    store.shutdown().unwrap();
}

#[test]
fn a_log_config_that_deletes_segments_by_itself_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut by_age = config();
    by_age.log.file_reserved_time_ms = 72 * 3_600_000;
    let mut by_space = config();
    by_space.log.clean_file_forcibly_enable = true;
    for bad in [by_age, by_space] {
        match RaftLogStore::<TypeConfig>::open(dir.path(), bad) {
            Err(RaftStoreError::InvalidConfig { reason }) => assert!(reason.contains("purge"), "{reason}"),
            other => panic!("opened: {:?}", other.err()),
        }
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written");
}
