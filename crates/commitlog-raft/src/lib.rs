//! The commit log as [openraft](https://docs.rs/openraft/0.9)'s log store
//! ([`RaftLogStorage`]), as raft-engine is TiKV's: entries are records in a
//! [`CommitLog`] under sync flush, a [`ConsumeQueue`] maps each raft index to its
//! record, and `append`'s callback fires when group commit has made the entries
//! durable, so concurrent appends share one sync and none pays an extra one.
//!
//! ```text
//! <dir>/log/          the commit log (records: one JSON-encoded entry each)
//! <dir>/raft/index/   the consume queue: entry i at byte 20 i (offset, size)
//! <dir>/raft/meta     vote, committed and last purged log id (replaced atomically)
//! <dir>/raft/lock     the raft directory's lock
//! ```
//!
//! What each guarantee rests on (the repository's docs/replication.md says
//! more):
//! - **Acknowledged means durable.** The callback of `append` fires from the
//!   batch's [`DurabilityHandle`], which resolves only
//!   after a successful sync covering it; callbacks fire in the order of the
//!   appends.
//! - **Truncation** (a conflicting suffix) waits for every callback in flight,
//!   then cuts the log ([`CommitLog::truncate_from`]: checkpoint lowered, tail
//!   erased and synced) and then the index. **Purge** writes the purged id
//!   durably first, then deletes whole segments of both. A crash in either
//!   recovers the state before or after it, or a prefix-purged / suffix-cut
//!   state in between; never a hole, because the index is rebuilt from the log at
//!   open ([`ConsumeQueue::repair`]) and the log is cut only at its tail.
//! - **The vote** is durable before `save_vote` returns; the committed id is
//!   written in the background, never ahead of the local durable log.
//!
//! Used as openraft uses it (`Raft::new(.., log_store, state_machine)` takes it
//! as the log store; `examples/raft-node` runs a 3-node cluster on it), or
//! directly:
//!
//! ```
//! use commitlog_raft::{RaftLogStore, RaftStoreConfig};
//! use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
//! use std::io::Cursor; // the default snapshot data of `declare_raft_types!`
//! use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, Vote};
//!
//! openraft::declare_raft_types!(
//!     /// A raft group whose entries are strings.
//!     pub Strings: D = String, R = String,
//! );
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let mut store = RaftLogStore::<Strings>::open(dir.path(), RaftStoreConfig::default())?;
//! store.save_vote(&Vote::new(1, 7)).await?; // durable when it returns
//! let entries = (1..=3).map(|i| Entry::<Strings> {
//!     log_id: LogId::new(CommittedLeaderId::new(1, 7), i),
//!     payload: EntryPayload::Normal(format!("x = {i}")),
//! });
//! // `append` answers its callback once group commit made the entries durable;
//! // `blocking_append` waits for that callback.
//! store.blocking_append(entries).await?;
//! let read = store.try_get_log_entries(2..=3).await?;
//! assert!(matches!(&read[0].payload, EntryPayload::Normal(x) if x == "x = 2"));
//! assert_eq!(store.get_log_state().await?.last_log_id.map(|id| id.index), Some(3));
//! store.truncate(LogId::new(CommittedLeaderId::new(1, 7), 3)).await?; // a conflicting suffix
//! store.shutdown()?;
//! drop(store); // the directory's lock goes with the last handle
//!
//! // Reopened, the store holds what was durable: entries 1 and 2, and the vote.
//! let mut store = RaftLogStore::<Strings>::open(dir.path(), RaftStoreConfig::default())?;
//! assert_eq!(store.get_log_state().await?.last_log_id.map(|id| id.index), Some(2));
//! assert_eq!(store.read_vote().await?, Some(Vote::new(1, 7)));
//! # store.shutdown()?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

mod meta;

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use commitlog::{CommitLog, CommitLogConfig, DurabilityHandle, FlushDiskType};
use consume_queue::{ConsumeQueue, ConsumeQueueConfig, CqEntry, CqError, Dispatch};
use mapped_file::{MmapStorage, Storage};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError, StorageIOError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use meta::META_FILE;

/// The commit log's directory inside a raft store directory.
pub const LOG_DIR: &str = "log";
/// The raft state's directory (index and meta file) inside a raft store directory.
pub const RAFT_DIR: &str = "raft";
/// The index's directory inside [`RAFT_DIR`].
pub const INDEX_DIR: &str = "index";

/// Errors of opening and running a [`RaftLogStore`] (given to openraft as
/// [`StorageError`]s).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RaftStoreError {
    /// The commit log failed.
    #[error(transparent)]
    Log(#[from] commitlog::Error),
    /// The index failed.
    #[error(transparent)]
    Index(#[from] CqError),
    /// The raft directory is held by another store.
    #[error(transparent)]
    Lock(#[from] mapped_file::LockError),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The meta file is damaged.
    #[error("raft meta file {} is damaged: {reason}", path.display())]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A record does not hold an entry.
    #[error("record at offset {offset} is not a raft entry: {source}")]
    Decode {
        /// The record's offset.
        offset: u64,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
    /// An entry could not be encoded.
    #[error("cannot encode a raft entry: {0}")]
    Encode(#[source] serde_json::Error),
    /// The index points at a record that is not the entry it should be.
    #[error("raft index {index} points at the entry for index {found}")]
    Mismatch {
        /// The index asked for.
        index: u64,
        /// The index the record holds.
        found: u64,
    },
    /// The configuration cannot work.
    #[error("invalid raft store config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The store was shut down: nothing more is written.
    #[error("the raft log store is shut down")]
    ShutDown,
}

/// Configuration of a [`RaftLogStore`].
#[derive(Debug, Clone)]
pub struct RaftStoreConfig {
    /// The commit log's. It must flush synchronously (`SyncFlush`, waiting for
    /// durability), must not limit reads to durable records (openraft reads
    /// what it appended before the callback, to replicate it), and must not
    /// delete segments by itself: only openraft's `purge` may delete entries
    /// (a segment deleted for its age or for disk space would take entries no
    /// snapshot holds yet). So segments never expire (`file_reserved_time_ms`
    /// `u64::MAX`) and `clean_file_forcibly_enable` is off; the disk-space guard
    /// stays (appends fail with a storage error at `disk_space_warning_level_ratio`).
    pub log: CommitLogConfig,
    /// The index's.
    pub index: ConsumeQueueConfig,
}

impl Default for RaftStoreConfig {
    /// 64 MiB log segments, 1 MiB bodies at most, no deletion but openraft's
    /// purge; the index's defaults.
    fn default() -> Self {
        let log = CommitLogConfig {
            mapped_file_size_commit_log: 64 << 20,
            max_message_size: 1 << 20,
            flush_disk_type: FlushDiskType::SyncFlush,
            wait_store_msg_ok: true,
            read_limit_to_flushed: false,
            file_reserved_time_ms: u64::MAX,
            delete_when: String::new(),
            clean_file_forcibly_enable: false,
            ..CommitLogConfig::default()
        };
        RaftStoreConfig { log, index: ConsumeQueueConfig::default() }
    }
}

/// Waits for appended batches to become durable and fires their callbacks, in
/// order; a barrier waits for every one before it.
enum Job<C: RaftTypeConfig> {
    Flushed { handle: DurabilityHandle, last: LogId<C::NodeId>, callback: LogFlushed<C> },
    Barrier(tokio::sync::oneshot::Sender<()>),
}

struct Shared<C: RaftTypeConfig> {
    log: CommitLog,
    index: ConsumeQueue,
    meta: meta::MetaStore<C::NodeId>,
    jobs: parking_lot::Mutex<Option<std::sync::mpsc::Sender<Job<C>>>>,
    notifier: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// One writer (append, truncate, purge) at a time.
    write: tokio::sync::Mutex<()>,
}

/// openraft's log store over a commit log. Cheap to clone (clones share the
/// store); the clone is also the log reader.
pub struct RaftLogStore<C: RaftTypeConfig> {
    shared: Arc<Shared<C>>,
}

impl<C: RaftTypeConfig> Clone for RaftLogStore<C> {
    fn clone(&self) -> Self {
        RaftLogStore { shared: Arc::clone(&self.shared) }
    }
}

impl<C: RaftTypeConfig> Debug for RaftLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLogStore").field("log", &self.shared.log).field("index", &self.shared.index).finish()
    }
}

fn storage_err<C: RaftTypeConfig>(err: impl Into<RaftStoreError>) -> StorageError<C::NodeId> {
    let err: RaftStoreError = err.into();
    StorageIOError::write_logs(&err).into()
}

fn read_err<C: RaftTypeConfig>(err: impl Into<RaftStoreError>) -> StorageError<C::NodeId> {
    let err: RaftStoreError = err.into();
    StorageIOError::read_logs(&err).into()
}

impl<C> RaftLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    /// Opens (or creates) the store in `dir`: the commit log recovers, the meta
    /// file is read, and the index is repaired from the log
    /// ([`ConsumeQueue::repair`]).
    pub fn open(dir: impl AsRef<Path>, config: RaftStoreConfig) -> Result<Self, RaftStoreError> {
        let dir = dir.as_ref();
        Self::validate(&config)?;
        let log = CommitLog::open(dir.join(LOG_DIR), config.log.clone())?;
        let raft_storage: Arc<dyn Storage> = Arc::new(MmapStorage::lock(&dir.join(RAFT_DIR))?);
        Self::open_parts(dir, config, log, raft_storage)
    }

    /// As [`open`](Self::open), with the commit log on `log_storage` and the
    /// index and meta file on `raft_storage` (each must own its directory, the
    /// [`Storage`] contract): `mapped_file::SimStorage` for both in fault-injection
    /// tests, where a simulated power cut then covers every file of the store.
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        config: RaftStoreConfig,
        log_storage: Arc<dyn Storage>,
        raft_storage: Arc<dyn Storage>,
    ) -> Result<Self, RaftStoreError> {
        let dir = dir.as_ref();
        Self::validate(&config)?;
        let log = CommitLog::open_with_storage(dir.join(LOG_DIR), config.log.clone(), log_storage)?;
        Self::open_parts(dir, config, log, raft_storage)
    }

    fn validate(config: &RaftStoreConfig) -> Result<(), RaftStoreError> {
        if config.log.flush_disk_type != FlushDiskType::SyncFlush || !config.log.wait_store_msg_ok {
            return Err(RaftStoreError::InvalidConfig {
                reason: "the commit log must flush synchronously (sync_flush, wait_store_msg_ok)".into(),
            });
        }
        if config.log.read_limit_to_flushed {
            return Err(RaftStoreError::InvalidConfig {
                reason: "read_limit_to_flushed must be off: openraft reads entries before they are durable".into(),
            });
        }
        if config.log.file_reserved_time_ms != u64::MAX || config.log.clean_file_forcibly_enable {
            return Err(RaftStoreError::InvalidConfig {
                reason: format!(
                    "the commit log must not delete segments by itself, only openraft's purge may: \
                     file_reserved_time_ms must be u64::MAX (never expire; it is {}) and \
                     clean_file_forcibly_enable false (it is {})",
                    config.log.file_reserved_time_ms, config.log.clean_file_forcibly_enable
                ),
            });
        }
        Ok(())
    }

    fn open_parts(
        dir: &Path,
        config: RaftStoreConfig,
        log: CommitLog,
        storage: Arc<dyn Storage>,
    ) -> Result<Self, RaftStoreError> {
        let raft_dir = dir.join(RAFT_DIR);
        let meta = meta::MetaStore::<C::NodeId>::open(Arc::clone(&storage), &raft_dir)?;
        let index = ConsumeQueue::open(storage, &raft_dir.join(INDEX_DIR), config.index)?;
        // Every record of the log is an entry. Entries at or below the purged id
        // are not wanted: the index keeps those it has while their segments last
        // (reads start above it), but never re-dispatches them, so a log still
        // holding entries far below a snapshot installed beyond its end does not
        // make the index rebuild the gap at every open.
        let wanted_from = meta.purged().map_or(0, |p| p.index.saturating_add(1));
        let mut bad = None;
        let report = index.repair_from_index(&log, 0, wanted_from, |record| {
            match serde_json::from_slice::<C::Entry>(&record.body) {
                Ok(entry) => Some(Dispatch { index: entry.get_log_id().index, tag: 0 }),
                Err(source) => {
                    bad.get_or_insert(RaftStoreError::Decode { offset: record.offset, source });
                    None
                }
            }
        })?;
        if let Some(err) = bad {
            return Err(err);
        }
        tracing::info!(dir = %dir.display(), ?report, next = index.next_index(), "raft log store opened");
        let (tx, rx) = std::sync::mpsc::channel::<Job<C>>();
        let store = RaftLogStore {
            shared: Arc::new(Shared {
                log,
                index,
                meta,
                jobs: parking_lot::Mutex::new(Some(tx)),
                notifier: parking_lot::Mutex::new(None),
                write: tokio::sync::Mutex::new(()),
            }),
        };
        // Everything the log holds now is durable (recovery synced it).
        let last = store.last_log_id()?;
        store.shared.meta.set_flushed(last);
        let weak = Arc::downgrade(&store.shared);
        let notifier = std::thread::Builder::new()
            .name("raft-log-flushed".into())
            .spawn(move || notify_flushed::<C>(rx, weak))
            .map_err(|source| RaftStoreError::Io { path: dir.to_path_buf(), source })?;
        *store.shared.notifier.lock() = Some(notifier);
        Ok(store)
    }

    /// The commit log underneath.
    pub fn commit_log(&self) -> &CommitLog {
        &self.shared.log
    }

    /// The index underneath.
    pub fn index(&self) -> &ConsumeQueue {
        &self.shared.index
    }

    /// Flushes and closes the log and the index (what `Drop` of the last clone
    /// does too, with errors logged).
    pub fn shutdown(&self) -> Result<(), RaftStoreError> {
        self.shared.stop_notifier();
        self.shared.index.shutdown()?;
        self.shared.log.shutdown()?;
        Ok(())
    }

    /// The entry at raft index `i`, if the store holds it.
    fn entry(&self, i: u64) -> Result<Option<C::Entry>, RaftStoreError> {
        let Some(at) = self.shared.index.get(i)? else { return Ok(None) };
        let record = self.shared.log.read(at.offset)?;
        // One copy: decoded straight from the record's zero-copy view.
        let entry: C::Entry = serde_json::from_slice(&record.body)
            .map_err(|source| RaftStoreError::Decode { offset: at.offset, source })?;
        let found = entry.get_log_id().index;
        if found != i {
            return Err(RaftStoreError::Mismatch { index: i, found });
        }
        Ok(Some(entry))
    }

    fn last_log_id(&self) -> Result<Option<LogId<C::NodeId>>, RaftStoreError> {
        let last = match self.shared.index.last()? {
            Some((i, _)) => self.entry(i)?.map(|e| e.get_log_id().clone()),
            None => None,
        };
        let purged = self.shared.meta.purged();
        Ok(if last.as_ref().map(|l| l.index) >= purged.as_ref().map(|p| p.index) { last } else { purged })
    }

    /// Waits until every callback of an earlier append has fired.
    async fn drain(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self.shared.jobs.lock().as_ref().is_some_and(|jobs| jobs.send(Job::Barrier(tx)).is_ok());
        if sent {
            let _ = rx.await;
        }
    }

    /// Appends `entries` and hands their durability wait to the notifier. The
    /// callback is answered exactly once, whatever happens: with the flush's
    /// result, or with an error if the entries could not be written or the store
    /// is shut down (openraft would wait for it for ever).
    fn append_now(&self, entries: Vec<C::Entry>, callback: LogFlushed<C>) -> Result<(), RaftStoreError> {
        let Some(last) = entries.last().map(|e| e.get_log_id().clone()) else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        if self.shared.jobs.lock().is_none() {
            // Shut down: nothing is written, and the callback learns why.
            fail(Job::Flushed { handle: DurabilityHandle::resolved(Ok(())), last, callback });
            return Err(RaftStoreError::ShutDown);
        }
        match self.write_entries(&entries) {
            Ok(handle) => {
                let job = Job::Flushed { handle, last, callback };
                let jobs = self.shared.jobs.lock();
                match jobs.as_ref() {
                    Some(jobs) => {
                        if let Err(std::sync::mpsc::SendError(job)) = jobs.send(job) {
                            fail(job);
                        }
                    }
                    None => fail(job),
                }
                Ok(())
            }
            Err(err) => {
                callback.log_io_completed(Err(io::Error::other(err.to_string())));
                Err(err)
            }
        }
    }

    /// Writes `entries` to the log and the index; returns the durability handle
    /// of the last batch (the log acknowledges in order, so it covers them all).
    fn write_entries(&self, entries: &[C::Entry]) -> Result<DurabilityHandle, RaftStoreError> {
        let bodies =
            entries.iter().map(serde_json::to_vec).collect::<Result<Vec<_>, _>>().map_err(RaftStoreError::Encode)?;
        // Batches no larger than a quarter segment each (a batch stays in one segment).
        let limit = self.shared.log.config().mapped_file_size_commit_log / 4;
        let mut handle = None;
        let mut first = entries[0].get_log_id().index;
        let mut start = 0;
        while start < bodies.len() {
            let mut end = start;
            let mut bytes = 0usize;
            while end < bodies.len() && (end == start || bytes.saturating_add(bodies[end].len()) < limit) {
                bytes = bytes.saturating_add(bodies[end].len());
                end += 1;
            }
            let put = self.shared.log.append_batch(&bodies[start..end])?;
            let ends = put.offsets.iter().skip(1).copied().chain(std::iter::once(put.offsets[0] + put.wrote_bytes));
            let positions: Vec<CqEntry> = put
                .offsets
                .iter()
                .zip(ends)
                .map(|(&offset, end)| CqEntry { offset, size: u32::try_from(end - offset).unwrap_or(u32::MAX), tag: 0 })
                .collect();
            self.shared.index.put_batch(first, &positions)?;
            first += (end - start) as u64;
            start = end;
            handle = Some(put.durability);
        }
        Ok(handle.expect("at least one entry"))
    }
}

fn fail<C: RaftTypeConfig>(job: Job<C>) {
    if let Job::Flushed { callback, .. } = job {
        callback.log_io_completed(Err(io::Error::other("the raft log store is shut down")));
    }
}

/// The notifier thread: one durability wait at a time, in append order. It
/// awaits each handle as a future (woken by the group-commit service) rather than
/// `wait`ing: a blocking wait of a lone waiter spins for a while, and this
/// thread is always a lone waiter, beside openraft's and the peers' threads.
fn notify_flushed<C: RaftTypeConfig>(jobs: std::sync::mpsc::Receiver<Job<C>>, shared: std::sync::Weak<Shared<C>>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(%err, "raft log store: cannot start the durability notifier");
            return jobs.into_iter().for_each(fail);
        }
    };
    for job in jobs {
        match job {
            Job::Flushed { handle, last, callback } => {
                let result = runtime.block_on(handle);
                if result.is_ok() {
                    if let Some(shared) = shared.upgrade() {
                        shared.meta.set_flushed(Some(last));
                    }
                }
                callback.log_io_completed(result.map_err(io::Error::other));
            }
            Job::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl<C: RaftTypeConfig> Shared<C> {
    /// Closes the job queue and waits for the notifier to fire what it holds.
    fn stop_notifier(&self) {
        self.jobs.lock().take();
        if let Some(thread) = self.notifier.lock().take() {
            // The notifier itself may hold the last reference for a moment.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

impl<C: RaftTypeConfig> Drop for Shared<C> {
    fn drop(&mut self) {
        self.stop_notifier();
        if let Err(err) = self.index.shutdown() {
            tracing::warn!(%err, "raft index: shutdown failed");
        }
        if let Err(err) = self.log.shutdown() {
            tracing::warn!(%err, "raft log: shutdown failed");
        }
    }
}

impl<C> RaftLogReader<C> for RaftLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let after_purged = self.shared.meta.purged().map_or(0, |p| p.index + 1);
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .max(after_purged)
        .max(self.shared.index.min_index());
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        }
        .min(self.shared.index.next_index());
        let mut entries = Vec::with_capacity(usize::try_from(end.saturating_sub(start)).unwrap_or(0).min(4096));
        for i in start..end {
            match self.entry(i).map_err(read_err::<C>)? {
                Some(entry) => entries.push(entry),
                None => break,
            }
        }
        Ok(entries)
    }
}

impl<C> RaftLogStorage<C> for RaftLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        Ok(LogState {
            last_purged_log_id: self.shared.meta.purged(),
            last_log_id: self.last_log_id().map_err(read_err::<C>)?,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.shared.meta.save_vote(vote).map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.shared.meta.vote())
    }

    async fn save_committed(&mut self, committed: Option<LogId<C::NodeId>>) -> Result<(), StorageError<C::NodeId>> {
        self.shared.meta.save_committed(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.shared.meta.committed())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<C::Entry> = entries.into_iter().collect();
        let _write = self.shared.write.lock().await;
        self.append_now(entries, callback).map_err(storage_err::<C>)
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let _write = self.shared.write.lock().await;
        // Every callback in flight fires first: none may report entries that
        // the cut removes as durable after new ones take their place.
        self.drain().await;
        let index = &self.shared.index;
        let i = log_id.index.max(index.min_index());
        if let Some(at) = index.get(i).map_err(storage_err::<C>)? {
            self.shared.log.truncate_from(at.offset).map_err(storage_err::<C>)?;
        }
        index.truncate_from(i).map_err(storage_err::<C>)?;
        let last = self.last_log_id().map_err(storage_err::<C>)?;
        self.shared.meta.set_flushed(last);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let _write = self.shared.write.lock().await;
        // Durable first: after a crash, the entries up to here are purged even if
        // their segments are still on disk.
        self.shared.meta.save_purged(log_id.clone()).map_err(storage_err::<C>)?;
        let index = &self.shared.index;
        let keep = log_id.index.saturating_add(1);
        if keep >= index.next_index() {
            // Everything is purged (a snapshot beyond the last entry): the index
            // starts over at the next append; the log keeps only its last segment.
            self.drain().await;
            index.clear().map_err(storage_err::<C>)?;
            let end = self.shared.log.max_offset();
            self.shared.log.delete_segments_before(end, usize::MAX).map_err(storage_err::<C>)?;
            return Ok(());
        }
        let first_kept = index.get(keep).map_err(storage_err::<C>)?.map(|e| e.offset);
        index.delete_before(keep).map_err(storage_err::<C>)?;
        if let Some(offset) = first_kept {
            self.shared.log.delete_segments_before(offset, usize::MAX).map_err(storage_err::<C>)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, Entry, EntryPayload};
    use std::io::Cursor;

    openraft::declare_raft_types!(
        /// Entries of strings.
        Strings: D = String, R = String,
    );

    fn config() -> RaftStoreConfig {
        let mut config = RaftStoreConfig::default();
        config.log.disk_space_warning_level_ratio = 100;
        config.log.disk_max_used_space_ratio = 100;
        config.log.mapped_file_size_commit_log = 64 << 10;
        config.log.max_message_size = 16 << 10;
        config.index = consume_queue::ConsumeQueueConfig::with_entries_per_segment(1024);
        config
    }

    fn entry(index: u64) -> Entry<Strings> {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal("v".into()) }
    }

    #[tokio::test]
    async fn an_append_once_the_notifier_stopped_answers_its_callback_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = RaftLogStore::<Strings>::open(dir.path(), config()).unwrap();
        store.blocking_append(vec![entry(1)]).await.unwrap();
        // The window inside `shutdown`: the notifier is gone, the log still open.
        store.shared.stop_notifier();
        let err = store.blocking_append(vec![entry(2)]).await.unwrap_err();
        assert!(err.to_string().contains("shut down"), "the callback was dropped unanswered: {err}");
        assert_eq!(store.index().next_index(), 2, "nothing written after the shutdown began");
        store.shutdown().unwrap();
    }
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
