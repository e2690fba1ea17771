//! Consumer offsets (RocketMQ's `ConsumerOffsetManager`): per group, topic and
//! queue, the next offset the group consumes. Kept in `config/consumer_offsets`,
//! replaced atomically (write, sync, rename, sync the directory) on every
//! commit, so a commit that returned survives any crash. Commits that arrive
//! while a write is under way share the next one (group commit for offsets).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};
use store_io::Storage;

use crate::error::{io_err, StoreError};
use crate::textfile;
use crate::topic::{validate_group, validate_topic};

/// The first line of the offsets file.
const HEADER: &str = "# message-store consumer offsets v1: <group> <topic> <queue> <offset>";

/// Where the offsets of the store in `root` are.
pub(crate) fn offsets_path(root: &Path) -> PathBuf {
    root.join("config").join("consumer_offsets")
}

/// Parses the offsets file at `path`.
pub(crate) fn parse_offsets(path: &Path, bytes: Vec<u8>) -> Result<BTreeMap<OffsetKey, u64>, StoreError> {
    let offsets = textfile::parse(path, bytes, HEADER, "consumer offsets", |line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let [group, topic, queue, offset] = fields[..] else { return None };
        if validate_group(group).is_err() || validate_topic(topic).is_err() {
            return None;
        }
        let (queue, offset) = (queue.parse::<u32>().ok()?, offset.parse::<u64>().ok()?);
        Some(((group.to_string(), topic.to_string(), queue), offset))
    })?;
    Ok(offsets.into_iter().collect())
}

/// (group, topic, queue id).
pub(crate) type OffsetKey = (String, String, u32);

#[derive(Debug, Default)]
struct Table {
    offsets: BTreeMap<OffsetKey, u64>,
    /// Bumped by every change.
    version: u64,
    /// The version the file holds.
    persisted: u64,
    /// A write is under way.
    writing: bool,
}

/// The consumer offsets of a store.
#[derive(Debug)]
pub(crate) struct ConsumerOffsets {
    path: PathBuf,
    table: Mutex<Table>,
    written: Condvar,
}

impl ConsumerOffsets {
    /// Loads the offsets of the store in `root` (none if there is no file yet).
    pub(crate) fn load(storage: &dyn Storage, root: &Path) -> Result<Self, StoreError> {
        let path = offsets_path(root);
        let offsets = match storage.read_small(&path).map_err(io_err(&path))? {
            Some(bytes) => parse_offsets(&path, bytes)?,
            None => BTreeMap::new(),
        };
        Ok(ConsumerOffsets { path, table: Mutex::new(Table { offsets, ..Table::default() }), written: Condvar::new() })
    }

    /// The committed offset of `key`.
    pub(crate) fn get(&self, key: &OffsetKey) -> Option<u64> {
        self.table.lock().offsets.get(key).copied()
    }

    /// Every committed offset.
    pub(crate) fn all(&self) -> Vec<(OffsetKey, u64)> {
        self.table.lock().offsets.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Lowers offsets above what their queue holds (after a crash under async
    /// flush took messages back); returns how many moved.
    /// `max_of` gives a queue's end, `None` for a queue it cannot tell (left as is).
    pub(crate) fn clamp(
        &self,
        storage: &dyn Storage,
        max_of: impl Fn(&OffsetKey) -> Option<u64>,
    ) -> Result<usize, StoreError> {
        let mut moved = 0usize;
        {
            let mut table = self.table.lock();
            for (key, offset) in table.offsets.iter_mut() {
                let Some(max) = max_of(key) else { continue };
                if *offset > max {
                    tracing::warn!(group = %key.0, topic = %key.1, queue = key.2, offset = *offset, max, "consumer offset beyond its queue's end lowered");
                    *offset = max;
                    moved = moved.saturating_add(1);
                }
            }
            if moved > 0 {
                table.version = table.version.saturating_add(1);
            }
        }
        if moved > 0 {
            self.persist(storage)?;
        }
        Ok(moved)
    }

    /// Sets `key`'s offset and returns once the file holds it (or a later value).
    pub(crate) fn commit(&self, storage: &dyn Storage, key: OffsetKey, offset: u64) -> Result<(), StoreError> {
        {
            let mut table = self.table.lock();
            if table.offsets.get(&key) != Some(&offset) {
                table.offsets.insert(key, offset);
                table.version = table.version.saturating_add(1);
            }
        }
        self.persist(storage)
    }

    /// Writes the table unless a write that began after the current version
    /// already holds it; waits for a write under way and joins the next.
    fn persist(&self, storage: &dyn Storage) -> Result<(), StoreError> {
        let mut table = self.table.lock();
        let wanted = table.version;
        loop {
            if table.persisted >= wanted {
                return Ok(());
            }
            if !table.writing {
                break;
            }
            self.written.wait(&mut table);
        }
        table.writing = true;
        let version = table.version;
        let lines =
            table.offsets.iter().map(|((group, topic, queue), offset)| format!("{group} {topic} {queue} {offset}"));
        let text = textfile::render(HEADER, lines);
        drop(table);
        let result = textfile::write(storage, &self.path, &text);
        let mut table = self.table.lock();
        table.writing = false;
        if result.is_ok() {
            // A failed write leaves `persisted` behind: the next caller writes.
            table.persisted = table.persisted.max(version);
        }
        drop(table);
        self.written.notify_all();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use store_io::sim::SimStorage;

    fn key(group: &str, queue: u32) -> OffsetKey {
        (group.to_string(), "t".to_string(), queue)
    }

    #[test]
    fn a_commit_that_returned_survives_a_power_loss() {
        let sim = SimStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let offsets = ConsumerOffsets::load(&*storage, Path::new("/s")).unwrap();
        offsets.commit(&*storage, key("g", 0), 7).unwrap();
        offsets.commit(&*storage, key("g", 1), 9).unwrap();
        offsets.commit(&*storage, key("h", 0), 1).unwrap();
        sim.crash_losing_unsynced();
        let reloaded = ConsumerOffsets::load(&*storage, Path::new("/s")).unwrap();
        assert_eq!(reloaded.get(&key("g", 0)), Some(7));
        assert_eq!(reloaded.get(&key("g", 1)), Some(9));
        assert_eq!(reloaded.get(&key("h", 0)), Some(1));
    }

    #[test]
    fn concurrent_commits_all_land_and_share_writes() {
        let sim = SimStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let offsets = Arc::new(ConsumerOffsets::load(&*storage, Path::new("/s")).unwrap());
        let threads: Vec<_> = (0..4u32)
            .map(|q| {
                let (offsets, storage) = (Arc::clone(&offsets), Arc::clone(&storage));
                std::thread::spawn(move || {
                    for offset in 1..=50 {
                        offsets.commit(&*storage, key("g", q), offset).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        sim.crash_losing_unsynced();
        let reloaded = ConsumerOffsets::load(&*storage, Path::new("/s")).unwrap();
        for q in 0..4 {
            assert_eq!(reloaded.get(&key("g", q)), Some(50));
        }
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_it() {
        let sim = SimStorage::new();
        sim.write_file(Path::new("/s/config/consumer_offsets"), b"garbage\n");
        let err = ConsumerOffsets::load(&sim, Path::new("/s")).unwrap_err();
        assert!(err.to_string().contains("consumer_offsets"), "{err}");
    }
}
