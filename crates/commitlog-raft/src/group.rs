//! One raft group's state on the engine: its index, its meta file, its locks.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use consume_queue::{ConsumeQueue, ConsumeQueueConfig};
use mapped_file::Storage;
use openraft::RaftTypeConfig;
use parking_lot::RwLock;

use crate::config::RaftStoreConfig;
use crate::error::RaftStoreError;
use crate::layout::{group_dir, INDEX_DIR};
use crate::meta::MetaStore;

/// One raft group's state on the engine.
pub(crate) struct Group<C: RaftTypeConfig> {
    pub(crate) id: u64,
    pub(crate) index: ConsumeQueue,
    pub(crate) meta: MetaStore<C::NodeId>,
    /// One writer (append, truncate, purge, rewrite) at a time.
    pub(crate) write: tokio::sync::Mutex<()>,
    /// Readers against the rewrite's swap of the index to the copies.
    pub(crate) view: RwLock<()>,
    pub(crate) dropped: AtomicBool,
    /// Appends whose flush callback is not answered yet ([`crate::flushed`]).
    pub(crate) unanswered: AtomicU64,
    /// Woken when `unanswered` drops to zero.
    pub(crate) answered: tokio::sync::Notify,
}

impl<C: RaftTypeConfig> Group<C> {
    /// The first raft index above the group's purged id (0 if none is purged).
    pub(crate) fn after_purged(&self) -> u64 {
        self.meta.purged().map_or(0, |p| p.index.saturating_add(1))
    }

    /// The group's first live entry's index: above the purged id, and held by
    /// the index (it may keep purged entries while their segments last).
    pub(crate) fn live_from(&self) -> u64 {
        self.after_purged().max(self.index.min_index())
    }
}

/// Opens (or creates) group `id`'s index and meta file in the store directory `dir`.
pub(crate) fn open_group_files<C: RaftTypeConfig>(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    id: u64,
    config: &RaftStoreConfig,
) -> Result<Group<C>, RaftStoreError> {
    let group_dir = group_dir(dir, id);
    storage.create_dir_all(&group_dir).map_err(|source| RaftStoreError::Io { path: group_dir.clone(), source })?;
    let meta = MetaStore::open(Arc::clone(storage), &group_dir)?;
    // The engine flushes every index from its maintenance thread, and the
    // groups share the storage.
    let index_config = ConsumeQueueConfig { own_flush_service: false, owns_storage: false, ..config.index.clone() };
    let index = ConsumeQueue::open(Arc::clone(storage), &group_dir.join(INDEX_DIR), index_config)?;
    Ok(Group {
        id,
        index,
        meta,
        write: tokio::sync::Mutex::new(()),
        view: RwLock::new(()),
        dropped: AtomicBool::new(false),
        unanswered: AtomicU64::new(0),
        answered: tokio::sync::Notify::new(),
    })
}
