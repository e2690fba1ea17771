//! The raft state beside the log: the vote, the committed log id and the last
//! purged log id, in one small file replaced atomically and durably
//! ([`Storage::replace_small`]: temporary file, fsync, rename, directory fsync),
//! as the commit log's checkpoint is.
//!
//! The vote and the purged id are written before the call that changes them
//! returns. The committed id is written by the engine's maintenance thread
//! ([`MetaStore::write_committed`], at most every [`COMMITTED_INTERVAL`]), the
//! latest value wins, and never above the last entry this node has made
//! durable: after a crash it may be older than the last one saved (openraft
//! then re-applies from there, which is safe), never ahead of the local log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mapped_file::Storage;
use openraft::{LogId, NodeId, Vote};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::RaftStoreError;

/// How often, at most, the committed id is written (each write is three syncs:
/// file, rename, directory); as RocketMQ's checkpoint, which is written every
/// second.
pub const COMMITTED_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// Name of the file, in a group's directory.
pub const META_FILE: &str = "meta";

/// What the file holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct Meta<NID: NodeId> {
    pub(crate) vote: Option<Vote<NID>>,
    pub(crate) committed: Option<LogId<NID>>,
    pub(crate) purged: Option<LogId<NID>>,
}

impl<NID: NodeId> Default for Meta<NID> {
    fn default() -> Self {
        Meta { vote: None, committed: None, purged: None }
    }
}

struct State<NID: NodeId> {
    /// What the file says (or will, once a write in progress ends).
    written: Meta<NID>,
    /// The committed id asked for last (what `read_committed` returns).
    committed_wanted: Option<LogId<NID>>,
    /// The last log id known durable in the local log.
    flushed: Option<LogId<NID>>,
}

/// One group's meta file.
pub(crate) struct MetaStore<NID: NodeId> {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    state: Mutex<State<NID>>,
    /// One write of the file at a time.
    writing: Mutex<()>,
}

impl<NID: NodeId> MetaStore<NID> {
    /// Loads `<dir>/meta` (absent: nothing saved yet).
    pub(crate) fn open(storage: Arc<dyn Storage>, dir: &Path) -> Result<Self, RaftStoreError> {
        let path = dir.join(META_FILE);
        let bytes = storage.read_small(&path).map_err(|source| RaftStoreError::Io { path: path.clone(), source })?;
        let written: Meta<NID> = match bytes {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|source| RaftStoreError::Meta { path: path.clone(), reason: source.to_string() })?,
            None => Meta::default(),
        };
        let state = State { committed_wanted: written.committed.clone(), flushed: None, written };
        Ok(MetaStore { storage, path, state: Mutex::new(state), writing: Mutex::new(()) })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn vote(&self) -> Option<Vote<NID>> {
        self.state.lock().written.vote.clone()
    }

    pub(crate) fn purged(&self) -> Option<LogId<NID>> {
        self.state.lock().written.purged.clone()
    }

    pub(crate) fn committed(&self) -> Option<LogId<NID>> {
        self.state.lock().committed_wanted.clone()
    }

    /// Writes the vote durably.
    pub(crate) fn save_vote(&self, vote: &Vote<NID>) -> Result<(), RaftStoreError> {
        self.update(|meta| meta.vote = Some(vote.clone()))
    }

    /// Writes the purged id durably.
    pub(crate) fn save_purged(&self, purged: LogId<NID>) -> Result<(), RaftStoreError> {
        self.update(|meta| meta.purged = Some(purged))
    }

    /// Asks for the committed id to be written (by the next
    /// [`write_committed`](Self::write_committed); see the module docs).
    pub(crate) fn save_committed(&self, committed: Option<LogId<NID>>) {
        self.state.lock().committed_wanted = committed;
    }

    /// The local log is durable up to `log_id` (and no further: a truncation
    /// may lower it).
    pub(crate) fn set_flushed(&self, log_id: Option<LogId<NID>>) {
        self.state.lock().flushed = log_id;
    }

    /// The local log is durable up to `log_id` at least: an append's flush,
    /// which never lowers what a later append's flush raised.
    pub(crate) fn raise_flushed(&self, log_id: LogId<NID>) {
        let mut state = self.state.lock();
        if state.flushed.as_ref().is_none_or(|flushed| flushed.index < log_id.index) {
            state.flushed = Some(log_id);
        }
    }

    /// Writes the committed id asked for, as far as the local log is durable,
    /// if it is later than the one in the file; returns whether it wrote.
    pub(crate) fn write_committed(&self) -> Result<bool, RaftStoreError> {
        let next = {
            let state = self.state.lock();
            let next = durable_committed(&state);
            if next <= state.written.committed {
                return Ok(false);
            }
            next
        };
        self.update(|meta| meta.committed = next)?;
        Ok(true)
    }

    /// Changes the file's content and writes it, durably, before returning.
    fn update(&self, change: impl FnOnce(&mut Meta<NID>)) -> Result<(), RaftStoreError> {
        let _one = self.writing.lock();
        let mut meta = self.state.lock().written.clone();
        change(&mut meta);
        self.write(&meta)?;
        self.state.lock().written = meta;
        Ok(())
    }

    fn write(&self, meta: &Meta<NID>) -> Result<(), RaftStoreError> {
        let bytes = serde_json::to_vec(meta).map_err(RaftStoreError::Encode)?;
        self.storage
            .replace_small(&self.path, &bytes)
            .map_err(|source| RaftStoreError::Io { path: self.path.clone(), source })
    }
}

/// The committed id a crash may keep: the one asked for, but no later than the
/// last durable entry.
fn durable_committed<NID: NodeId>(state: &State<NID>) -> Option<LogId<NID>> {
    match (&state.committed_wanted, &state.flushed) {
        (Some(wanted), Some(flushed)) if wanted.index > flushed.index => Some(flushed.clone()),
        (Some(_), None) => state.written.committed.clone(), // nothing known durable yet
        (wanted, _) => wanted.clone(),
    }
}
