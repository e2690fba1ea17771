//! Many raft groups on one commit log ([`RaftLogEngine`]): openraft's storage
//! suite for a group beside busy ones; groups created and dropped at run time;
//! a lagging group rewritten forward so it never pins the log; truncation of
//! one group leaving the others and the log alone; recovery of a thousand
//! groups from the shared log.

mod kv;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use commitlog_raft::{RaftLogEngine, RaftLogStore, RaftStoreConfig, RaftStoreError, QUEUE_INDEX_DIR, RAFT_DIR};
use kv::{NodeId, StateMachine, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, StorageError};

const SEGMENT: usize = 64 << 10;

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// Entry `index` of `group` in `term`, its value naming all three.
fn entry(group: u64, term: u64, index: u64, bytes: usize) -> Entry<TypeConfig> {
    let value = format!("{group}:{term}:{index}:");
    let request = kv::Request { key: format!("k{index}"), value: format!("{value}{}", "v".repeat(bytes)) };
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(request) }
}

fn entries(group: u64, term: u64, range: std::ops::RangeInclusive<u64>, bytes: usize) -> Vec<Entry<TypeConfig>> {
    range.map(|i| entry(group, term, i, bytes)).collect()
}

/// Every entry of `store` is the one written for its group at its index, in `term`
/// for indexes from `term_from` on (term 1 before).
async fn check_entries(
    store: &mut RaftLogStore<TypeConfig>,
    want: std::ops::RangeInclusive<u64>,
    term_from: (u64, u64),
) {
    let read = store.try_get_log_entries(*want.start()..=*want.end()).await.unwrap();
    assert_eq!(read.len() as u64, want.end() + 1 - want.start(), "group {}: entries {want:?}", store.group());
    for (entry, i) in read.iter().zip(want) {
        let term = if i >= term_from.1 { term_from.0 } else { 1 };
        assert_eq!(entry.log_id, log_id(term, i), "group {}", store.group());
        let EntryPayload::Normal(request) = &entry.payload else { panic!("not a normal entry") };
        assert!(
            request.value.starts_with(&format!("{}:{term}:{i}:", store.group())),
            "group {}: {}",
            store.group(),
            request.value
        );
    }
}

fn config() -> RaftStoreConfig {
    let mut config = kv::small_config(SEGMENT);
    // Rounds come from the tests (and after purges), not from the clock.
    config.groups.checkpoint_interval_ms = 3_600_000;
    config
}

/// Deletes the queue index's files (derived data): the next open rebuilds it
/// from the whole log in one pass.
fn lose_index(dir: &std::path::Path) {
    for file in std::fs::read_dir(dir.join(RAFT_DIR).join(QUEUE_INDEX_DIR)).unwrap() {
        std::fs::remove_file(file.unwrap().path()).unwrap();
    }
}

async fn reclaim(engine: &RaftLogEngine<TypeConfig>) -> commitlog_raft::ReclaimStats {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || engine.reclaim()).await.unwrap().unwrap()
}

/// Groups 1 and 2 of `engine`, written in turn: 400 entries of group 1 (over
/// several segments) and 10 of group 2 between them. Returns their stores and
/// the log's end.
async fn two_groups(engine: &RaftLogEngine<TypeConfig>) -> (RaftLogStore<TypeConfig>, RaftLogStore<TypeConfig>, u64) {
    let (mut one, mut two) = (engine.open_group(1).unwrap(), engine.open_group(2).unwrap());
    for k in 0..10 {
        one.blocking_append(entries(1, 1, k * 40 + 1..=k * 40 + 40, 800)).await.unwrap();
        two.blocking_append(entries(2, 1, k + 1..=k + 1, 500)).await.unwrap();
    }
    (one, two, engine.commit_log().max_offset())
}

/// Each suite test gets a group (7) of a fresh engine on which two other groups
/// append, truncate and purge all along, and every engine round runs every few
/// milliseconds with a small rewrite lag, so the suite's group is rewritten
/// under it too.
struct Busy;

/// Stops the busy groups when the suite's test is done.
struct Guard {
    stop: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl StoreBuilder<TypeConfig, RaftLogStore<TypeConfig>, Arc<StateMachine>, Guard> for Busy {
    async fn build(&self) -> Result<(Guard, RaftLogStore<TypeConfig>, Arc<StateMachine>), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut config = kv::small_config(SEGMENT);
        config.groups.checkpoint_interval_ms = 2;
        config.groups.rewrite_lag_bytes = 2 * SEGMENT as u64;
        let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config).expect("open the engine");
        let stop = Arc::new(AtomicBool::new(false));
        for group in [1u64, 2] {
            let mut store = engine.open_group(group).expect("a busy group");
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut next = 1u64;
                let mut term = 1u64;
                while !stop.load(Ordering::Acquire) {
                    let n = 1 + next % 5;
                    let batch: Vec<_> = (next..next + n).map(|i| entry(group, term, i, 400)).collect();
                    if store.blocking_append(batch).await.is_err() {
                        return; // the engine is shut down
                    }
                    next += n;
                    if next.is_multiple_of(7) {
                        store.truncate(log_id(term, next - 2)).await.expect("truncate");
                        next -= 2;
                        term += 1;
                    }
                    if next.is_multiple_of(11) && next > 20 {
                        let at = next - 10;
                        let purged = store.try_get_log_entries(at..=at).await.expect("read")[0].log_id;
                        store.purge(purged).await.expect("purge");
                    }
                }
            });
        }
        let store = engine.open_group(7).expect("the suite's group");
        Ok((Guard { stop, _dir: dir }, store, Arc::new(StateMachine::default())))
    }
}

#[test]
fn openraft_storage_suite_passes_for_a_group_beside_busy_groups() {
    if let Err(err) = Suite::test_all(Busy) {
        panic!("openraft's storage suite failed for a group store: {err}");
    }
}

#[tokio::test]
async fn groups_are_created_and_dropped_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
    let (mut one, mut two, written) = two_groups(&engine).await;
    assert!(written > 4 * SEGMENT as u64, "group 1 spans several segments");
    engine.drop_group(1).await.unwrap();
    assert_eq!(engine.groups(), vec![2]);
    match one.get_log_state().await {
        Err(err) => assert!(err.to_string().contains("dropped"), "{err}"),
        Ok(state) => panic!("a dropped group answered {state:?}"),
    }
    assert!(one.blocking_append(entries(1, 1, 301..=301, 10)).await.is_err(), "a dropped group takes no entries");
    assert!(matches!(engine.drop_group(1).await, Err(RaftStoreError::NoSuchGroup { group: 1 })));

    // Group 2 purges all it has: with group 1 gone, nothing pins the old segments.
    two.purge(log_id(1, 10)).await.unwrap();
    let stats = reclaim(&engine).await;
    assert!(stats.segments_deleted >= 4, "{stats:?}");
    assert!(engine.commit_log().min_offset() >= written - SEGMENT as u64, "the dropped group's segments went");
    engine.shutdown().unwrap();
    drop((engine, one, two));

    // Reopened: group 1 is gone; created again, it starts empty, and its old
    // records (those still in the log's last segment) never come back.
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
    assert_eq!(engine.groups(), vec![2]);
    let mut one = engine.open_group(1).unwrap();
    assert_eq!(one.get_log_state().await.unwrap().last_log_id, None, "a re-created group starts empty");
    one.blocking_append(entries(1, 2, 1..=3, 10)).await.unwrap();
    engine.shutdown().unwrap();
    drop((engine, one));
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
    // Replay from the start, through the old group's records too.
    lose_index(dir.path());
    engine.shutdown().unwrap();
    drop(engine);
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
    assert_eq!(engine.groups(), vec![1, 2]);
    let mut one = engine.open_group(1).unwrap();
    assert_eq!(one.get_log_state().await.unwrap().last_log_id, Some(log_id(2, 3)));
    check_entries(&mut one, 1..=3, (2, 1)).await;
    engine.shutdown().unwrap();
}

/// Purges that empty their groups' queues cut the index's active run at
/// their first entries: the next reclaim round still seals past those cuts
/// and deletes every segment no group needs, whether or not a checkpoint ran
/// between the writes and the purges (the maintenance thread's round, woken
/// by the purge, races the test's own).
#[tokio::test]
async fn purges_that_empty_every_group_free_the_log_at_the_next_round() {
    let dir = tempfile::tempdir().unwrap();
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
    let (mut one, mut two, written) = two_groups(&engine).await;
    assert!(written > 4 * SEGMENT as u64, "the groups span several segments");
    one.purge(log_id(1, 400)).await.unwrap();
    two.purge(log_id(1, 10)).await.unwrap();
    let stats = reclaim(&engine).await;
    assert!(stats.segments_deleted >= 4, "{stats:?}, the log from {}", engine.commit_log().min_offset());
    assert!(engine.commit_log().min_offset() >= written - SEGMENT as u64, "only the last segment stays");
    // Both groups go on from their purged ids, after a reopen too.
    one.blocking_append(entries(1, 1, 401..=401, 10)).await.unwrap();
    engine.shutdown().unwrap();
    drop((engine, one, two));
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
    let (mut one, mut two) = (engine.open_group(1).unwrap(), engine.open_group(2).unwrap());
    assert_eq!(one.get_log_state().await.unwrap().last_log_id, Some(log_id(1, 401)));
    assert_eq!(two.get_log_state().await.unwrap().last_log_id, Some(log_id(1, 10)));
    check_entries(&mut one, 401..=401, (1, 1)).await;
    engine.shutdown().unwrap();
}

/// A group that never purges, beside one that writes and purges a lot: its
/// entries are copied forward, so the log's old segments go; without rewrites
/// (`rewrite_lag_bytes` `u64::MAX`) it pins them all.
#[tokio::test]
async fn a_lagging_group_is_rewritten_forward_and_never_pins_the_log() {
    for rewrite in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config();
        config.groups.rewrite_lag_bytes = if rewrite { 2 * SEGMENT as u64 } else { u64::MAX };
        let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
        let (mut idle, mut busy) = (engine.open_group(1).unwrap(), engine.open_group(2).unwrap());
        idle.blocking_append(entries(1, 1, 1..=20, 300)).await.unwrap();
        let idle_bytes = engine.commit_log().max_offset();
        let mut next = 1;
        for _ in 0..40 {
            busy.blocking_append(entries(2, 1, next..=next + 19, 500)).await.unwrap();
            next += 20;
            busy.purge(log_id(1, next - 5)).await.unwrap();
            reclaim(&engine).await;
        }
        let written = engine.commit_log().max_offset();
        let stats = engine.reclaim_stats();
        if !rewrite {
            assert_eq!(engine.commit_log().min_offset(), 0, "without rewrites the idle group pins the log");
            assert_eq!(stats.rewritten_entries, 0);
            engine.shutdown().unwrap();
            continue;
        }
        // Never more than one segment behind the lag kept, whatever was written.
        assert!(
            engine.commit_log().min_offset() + config.groups.rewrite_lag_bytes + 2 * SEGMENT as u64 >= written,
            "the log kept {} of {written} bytes: {stats:?}",
            written - engine.commit_log().min_offset()
        );
        // The cost: the idle group's bytes, once per lag's worth of log written.
        assert!(stats.rewritten_entries >= 20, "{stats:?}");
        let rounds = written / config.groups.rewrite_lag_bytes + 1;
        assert!(stats.rewritten_bytes <= rounds * idle_bytes, "{stats:?}, at most {rounds} x {idle_bytes}");
        check_entries(&mut idle, 1..=20, (1, 1)).await;
        // A truncation and new entries of the rewritten group, then a restart
        // replaying everything (no checkpoint).
        idle.truncate(log_id(1, 16)).await.unwrap();
        idle.blocking_append(entries(1, 2, 16..=18, 300)).await.unwrap();
        engine.shutdown().unwrap();
        drop((engine, idle, busy));
        lose_index(dir.path());
        let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
        assert_eq!(engine.recovery().replayed_from, engine.commit_log().min_offset());
        let mut idle = engine.open_group(1).unwrap();
        assert_eq!(idle.get_log_state().await.unwrap().last_log_id, Some(log_id(2, 18)));
        check_entries(&mut idle, 1..=18, (2, 16)).await;
        let mut busy = engine.open_group(2).unwrap();
        check_entries(&mut busy, next - 4..=next - 1, (1, 1)).await;
        engine.shutdown().unwrap();
    }
}

/// A conflicting suffix of one group goes from that group only: the log keeps
/// growing, the other group's entries interleaved with the cut ones stay.
#[tokio::test]
async fn truncating_one_group_leaves_the_others_and_the_log_alone() {
    let dir = tempfile::tempdir().unwrap();
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
    let (mut a, mut b) = (engine.open_group(1).unwrap(), engine.open_group(2).unwrap());
    for i in 1..=10 {
        a.blocking_append(entries(1, 1, i..=i, 50)).await.unwrap();
        b.blocking_append(entries(2, 1, i..=i, 50)).await.unwrap();
    }
    let end = engine.commit_log().max_offset();
    a.truncate(log_id(1, 5)).await.unwrap();
    assert!(engine.commit_log().max_offset() > end, "a truncation is a record, never a cut of the log");
    assert_eq!(a.get_log_state().await.unwrap().last_log_id, Some(log_id(1, 4)));
    check_entries(&mut b, 1..=10, (1, 1)).await;
    a.blocking_append(entries(1, 2, 5..=6, 50)).await.unwrap();
    // Half the story before a checkpoint, half after.
    engine.checkpoint().unwrap();
    b.truncate(log_id(1, 9)).await.unwrap();
    b.blocking_append(entries(2, 3, 9..=9, 50)).await.unwrap();
    engine.shutdown().unwrap();
    drop((engine, a, b));
    for replay_all in [false, true] {
        if replay_all {
            lose_index(dir.path());
        }
        let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config()).unwrap();
        let (mut a, mut b) = (engine.open_group(1).unwrap(), engine.open_group(2).unwrap());
        assert_eq!(a.get_log_state().await.unwrap().last_log_id, Some(log_id(2, 6)));
        check_entries(&mut a, 1..=6, (2, 5)).await;
        assert_eq!(b.get_log_state().await.unwrap().last_log_id, Some(log_id(3, 9)));
        check_entries(&mut b, 1..=9, (3, 9)).await;
        engine.shutdown().unwrap();
    }
}

/// A thousand groups, their entries interleaved in the log: every one comes
/// back, from the checkpoint and, with the checkpoint lost, from the whole log
/// in one pass.
#[tokio::test]
async fn a_thousand_groups_recover_from_the_shared_log() {
    const GROUPS: u64 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let mut config = kv::small_config(1 << 20);
    config.groups.checkpoint_interval_ms = 3_600_000;
    let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
    let stores: Vec<_> = (0..GROUPS).map(|g| engine.open_group(g).unwrap()).collect();
    for round in 0..5u64 {
        // All at once, so their appends share the log's group commits.
        let mut appends = tokio::task::JoinSet::new();
        for store in &stores {
            let (g, mut store) = (store.group(), store.clone());
            appends.spawn(async move { store.blocking_append(entries(g, 1, round * 2 + 1..=round * 2 + 2, 40)).await });
        }
        while let Some(result) = appends.join_next().await {
            result.unwrap().unwrap();
        }
        if round == 2 {
            engine.checkpoint().unwrap();
        }
    }
    let records = engine.commit_log().max_offset();
    engine.shutdown().unwrap();
    drop((engine, stores));
    for replay_all in [false, true] {
        if replay_all {
            lose_index(dir.path());
        }
        let engine = RaftLogEngine::<TypeConfig>::open(dir.path(), config.clone()).unwrap();
        let recovery = engine.recovery();
        assert_eq!(recovery.groups, GROUPS as usize);
        if replay_all {
            assert_eq!(recovery.replayed_from, 0);
            // Every group's creation record and ten entries.
            assert_eq!(recovery.records_replayed, 11 * GROUPS, "{recovery:?}");
        } else {
            assert_eq!(recovery.replayed_from, records, "the shutdown's checkpoint covers the log");
        }
        for g in 0..GROUPS {
            let mut store = engine.open_group(g).unwrap();
            check_entries(&mut store, 1..=10, (1, 1)).await;
        }
        engine.shutdown().unwrap();
    }
}

/// A directory of the format before the engine (records of bare JSON entries)
/// is refused with a clear error, and left as it was.
#[test]
fn a_log_of_the_old_single_group_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = config();
    let log_dir = dir.path().join(commitlog_raft::LOG_DIR);
    let log = commitlog::CommitLog::open(&log_dir, config.log.clone()).unwrap();
    let old = serde_json::to_vec(&entry(0, 1, 1, 10)).unwrap();
    log.append(&old).unwrap().durability.wait().unwrap();
    let end = log.max_offset();
    log.shutdown().unwrap();
    drop(log);
    match RaftLogStore::<TypeConfig>::open(dir.path(), config.clone()) {
        Err(RaftStoreError::Format { offset: 0, reason }) => assert!(reason.contains("header"), "{reason}"),
        other => panic!("an old-format log opened: {:?}", other.map(|s| s.group())),
    }
    let log = commitlog::CommitLog::open(&log_dir, config.log).unwrap();
    assert_eq!(log.max_offset(), end, "the old records are still there");
    log.shutdown().unwrap();
}
