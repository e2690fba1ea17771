//! The message store's own files (the topic registry, the consumer-offsets
//! journal and `CURRENT`, the dispatch checkpoint, the queue index's table
//! and runs, the key index) as arbitrary bytes: their parsers are private to
//! the crate, so the bytes reach them through an open. A small store is
//! built once on a simulated disk; each input's first byte picks one of its
//! files, the rest replaces that file's bytes, and the store is opened (and
//! closed if it opened). A panic is the finding; an error is a fine answer.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use commitlog::{CommitLogConfig, FlushDiskType, Storage};
use libfuzzer_sys::fuzz_target;
use message_store::{Message, MessageStore, MessageStoreConfig};
use store_io::sim::{SimSnapshot, SimStorage};

const ROOT: &str = "/store";

/// A small store: 64 KiB segments, a small key index and offsets journal.
fn config() -> MessageStoreConfig {
    let log = CommitLogConfig {
        disk_space_warning_level_ratio: 100,
        disk_max_used_space_ratio: 100,
        clean_file_forcibly_enable: false,
        ..CommitLogConfig::builder()
            .mapped_file_size_commit_log(64 << 10)
            .max_message_size(4096)
            .flush_disk_type(FlushDiskType::SyncFlush)
            .build()
            .unwrap()
    };
    let mut config = MessageStoreConfig::new(log);
    config.index = message_store::IndexConfig::new(64, 1024);
    config.consumer_offsets_journal_size = 64 << 10;
    config
}

fn open(sim: &SimStorage) -> Result<MessageStore, message_store::StoreError> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    MessageStore::open_with_storage(ROOT, config(), storage)
}

/// The built store, closed, and its own files (sorted).
fn base() -> &'static (Mutex<SimSnapshot>, Vec<PathBuf>) {
    static BASE: OnceLock<(Mutex<SimSnapshot>, Vec<PathBuf>)> = OnceLock::new();
    BASE.get_or_init(|| {
        let sim = SimStorage::new();
        let store = open(&sim).unwrap();
        store.create_topic("a", 2).unwrap();
        store.create_topic("b", 1).unwrap();
        for i in 0..24u32 {
            let (topic, queue) = if i % 3 == 2 { ("b", 0) } else { ("a", i % 2) };
            let message = Message::new(topic, queue, format!("message {i}").into_bytes()).with_key(format!("k{i}"));
            store.put_message(&message).unwrap().durability.wait().unwrap();
            if i % 8 == 7 {
                store.dispatch_now().unwrap();
                store.seal_index().unwrap();
            }
        }
        store.commit_offset("g", "a", 0, 3).unwrap();
        store.commit_offset("g", "b", 0, 5).unwrap();
        store.commit_offset("g", "a", 0, 2).unwrap();
        store.shutdown().unwrap();
        let snapshot = sim.snapshot();
        let root = Path::new(ROOT);
        let mut files: Vec<PathBuf> = snapshot
            .files
            .iter()
            .map(|f| f.path.clone())
            .filter(|p| ["config", "queueindex", "index"].iter().any(|dir| p.starts_with(root.join(dir))))
            .collect();
        files.sort();
        (Mutex::new(snapshot), files)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else { return };
    let (snapshot, files) = base();
    // A fresh copy of the built store for each input.
    let sim = snapshot.lock().unwrap().crash_image(|_| true);
    sim.write_file(&files[usize::from(pick) % files.len()], bytes);
    if let Ok(store) = open(&sim) {
        store.shutdown().unwrap();
    }
});
