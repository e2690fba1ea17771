//! Many raft groups over one commit log, as TiKV keeps every region's raft log
//! in one raft-engine and RocketMQ every queue in one commit log: appends of all
//! groups go through one group commit, so concurrent groups share syncs.
//!
//! Each group has its own index (a [`ConsumeQueue`]: raft index → record) and
//! its own meta file (vote, committed, purged). What a group does to its own log
//! never cuts the shared one:
//! - **Truncation** (a conflicting suffix) writes a truncation record, waits for
//!   it to be durable, then cuts the group's index.
//! - **Purge** writes the purged id and drops the group's index below it. Log
//!   segments go in [`RaftLogEngine::reclaim`] (run by the maintenance thread),
//!   once no group's live entries are in them; a group whose oldest live entry
//!   lags more than [`GroupsConfig::rewrite_lag_bytes`] behind the log's end has
//!   its live entries copied forward first (rewritten, as raft-engine's purge
//!   rewrites the regions that pin its oldest files), so one idle group never
//!   pins the log.
//! - **Recovery** replays the log from the dispatch checkpoint (a log offset
//!   below which every group's index is on disk) into every group's index, in
//!   one pass whatever the number of groups.
//!
//! ```text
//! <dir>/log/                      the shared commit log
//! <dir>/raft/groups.json          the groups, each with the log offset it was created at
//! <dir>/raft/dispatched           the dispatch checkpoint
//! <dir>/raft/groups/<id>/index/   a group's index: entry i at byte 20 i
//! <dir>/raft/groups/<id>/meta     a group's vote, committed and purged log ids
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use commitlog::{CommitLog, DurabilityHandle};
use consume_queue::CqEntry;
use mapped_file::{MmapStorage, Storage};
use openraft::{LogId, RaftLogId, RaftTypeConfig};
use parking_lot::{Condvar, Mutex, RwLock};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::config::RaftStoreConfig;
use crate::error::RaftStoreError;
use crate::group::{open_group_files, Group};
use crate::layout::{DISPATCHED_FILE, GROUPS_FILE, LOG_DIR, RAFT_DIR};
use crate::record::{Header, Kind};
use crate::recovery::EngineRecovery;
use crate::recovery::{cut_from, replay};
#[cfg(doc)]
use crate::GroupsConfig;
use crate::RaftLogStore;

mod maintenance;
pub use maintenance::ReclaimStats;
use maintenance::{maintain, Dispatched, Maintenance};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Registry {
    /// Live groups and the log offset each was created at: records of a group
    /// below it belong to an earlier group of that id, dropped.
    groups: BTreeMap<u64, u64>,
    /// Groups being dropped: their files go at the next open if a crash
    /// interrupted the drop.
    dropping: Vec<u64>,
}

/// Operations between their log append and their index update: the dispatch
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
    groups: RwLock<HashMap<u64, Arc<Group<C>>>>,
    /// Creates and drops, one at a time, with the registry as the file says.
    registry: Mutex<Registry>,
    maintenance: Mutex<Option<std::thread::JoinHandle<()>>>,
    wake: (Mutex<Maintenance>, Condvar),
    pub(crate) in_flight: InFlight,
    /// The dispatch checkpoint as written, one checkpoint at a time.
    pub(crate) dispatched: Mutex<u64>,
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

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RaftStoreError + '_ {
    move |source| RaftStoreError::Io { path: path.to_path_buf(), source }
}

impl<C> RaftLogEngine<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    /// Opens (or creates) the engine in `dir`: the commit log recovers, every
    /// group's index and meta file is opened, and the log is replayed from the
    /// dispatch checkpoint into the indexes.
    pub fn open(dir: impl AsRef<Path>, config: RaftStoreConfig) -> Result<Self, RaftStoreError> {
        let dir = dir.as_ref();
        config.validate()?;
        let log = CommitLog::open(dir.join(LOG_DIR), config.log.clone())?;
        let storage: Arc<dyn Storage> = Arc::new(MmapStorage::lock(&dir.join(RAFT_DIR))?);
        Self::open_parts(dir, config, log, storage)
    }

    /// As [`open`](Self::open), with the commit log on `log_storage` and the
    /// groups' files on `raft_storage` (each must own its directory, the
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
        let registry_path = raft_dir.join(GROUPS_FILE);
        let mut registry: Registry = read_json(&*storage, &registry_path)?.unwrap_or_default();
        // Drops a crash interrupted.
        if !registry.dropping.is_empty() {
            for id in std::mem::take(&mut registry.dropping) {
                let group = open_group_files::<C>(&storage, dir, id, &config)?;
                group.index.clear()?;
                remove_file(&*storage, group.meta.path())?;
            }
            write_json(&*storage, &registry_path, &registry)?;
        }
        let dispatched_path = raft_dir.join(DISPATCHED_FILE);
        let checkpoint = read_json::<Dispatched>(&*storage, &dispatched_path)?.unwrap_or_default().offset;
        // The log may have lost records past the checkpoint's (a damaged tail cut).
        let replay_from = checkpoint.min(log.max_offset()).max(log.min_offset());
        let mut groups = HashMap::with_capacity(registry.groups.len());
        let mut recovery =
            EngineRecovery { groups: registry.groups.len(), replayed_from: replay_from, ..Default::default() };
        for &id in registry.groups.keys() {
            let group = open_group_files::<C>(&storage, dir, id, &config)?;
            // Entries past the checkpoint may be torn or name records the log
            // lost: they come back from the replay.
            if !group.index.is_empty() {
                let cut = group.index.first_index_at_or_after(replay_from)?;
                recovery.entries_cut += group.index.next_index().saturating_sub(cut);
                cut_from(&group.index, cut)?;
            }
            groups.insert(id, Arc::new(group));
        }
        let mut gaps: HashMap<u64, Option<(u64, u64)>> = HashMap::new();
        for record in log.iter_from(replay_from) {
            let record = record?;
            recovery.records_replayed += 1;
            let (header, _) = Header::parse(&record.body, record.offset)?;
            let Some(group) = groups.get(&header.group) else { continue }; // dropped
            if registry.groups.get(&header.group).is_some_and(|&created| record.offset < created) {
                continue; // an earlier group of this id
            }
            let size = u32::try_from(record.size).unwrap_or(u32::MAX);
            replay(
                group,
                header,
                CqEntry { offset: record.offset, size, tag: 0 },
                gaps.entry(header.group).or_default(),
            )?;
        }
        if let Some((&group, &Some((next, found)))) = gaps.iter().find(|(_, gap)| gap.is_some()) {
            return Err(RaftStoreError::IndexGap { group, next, found });
        }
        let engine = Arc::new(Engine {
            dir: dir.to_path_buf(),
            log,
            storage,
            config,
            groups: RwLock::new(groups),
            registry: Mutex::new(registry),
            maintenance: Mutex::new(None),
            wake: (Mutex::new(Maintenance::default()), Condvar::new()),
            in_flight: InFlight::default(),
            dispatched: Mutex::new(checkpoint),
            reclaiming: Mutex::new(ReclaimStats::default()),
            recovery: Mutex::new(recovery),
            closed: AtomicBool::new(false),
        });
        let engine = RaftLogEngine { inner: Arc::new(Owner(engine)) };
        // Everything the log holds now is durable (recovery synced it).
        for group in engine.inner.groups.read().values() {
            let last = group_last_log_id(&engine.inner, group)?;
            group.meta.set_flushed(last);
        }
        let maintained = Arc::clone(&engine.inner.0);
        let maintenance = std::thread::Builder::new()
            .name("raft-log-maintenance".into())
            .spawn(move || maintain::<C>(&maintained))
            .map_err(io_err(dir))?;
        *engine.inner.maintenance.lock() = Some(maintenance);
        let recovery = {
            let mut recovery = engine.inner.recovery.lock();
            recovery.elapsed = began.elapsed();
            *recovery
        };
        tracing::info!(dir = %dir.display(), ?recovery, "raft log engine opened");
        Ok(engine)
    }

    /// The store of group `id`, created (durably registered) if the engine does
    /// not have it yet.
    pub fn open_group(&self, id: u64) -> Result<RaftLogStore<C>, RaftStoreError> {
        let engine = &self.inner;
        if engine.closed.load(Ordering::Acquire) {
            return Err(RaftStoreError::ShutDown);
        }
        if let Some(group) = engine.groups.read().get(&id) {
            return Ok(RaftLogStore::new(Arc::clone(engine), Arc::clone(group)));
        }
        let mut registry = engine.registry.lock();
        if let Some(group) = engine.groups.read().get(&id) {
            return Ok(RaftLogStore::new(Arc::clone(engine), Arc::clone(group)));
        }
        // Records of this id below the log's end now are an earlier group's.
        let mut next = registry.clone();
        next.groups.insert(id, engine.log.max_offset());
        let group = open_group_files::<C>(&engine.storage, &engine.dir, id, &engine.config)?;
        // A group of this id dropped before may have left files if its drop
        // was interrupted; a new group starts empty.
        group.index.clear()?;
        write_json(&*engine.storage, &engine.dir.join(RAFT_DIR).join(GROUPS_FILE), &next)?;
        *registry = next;
        let group = Arc::new(group);
        engine.groups.write().insert(id, Arc::clone(&group));
        tracing::info!(group = id, "raft group created");
        Ok(RaftLogStore::new(Arc::clone(engine), group))
    }

    /// Drops group `id`: its index and meta file are deleted and its entries in
    /// the shared log become garbage that [`reclaim`](Self::reclaim) deletes
    /// with their segments. Stores of the group still held fail from now on.
    pub async fn drop_group(&self, id: u64) -> Result<(), RaftStoreError> {
        let engine = &self.inner;
        let group = engine.groups.read().get(&id).cloned().ok_or(RaftStoreError::NoSuchGroup { group: id })?;
        let _write = group.write.lock().await;
        crate::flushed::drain(&group).await;
        let path = engine.dir.join(RAFT_DIR).join(GROUPS_FILE);
        let mut registry = engine.registry.lock();
        let mut next = registry.clone();
        next.groups.remove(&id);
        next.dropping.push(id);
        write_json(&*engine.storage, &path, &next)?;
        *registry = next.clone();
        group.dropped.store(true, Ordering::Release);
        engine.groups.write().remove(&id);
        group.index.clear()?;
        remove_file(&*engine.storage, group.meta.path())?;
        next.dropping.retain(|&d| d != id);
        write_json(&*engine.storage, &path, &next)?;
        *registry = next;
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

    /// Flushes every group's index and advances the dispatch checkpoint (what
    /// the maintenance thread does every `checkpoint_interval_ms`); returns it.
    pub fn checkpoint(&self) -> Result<u64, RaftStoreError> {
        self.inner.checkpoint()
    }

    /// One reclaim round (what the maintenance thread runs after each
    /// checkpoint and after a purge or drop): groups lagging past
    /// [`GroupsConfig::rewrite_lag_bytes`] have their live entries rewritten at
    /// the log's end, the checkpoint advances, and the log's segments below
    /// every group's first live entry go. Blocks on a group's writes while it
    /// rewrites that group: call it from a thread, not a runtime's worker.
    pub fn reclaim(&self) -> Result<ReclaimStats, RaftStoreError> {
        self.inner.reclaim()
    }

    /// Stops the engine: callbacks in flight fire, committed ids are written,
    /// the indexes and the log are flushed and closed. Stores of its groups
    /// fail afterwards. What `Drop` of the last handle does too, with errors
    /// logged.
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
    let purged = group.meta.purged();
    let last = match group.index.last()? {
        // An entry at or below the purged id is never read: reclaim may have
        // deleted its record (the index keeps purged entries while their
        // segment lasts).
        Some((i, _)) if purged.as_ref().is_some_and(|p| i <= p.index) => None,
        Some((i, _)) => engine.entry(group, i)?.map(|e| e.get_log_id().clone()),
        None => None,
    };
    Ok(if last.as_ref().map(|l| l.index) >= purged.as_ref().map(|p| p.index) { last } else { purged })
}

fn read_json<T: DeserializeOwned>(storage: &dyn Storage, path: &Path) -> Result<Option<T>, RaftStoreError> {
    match storage.read_small(path).map_err(io_err(path))? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| RaftStoreError::Meta { path: path.to_path_buf(), reason: source.to_string() }),
        None => Ok(None),
    }
}

fn write_json<T: Serialize>(storage: &dyn Storage, path: &Path, value: &T) -> Result<(), RaftStoreError> {
    let bytes = serde_json::to_vec(value).map_err(RaftStoreError::Encode)?;
    storage.replace_small(path, &bytes).map_err(io_err(path))
}

fn remove_file(storage: &dyn Storage, path: &Path) -> Result<(), RaftStoreError> {
    match storage.remove(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => {
            Err(RaftStoreError::Io { path: path.to_path_buf(), source: err })
        }
        _ => Ok(()),
    }
}

impl<C> Engine<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    /// The entry at raft index `i` of `group`, if its index holds it.
    pub(crate) fn entry(&self, group: &Group<C>, i: u64) -> Result<Option<C::Entry>, RaftStoreError> {
        let Some(at) = group.index.get(i)? else { return Ok(None) };
        let record = self.log.read(at.offset)?;
        let (header, payload) = Header::parse(&record.body, at.offset)?;
        if header.group != group.id || header.index != i || header.kind == Kind::Truncation {
            return Err(RaftStoreError::Mismatch { group: group.id, index: i, found: header.index });
        }
        // One copy: decoded straight from the record's zero-copy view.
        let entry: C::Entry =
            serde_json::from_slice(payload).map_err(|source| RaftStoreError::Decode { offset: at.offset, source })?;
        let found = entry.get_log_id().index;
        if found != i {
            return Err(RaftStoreError::Mismatch { group: group.id, index: i, found });
        }
        Ok(Some(entry))
    }
}

impl<C: RaftTypeConfig> Engine<C> {
    /// Appends records of `group` (bodies with their headers) in batches no
    /// larger than a quarter segment (a batch stays in one segment); returns
    /// where each went and the durability handle of the last batch (the log
    /// acknowledges in order, so it covers them all). `put` puts each batch
    /// into the group's index as it goes, at `first`, `first + 1`, ….
    pub(crate) fn write_records(
        &self,
        group: &Group<C>,
        first: u64,
        bodies: &[Vec<u8>],
        put: bool,
    ) -> Result<(Vec<CqEntry>, DurabilityHandle), RaftStoreError> {
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
            positions.extend(appended.offsets.iter().zip(ends).map(|(&offset, end)| CqEntry {
                offset,
                size: u32::try_from(end - offset).unwrap_or(u32::MAX),
                tag: 0,
            }));
            if put {
                group.index.put_batch(first + start as u64, &positions[start..])?;
            }
            start = end;
            handle = Some(appended.durability);
        }
        Ok((positions, handle.expect("at least one record")))
    }

    /// Registers an operation that appends to the log and then updates an index.
    pub(crate) fn in_flight(&self) -> InFlightGuard<'_> {
        self.in_flight.enter(self.log.max_offset())
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn live_groups(&self) -> Vec<Arc<Group<C>>> {
        self.groups.read().values().cloned().collect()
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
        self.write_committed();
        let checkpoint = self.checkpoint();
        let mut first_err = checkpoint.err();
        for group in self.live_groups() {
            if let Err(err) = group.index.shutdown() {
                first_err.get_or_insert(err.into());
            }
        }
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
