//! The key index: lookups by key and time range, across index files, after a
//! restart, with every key sharing one slot, and expiry with the log.

mod common;

use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open};
use message_store::{IndexConfig, Message, MessageStoreConfig};
use store_io::sim::SimStorage;

const WAIT: Duration = Duration::from_secs(10);

fn small_index(slots: u32, items: u32) -> MessageStoreConfig {
    {
        let mut config = config(FlushDiskType::SyncFlush);
        config.index = IndexConfig::new(slots, items);
        config
    }
}

fn bodies(found: &[message_store::StoredMessage]) -> Vec<Vec<u8>> {
    found.iter().map(|m| m.body.to_vec()).collect()
}

#[test]
fn keys_are_found_newest_first_within_their_topic_and_time_range() {
    let sim = SimStorage::new();
    let store = open(&sim, small_index(1024, 4096));
    store.create_topic("a", 2).unwrap();
    store.create_topic("b", 1).unwrap();
    let mut times = Vec::new();
    for i in 0..6u8 {
        let m = Message::new("a", u32::from(i % 2), vec![i])
            .with_key(if i % 2 == 0 { "even" } else { "odd" })
            .with_key(format!("n{i}"));
        let put = store.put_message(&m).unwrap();
        put.durability.wait().unwrap();
        times.push(put.store_timestamp_ms);
        std::thread::sleep(Duration::from_millis(3));
    }
    store.put_message(&Message::new("b", 0, vec![99]).with_key("even")).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("b", 0, 0, WAIT).unwrap().arrived() && store.wait_for("a", 1, 2, WAIT).unwrap().arrived());
    let even = store.query_by_key("a", "even", 0, u64::MAX, 10).unwrap();
    assert_eq!(bodies(&even), vec![vec![4], vec![2], vec![0]], "newest first, topic b's message not among them");
    assert_eq!(bodies(&store.query_by_key("b", "even", 0, u64::MAX, 10).unwrap()), vec![vec![99]]);
    assert_eq!(bodies(&store.query_by_key("a", "n3", 0, u64::MAX, 10).unwrap()), vec![vec![3]]);
    assert_eq!(store.query_by_key("a", "even", 0, u64::MAX, 2).unwrap().len(), 2, "at most max");
    let window = store.query_by_key("a", "even", times[1], times[3], 10).unwrap();
    assert_eq!(bodies(&window), vec![vec![2]], "only within the time range");
    assert!(store.query_by_key("a", "missing", 0, u64::MAX, 10).unwrap().is_empty());
    store.shutdown().unwrap();
}

#[test]
fn keys_sharing_one_slot_are_told_apart_and_files_roll_and_reopen() {
    let sim = SimStorage::new();
    // One slot: every key's chain is every item; 1,024 items a file: several files.
    let config = small_index(1, 1024);
    let store = open(&sim, config.clone());
    store.create_topic("t", 4).unwrap();
    let n = 3000u32;
    for i in 0..n {
        store.put_message(&Message::new("t", i % 4, i.to_le_bytes().to_vec()).with_key(format!("k{i}"))).unwrap();
    }
    store.log().flush_all().unwrap();
    assert!(store.wait_for("t", 3, u64::from(n / 4 - 1), WAIT).unwrap().arrived());
    for i in [0u32, 1, 1023, 1024, 2047, 2999] {
        let found = store.query_by_key("t", &format!("k{i}"), 0, u64::MAX, 4).unwrap();
        assert_eq!(bodies(&found), vec![i.to_le_bytes().to_vec()], "key k{i}");
    }
    store.shutdown().unwrap();
    let reopened = open(&sim, config);
    for i in [0u32, 1500, 2999] {
        let found = reopened.query_by_key("t", &format!("k{i}"), 0, u64::MAX, 4).unwrap();
        assert_eq!(bodies(&found), vec![i.to_le_bytes().to_vec()], "key k{i} after a restart");
    }
    // New keys go on in the live file.
    reopened.put_message(&Message::new("t", 0, &b"new"[..]).with_key("k0")).unwrap().durability.wait().unwrap();
    assert!(reopened.wait_for("t", 0, u64::from(n / 4), WAIT).unwrap().arrived());
    let found = reopened.query_by_key("t", "k0", 0, u64::MAX, 4).unwrap();
    assert_eq!(bodies(&found), vec![b"new".to_vec(), 0u32.to_le_bytes().to_vec()]);
    reopened.shutdown().unwrap();
}

#[test]
fn a_store_without_the_index_finds_nothing_by_key() {
    let sim = SimStorage::new();
    let store = open(&sim, {
        let mut config = config(FlushDiskType::SyncFlush);
        config.message_index_enable = false;
        config
    });
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, &b"x"[..]).with_key("k")).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("t", 0, 0, WAIT).unwrap().arrived());
    assert!(store.query_by_key("t", "k", 0, u64::MAX, 4).unwrap().is_empty());
    store.shutdown().unwrap();
}

#[test]
fn every_key_of_a_message_with_several_keys_is_found_after_a_restart() {
    for crash in [false, true] {
        let sim = SimStorage::new();
        let config = small_index(64, 1024);
        let store = open(&sim, config.clone());
        store.create_topic("t", 1).unwrap();
        for i in 0..20u8 {
            let m = Message::new("t", 0, vec![i])
                .with_key(format!("a{i}"))
                .with_key(format!("b{i}"))
                .with_key(format!("c{i}"));
            store.put_message(&m).unwrap().durability.wait().unwrap();
        }
        assert!(store.wait_for("t", 0, 19, WAIT).unwrap().arrived());
        if crash {
            // The consume queues and the index as the last thorough flush left
            // them: nothing lost below the recorded point, the rest dispatched again.
            store.log().flush_all().unwrap();
            let snapshot = sim.snapshot();
            store.shutdown().unwrap();
            let image = snapshot.crash_image(|_| false);
            let store = open(&image, config.clone());
            for i in 0..20u8 {
                for key in ["a", "b", "c"] {
                    let found = store.query_by_key("t", &format!("{key}{i}"), 0, u64::MAX, 4).unwrap();
                    assert_eq!(bodies(&found), vec![vec![i]], "key {key}{i} after a crash");
                }
            }
            store.shutdown().unwrap();
            continue;
        }
        store.shutdown().unwrap();
        let store = open(&sim, config.clone());
        for i in 0..20u8 {
            for key in ["a", "b", "c"] {
                let found = store.query_by_key("t", &format!("{key}{i}"), 0, u64::MAX, 4).unwrap();
                assert_eq!(bodies(&found), vec![vec![i]], "key {key}{i} after a restart");
            }
        }
        store.shutdown().unwrap();
    }
}

#[test]
fn an_index_shape_changed_without_changing_the_file_size_is_rebuilt() {
    let sim = SimStorage::new();
    // 16 or 32 slots of 128 items: both files are 4 KiB.
    let store = open(&sim, small_index(16, 128));
    store.create_topic("t", 1).unwrap();
    for i in 0..300u32 {
        let m = Message::new("t", 0, i.to_le_bytes().to_vec()).with_key(format!("k{i}"));
        store.put_message(&m).unwrap().durability.wait().unwrap();
    }
    assert!(store.wait_for("t", 0, 299, WAIT).unwrap().arrived());
    store.shutdown().unwrap();
    let files = |sim: &SimStorage| {
        use store_io::Storage;
        sim.list(&std::path::Path::new(common::ROOT).join("index")).unwrap().len()
    };
    assert!(files(&sim) >= 3, "sealed files and a live one");
    let store = open(&sim, small_index(32, 128));
    assert!(store.open_report().index_rebuilt, "another shape: rebuilt from the log");
    for i in 0..300u32 {
        let found = store.query_by_key("t", &format!("k{i}"), 0, u64::MAX, 4).unwrap();
        assert_eq!(bodies(&found), vec![i.to_le_bytes().to_vec()], "key k{i}");
    }
    store.shutdown().unwrap();
}

#[test]
fn a_crash_after_an_index_file_was_sealed_keeps_every_key_below_the_point() {
    // A file is sealed (its slot table and footer appended) by the message
    // that does not fit it, after the last recorded point. A power cut may
    // keep the footer's sector and not the slot table's: the file must not be
    // taken for sealed then, or every key in it is lost.
    let sim = SimStorage::new();
    let config = {
        let mut config = small_index(64, 8);
        config.flush_interval_consume_queue_ms = 3_600_000;
        config.flush_consume_queue_thorough_interval_ms = 3_600_000;
        config
    };
    let store = open(&sim, config.clone());
    store.create_topic("t", 1).unwrap();
    for i in 0..8u8 {
        store.put_message(&Message::new("t", 0, vec![i]).with_key(format!("k{i}"))).unwrap().durability.wait().unwrap();
    }
    assert!(store.wait_for("t", 0, 7, WAIT).unwrap().arrived());
    store.shutdown().unwrap(); // the point recorded: file 0 full, not sealed
    let store = open(&sim, config.clone());
    store.put_message(&Message::new("t", 0, vec![8]).with_key("k8")).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("t", 0, 8, WAIT).unwrap().arrived());
    let index_dir = std::path::Path::new(common::ROOT).join("index");
    let first = {
        use store_io::Storage;
        let mut names: Vec<String> = sim.list(&index_dir).unwrap().into_iter().map(|f| f.name).collect();
        names.sort();
        assert_eq!(names.len(), 2, "the ninth key rolled the index");
        index_dir.join(&names[0])
    };
    let footer_sector = 4096 / 512 - 1;
    // The crash keeps the footer of the sealed file and nothing else of the
    // index that was not flushed; everything else that was written.
    let snapshot = sim.snapshot();
    store.shutdown().unwrap();
    let image = snapshot.crash_image_with(|path, sector| {
        if path.starts_with(&index_dir) {
            path == first && sector == footer_sector
        } else {
            true
        }
    });
    let store = open(&image, config);
    for i in 0..9u8 {
        let found = store.query_by_key("t", &format!("k{i}"), 0, u64::MAX, 4).unwrap();
        assert_eq!(bodies(&found), vec![vec![i]], "key k{i}");
    }
    store.shutdown().unwrap();
}
