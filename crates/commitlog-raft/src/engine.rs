//! Many raft groups over one commit log, as TiKV keeps every region's raft log
//! in one raft-engine and RocketMQ every queue in one commit log: appends of all
//! groups go through one group commit, so concurrent groups share syncs.
//!
//! Every group is a queue of one [`QueueIndex`] (raft index → record), so a
//! group costs no file, no mapping and no system call: its creation, its vote
//! and its purged id are records of the shared log, and its state is in
//! memory and in one state file for all groups ([`crate::state`]). What a
//! group does to its own log never cuts the shared one:
//! - **Truncation** (a conflicting suffix) writes a truncation record, waits for
//!   it to be durable, then cuts the group's queue in the index.
//! - **Purge** writes the purged id durably. Log segments go in
//!   [`RaftLogEngine::reclaim`] (run by the maintenance thread), once no
//!   group's live entries are in them; a group whose oldest live entry lags
//!   more than [`GroupsConfig::rewrite_lag_bytes`] behind the log's end has its
//!   live entries copied forward first (rewritten, as raft-engine's purge
//!   rewrites the regions that pin its oldest files), so one idle group never
//!   pins the log.
//! - **Recovery** opens the index (its sealed runs) and the state file, and
//!   replays the log from the lower of their points into every group in one
//!   pass, whatever the number of groups: the unsealed tail, not the
//!   retention.
//!
//! ```text
//! <dir>/log/               the shared commit log
//! <dir>/raft/queueindex/   the queue index: one run file per sealed log range, a queue table
//! <dir>/raft/state         every group's id, key, creation offset, vote, committed and purged ids, as of a log offset
//! <dir>/raft/lock          the raft directory's lock
//! ```

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use commitlog::{CommitLog, DurabilityHandle};
use mapped_file::{MmapStorage, Storage};
use openraft::{LogId, RaftLogId, RaftTypeConfig};
use parking_lot::{Condvar, Mutex, RwLock};
use queue_index::{Entry as IndexEntry, IndexConfig, QueueIndex};
use serde::de::DeserializeOwned;
use serde::Serialize;
use store_io::remove_files;

use crate::config::RaftStoreConfig;
use crate::error::{io_err, io_error, RaftStoreError};
use crate::group::Group;
use crate::layout::{LOG_DIR, QUEUE_INDEX_DIR, RAFT_DIR, STATE_FILE};
use crate::record::{Header, Kind};
use crate::recovery::{replay, EngineRecovery, Replay};
use crate::state::{self, GroupState, Saved};
#[cfg(doc)]
use crate::GroupsConfig;
use crate::{legacy, RaftLogStore};

mod maintenance;
pub use maintenance::ReclaimStats;
use maintenance::{maintain, Maintenance};

/// Operations between their log append and their index or state update: the
/// checkpoint stays below the first record of each.
#[derive(Default)]
pub(crate) struct InFlight {
    next_ticket: AtomicU64,
    starts: Mutex<HashMap<u64, u64>>,
}

pub(crate) struct InFlightGuard<'a> {
    in_flight: &'a InFlight,
    ticket: u64,
}

impl InFlight {
    fn enter(&self, start: u64) -> InFlightGuard<'_> {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.starts.lock().insert(ticket, start);
        InFlightGuard { in_flight: self, ticket }
    }

    pub(crate) fn min_start(&self) -> Option<u64> {
        self.starts.lock().values().copied().min()
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.in_flight.starts.lock().remove(&self.ticket);
    }
}

pub(crate) struct Engine<C: RaftTypeConfig> {
    pub(crate) dir: PathBuf,
    pub(crate) log: CommitLog,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) config: RaftStoreConfig,
    /// Every group's entries: the group's key → raft index → record.
    pub(crate) index: QueueIndex,
    groups: RwLock<HashMap<u64, Arc<Group<C>>>>,
    /// Creates and drops, one at a time; the key the next group takes.
    next_key: Mutex<u64>,
    maintenance: Mutex<Option<std::thread::JoinHandle<()>>>,
    wake: (Mutex<Maintenance>, Condvar),
    pub(crate) in_flight: InFlight,
    /// The state file's point as written (one checkpoint at a time).
    pub(crate) state_point: Mutex<u64>,
    /// A group's state changed since the state file was written.
    pub(crate) state_dirty: AtomicBool,
    /// One reclaim round at a time.
    pub(crate) reclaiming: Mutex<ReclaimStats>,
    recovery: Mutex<EngineRecovery>,
    closed: AtomicBool,
}

/// What the engine's users hold: the engine closes when the last of them goes
/// (the background threads hold the engine itself, not this).
pub(crate) struct Owner<C: RaftTypeConfig>(pub(crate) Arc<Engine<C>>);

impl<C: RaftTypeConfig> std::ops::Deref for Owner<C> {
    type Target = Engine<C>;
    fn deref(&self) -> &Engine<C> {
        &self.0
    }
}

impl<C: RaftTypeConfig> Drop for Owner<C> {
    fn drop(&mut self) {
        if let Err(err) = self.0.shutdown() {
            tracing::warn!(%err, "raft log engine: closing failed");
        }
    }
}

/// Many raft groups on one commit log: each group's [`RaftLogStore`] comes from
/// [`open_group`](Self::open_group). Cheap to clone (clones share the engine);
/// the engine closes when the last clone and the last group store are gone, or
/// at [`shutdown`](Self::shutdown).
///
/// ```
/// use commitlog_raft::{RaftLogEngine, RaftStoreConfig};
/// use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
/// use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
/// use std::io::Cursor; // the default snapshot data of `declare_raft_types!`
///
/// openraft::declare_raft_types!(
///     /// A raft group whose entries are strings.
///     pub Strings: D = String, R = String,
/// );
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let engine = RaftLogEngine::<Strings>::open(dir.path(), RaftStoreConfig::default())?;
/// // Each group is a store of its own for its `openraft::Raft`; their
/// // appends share the log's syncs.
/// let (mut a, mut b) = (engine.open_group(1)?, engine.open_group(2)?);
/// let entry = |i| Entry::<Strings> {
///     log_id: LogId::new(CommittedLeaderId::new(1, 7), i),
///     payload: EntryPayload::Normal(format!("x = {i}")),
/// };
/// a.blocking_append((1..=3).map(entry)).await?;
/// b.blocking_append((1..=2).map(entry)).await?;
/// b.truncate(LogId::new(CommittedLeaderId::new(1, 7), 2)).await?; // group 2 only
/// assert_eq!(a.get_log_state().await?.last_log_id.map(|id| id.index), Some(3));
/// assert_eq!(b.get_log_state().await?.last_log_id.map(|id| id.index), Some(1));
/// engine.drop_group(2).await?; // its records become garbage the engine reclaims
/// assert_eq!(engine.groups(), vec![1]);
/// engine.shutdown()?;
/// # Ok(())
/// # }
/// ```
pub struct RaftLogEngine<C: RaftTypeConfig> {
    pub(crate) inner: Arc<Owner<C>>,
}

impl<C: RaftTypeConfig> Clone for RaftLogEngine<C> {
    fn clone(&self) -> Self {
        RaftLogEngine { inner: Arc::clone(&self.inner) }
    }
}

impl<C: RaftTypeConfig> std::fmt::Debug for RaftLogEngine<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLogEngine")
            .field("dir", &self.inner.dir)
            .field("groups", &self.inner.groups.read().len())
            .field("log", &self.inner.log)
            .finish()
    }
}

impl<C> RaftLogEngine<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    /// Opens (or creates) the engine in `dir`: the commit log recovers, the
    /// queue index and the state file are read, and the log is replayed from
    /// the lower of their points into every group. A directory of the earlier
    /// layout (a consume queue and a meta file per group under
    /// `raft/groups/`) is converted: its state read from those files, its
    /// index built from the log, then those files deleted.
    pub fn open(dir: impl AsRef<Path>, config: RaftStoreConfig) -> Result<Self, RaftStoreError> {
        let dir = dir.as_ref();
        config.validate()?;
        let log = CommitLog::open(dir.join(LOG_DIR), config.log.clone())?;
        let storage: Arc<dyn Storage> = Arc::new(MmapStorage::lock(&dir.join(RAFT_DIR))?);
        Self::open_parts(dir, config, log, storage)
    }

    /// As [`open`](Self::open), with the commit log on `log_storage` and the
    /// raft directory on `raft_storage` (each must own its directory, the
    /// [`Storage`] contract): `mapped_file::SimStorage` for both in fault-injection
    /// tests, where a simulated power cut then covers every file of the engine.
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        config: RaftStoreConfig,
        log_storage: Arc<dyn Storage>,
        raft_storage: Arc<dyn Storage>,
    ) -> Result<Self, RaftStoreError> {
        let dir = dir.as_ref();
        config.validate()?;
        let log = CommitLog::open_with_storage(dir.join(LOG_DIR), config.log.clone(), log_storage)?;
        Self::open_parts(dir, config, log, raft_storage)
    }

    fn open_parts(
        dir: &Path,
        config: RaftStoreConfig,
        log: CommitLog,
        storage: Arc<dyn Storage>,
    ) -> Result<Self, RaftStoreError> {
        let began = Instant::now();
        let raft_dir = dir.join(RAFT_DIR);
        storage.create_dir_all(&raft_dir).map_err(io_err(&raft_dir))?;
        let state_path = raft_dir.join(STATE_FILE);
        let mut recovery = EngineRecovery::default();
        let (saved, converting) = match state::read::<C::NodeId>(&*storage, &state_path) {
            Ok(Some(saved)) => (saved, false),
            Ok(None) => match legacy::read::<C::NodeId>(&*storage, dir, log.min_offset())? {
                Some(saved) => (saved, true),
                None if log.min_offset() == 0 => (Saved::default(), false),
                None => return Err(RaftStoreError::StateLost { path: state_path, log_min: log.min_offset() }),
            },
            // Damaged: every state record is still in a log that never
            // deleted a segment; past that, the state cannot be rebuilt.
            Err(err) if log.min_offset() == 0 => {
                tracing::warn!(%err, "raft state file damaged: rebuilt from the log's records");
                recovery.state_rebuilt = true;
                (Saved::default(), false)
            }
            Err(err) => return Err(err),
        };
        let index_dir = raft_dir.join(QUEUE_INDEX_DIR);
        let index_config = IndexConfig::concurrent_appends();
        if converting {
            remove_files(&*storage, &index_dir, io_error)?;
        }
        let (mut index, mut report) = QueueIndex::open_with(&*storage, &index_dir, index_config.clone())?;
        // Sealed past what the log holds (never done: a seal stays below the
        // log's durable end): rebuilt, as entries may name lost records.
        #[cfg(planted_bugs)]
        let trust_ahead = crate::planted::is_active(crate::planted::Bug::SealPastDurable);
        #[cfg(not(planted_bugs))]
        let trust_ahead = false;
        let ahead = report.replay_from > log.max_offset() && !trust_ahead;
        let front_lost = index.covers_from() > log.min_offset() && log.max_offset() > log.min_offset();
        // A run dropped whose range the log no longer holds whole: the cuts
        // among its records may be gone too.
        let cuts_lost = !report.dropped.is_empty() && report.replay_from < log.min_offset();
        if ahead || front_lost || cuts_lost {
            tracing::warn!(
                ahead,
                front_lost,
                cuts_lost,
                covers_from = index.covers_from(),
                sealed_to = report.replay_from,
                log_min = log.min_offset(),
                log_max = log.max_offset(),
                "raft queue index rebuilt from the log"
            );
            drop(index);
            remove_files(&*storage, &index_dir, io_error)?;
            (index, report) = QueueIndex::open_with(&*storage, &index_dir, index_config)?;
            recovery.index_rebuilt = true;
        }
        index.expire(&*storage, log.min_offset())?;
        let mut groups: HashMap<u64, Arc<Group<C>>> = HashMap::with_capacity(saved.groups.len());
        for g in &saved.groups {
            groups.insert(g.id, Arc::new(Group::new(g.id, g.key, g.created, g.state.clone())));
        }
        let index_from = report.replay_from.max(log.min_offset());
        let state_from = saved.point.max(log.min_offset());
        let replay_from = index_from.min(state_from);
        recovery.replayed_from = replay_from;
        let mut run = Replay::<C> { index: &index, groups, next_key: saved.next_key, gaps: HashMap::new() };
        for record in log.iter_from(replay_from) {
            let record = record?;
            recovery.records_replayed += 1;
            let (header, payload) = Header::parse(&record.body, record.offset)?;
            let size = u32::try_from(record.size).unwrap_or(u32::MAX);
            let at = IndexEntry { log_offset: record.offset, size, tag: 0 };
            replay(&mut run, header, payload, at, record.offset >= index_from, record.offset >= state_from)?;
        }
        if let Some((&group, &Some((next, found)))) = run.gaps.iter().find(|(_, gap)| gap.is_some()) {
            return Err(RaftStoreError::IndexGap { group, next, found });
        }
        let Replay { groups, next_key, .. } = run;
        // The queues of dropped groups go (their entries stay in the runs,
        // unread, until their segments go).
        let live: HashSet<u64> = groups.values().map(|g| g.key).collect();
        index.forget(&*storage, |key| !live.contains(&key))?;
        recovery.groups = groups.len();
        let engine = Arc::new(Engine {
            dir: dir.to_path_buf(),
            log,
            storage,
            config,
            index,
            groups: RwLock::new(groups),
            next_key: Mutex::new(next_key),
            maintenance: Mutex::new(None),
            wake: (Mutex::new(Maintenance::default()), Condvar::new()),
            in_flight: InFlight::default(),
            state_point: Mutex::new(saved.point),
            state_dirty: AtomicBool::new(recovery.state_rebuilt),
            reclaiming: Mutex::new(ReclaimStats::default()),
            recovery: Mutex::new(recovery),
            closed: AtomicBool::new(false),
        });
        let engine = RaftLogEngine { inner: Arc::new(Owner(engine)) };
        // Everything the log holds now is durable (recovery synced it).
        for group in engine.inner.groups.read().values() {
            let last = group_last_log_id(&engine.inner, group)?;
            group.set_flushed(last);
        }
        if converting {
            // The state as the old files said, in the new file (as of the
            // log's end: the replay is done), and only then the old files go.
            engine.inner.checkpoint(true)?;
            legacy::remove(&*engine.inner.storage, dir)?;
            tracing::warn!(dir = %dir.display(), "raft directory of the file-per-group layout converted");
        } else if legacy::present(&*engine.inner.storage, dir)? {
            // A conversion that crashed after writing the state file.
            legacy::remove(&*engine.inner.storage, dir)?;
        }
        let maintained = Arc::clone(&engine.inner.0);
        let maintenance = std::thread::Builder::new()
            .name("raft-log-maintenance".into())
            .spawn(move || maintain::<C>(&maintained))
            .map_err(io_err(dir))?;
        *engine.inner.maintenance.lock() = Some(maintenance);
        let recovery = {
            let mut recovery = engine.inner.recovery.lock();
            recovery.converted = converting;
            recovery.elapsed = began.elapsed();
            *recovery
        };
        tracing::info!(dir = %dir.display(), ?recovery, "raft log engine opened");
        Ok(engine)
    }

    /// The store of group `id`, created (durably registered: a record of the
    /// log, synced) if the engine does not have it yet.
    pub fn open_group(&self, id: u64) -> Result<RaftLogStore<C>, RaftStoreError> {
        let engine = &self.inner;
        if engine.closed.load(Ordering::Acquire) {
            return Err(RaftStoreError::ShutDown);
        }
        if let Some(group) = engine.groups.read().get(&id) {
            return Ok(RaftLogStore::new(Arc::clone(engine), Arc::clone(group)));
        }
        let mut next_key = engine.next_key.lock();
        if let Some(group) = engine.groups.read().get(&id) {
            return Ok(RaftLogStore::new(Arc::clone(engine), Arc::clone(group)));
        }
        // A new queue in the index: records of this id below the creation
        // record are an earlier group's.
        let key = *next_key;
        let _in_flight = engine.in_flight();
        let created = engine.append_state(Kind::Created, id, key, &[])?;
        created.1.wait()?;
        *next_key = key + 1;
        let group = Arc::new(Group::new(id, key, created.0, GroupState::default()));
        engine.groups.write().insert(id, Arc::clone(&group));
        engine.state_dirty.store(true, Ordering::Release);
        tracing::info!(group = id, key, "raft group created");
        Ok(RaftLogStore::new(Arc::clone(engine), group))
    }

    /// Drops group `id`: a record of the log says so (synced), its queue in
    /// the index is forgotten, and its entries in the shared log become
    /// garbage that [`reclaim`](Self::reclaim) deletes with their segments.
    /// Stores of the group still held fail from now on.
    pub async fn drop_group(&self, id: u64) -> Result<(), RaftStoreError> {
        let engine = &self.inner;
        let group = engine.groups.read().get(&id).cloned().ok_or(RaftStoreError::NoSuchGroup { group: id })?;
        let _write = group.write.lock().await;
        crate::flushed::drain(&group).await;
        let _in_flight = engine.in_flight();
        let (_, durable) = {
            let _one = engine.next_key.lock();
            engine.append_state(Kind::Dropped, id, group.key, &[])?
        };
        durable.await?;
        group.dropped.store(true, Ordering::Release);
        engine.groups.write().remove(&id);
        engine.index.forget(&*engine.storage, |key| key == group.key)?;
        engine.state_dirty.store(true, Ordering::Release);
        tracing::info!(group = id, "raft group dropped");
        engine.wake_maintenance(true);
        Ok(())
    }

    /// The groups the engine holds.
    pub fn groups(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.inner.groups.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The commit log underneath.
    pub fn commit_log(&self) -> &CommitLog {
        &self.inner.log
    }

    /// What recovery did at open.
    pub fn recovery(&self) -> EngineRecovery {
        *self.inner.recovery.lock()
    }

    /// What reclaiming has done since the engine opened.
    pub fn reclaim_stats(&self) -> ReclaimStats {
        *self.inner.reclaiming.lock()
    }

    /// Seals the queue index at the last log segment boundary the log has
    /// made durable and every writer has indexed (or further, once its
    /// in-memory entries reach [`GroupsConfig::seal_entries`]), and writes the
    /// state file if a group's state changed (what the maintenance thread
    /// does every `checkpoint_interval_ms`); returns the log offset an open
    /// would replay from.
    pub fn checkpoint(&self) -> Result<u64, RaftStoreError> {
        self.inner.checkpoint(false)
    }

    /// One reclaim round (what the maintenance thread runs after each
    /// checkpoint and after a purge or drop): groups lagging past
    /// [`GroupsConfig::rewrite_lag_bytes`] have their live entries rewritten at
    /// the log's end, a checkpoint runs, and the log's segments below every
    /// group's first live entry and below the checkpoint go, with the index's
    /// runs below them. Blocks on a group's writes while it rewrites that
    /// group: call it from a thread, not a runtime's worker.
    pub fn reclaim(&self) -> Result<ReclaimStats, RaftStoreError> {
        self.inner.reclaim()
    }

    /// Stops the engine: callbacks in flight fire, the index is sealed and
    /// the state file written, the log flushed and closed. Stores of its
    /// groups fail afterwards. What `Drop` of the last handle does too, with
    /// errors logged.
    pub fn shutdown(&self) -> Result<(), RaftStoreError> {
        self.inner.shutdown()
    }
}

/// The group's last log id: its last entry, or its purged id when that is later.
pub(crate) fn group_last_log_id<C>(
    engine: &Engine<C>,
    group: &Group<C>,
) -> Result<Option<LogId<C::NodeId>>, RaftStoreError>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    let purged = group.purged();
    let last = match engine.index.extent(group.key) {
        // An entry at or below the purged id is never read: reclaim may have
        // deleted its record (the index keeps purged entries while their
        // segment lasts).
        Some((min, end)) if end > min && purged.as_ref().is_none_or(|p| end - 1 > p.index) => {
            engine.entry(group, end - 1)?.map(|e| e.get_log_id().clone())
        }
        _ => None,
    };
    Ok(if last.as_ref().map(|l| l.index) >= purged.as_ref().map(|p| p.index) { last } else { purged })
}

impl<C> Engine<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    /// The entry at raft index `i` of `group`, if its index holds it.
    pub(crate) fn entry(&self, group: &Group<C>, i: u64) -> Result<Option<C::Entry>, RaftStoreError> {
        let Some(at) = self.index.get(group.key, i, 1).first().copied() else { return Ok(None) };
        self.entry_at(group, i, at).map(Some)
    }

    /// The entry at raft index `i` of `group`, from its record at `at`.
    pub(crate) fn entry_at(&self, group: &Group<C>, i: u64, at: IndexEntry) -> Result<C::Entry, RaftStoreError> {
        let record = self.log.read(at.log_offset)?;
        let (header, payload) = Header::parse(&record.body, at.log_offset)?;
        if header.group != group.id || header.index != i || !matches!(header.kind, Kind::Entry | Kind::Rewritten) {
            return Err(RaftStoreError::Mismatch { group: group.id, index: i, found: header.index });
        }
        // One copy: decoded straight from the record's zero-copy view.
        let entry: C::Entry = serde_json::from_slice(payload)
            .map_err(|source| RaftStoreError::Decode { offset: at.log_offset, source })?;
        let found = entry.get_log_id().index;
        if found != i {
            return Err(RaftStoreError::Mismatch { group: group.id, index: i, found });
        }
        Ok(entry)
    }
}

impl<C: RaftTypeConfig> Engine<C> {
    /// Appends records of `group` (bodies with their headers) in batches no
    /// larger than a quarter segment (a batch stays in one segment); returns
    /// where each went and the durability handle of the last batch (the log
    /// acknowledges in order, so it covers them all). `put` appends each batch
    /// to the group's queue in the index as it goes, at `first`, `first + 1`, ….
    /// The caller holds an in-flight guard taken before.
    pub(crate) fn write_records(
        &self,
        group: &Group<C>,
        first: u64,
        bodies: &[Vec<u8>],
        put: bool,
    ) -> Result<(Vec<IndexEntry>, DurabilityHandle), RaftStoreError> {
        let limit = self.log.config().mapped_file_size_commit_log / 4;
        let mut handle = None;
        let mut positions = Vec::with_capacity(bodies.len());
        let mut start = 0;
        while start < bodies.len() {
            let mut end = start;
            let mut bytes = 0usize;
            while end < bodies.len() && (end == start || bytes.saturating_add(bodies[end].len()) < limit) {
                bytes = bytes.saturating_add(bodies[end].len());
                end += 1;
            }
            let appended = self.log.append_batch(&bodies[start..end])?;
            let ends = appended
                .offsets
                .iter()
                .skip(1)
                .copied()
                .chain(std::iter::once(appended.offsets[0] + appended.wrote_bytes));
            positions.extend(appended.offsets.iter().zip(ends).map(|(&offset, end)| IndexEntry {
                log_offset: offset,
                size: u32::try_from(end - offset).unwrap_or(u32::MAX),
                tag: 0,
            }));
            if put {
                for (k, at) in positions[start..].iter().enumerate() {
                    self.index.append(group.key, first + (start + k) as u64, *at)?;
                }
            }
            start = end;
            handle = Some(appended.durability);
        }
        Ok((positions, handle.expect("at least one record")))
    }

    /// Appends a record of a group's raft state (`index` in the header's
    /// index field); returns its log offset and durability. The caller holds
    /// an in-flight guard taken before, until it has applied the change.
    pub(crate) fn append_state(
        &self,
        kind: Kind,
        group: u64,
        index: u64,
        payload: &[u8],
    ) -> Result<(u64, DurabilityHandle), RaftStoreError> {
        let appended = self.log.append(&Header { kind, group, index }.encode(payload))?;
        Ok((appended.wrote_offset, appended.durability))
    }

    /// Registers an operation that appends to the log and then updates the
    /// index or a group's state.
    pub(crate) fn in_flight(&self) -> InFlightGuard<'_> {
        self.in_flight.enter(self.log.max_offset())
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn live_groups(&self) -> Vec<Arc<Group<C>>> {
        self.groups.read().values().cloned().collect()
    }

    /// The group's state changed: the next checkpoint writes the state file.
    pub(crate) fn state_changed(&self) {
        self.state_dirty.store(true, Ordering::Release);
    }

    /// The queue key the next created group would take (for the state file).
    pub(crate) fn next_key(&self) -> u64 {
        *self.next_key.lock()
    }

    pub(crate) fn shutdown(&self) -> Result<(), RaftStoreError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let current = std::thread::current().id();
        {
            let (state, changed) = &self.wake;
            state.lock().stop = true;
            changed.notify_all();
        }
        if let Some(thread) = self.maintenance.lock().take() {
            if thread.thread().id() != current {
                let _ = thread.join();
            }
        }
        // Everything appended is durable once the log's flush returns: the
        // index is sealed to the log's end and the state written as of it,
        // so the next open replays nothing.
        let mut first_err = self.log.flush_all().err().map(RaftStoreError::from);
        if let Err(err) = self.checkpoint(true) {
            first_err.get_or_insert(err);
        }
        self.index.close();
        if let Err(err) = self.log.shutdown() {
            first_err.get_or_insert(err.into());
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Closes the engine to new appends only (a test's window inside `shutdown`).
    #[cfg(test)]
    pub(crate) fn begin_shutdown(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl<C: RaftTypeConfig> Engine<C> {
    pub(crate) fn wake_maintenance(&self, reclaim: bool) {
        let (state, changed) = &self.wake;
        state.lock().reclaim_wanted |= reclaim;
        changed.notify_all();
    }

    pub(crate) fn maintenance_state(&self) -> &(Mutex<Maintenance>, Condvar) {
        &self.wake
    }

    /// The groups' state as of now, for the state file at `point`.
    pub(crate) fn saved(&self, point: u64) -> Saved<C::NodeId> {
        let next_key = self.next_key();
        let mut groups: Vec<_> = self
            .live_groups()
            .iter()
            .map(|g| state::SavedGroup {
                id: g.id,
                key: g.key,
                created: g.created,
                state: g.state.lock().saved.clone(),
            })
            .collect();
        groups.sort_unstable_by_key(|g| g.id);
        Saved { point, next_key, groups }
    }

    pub(crate) fn state_path(&self) -> PathBuf {
        self.dir.join(RAFT_DIR).join(STATE_FILE)
    }
}
