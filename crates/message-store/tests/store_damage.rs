//! Derived data never costs a message: a consume queue (or its files, or its
//! directory, or the dispatch checkpoint, or the topic registry) damaged while
//! the store was closed is repaired from the log at the next open, loudly; no
//! message becomes unreachable, no consumer offset is lowered, and no queue
//! offset the log holds is given again.

mod common;

use std::path::{Path, PathBuf};

use commitlog::FlushDiskType;
use message_store::{Message, MessageStore, TagFilter};
use store_io::sim::SimStorage;
use store_io::Storage;

use common::{config, open, read_queue, ROOT};

const MESSAGES: u8 = 30;
const COMMITTED: u64 = 20;

/// A clean store of 30 messages on one queue of topic `t` (and, with
/// `interleaved`, 30 more on queue 1 between them), a group's offset at 20,
/// closed normally. Returns the bodies of queue 0.
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
            // The same size, so an entry of queue 1 fits queue 0's order.
            let other = format!("message {i:02} of queue 1").into_bytes();
            store.put_message(&Message::new("t", 1, other)).unwrap().durability.wait().unwrap();
        }
    }
    assert!(store.wait_for("t", 0, u64::from(MESSAGES) - 1, std::time::Duration::from_secs(10)).unwrap());
    store.commit_offset("g", "t", 0, COMMITTED).unwrap();
    store.shutdown().unwrap();
    bodies
}

fn queue_dir(queue: u32) -> PathBuf {
    Path::new(ROOT).join("consumequeue/t").join(queue.to_string())
}

/// The single consume-queue file of `queue`.
fn queue_file(sim: &SimStorage, queue: u32) -> PathBuf {
    let files = sim.list(&queue_dir(queue)).unwrap();
    assert_eq!(files.len(), 1, "one segment");
    queue_dir(queue).join(&files[0].name)
}

fn entry_bytes(sim: &SimStorage, queue: u32, index: usize) -> Vec<u8> {
    sim.file_bytes(&queue_file(sim, queue)).unwrap()[20 * index..20 * index + 20].to_vec()
}

fn overwrite_entry(sim: &SimStorage, queue: u32, index: usize, bytes: &[u8]) {
    assert!(sim.patch_file(&queue_file(sim, queue), 20 * index, bytes));
}

fn remove_all_under(sim: &SimStorage, dir: &Path) {
    for file in sim.list(dir).unwrap_or_default() {
        sim.remove(&dir.join(file.name)).unwrap();
    }
}

/// Opens the damaged store and checks that nothing was lost: queue 0 reads
/// back whole at its offsets, the group's offset stands, the next put takes
/// offset 30, and the repair was counted.
fn check_repaired(sim: &SimStorage, bodies: &[Vec<u8>], what: &str) -> MessageStore {
    let store = open(sim, config(FlushDiskType::SyncFlush));
    assert_eq!(store.queue_range("t", 0).unwrap(), (0, u64::from(MESSAGES)), "{what}: the queue is whole");
    let read = read_queue(&store, "t", 0);
    let expected: Vec<(u64, Vec<u8>)> = bodies.iter().cloned().enumerate().map(|(k, b)| (k as u64, b)).collect();
    assert_eq!(read, expected, "{what}: every message at its offset");
    assert_eq!(store.committed_offset("g", "t", 0), Some(COMMITTED), "{what}: the group's offset is not lowered");
    for k in 0..MESSAGES {
        let found = store.query_by_key("t", &format!("k{k}"), 0, u64::MAX, 4).unwrap();
        assert_eq!(found.len(), 1, "{what}: key k{k} found");
    }
    let report = store.open_report();
    let stats = store.stats();
    assert!(
        stats.queues_rebuilt > 0 || report.rebuilt_all.is_some() || report.index_rebuilt,
        "{what}: the repair is counted: {report:?} {stats:?}"
    );
    let put = store.put_message(&Message::new("t", 0, &b"after"[..])).unwrap();
    assert_eq!(put.queue_offset, u64::from(MESSAGES), "{what}: no offset given twice");
    store
}

#[test]
fn an_overwritten_entry_below_the_dispatch_point_is_repaired_never_cut() {
    for without_checkpoint in [false, true] {
        for (name, damage) in [
            ("garbage", vec![0xA5u8; 20]),
            ("zeros", vec![0u8; 20]),
            ("a copy of an earlier entry", Vec::new()),
            ("an entry past the log's end", Vec::new()),
        ] {
            let what = format!("entry 5 overwritten with {name}, checkpoint removed: {without_checkpoint}");
            let sim = SimStorage::new();
            let bodies = clean_store(&sim, false);
            let bytes = match name {
                "a copy of an earlier entry" => entry_bytes(&sim, 0, 2),
                "an entry past the log's end" => {
                    let mut bytes = entry_bytes(&sim, 0, 5);
                    bytes[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
                    bytes
                }
                _ => damage,
            };
            overwrite_entry(&sim, 0, 5, &bytes);
            if without_checkpoint {
                sim.remove(&Path::new(ROOT).join("config/dispatch")).unwrap();
            }
            check_repaired(&sim, &bodies, &what).shutdown().unwrap();
        }
    }
}

#[test]
fn the_first_and_the_last_entry_damaged_are_repaired() {
    for index in [0, usize::from(MESSAGES) - 1] {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, false);
        overwrite_entry(&sim, 0, index, &[0u8; 20]);
        check_repaired(&sim, &bodies, &format!("entry {index} zeroed")).shutdown().unwrap();
    }
}

#[test]
fn a_missing_consume_queue_directory_or_all_of_them_is_rebuilt() {
    for (what, dir, without_checkpoint) in [
        ("the queue's files deleted", queue_dir(0), false),
        ("consumequeue/ deleted", Path::new(ROOT).join("consumequeue"), false),
        ("consumequeue/ and the checkpoint deleted", Path::new(ROOT).join("consumequeue"), true),
    ] {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, false);
        remove_all_under(&sim, &queue_dir(0));
        if dir.ends_with("consumequeue") {
            remove_all_under(&sim, &queue_dir(1));
        }
        if without_checkpoint {
            sim.remove(&Path::new(ROOT).join("config/dispatch")).unwrap();
        }
        let store = check_repaired(&sim, &bodies, what);
        if !without_checkpoint {
            assert_eq!(store.open_report().queues_rebuilt_whole, 1, "{what}: rebuilt in the open's own pass");
        }
        store.shutdown().unwrap();
    }
}

#[test]
fn a_consume_queue_file_cut_short_or_grown_is_rebuilt() {
    for cut in [0usize, 100, 4096, 81_920 + 20] {
        let sim = SimStorage::new();
        let bodies = clean_store(&sim, false);
        let path = queue_file(&sim, 0);
        let mut bytes = sim.file_bytes(&path).unwrap();
        bytes.resize(cut, 7);
        sim.write_file(&path, &bytes);
        check_repaired(&sim, &bodies, &format!("the file cut to {cut} bytes")).shutdown().unwrap();
    }
}

#[test]
fn an_entry_naming_another_queues_message_is_repaired_when_a_read_finds_it() {
    let sim = SimStorage::new();
    let bodies = clean_store(&sim, true);
    // Queue 1's entry 5 names a record between queue 0's entries 5 and 6 and
    // of the same size: in order, so only reading the record shows it.
    let other = entry_bytes(&sim, 1, 5);
    overwrite_entry(&sim, 0, 5, &other);
    let store = check_repaired(&sim, &bodies, "entry 5 naming queue 1's message 5");
    assert!(store.stats().entries_repaired > 0);
    store.shutdown().unwrap();
}

#[test]
fn a_damaged_dispatch_checkpoint_rebuilds_everything_from_the_log() {
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
        let store = check_repaired(&sim, &bodies, &format!("the checkpoint {damage}"));
        assert!(store.open_report().rebuilt_all.is_some());
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
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        assert!(store.open_report().topics_recovered, "{damage}");
        // With the checkpoint, the queue count is known; from the log alone,
        // queues up to the highest one used.
        let queues = if without_checkpoint { 1 } else { 2 };
        assert_eq!(store.topics(), vec![("t".to_string(), queues)]);
        let read = read_queue(&store, "t", 0);
        assert_eq!(read.len(), bodies.len());
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
        let store = check_repaired(&sim, &bodies, &format!("index: {damage}"));
        assert!(store.open_report().index_rebuilt, "{damage}");
        store.shutdown().unwrap();
    }
}

#[test]
fn a_queue_damaged_while_the_log_expired_its_messages_goes_on_from_its_end() {
    // Every message of queue 0 expired with the log's front, and its files
    // are gone: it starts again at its recorded end, never at 0.
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    for i in 0..5u8 {
        store.put_message(&Message::new("t", 0, vec![i; 100])).unwrap().durability.wait().unwrap();
    }
    // Fill queue 1 until the log has rolled past the segments of queue 0.
    let body = vec![7u8; 3000];
    while store.log().min_offset() == 0 {
        for _ in 0..64 {
            store.put_message(&Message::new("t", 1, body.clone())).unwrap().durability.wait().unwrap();
        }
        store.log().delete_segments_before(store.log().max_offset() - 70_000, usize::MAX).unwrap();
    }
    assert!(store.wait_for("t", 1, 0, std::time::Duration::from_secs(10)).unwrap());
    store.shutdown().unwrap();
    remove_all_under(&sim, &queue_dir(0));
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    assert_eq!(store.queue_range("t", 0).unwrap(), (5, 5));
    let got = store.get_messages("g", "t", 0, 0, 8, u64::MAX, &TagFilter::All).unwrap();
    assert_eq!((got.status, got.next_offset), (message_store::GetStatus::OffsetTooSmall, 5));
    assert_eq!(store.put_message(&Message::new("t", 0, &b"after"[..])).unwrap().queue_offset, 5);
    store.shutdown().unwrap();
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
fn the_check_sees_each_damage_and_nothing_once_the_store_repaired_it() {
    let sim = SimStorage::new();
    clean_store(&sim, true);
    let clean = message_store::inspect::check(to_disk(&sim).path()).unwrap();
    assert!(clean.problems.is_empty(), "{:?}", clean.problems);
    assert_eq!((clean.messages, clean.queues, clean.entries, clean.keys), (60, 2, 60, 30));
    type Damage = fn(&SimStorage);
    let damages: [(&str, Damage); 7] = [
        ("an entry zeroed", |sim| overwrite_entry(sim, 0, 7, &[0; 20])),
        ("an entry naming another queue's message", |sim| {
            let other = entry_bytes(sim, 1, 5);
            overwrite_entry(sim, 0, 5, &other);
        }),
        ("a queue's files removed", |sim| remove_all_under(sim, &queue_dir(1))),
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
            assert_eq!(store.committed_offset("g", "t", 0), Some(30), "{what}: lowered to the queue's end");
            store.shutdown().unwrap();
            assert!(problems(&sim).is_empty(), "{what}: lowered for good");
            continue;
        }
        // The open repairs what it sees; a read, what it reads; the index, if asked.
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        for queue in 0..2 {
            read_queue(&store, "t", queue);
        }
        let left = message_store::inspect::check(to_disk(&sim).path()).unwrap();
        if left
            .problems
            .iter()
            .any(|p| p.path.ends_with("index") || p.path.parent().is_some_and(|d| d.ends_with("index")))
        {
            store.rebuild_index().unwrap();
        }
        store.shutdown().unwrap();
        let left = problems(&sim);
        assert!(left.is_empty(), "{what}: repaired, but {left:?}");
    }
}

#[test]
fn damage_older_than_the_checked_segments_is_repaired_by_the_read_that_meets_it() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    // Five consume-queue segments of 1,024 entries; the open reads the last three.
    let messages = 5 * 1024 - 10;
    let bodies: Vec<Vec<u8>> = (0..messages).map(|i: u32| i.to_le_bytes().to_vec()).collect();
    for chunk in bodies.chunks(256) {
        let batch: Vec<Message> = chunk.iter().map(|b| Message::new("t", 0, b.clone())).collect();
        store.put_messages(&batch).unwrap().durability.wait().unwrap();
    }
    assert!(store.wait_for("t", 0, u64::from(messages) - 1, std::time::Duration::from_secs(10)).unwrap());
    store.shutdown().unwrap();
    let first = queue_dir(0).join(format!("{:020}", 0));
    assert!(sim.patch_file(&first, 20 * 10, &[0u8; 20]));
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    assert_eq!(store.stats().queues_rebuilt, 0, "not read at open");
    let read = read_queue(&store, "t", 0);
    assert_eq!(read.len(), bodies.len());
    assert!(read.iter().zip(&bodies).all(|((_, got), want)| got == want));
    assert_eq!(store.stats().queues_rebuilt, 1, "repaired by the read");
    store.shutdown().unwrap();
}
