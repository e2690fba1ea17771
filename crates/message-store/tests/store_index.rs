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
    MessageStoreConfig {
        index: IndexConfig { hash_slots: slots, max_items: items },
        ..config(FlushDiskType::SyncFlush)
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
    assert!(store.wait_for("b", 0, 0, WAIT).unwrap() && store.wait_for("a", 1, 2, WAIT).unwrap());
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
    assert!(store.wait_for("t", 3, u64::from(n / 4 - 1), WAIT).unwrap());
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
    assert!(reopened.wait_for("t", 0, u64::from(n / 4), WAIT).unwrap());
    let found = reopened.query_by_key("t", "k0", 0, u64::MAX, 4).unwrap();
    assert_eq!(bodies(&found), vec![b"new".to_vec(), 0u32.to_le_bytes().to_vec()]);
    reopened.shutdown().unwrap();
}

#[test]
fn a_store_without_the_index_finds_nothing_by_key() {
    let sim = SimStorage::new();
    let store = open(&sim, MessageStoreConfig { message_index_enable: false, ..config(FlushDiskType::SyncFlush) });
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, &b"x"[..]).with_key("k")).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("t", 0, 0, WAIT).unwrap());
    assert!(store.query_by_key("t", "k", 0, u64::MAX, 4).unwrap().is_empty());
    store.shutdown().unwrap();
}
