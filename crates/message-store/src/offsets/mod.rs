//! Consumer offsets (RocketMQ's `ConsumerOffsetManager`): per group, topic and
//! queue, the next offset the group consumes.
//!
//! Kept in a journal, `config/offsets/<generation>` ([`journal`] has the
//! format): a snapshot of the whole table, then one record per change, so a
//! commit costs a 29-byte record, never a rewrite of every group's every queue.
//! A commit returns once its record is synced; commits that arrive while a sync
//! is under way share the next one (group commit). When the journal is full it
//! is compacted: the table is written as the snapshot of the next generation,
//! synced, named in `config/offsets/CURRENT` (replaced atomically), and only
//! then the old journal deleted, so a crash at any step leaves one complete
//! journal that `CURRENT` names. A store written before the journal (the text
//! file `config/consumer_offsets`) is converted at its first open.
//!
//! The store's operations on them (commit, reset, remove, read) are in
//! `api.rs`; the syncs, blocking and for commits awaited as futures (the
//! store's offsets sync service), in `sync.rs`.

mod api;
mod journal;
mod sync;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flush_service::ServiceState;
use mapped_file::MappedFile;
use parking_lot::{Condvar, Mutex};
use store_io::Storage;

use crate::error::{io_err, StoreError};
use crate::textfile;
use crate::topic::{validate_group, validate_topic};
pub use api::{CommittedOffset, OffsetReset, ResetTo};
use journal::{Change, Encoder, Table, Undo};
pub(crate) use sync::Staged;
use sync::{wake, Syncs};

/// The first line of the text file of offsets the store kept before the journal.
const LEGACY_HEADER: &str = "# message-store consumer offsets v1: <group> <topic> <queue> <offset>";

/// (group, topic, queue id).
pub(crate) type OffsetKey = (String, String, u32);

/// Which committed offsets a removal takes away.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Removal<'a> {
    /// Every offset of a group (RocketMQ's `removeOffset`).
    Group(&'a str),
    /// A group's offsets in a topic.
    GroupTopic(&'a str, &'a str),
    /// Every group's offsets in a topic (RocketMQ's `cleanOffsetByTopic`).
    Topic(&'a str),
}

/// Where the offsets of the store in `root` live.
pub(crate) fn offsets_dir(root: &Path) -> PathBuf {
    root.join("config").join("offsets")
}

fn current_path(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}

/// The text file of offsets of a store written before the journal.
fn legacy_path(root: &Path) -> PathBuf {
    root.join("config").join("consumer_offsets")
}

/// The journal of `generation` in `dir`.
fn journal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(mapped_file::file_name(generation))
}

/// The size of a journal that starts with a snapshot of `snapshot` bytes:
/// room for as many change records again and at least `min`, so a
/// compaction writes at most about as much as the commits since the last one.
fn journal_size(snapshot: usize, min: usize) -> usize {
    let size = snapshot.saturating_mul(2).max(min);
    size.div_ceil(4096).saturating_mul(4096)
}

/// Reads the offsets of the store in `root` through `read` (a small file's
/// bytes, `None` if missing), without writing anything: the journal `CURRENT`
/// names, else the text file of a store written before the journal, else none.
/// Also returns the generation read (0: none).
pub(crate) fn read_offsets(
    root: &Path,
    read: impl Fn(&Path) -> Result<Option<Vec<u8>>, StoreError>,
) -> Result<(journal::Scanned, u64), StoreError> {
    let dir = offsets_dir(root);
    let current = current_path(&dir);
    if let Some(bytes) = read(&current)? {
        let generation =
            std::str::from_utf8(&bytes).ok().and_then(|s| s.trim().parse::<u64>().ok()).filter(|&g| g > 0).ok_or_else(
                || StoreError::BadFile { path: current.clone(), reason: "not a generation number".into() },
            )?;
        let path = journal_path(&dir, generation);
        let bytes = read(&path)?.ok_or_else(|| StoreError::BadFile {
            path: current.clone(),
            reason: format!("names generation {generation}, whose journal {} is missing", path.display()),
        })?;
        let scanned = journal::scan(generation, &bytes).map_err(|reason| StoreError::BadFile { path, reason })?;
        return Ok((scanned, generation));
    }
    let legacy = legacy_path(root);
    let table = match read(&legacy)? {
        Some(bytes) => parse_legacy(&legacy, bytes)?,
        None => Table::default(),
    };
    Ok((journal::Scanned { table, end: 0, dirty_tail: false, changes: 0 }, 0))
}

/// Parses the text file of offsets (one `<group> <topic> <queue> <offset>` a line).
fn parse_legacy(path: &Path, bytes: Vec<u8>) -> Result<Table, StoreError> {
    let lines = textfile::parse(path, bytes, LEGACY_HEADER, "consumer offsets", |line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let [group, topic, queue, offset] = fields[..] else { return None };
        if validate_group(group).is_err() || validate_topic(topic).is_err() {
            return None;
        }
        Some((group.to_string(), topic.to_string(), queue.parse::<u32>().ok()?, offset.parse::<u64>().ok()?))
    })?;
    let mut table = Table::default();
    for (group, topic, queue, offset) in lines {
        let (group, _) = table.groups.intern(&group);
        let (topic, _) = table.topics.intern(&topic);
        table.apply(Change::Commit((group, topic, queue), offset));
    }
    Ok(table)
}

/// Every offset of `table` by name, sorted.
fn by_name(table: &Table) -> Vec<(OffsetKey, u64)> {
    let mut all: Vec<(OffsetKey, u64)> = table
        .offsets
        .iter()
        .filter_map(|(&(group, topic, queue), &offset)| {
            let key = (table.groups.name(group)?.to_string(), table.topics.name(topic)?.to_string(), queue);
            Some((key, offset))
        })
        .collect();
    all.sort_unstable();
    all
}

/// Every committed offset of the store in `root`, read without opening it.
pub(crate) fn read_all(
    root: &Path,
    read: impl Fn(&Path) -> Result<Option<Vec<u8>>, StoreError>,
) -> Result<Vec<(OffsetKey, u64)>, StoreError> {
    let (scanned, _) = read_offsets(root, read)?;
    Ok(by_name(&scanned.table))
}

/// The journal being appended to.
#[derive(Debug)]
struct Journal {
    file: Arc<MappedFile>,
    generation: u64,
    /// The ticket of the file's position 0: tickets grow across generations, so
    /// "durable up to ticket t" needs no generation beside it.
    base: u64,
}

impl Journal {
    fn ticket(&self) -> u64 {
        self.base.saturating_add(self.file.wrote_position() as u64)
    }
}

#[derive(Debug)]
struct Inner {
    table: Table,
    /// `None` once closed.
    journal: Option<Journal>,
}

/// The consumer offsets of a store.
#[derive(Debug)]
pub(crate) struct ConsumerOffsets {
    dir: PathBuf,
    /// The smallest journal file.
    min_size: usize,
    /// Converted at this open from the text file of an older store.
    converted: bool,
    inner: Mutex<Inner>,
    syncs: Mutex<Syncs>,
    synced: Condvar,
    /// Wakes the sync service ([`serve`](Self::serve)) for commits waiting
    /// asynchronously.
    sync_wake: Arc<ServiceState>,
}

/// What a batch of commits asks for: (topic, queue, offset) for one group.
pub(crate) type Commits<'a> = &'a [(&'a str, u32, u64)];

impl ConsumerOffsets {
    /// Loads the offsets of the store in `root`, converting the text file of a
    /// store written before the journal, and cleaning up after a crash in the
    /// middle of a compaction.
    /// `min_size` is the smallest journal file.
    pub(crate) fn load(storage: &dyn Storage, root: &Path, min_size: usize) -> Result<Self, StoreError> {
        let dir = offsets_dir(root);
        storage.create_dir_all(&dir).map_err(io_err(&dir))?;
        let read = |path: &Path| storage.read_small(path).map_err(io_err(path));
        let (scanned, generation) = read_offsets(root, read)?;
        // Journals `CURRENT` does not name: the next generation of a compaction
        // that crashed before naming it, or the last one's, not yet deleted.
        let mut highest = generation;
        let mut current_len = 0;
        for entry in storage.list(&dir).map_err(io_err(&dir))? {
            let Some(g) = mapped_file::parse_file_name(&entry.name) else { continue };
            highest = highest.max(g);
            if g == generation {
                current_len = entry.len;
            } else {
                let path = dir.join(&entry.name);
                storage.remove(&path).map_err(io_err(&path))?;
            }
        }
        let journal = if generation == 0 {
            None
        } else {
            let path = journal_path(&dir, generation);
            let file = MappedFile::open(storage, &path, usize::try_from(current_len).unwrap_or(usize::MAX))?;
            if scanned.dirty_tail {
                // Bytes of records never acknowledged lie past the end: erase
                // them (synced), so no stale record can follow a new one.
                file.truncate(scanned.end)?;
            } else {
                file.set_positions(scanned.end)?;
            }
            Some(Journal { file: Arc::new(file), generation, base: 0 })
        };
        let mut converted = false;
        let journal = match journal {
            Some(journal) => journal,
            // A new store, or one written before the journal: its first journal.
            None => {
                let journal =
                    Self::write_generation(storage, &dir, highest.saturating_add(1), &scanned.table, 0, min_size)?;
                let legacy = legacy_path(root);
                if storage.read_small(&legacy).map_err(io_err(&legacy))?.is_some() {
                    tracing::info!(offsets = scanned.table.offsets.len(), "consumer offsets converted to the journal");
                    storage.remove(&legacy).map_err(io_err(&legacy))?;
                    converted = true;
                }
                journal
            }
        };
        tracing::debug!(
            generation = journal.generation,
            offsets = scanned.table.offsets.len(),
            changes = scanned.changes,
            "consumer offsets loaded"
        );
        let durable = journal.ticket();
        Ok(ConsumerOffsets {
            dir,
            min_size,
            converted,
            inner: Mutex::new(Inner { table: scanned.table, journal: Some(journal) }),
            syncs: Mutex::new(Syncs { durable, ..Syncs::default() }),
            synced: Condvar::new(),
            sync_wake: ServiceState::new(),
        })
    }

    /// Writes the journal of `generation` with a snapshot of `table`, syncs it,
    /// and names it in `CURRENT`. Its tickets start at `base`.
    fn write_generation(
        storage: &dyn Storage,
        dir: &Path,
        generation: u64,
        table: &Table,
        base: u64,
        min_size: usize,
    ) -> Result<Journal, StoreError> {
        let snapshot = Encoder::snapshot(generation, table).bytes;
        let size = journal_size(snapshot.len(), min_size);
        let path = journal_path(dir, generation);
        if storage.read_small(&path).map_err(io_err(&path))?.is_some() {
            storage.remove(&path).map_err(io_err(&path))?;
        }
        let file = MappedFile::create(storage, dir, generation, size)?;
        file.append_bytes(0, &snapshot)?;
        file.flush(0)?;
        let current = current_path(dir);
        storage.replace_small(&current, format!("{generation}\n").as_bytes()).map_err(io_err(&current))?;
        Ok(Journal { file: Arc::new(file), generation, base })
    }

    /// The committed offset of `group` in `topic`'s queue `queue`.
    pub(crate) fn get(&self, group: &str, topic: &str, queue: u32) -> Option<u64> {
        let inner = self.inner.lock();
        let table = &inner.table;
        let id = (table.groups.id(group)?, table.topics.id(topic)?, queue);
        table.offsets.get(&id).copied()
    }

    /// Every committed offset, sorted.
    pub(crate) fn all(&self) -> Vec<(OffsetKey, u64)> {
        by_name(&self.inner.lock().table)
    }

    /// The topics in which some group holds an offset.
    pub(crate) fn topics(&self) -> Vec<String> {
        let inner = self.inner.lock();
        let table = &inner.table;
        let ids: std::collections::BTreeSet<u32> = table.offsets.keys().map(|k| k.1).collect();
        ids.into_iter().filter_map(|id| table.topics.name(id).map(str::to_string)).collect()
    }

    /// True when this open converted the text file of an older store.
    pub(crate) fn converted(&self) -> bool {
        self.converted
    }

    /// How many offsets are committed.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().table.offsets.len()
    }

    /// Syncs of the journal so far (each shared by the commits that waited for it).
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.lock().count
    }

    /// Lowers offsets above what their queue holds (after a crash under async
    /// flush took messages back); returns how many moved.
    /// `max_of` gives a queue's end, `None` for a queue it cannot tell (left as is).
    pub(crate) fn clamp(
        &self,
        storage: &dyn Storage,
        max_of: impl Fn(&OffsetKey) -> Option<u64>,
    ) -> Result<usize, StoreError> {
        let mut lowered = Vec::new();
        // By queue, so each queue's end is asked for once, however many groups
        // consume it.
        let mut all = self.all();
        all.sort_unstable_by(|a, b| (&a.0 .1, a.0 .2).cmp(&(&b.0 .1, b.0 .2)));
        let mut known: Option<((String, u32), Option<u64>)> = None;
        for (key, offset) in all {
            let queue = (key.1.clone(), key.2);
            let max = match &known {
                Some((q, max)) if *q == queue => *max,
                _ => {
                    let max = max_of(&key);
                    known = Some((queue, max));
                    max
                }
            };
            let Some(max) = max else { continue };
            if offset > max {
                tracing::warn!(group = %key.0, topic = %key.1, queue = key.2, offset, max, "consumer offset beyond its queue's end lowered");
                lowered.push((key, max));
            }
        }
        for ((group, topic, queue), max) in &lowered {
            self.commit_many(storage, group, &[(topic.as_str(), *queue, *max)])?;
        }
        Ok(lowered.len())
    }

    /// Sets `group`'s offsets in the queues `commits` names, all in one sync;
    /// returns once the journal holds them durably.
    pub(crate) fn commit_many(
        &self,
        storage: &dyn Storage,
        group: &str,
        commits: Commits<'_>,
    ) -> Result<(), StoreError> {
        let staged = self.stage_commits(storage, group, commits)?;
        self.wait_staged(staged)
    }

    /// Nothing to change: what makes the table as it is now durable (values
    /// a commit still syncing appended, or whose sync failed: those go into
    /// the next generation at once). A member that takes an offset from the
    /// table waits for this before it hands out anything after it.
    pub(crate) fn stage_table(&self, storage: &dyn Storage) -> Result<Staged, StoreError> {
        self.stage(storage, |_, _, _| {})
    }

    /// Sets `group`'s offsets in the queues `commits` names (the table shows
    /// them at once) and appends their records, without waiting for a sync:
    /// [`wait_staged`](Self::wait_staged) or [`poll_durable`](Self::poll_durable) does.
    pub(crate) fn stage_commits(
        &self,
        storage: &dyn Storage,
        group: &str,
        commits: Commits<'_>,
    ) -> Result<Staged, StoreError> {
        self.stage(storage, |table, e, undo| {
            let group = intern(&mut table.groups, group, |id, name| e.group_name(id, name));
            for &(topic, queue, offset) in commits {
                let topic = intern(&mut table.topics, topic, |id, name| e.topic_name(id, name));
                let change = Change::Commit((group, topic, queue), offset);
                if table.apply_noting(change, undo) {
                    e.change(change);
                }
            }
        })
    }

    /// Makes `removal` and waits until it is durable; returns how many went.
    pub(crate) fn remove(&self, storage: &dyn Storage, removal: Removal<'_>) -> Result<usize, StoreError> {
        let (removed, staged) = self.stage_removal(storage, removal)?;
        self.wait_staged(staged)?;
        Ok(removed)
    }

    /// Makes `removal` in the table (seen at once) and appends its record,
    /// without waiting for a sync (as [`stage_commits`](Self::stage_commits));
    /// returns how many went.
    pub(crate) fn stage_removal(
        &self,
        storage: &dyn Storage,
        removal: Removal<'_>,
    ) -> Result<(usize, Staged), StoreError> {
        let mut removed = 0;
        let staged = self.stage(storage, |table, e, undo| {
            let change = match removal {
                Removal::Group(group) => table.groups.id(group).map(Change::RemoveGroup),
                Removal::GroupTopic(group, topic) => {
                    table.groups.id(group).zip(table.topics.id(topic)).map(|(g, t)| Change::Remove(g, t))
                }
                Removal::Topic(topic) => table.topics.id(topic).map(Change::RemoveTopic),
            };
            let Some(change) = change else { return };
            let before = table.offsets.len();
            if table.apply_noting(change, undo) {
                removed = before - table.offsets.len();
                e.change(change);
            }
        })?;
        Ok((removed, staged))
    }

    /// Applies `edit` to the table under the lock and appends the records it
    /// encoded. Where the records cannot be written (an append or a
    /// compaction fails), the edit is taken back: the table never shows what
    /// the journal does not hold.
    fn stage(
        &self,
        storage: &dyn Storage,
        edit: impl FnOnce(&mut Table, &mut Encoder, &mut Undo),
    ) -> Result<Staged, StoreError> {
        let (ticket, file, base) = {
            let mut inner = self.inner.lock();
            let journal = inner.journal.as_ref().ok_or(StoreError::Shutdown)?;
            let mut e = Encoder::at(journal.generation, journal.file.wrote_position());
            let failed = journal.file.is_latched();
            let mut undo = Undo::of(&inner.table);
            edit(&mut inner.table, &mut e, &mut undo);
            if e.bytes.is_empty() {
                // Nothing changed; still wait for what is under way (the value
                // may be one a commit still syncing appended). A journal whose
                // sync failed holds values no sync will make durable: the
                // table goes whole into the next generation.
                if failed {
                    self.compact(storage, &mut inner)?;
                }
                let ticket = inner.journal.as_ref().map_or(0, Journal::ticket);
                return Ok(Staged { ticket, file: None });
            }
            let written = (|| {
                let appended = !failed && self.append(inner.journal.as_ref().ok_or(StoreError::Shutdown)?, &e.bytes)?;
                if !appended {
                    // Full (or failed: a failed sync latches the file for good):
                    // the table, with this change, goes into the next generation.
                    self.compact(storage, &mut inner)?;
                }
                Ok::<_, StoreError>(())
            })();
            if let Err(err) = written {
                undo.revert(&mut inner.table);
                return Err(err);
            }
            let journal = inner.journal.as_ref().ok_or(StoreError::Shutdown)?;
            (journal.ticket(), Arc::clone(&journal.file), journal.base)
        };
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::OffsetCommitNotSynced) {
            return Ok(Staged::nothing());
        }
        Ok(Staged { ticket, file: Some((file, base)) })
    }

    /// Appends `bytes` to `journal`; false if they do not fit.
    fn append(&self, journal: &Journal, bytes: &[u8]) -> Result<bool, StoreError> {
        Ok(matches!(journal.file.append_bytes(0, bytes)?, mapped_file::Appended::Written { .. }))
    }

    fn current_ticket(&self) -> u64 {
        self.inner.lock().journal.as_ref().map_or(0, Journal::ticket)
    }

    /// Writes the table as the next generation's snapshot and switches to it;
    /// the old journal is deleted once `CURRENT` names the new one.
    fn compact(&self, storage: &dyn Storage, inner: &mut Inner) -> Result<(), StoreError> {
        let old = inner.journal.as_ref().ok_or(StoreError::Shutdown)?;
        let base = old.ticket().saturating_add(1);
        #[cfg(planted_bugs)]
        let drop_names = !crate::planted::is_active(crate::planted::Bug::CompactionKeepsUnusedNames);
        #[cfg(not(planted_bugs))]
        let drop_names = true;
        // What the snapshot names is all the table names: a name used again
        // after this writes its record again. Kept until the new generation
        // is written: the old journal, still in use if it is not, names them.
        let names = drop_names.then(|| (inner.table.groups.clone(), inner.table.topics.clone()));
        if drop_names {
            inner.table.drop_unused_names();
        }
        let written = Self::write_generation(storage, &self.dir, old.generation + 1, &inner.table, base, self.min_size);
        let journal = match written {
            Ok(journal) => journal,
            Err(err) => {
                if let Some((groups, topics)) = names {
                    (inner.table.groups, inner.table.topics) = (groups, topics);
                }
                return Err(err);
            }
        };
        if let Err(err) = old.file.destroy() {
            // Left behind: the next open deletes it (`CURRENT` names the new one).
            tracing::warn!(%err, "the compacted consumer offsets journal could not be deleted");
        }
        tracing::debug!(
            generation = journal.generation,
            offsets = inner.table.offsets.len(),
            "consumer offsets compacted"
        );
        let durable = journal.ticket();
        inner.journal = Some(journal);
        let mut syncs = self.syncs.lock();
        syncs.durable = syncs.durable.max(durable);
        syncs.count = syncs.count.saturating_add(1);
        let wakers = syncs.finished();
        drop(syncs);
        self.synced.notify_all();
        wake(wakers);
        Ok(())
    }
}

/// The id of `name` in `names`, calling `named` when it is new (to write its record).
fn intern(names: &mut journal::Names, name: &str, named: impl FnOnce(u32, &str)) -> u32 {
    let (id, new) = names.intern(name);
    if new {
        named(id, name);
    }
    id
}

#[cfg(test)]
mod tests;
