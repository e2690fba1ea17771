//! The commit log as [openraft](https://docs.rs/openraft/0.9)'s log store
//! ([`RaftLogStorage`]), as raft-engine is TiKV's: entries are records in a
//! [`CommitLog`] under sync flush, one [`QueueIndex`](queue_index::QueueIndex)
//! maps each group's raft indexes to their records, and `append`'s callback
//! fires when group commit has made the entries durable, so concurrent
//! appends share one sync and none pays an extra one.
//!
//! Many groups can share one log: a [`RaftLogEngine`] holds the log and hands
//! out a [`RaftLogStore`] per group ([`RaftLogEngine::open_group`]), as TiKV
//! keeps every region's raft log in one raft-engine and RocketMQ every queue in
//! one commit log; appends of every group go through the one group commit. A
//! group costs no file, no mapping and no system call of its own: its
//! entries are a queue of the shared index, its vote and purged id records
//! of the shared log. [`RaftLogStore::open`] is the one-group case (group
//! [`SINGLE_GROUP`]).
//!
//! ```text
//! <dir>/log/               the commit log: records of every group, each a 17-byte
//!                          header (kind, group, raft index or key) and a JSON body
//! <dir>/raft/queueindex/   the queue index of every group's entries: one run file per
//!                          sealed log range, and a queue table
//! <dir>/raft/state         every group's id, key, vote, committed and purged ids, as of a log offset
//! <dir>/raft/lock          the raft directory's lock
//! ```
//!
//! What each guarantee rests on (the repository's docs/replication.md says
//! more):
//! - **Acknowledged means durable.** The callback of `append` fires from the
//!   batch's [`DurabilityHandle`], which resolves only after a successful sync
//!   covering it; callbacks fire in the order of the appends.
//! - **Truncation** (a conflicting suffix of one group) waits for every
//!   callback in flight, appends a truncation record and waits for it to be
//!   durable, then cuts the group's queue in the index. The shared log is
//!   never cut: after a crash, the replay meets the truncation record after
//!   the entries it removes.
//! - **Purge** appends the group's purged id and waits for it to be durable.
//!   Log segments go once no group has a live entry in them, with the
//!   index's runs below them; a group lagging
//!   [`GroupsConfig::rewrite_lag_bytes`] behind the log's end has its live
//!   entries copied forward first, so one idle group never pins the log
//!   ([`RaftLogEngine::reclaim`]).
//! - **Recovery** reads the index's sealed runs and the state file, and
//!   replays the log from the lower of their points into every group in one
//!   pass, whatever the number of groups. A run is sealed only below what
//!   the log has made durable and every writer has indexed, so it never
//!   names a record a power cut took.
//! - **The vote** is a record, durable before `save_vote` returns; the
//!   committed id is written with the state file at the next checkpoint,
//!   never ahead of the local durable log.
//!
//! Used as openraft uses it (`Raft::new(.., log_store, state_machine)` takes it
//! as the log store; `examples/raft-node` runs a sharded 3-node cluster of
//! many groups on it), or directly:
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

mod config;
mod engine;
mod error;
mod flushed;
mod group;
mod layout;
mod legacy;
#[cfg(planted_bugs)]
pub mod planted;
mod record;
mod recovery;
mod state;

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use commitlog::{CommitLog, DurabilityHandle};
use mapped_file::Storage;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError, StorageIOError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use config::{GroupsConfig, RaftStoreConfig};
use engine::Owner;
pub use engine::{RaftLogEngine, ReclaimStats};
pub use error::RaftStoreError;
use group::Group;
pub use layout::{LOG_DIR, QUEUE_INDEX_DIR, RAFT_DIR, SINGLE_GROUP, STATE_FILE};
pub use recovery::EngineRecovery;

/// openraft's log store for one raft group: over its own commit log
/// ([`open`](Self::open)) or over a [`RaftLogEngine`] shared with other groups
/// ([`RaftLogEngine::open_group`]). Cheap to clone (clones share the store);
/// the clone is also the log reader.
pub struct RaftLogStore<C: RaftTypeConfig> {
    engine: Arc<Owner<C>>,
    group: Arc<Group<C>>,
}

impl<C: RaftTypeConfig> Clone for RaftLogStore<C> {
    fn clone(&self) -> Self {
        RaftLogStore { engine: Arc::clone(&self.engine), group: Arc::clone(&self.group) }
    }
}

impl<C: RaftTypeConfig> Debug for RaftLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLogStore")
            .field("group", &self.group.id)
            .field("log", &self.engine.log)
            .field("key", &self.group.key)
            .finish()
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

impl<C: RaftTypeConfig> RaftLogStore<C> {
    pub(crate) fn new(engine: Arc<Owner<C>>, group: Arc<Group<C>>) -> Self {
        RaftLogStore { engine, group }
    }
}

impl<C> RaftLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    /// Opens (or creates) a store directory holding one raft group
    /// ([`SINGLE_GROUP`] of a [`RaftLogEngine`] in `dir`).
    pub fn open(dir: impl AsRef<Path>, config: RaftStoreConfig) -> Result<Self, RaftStoreError> {
        RaftLogEngine::open(dir, config)?.open_group(SINGLE_GROUP)
    }

    /// As [`open`](Self::open), with the commit log on `log_storage` and the
    /// raft directory (the queue index and the state file) on `raft_storage`
    /// ([`RaftLogEngine::open_with_storage`]).
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        config: RaftStoreConfig,
        log_storage: Arc<dyn Storage>,
        raft_storage: Arc<dyn Storage>,
    ) -> Result<Self, RaftStoreError> {
        RaftLogEngine::open_with_storage(dir, config, log_storage, raft_storage)?.open_group(SINGLE_GROUP)
    }

    /// The group's id.
    pub fn group(&self) -> u64 {
        self.group.id
    }

    /// The engine the group is on.
    pub fn engine(&self) -> RaftLogEngine<C> {
        RaftLogEngine { inner: Arc::clone(&self.engine) }
    }

    /// The commit log underneath (shared with the engine's other groups).
    pub fn commit_log(&self) -> &CommitLog {
        &self.engine.log
    }

    /// The raft indexes the group's queue holds: from its first entry still
    /// indexed (purged entries stay indexed while their log segment lasts)
    /// to one past its last.
    pub fn indexed(&self) -> std::ops::Range<u64> {
        self.engine.index.extent(self.group.key).map_or(0..0, |(min, end)| min..end)
    }

    /// The log offset of the record holding the group's entry at raft index
    /// `i`, if its queue holds it.
    pub fn entry_offset(&self, i: u64) -> Option<u64> {
        self.engine.index.get(self.group.key, i, 1).first().map(|e| e.log_offset)
    }

    /// Shuts the whole engine down ([`RaftLogEngine::shutdown`]): every group
    /// on it stops. What `Drop` of the engine's last handle does too, with
    /// errors logged.
    pub fn shutdown(&self) -> Result<(), RaftStoreError> {
        self.engine.shutdown()
    }

    fn check_live(&self) -> Result<(), RaftStoreError> {
        if self.group.dropped.load(Ordering::Acquire) {
            return Err(RaftStoreError::GroupDropped { group: self.group.id });
        }
        Ok(())
    }

    fn last_log_id(&self) -> Result<Option<LogId<C::NodeId>>, RaftStoreError> {
        let _view = self.group.view.read();
        engine::group_last_log_id(&self.engine, &self.group)
    }

    /// Appends `entries`; their callback is answered when they are durable
    /// (by the thread that completes the flush, [`flushed`]). The
    /// callback is answered exactly once, whatever happens: with the flush's
    /// result, or with an error if the entries could not be written or the store
    /// is shut down (openraft would wait for it for ever).
    fn append_now(&self, entries: Vec<C::Entry>, callback: LogFlushed<C>) -> Result<(), RaftStoreError> {
        let Some(last) = entries.last().map(|e| e.get_log_id().clone()) else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let refused = if self.engine.is_shut_down() { Some(RaftStoreError::ShutDown) } else { self.check_live().err() };
        if let Some(err) = refused {
            // Nothing is written, and the callback learns why.
            callback.log_io_completed(Err(io::Error::other(err.to_string())));
            return Err(err);
        }
        match self.write_entries(&entries) {
            Ok(handle) => {
                flushed::answer_when_durable(handle, Arc::clone(&self.group), last, callback);
                Ok(())
            }
            Err(err) => {
                callback.log_io_completed(Err(io::Error::other(err.to_string())));
                Err(err)
            }
        }
    }

    /// Writes `entries` to the log and the group's index; returns the
    /// durability handle covering them all.
    fn write_entries(&self, entries: &[C::Entry]) -> Result<DurabilityHandle, RaftStoreError> {
        let bodies = entries
            .iter()
            .map(|entry| {
                let header =
                    record::Header { kind: record::Kind::Entry, group: self.group.id, index: entry.get_log_id().index };
                serde_json::to_vec(entry).map(|json| header.encode(&json))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(RaftStoreError::Encode)?;
        let _in_flight = self.engine.in_flight();
        let first = entries[0].get_log_id().index;
        if let Some((min, end)) = self.engine.index.extent(self.group.key) {
            if end > min && first > end && end <= self.group.after_purged() {
                // Everything the queue holds is purged (a snapshot past its
                // last entry): it starts over at these entries, cut by the
                // first of them (the replay does the same there).
                self.engine.index.truncate(self.group.key, 0, self.engine.log.max_offset())?;
            }
        }
        Ok(self.engine.write_records(&self.group, first, &bodies, true)?.1)
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
        self.check_live().map_err(read_err::<C>)?;
        let _view = self.group.view.read();
        let Some((min, next)) = self.engine.index.extent(self.group.key) else { return Ok(Vec::new()) };
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .max(self.group.after_purged())
        .max(min);
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        }
        .min(next);
        let want = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
        let mut entries = Vec::with_capacity(want.min(4096));
        let mut i = start;
        // The positions a batch at a time, then each record.
        while i < end {
            let positions = self.engine.index.get(self.group.key, i, (end - i).min(4096) as usize);
            if positions.is_empty() {
                break;
            }
            for at in positions {
                entries.push(self.engine.entry_at(&self.group, i, at).map_err(read_err::<C>)?);
                i += 1;
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
        self.check_live().map_err(read_err::<C>)?;
        Ok(LogState {
            last_purged_log_id: self.group.purged(),
            last_log_id: self.last_log_id().map_err(read_err::<C>)?,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let err = |e: RaftStoreError| StorageError::from(StorageIOError::write_vote(&e));
        self.check_live().map_err(err)?;
        let payload = serde_json::to_vec(vote).map_err(|e| err(RaftStoreError::Encode(e)))?;
        // A record of the log, synced (the sync shared with other groups'
        // appends) before the vote counts.
        let _in_flight = self.engine.in_flight();
        let (_, durable) = self.engine.append_state(record::Kind::Vote, self.group.id, 0, &payload).map_err(err)?;
        #[cfg(planted_bugs)]
        let awaited = !planted::is_active(planted::Bug::VoteNotAwaited);
        #[cfg(not(planted_bugs))]
        let awaited = true;
        if awaited {
            durable.await.map_err(|e| err(e.into()))?;
        }
        self.group.state.lock().saved.vote = Some(vote.clone());
        self.engine.state_changed();
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.group.vote())
    }

    async fn save_committed(&mut self, committed: Option<LogId<C::NodeId>>) -> Result<(), StorageError<C::NodeId>> {
        self.group.state.lock().committed_wanted = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.group.committed())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<C::Entry> = entries.into_iter().collect();
        let _write = self.group.write.lock().await;
        self.append_now(entries, callback).map_err(storage_err::<C>)
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let _write = self.group.write.lock().await;
        self.check_live().map_err(storage_err::<C>)?;
        // Every callback in flight fires first: none may report entries that
        // the cut removes as durable after new ones take their place.
        flushed::drain(&self.group).await;
        let (min, next) = self.engine.index.extent(self.group.key).unwrap_or_default();
        let i = log_id.index.max(min);
        if i < next {
            // The truncation record is durable before the index is cut: a crash
            // after the cut must not bring the entries back at the replay.
            let body = record::Header { kind: record::Kind::Truncation, group: self.group.id, index: i }.encode(&[]);
            let _in_flight = self.engine.in_flight();
            let appended = self.engine.log.append(&body).map_err(storage_err::<C>)?;
            appended.durability.await.map_err(storage_err::<C>)?;
            // Only purged entries would be left: the queue is emptied and
            // starts over at the next append, as after a purge of everything.
            let from = if i <= self.group.after_purged() { 0 } else { i };
            self.engine.index.truncate(self.group.key, from, appended.wrote_offset).map_err(storage_err::<C>)?;
        }
        let last = self.last_log_id().map_err(storage_err::<C>)?;
        self.group.set_flushed(last);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let _write = self.group.write.lock().await;
        self.check_live().map_err(storage_err::<C>)?;
        // Durable first: after a crash, the entries up to here are purged even if
        // their records are still in the log.
        let payload = serde_json::to_vec(&log_id).map_err(|e| storage_err::<C>(RaftStoreError::Encode(e)))?;
        let _in_flight = self.engine.in_flight();
        let (at, durable) =
            self.engine.append_state(record::Kind::Purged, self.group.id, 0, &payload).map_err(storage_err::<C>)?;
        durable.await.map_err(storage_err::<C>)?;
        self.group.state.lock().saved.purged = Some(log_id.clone());
        self.engine.state_changed();
        let (min, next) = self.engine.index.extent(self.group.key).unwrap_or_default();
        if next > min && log_id.index.saturating_add(1) >= next {
            // Everything is purged (a snapshot beyond the last entry): the
            // queue is emptied and starts over at the next append.
            flushed::drain(&self.group).await;
            self.engine.index.truncate(self.group.key, 0, at).map_err(storage_err::<C>)?;
        }
        // The log's segments go once no group needs them.
        self.engine.wake_maintenance(true);
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
        config
    }

    fn entry(index: u64) -> Entry<Strings> {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal("v".into()) }
    }

    #[tokio::test]
    async fn an_append_is_acknowledged_after_a_sync_that_made_it_durable() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = RaftLogStore::<Strings>::open(dir.path(), config()).unwrap();
        let before = store.commit_log().flush_stats().group_commit;
        store.blocking_append(vec![entry(1)]).await.unwrap();
        let after = store.commit_log().flush_stats().group_commit;
        assert!(after.syncing_flushes > before.syncing_flushes, "acknowledged without a sync: {after:?}");
        assert!(store.commit_log().flushed_offset() >= store.commit_log().max_offset(), "not durable when answered");
        store.shutdown().unwrap();
    }

    #[tokio::test]
    async fn an_append_once_the_shutdown_began_answers_its_callback_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = RaftLogStore::<Strings>::open(dir.path(), config()).unwrap();
        store.blocking_append(vec![entry(1)]).await.unwrap();
        // The window inside `shutdown`: the engine is closed, the log still open.
        store.engine.begin_shutdown();
        let err = store.blocking_append(vec![entry(2)]).await.unwrap_err();
        assert!(err.to_string().contains("shut down"), "the callback was dropped unanswered: {err}");
        assert_eq!(store.indexed(), 1..2, "nothing written after the shutdown began");
        store.shutdown().unwrap();
    }
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
