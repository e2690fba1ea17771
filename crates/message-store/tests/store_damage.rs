//! Derived data never costs a message: the queue index (a run, its table, all
//! of it), the dispatch checkpoint, the topic registry or the key index
//! damaged while the store was closed is rebuilt from the log at the next
//! open, loudly; no message becomes unreachable, no consumer offset is
//! lowered, and no queue offset the log holds is given again. A store of the
//! consume-queue layout is converted the same way.

mod common;

use std::path::{Path, PathBuf};

use commitlog::FlushDiskType;
use message_store::{Message, MessageStore};
use store_io::sim::{SimSnapshot, SimStorage};
use store_io::Storage;

use common::{config, open, read_queue, ROOT};

const MESSAGES: u8 = 30;
const COMMITTED: u64 = 20;

/// A clean store of 30 messages on queue 0 of topic `t` (and, with
/// `interleaved`, 30 more on queue 1 between them), the queue index sealed
/// every 10 messages (three runs, and a fourth at shutdown if any is left),
/// a group's offset at 20, closed normally. Returns the bodies of queue 0.
fn clean_store(sim: &SimStorage, interleaved: bool) -> Vec<Vec<u8>> {
    let store = open(sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    let mut bodies = Vec::new();
    for i in 0..MESSAGES {
        let body = format!("message {i:02} of queue 0").into_bytes();
        let put = store.put_message(&Message::new("t", 0, body.clone()).with_key(format!("k{i}"))).unwrap();
        put.durability.wait().unwrap();
        assert_eq!(put.queue_offset, u64::from(i));
        bodies.push(body);
        if interleaved {
            let other = format!("message {i:02} of queue 1").into_bytes();
            store.put_message(&Message::new("t", 1, other)).unwrap().durability.wait().unwrap();
        }
        if i % 10 == 9 {
            assert!(store.wait_for("t", 0, u64::from(i), std::time::Duration::from_secs(10)).unwrap().arrived());
            store.dispatch_now().unwrap();
            store.seal_index().unwrap();
        }
    }
    store.commit_offset("g", "t", 0, COMMITTED).unwrap();
    store.shutdown().unwrap();
    bodies
}

/// The queue index's run files, in log order.
fn runs(sim: &SimStorage) -> Vec<PathBuf> {
    let dir = Path::new(ROOT).join("queueindex");
    let mut runs: Vec<PathBuf> =
        sim.list(&dir).unwrap().into_iter().filter(|f| f.name.len() == 20).map(|f| dir.join(f.name)).collect();
    runs.sort();
    runs
}

fn remove_all_under(sim: &SimStorage, dir: &Path) {
    for file in sim.list(dir).unwrap_or_default() {
        sim.remove(&dir.join(file.name)).unwrap();
    }
}

/// Opens the damaged store and checks that nothing was lost: queue 0 reads
/// back whole at its offsets, the group's offset stands, every key is found,
/// the next put takes offset 30, and (with `counted`) the rebuild was said.
fn check_repaired(sim: &SimStorage, bodies: &[Vec<u8>], what: &str, counted: bool) -> MessageStore {
    let store = open(sim, config(FlushDiskType::SyncFlush));
    assert_eq!(store.queue_range("t", 0).unwrap(), 0..u64::from(MESSAGES), "{what}: the queue is whole");
    let read = read_queue(&store, "t", 0);
    let expected: Vec<(u64, Vec<u8>)> = bodies.iter().cloned().enumerate().map(|(k, b)| (k as u64, b)).collect();
    assert_eq!(read, expected, "{what}: every message at its offset");
    assert_eq!(
        store.committed_offset("g", "t", 0).unwrap(),
        Some(COMMITTED),
        "{what}: the group's offset is not lowered"
    );
    for k in 0..MESSAGES {
        let found = store.query_by_key("t", &format!("k{k}"), 0, u64::MAX, 4).unwrap();
        assert_eq!(found.len(), 1, "{what}: key k{k} found");
    }
    let report = store.open_report();
    if counted {
        assert!(
            !report.index_runs_dropped.is_empty()
                || report.rebuilt_all.is_some()
                || report.index_rebuilt
                || report.topics_recovered,
            "{what}: the rebuild is said: {report:?}"
        );
    }
    let put = store.put_message(&Message::new("t", 0, &b"after"[..])).unwrap();
    assert_eq!(put.queue_offset, u64::from(MESSAGES), "{what}: no offset given twice");
    store
}

#[test]
fn a_damaged_run_is_dropped_with_every_later_one_and_dispatched_again_never_cut() {
    for which in 0..3 {
        for damage in ["a byte flipped", "cut short", "grown", "deleted"] {
            let sim = SimStorage::new();
            let bodies = clean_store(&sim, true);
            let runs = runs(&sim);
            assert!(runs.len() >= 3, "{runs:?}");
            let path = &runs[which];
            let bytes = sim.file_bytes(path).unwrap();
            match damage {
                "a byte flipped" => assert!(sim.patch_file(path, bytes.len() / 2, &[bytes[bytes.len() / 2] ^ 0x10])),
                "cut short" => sim.write_file(path, &bytes[..bytes.len() - 7]),
                "grown" => sim.write_file(path, &[bytes.as_slice(), &[0u8; 100]].concat()),
                _ => sim.remove(path).unwrap(),
            }
            let what = format!("run {which} {damage}");
            // The last run deleted is what a store that never sealed it holds:
            // its range is dispatched again, and nothing is said.
            let last_deleted = damage == "deleted" && which + 1 == runs.len();
            let store = check_repaired(&sim, &bodies, &what, !last_deleted);
            let report = store.open_report();
            if damage == "deleted" && which == 0 {
                assert!(report.rebuilt_all.is_some(), "{what}: lost at the front, rebuilt whole: {report:?}");
            } else {
                // A deleted run is not a file to drop: the runs after the gap are.
                let dropped = runs.len() - which - usize::from(damage == "deleted");
                assert_eq!(report.index_runs_dropped.len(), dropped, "{what}: it and every later run");
            }
            assert_eq!(read_queue(&store, "t", 1).len(), usize::from(MESSAGES), "{what}: queue 1 too");
            store.shutdown().unwrap();
        }
    }
}

#[test]
fn a_damaged_or_missing_queue_table_or_index_is_rebuilt_from_the_runs_or_the_log() {
    for damage in ["the table garbled", "the table deleted", "every file deleted"] {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, true);
        let dir = Path::new(ROOT).join("queueindex");
        match damage {
            "the table garbled" => sim.write_file(&dir.join("table"), b"not a table"),
            "the table deleted" => {
                let _ = sim.remove(&dir.join("table"));
            }
            _ => remove_all_under(&sim, &dir),
        }
        let store = check_repaired(&sim, &bodies, damage, false);
        assert_eq!(read_queue(&store, "t", 1).len(), usize::from(MESSAGES), "{damage}: queue 1 too");
        if damage == "every file deleted" {
            assert_eq!(store.open_report().recovered_from, 0, "the whole log dispatched again");
        }
        store.shutdown().unwrap();
    }
}

#[test]
fn a_damaged_dispatch_checkpoint_rebuilds_the_key_index_only() {
    for damage in ["garbage", "cut", "empty"] {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, false);
        let path = Path::new(ROOT).join("config/dispatch");
        let bytes = sim.file_bytes(&path).unwrap();
        let damaged = match damage {
            "garbage" => bytes.iter().map(|b| b ^ 0x5A).collect(),
            "cut" => bytes[..bytes.len() / 2].to_vec(),
            _ => Vec::new(),
        };
        sim.write_file(&path, &damaged);
        let store = check_repaired(&sim, &bodies, &format!("the checkpoint {damage}"), true);
        let report = store.open_report();
        assert!(report.index_rebuilt && report.rebuilt_all.is_none(), "{report:?}");
        store.shutdown().unwrap();
    }
}

#[test]
fn a_missing_or_damaged_topic_registry_is_recovered() {
    for (damage, without_checkpoint) in [("missing", false), ("garbage", false), ("missing", true)] {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, false);
        let path = Path::new(ROOT).join("config/topics");
        if damage == "missing" {
            sim.remove(&path).unwrap();
        } else {
            sim.write_file(&path, b"\xff\xfe not a registry\n");
        }
        if without_checkpoint {
            sim.remove(&Path::new(ROOT).join("config/dispatch")).unwrap();
        }
        let store = check_repaired(&sim, &bodies, &format!("registry {damage}"), true);
        let report = store.open_report();
        assert!(report.topics_recovered, "{damage}");
        // With the checkpoint, the queue count and the topic's id are known
        // (the index is kept); from the log alone, queues up to the highest
        // one used, and the index is rebuilt under new ids.
        let queues = if without_checkpoint { 1 } else { 2 };
        assert_eq!(store.topics(), vec![("t".to_string(), queues)]);
        assert_eq!(report.rebuilt_all.is_some(), without_checkpoint, "{report:?}");
        store.shutdown().unwrap();
        // Written back: the next open finds it whole.
        let again = open(&sim, config(FlushDiskType::SyncFlush));
        assert!(!again.open_report().topics_recovered);
        again.shutdown().unwrap();
    }
}

#[test]
fn a_damaged_index_is_rebuilt_from_the_log() {
    for damage in ["header", "an item", "the file removed", "a foreign shape"] {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, false);
        let dir = Path::new(ROOT).join("index");
        let files = sim.list(&dir).unwrap();
        let path = dir.join(&files[0].name);
        match damage {
            "header" => assert!(sim.patch_file(&path, 0, b"XXXXXXXX")),
            "an item" => assert!(sim.patch_file(&path, 64 + 28 * 3, &[0u8; 28])),
            "the file removed" => sim.remove(&path).unwrap(),
            _ => {
                // Another hash-slot count in a file of the same size.
                let slots = u32::from_le_bytes(sim.file_bytes(&path).unwrap()[8..12].try_into().unwrap());
                assert!(sim.patch_file(&path, 8, &(slots / 2).to_le_bytes()));
            }
        }
        let store = check_repaired(&sim, &bodies, &format!("index: {damage}"), true);
        assert!(store.open_report().index_rebuilt, "{damage}");
        store.shutdown().unwrap();
    }
}

#[test]
fn a_store_of_the_consume_queue_layout_is_converted_and_expired_queues_keep_their_end() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    // Queue 0's messages all go with the log's first segments; queue 1's
    // (two segments of them after) stay in part.
    for _ in 0..200u32 {
        store.put_message(&Message::new("t", 0, vec![7u8; 1000])).unwrap().durability.wait().unwrap();
    }
    for _ in 0..130u32 {
        store.put_message(&Message::new("t", 1, vec![8u8; 1000])).unwrap().durability.wait().unwrap();
    }
    assert!(store.wait_for("t", 1, 129, std::time::Duration::from_secs(10)).unwrap().arrived());
    store.seal_index().unwrap(); // the log keeps the segments of unsealed entries
    let front = store.log().max_offset() - 100;
    assert!(store.log().delete_segments_before(front, usize::MAX).unwrap() > 0);
    store.shutdown().unwrap();
    // What a store of the consume-queue layout holds instead: the first
    // registry format, a format-2 checkpoint with each queue's extent.
    let root = Path::new(ROOT);
    remove_all_under(&sim, &root.join("queueindex"));
    sim.write_file(&root.join("config/topics"), b"# message-store topics v1: <topic> <queue count>\nt 2\n");
    let mut v2 = b"MSDISP02".to_vec();
    for word in [0u64, 0] {
        v2.extend_from_slice(&word.to_le_bytes()); // point 0 (all dispatched again), log min 0
    }
    v2.push(0);
    v2.extend_from_slice(&[0; 20]);
    v2.extend_from_slice(&1u32.to_le_bytes());
    v2.push(1);
    v2.push(b't');
    v2.extend_from_slice(&2u32.to_le_bytes());
    v2.extend_from_slice(&2u32.to_le_bytes());
    for (queue, min, end) in [(0u32, 150u64, 200u64), (1, 60, 130)] {
        v2.extend_from_slice(&queue.to_le_bytes());
        v2.extend_from_slice(&min.to_le_bytes());
        v2.extend_from_slice(&end.to_le_bytes());
    }
    let crc = crc32c::crc32c(&v2);
    v2.extend_from_slice(&crc.to_le_bytes());
    sim.write_file(&root.join("config/dispatch"), &v2);
    let old_file = root.join("consumequeue/t/0/00000000000000000000");
    sim.write_file(&old_file, &[0u8; 4096]);
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    let report = store.open_report();
    assert!(report.rebuilt_all.as_deref().is_some_and(|w| w.contains("consume-queue layout")), "{report:?}");
    assert_eq!(store.queue_range("t", 0).unwrap(), 200..200, "its messages expired: it keeps its end");
    assert_eq!(store.put_message(&Message::new("t", 0, &b"next"[..])).unwrap().queue_offset, 200);
    let kept = read_queue(&store, "t", 1);
    assert!(!kept.is_empty() && kept.last().unwrap().0 == 129, "queue 1 from the log: {} messages", kept.len());
    assert!(sim.file_bytes(&old_file).is_none(), "the old layout's files are deleted");
    store.shutdown().unwrap();
    let again = open(&sim, config(FlushDiskType::SyncFlush));
    assert!(again.open_report().rebuilt_all.is_none(), "converted once");
    assert_eq!(again.queue_range("t", 0).unwrap(), 200..201);
    again.shutdown().unwrap();
}

/// A store of topic "t" whose queue 0's 200 messages all went with the log's
/// front and whose queue 1's 130 stay in part, closed. The test seals the
/// queue index after queue 1's messages, and (`seal_between`) after queue
/// 0's too: one run over both queues, or a run for each.
fn store_with_an_expired_queue(sim: &SimStorage, seal_between: bool) {
    let store = open(sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    for _ in 0..200u32 {
        store.put_message(&Message::new("t", 0, vec![7u8; 1000])).unwrap().durability.wait().unwrap();
    }
    if seal_between {
        assert!(store.wait_for("t", 0, 199, std::time::Duration::from_secs(10)).unwrap().arrived());
        store.seal_index().unwrap();
    }
    for _ in 0..130u32 {
        store.put_message(&Message::new("t", 1, vec![8u8; 1000])).unwrap().durability.wait().unwrap();
    }
    assert!(store.wait_for("t", 1, 129, std::time::Duration::from_secs(10)).unwrap().arrived());
    store.seal_index().unwrap();
    let front = store.log().max_offset() - 100;
    assert!(store.log().delete_segments_before(front, usize::MAX).unwrap() > 0);
    store.shutdown().unwrap();
}

/// Queue 0 of [`store_with_an_expired_queue`] kept its end (its next put
/// takes 200) and queue 1 reads back from the log; the store is closed.
fn check_the_expired_queue_kept_its_end(store: MessageStore, why: &str) {
    assert_eq!(store.queue_range("t", 0).unwrap(), 200..200, "its messages expired: it keeps its end ({why})");
    assert_eq!(store.put_message(&Message::new("t", 0, &b"next"[..])).unwrap().queue_offset, 200);
    let kept = read_queue(&store, "t", 1);
    assert!(!kept.is_empty() && kept.last().unwrap().0 == 129, "queue 1 from the log: {} messages", kept.len());
    store.shutdown().unwrap();
}

#[test]
fn runs_lost_while_a_queue_had_expired_whole_keep_its_end_from_the_queue_table() {
    let sim = SimStorage::new();
    store_with_an_expired_queue(&sim, false);
    // Every run is lost (what `commitlog recover` deletes when a check finds
    // a run wrong); the queue table stays.
    for run in runs(&sim) {
        sim.remove(&run).unwrap();
    }
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    assert!(store.open_report().rebuilt_all.is_some(), "{:?}", store.open_report());
    check_the_expired_queue_kept_its_end(store, "every run lost");
}

/// As above, but the first run left is damaged instead (dropped at the open,
/// with every run after it): the queue table, which covered them, is not
/// used, and its ends are what keeps queue 0's end. With one run over both
/// queues and with a run for each.
#[test]
fn a_damaged_front_run_keeps_an_expired_queues_end_from_the_unused_table() {
    for seal_between in [true, false] {
        let sim = SimStorage::new();
        store_with_an_expired_queue(&sim, seal_between);
        let first = runs(&sim)[0].clone();
        let bytes = sim.file_bytes(&first).unwrap();
        assert!(sim.patch_file(&first, bytes.len() / 2, &[bytes[bytes.len() / 2] ^ 0x10]));
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        let report = format!("sealed between {seal_between}: {:?}", store.open_report());
        check_the_expired_queue_kept_its_end(store, &report);
    }
}

/// A power cut anywhere inside an open that recovers the queue index (after
/// it dropped a damaged run and the queue table covering it, or deleted the
/// whole index to build it from the log, and before the replay's ends are
/// written back) leaves queue 0 its end all the same: the open after the
/// power cut gives it 200, not 0, and no acknowledged offset is given again.
#[test]
fn a_power_cut_inside_a_recovering_open_keeps_an_expired_queues_end() {
    for every_run_lost in [false, true] {
        let sim = SimStorage::new();
        store_with_an_expired_queue(&sim, true);
        if every_run_lost {
            for run in runs(&sim) {
                sim.remove(&run).unwrap();
            }
        } else {
            let first = runs(&sim)[0].clone();
            let bytes = sim.file_bytes(&first).unwrap();
            assert!(sim.patch_file(&first, bytes.len() / 2, &[bytes[bytes.len() / 2] ^ 0x10]));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel::<SimSnapshot>(16);
        let collector = std::thread::spawn(move || rx.iter().collect::<Vec<SimSnapshot>>());
        sim.set_snapshot_sink(Some(tx));
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        sim.set_snapshot_sink(None);
        let states = collector.join().unwrap();
        check_the_expired_queue_kept_its_end(store, &format!("every run lost {every_run_lost}: the open"));
        assert!(!states.is_empty());
        for state in &states {
            let image = state.crash_image(|_| false);
            let store = open(&image, config(FlushDiskType::SyncFlush));
            let why = format!("every run lost {every_run_lost}: a power cut at event {} of the open", state.event);
            check_the_expired_queue_kept_its_end(store, &why);
        }
    }
}

/// The store's files as a real directory (what `inspect::check` reads).
fn to_disk(sim: &SimStorage) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let image = sim.snapshot().crash_image(|_| true);
    for file in sim.snapshot().files {
        let path = dir.path().join(file.path.strip_prefix(ROOT).unwrap());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, image.file_bytes(&file.path).unwrap()).unwrap();
    }
    dir
}

/// The problems `inspect::check` finds in the store's files.
fn problems(sim: &SimStorage) -> Vec<message_store::inspect::Problem> {
    message_store::inspect::check(to_disk(sim).path()).unwrap().problems
}

#[test]
fn the_check_sees_each_damage_and_nothing_once_the_store_rebuilt_it() {
    let sim = SimStorage::new();
    clean_store(&sim, true);
    let clean = message_store::inspect::check(to_disk(&sim).path()).unwrap();
    assert!(clean.problems.is_empty(), "{:?}", clean.problems);
    assert_eq!((clean.messages, clean.queues, clean.keys), (60, 2, 30));
    assert!(clean.entries >= 40, "the sealed runs' entries compared: {}", clean.entries);
    type Damage = fn(&SimStorage);
    let damages: [(&str, Damage); 6] = [
        ("a run's byte flipped", |sim| {
            let run = runs(sim)[1].clone();
            let len = sim.file_bytes(&run).unwrap().len();
            assert!(sim.patch_file(&run, len / 2, &[0xEE]));
        }),
        ("a run deleted", |sim| sim.remove(&runs(sim)[1]).unwrap()),
        ("the checkpoint garbled", |sim| sim.write_file(&Path::new(ROOT).join("config/dispatch"), b"garbage")),
        ("the registry garbled", |sim| sim.write_file(&Path::new(ROOT).join("config/topics"), b"garbage\n")),
        ("an index item zeroed", |sim| {
            let files = sim.list(&Path::new(ROOT).join("index")).unwrap();
            assert!(sim.patch_file(&Path::new(ROOT).join("index").join(&files[0].name), 64 + 28 * 4, &[0; 28]));
        }),
        ("a consumer offset past its queue's end", |sim| {
            // As a store of the text-file layout would hold it, converted at the next open.
            remove_all_under(sim, &Path::new(ROOT).join("config/offsets"));
            let text = "# message-store consumer offsets v1: <group> <topic> <queue> <offset>\ng t 0 99\n";
            sim.write_file(&Path::new(ROOT).join("config/consumer_offsets"), text.as_bytes());
        }),
    ];
    for (what, damage) in damages {
        let sim = SimStorage::new();
        clean_store(&sim, true);
        damage(&sim);
        let found = problems(&sim);
        assert!(!found.is_empty(), "{what}: seen");
        if what == "a consumer offset past its queue's end" {
            // The open lowers it (a loss of the log's, not of derived data).
            let store = open(&sim, config(FlushDiskType::SyncFlush));
            assert_eq!(store.open_report().offsets_lowered, 1, "{what}");
            assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(30), "{what}: lowered to the queue's end");
            store.shutdown().unwrap();
            assert!(problems(&sim).is_empty(), "{what}: lowered for good");
            continue;
        }
        // The open rebuilds what it sees; the key index, if asked.
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        let left = message_store::inspect::check(to_disk(&sim).path()).unwrap();
        if left.problems.iter().any(|p| p.kind == message_store::inspect::Derived::Index) {
            store.rebuild_index().unwrap();
        }
        store.shutdown().unwrap();
        let left = problems(&sim);
        assert!(left.is_empty(), "{what}: rebuilt, but {left:?}");
    }
}

#[test]
fn the_check_says_what_the_open_repairs_of_lost_runs_and_a_lost_checkpoint() {
    type Damage = fn(&SimStorage);
    let damages: [(&str, Damage); 4] = [
        ("queueindex/ deleted", |sim| remove_all_under(sim, &Path::new(ROOT).join("queueindex"))),
        ("every run deleted, the table kept", |sim| {
            for run in runs(sim) {
                sim.remove(&run).unwrap();
            }
        }),
        ("the last run deleted", |sim| sim.remove(runs(sim).last().unwrap()).unwrap()),
        ("the checkpoint deleted", |sim| sim.remove(&Path::new(ROOT).join("config/dispatch")).unwrap()),
    ];
    for (what, damage) in damages {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, false);
        damage(&sim);
        let found = message_store::inspect::check(to_disk(&sim).path()).unwrap();
        assert!(!found.problems.is_empty(), "{what}: seen in {found:?}");
        let kind = if what.contains("checkpoint") {
            message_store::inspect::Derived::Checkpoint
        } else {
            message_store::inspect::Derived::QueueIndex
        };
        assert!(found.problems.iter().all(|p| p.kind == kind), "{what}: {:?}", found.problems);
        // Nothing lost: the open repairs it, and the check finds nothing after.
        let store = check_repaired(&sim, &bodies, what, false);
        store.shutdown().unwrap();
        let left = problems(&sim);
        assert!(left.is_empty(), "{what}: repaired, but {left:?}");
    }
}

#[test]
fn the_check_finds_a_crashed_store_whose_runs_lag_the_recorded_point_clean() {
    let sim = SimStorage::new();
    clean_store(&sim, false);
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    let checkpoint = Path::new(ROOT).join("config/dispatch");
    let at_open = sim.file_bytes(&checkpoint).unwrap();
    for i in 0..5u8 {
        store.put_message(&Message::new("t", 0, vec![i; 8])).unwrap().durability.wait().unwrap();
    }
    // The flush service records the point past the runs (it seals only at a
    // segment's end or after many entries), and the log's checkpoint its end.
    let end = store.log().max_offset();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let recorded = |dir: &Path| {
        let log_durable = commitlog::inspect::store_files(dir).checkpoint.map_or(0, |c| c.flushed_offset);
        (message_store::inspect::dispatch_point(dir).unwrap(), log_durable)
    };
    while recorded(to_disk(&sim).path()) != (Some(end), end) {
        assert!(std::time::Instant::now() < deadline, "both checkpoints were recorded again");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_ne!(sim.file_bytes(&checkpoint).unwrap(), at_open);
    let queue = message_store::inspect::queue(to_disk(&sim).path(), "t", 0).unwrap();
    assert_eq!((queue.sealed_end, queue.max_offset), (30, 35), "the runs lag the point");
    // A crash now: the open dispatches the messages after the runs again, as always.
    let found = message_store::inspect::check(to_disk(&sim).path()).unwrap();
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    drop(store);
}
