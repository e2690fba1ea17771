//! One raft group on the engine: its key in the shared queue index, its raft
//! state, its locks.

use std::sync::atomic::{AtomicBool, AtomicU64};

use openraft::{LogId, RaftTypeConfig, Vote};
use parking_lot::{Mutex, RwLock};

use crate::state::GroupState;

/// One raft group's state on the engine.
pub(crate) struct Group<C: RaftTypeConfig> {
    pub(crate) id: u64,
    /// Its queue in the engine's queue index: raft index → record.
    pub(crate) key: u64,
    /// The log offset of its creation record.
    pub(crate) created: u64,
    pub(crate) state: Mutex<Live<C::NodeId>>,
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

/// A group's raft state in memory.
#[derive(Debug, Clone)]
pub(crate) struct Live<NID: openraft::NodeId> {
    /// What is durable (the vote and purged id) or will be written with the
    /// next state file (the committed id, as far as the local log is durable).
    pub(crate) saved: GroupState<NID>,
    /// The committed id asked for last (what `read_committed` returns).
    pub(crate) committed_wanted: Option<LogId<NID>>,
    /// The last log id known durable in the local log.
    pub(crate) flushed: Option<LogId<NID>>,
}

impl<C: RaftTypeConfig> Group<C> {
    pub(crate) fn new(id: u64, key: u64, created: u64, saved: GroupState<C::NodeId>) -> Self {
        let live = Live { committed_wanted: saved.committed.clone(), flushed: None, saved };
        Group {
            id,
            key,
            created,
            state: Mutex::new(live),
            write: tokio::sync::Mutex::new(()),
            view: RwLock::new(()),
            dropped: AtomicBool::new(false),
            unanswered: AtomicU64::new(0),
            answered: tokio::sync::Notify::new(),
        }
    }

    pub(crate) fn vote(&self) -> Option<Vote<C::NodeId>> {
        self.state.lock().saved.vote.clone()
    }

    pub(crate) fn purged(&self) -> Option<LogId<C::NodeId>> {
        self.state.lock().saved.purged.clone()
    }

    pub(crate) fn committed(&self) -> Option<LogId<C::NodeId>> {
        self.state.lock().committed_wanted.clone()
    }

    /// The first raft index above the group's purged id (0 if none is purged).
    pub(crate) fn after_purged(&self) -> u64 {
        self.purged().map_or(0, |p| p.index.saturating_add(1))
    }

    /// The local log is durable up to `log_id` (and no further: a truncation
    /// may lower it).
    pub(crate) fn set_flushed(&self, log_id: Option<LogId<C::NodeId>>) {
        self.state.lock().flushed = log_id;
    }

    /// The local log is durable up to `log_id` at least: an append's flush,
    /// which never lowers what a later append's flush raised.
    pub(crate) fn raise_flushed(&self, log_id: LogId<C::NodeId>) {
        let mut state = self.state.lock();
        if state.flushed.as_ref().is_none_or(|flushed| flushed.index < log_id.index) {
            state.flushed = Some(log_id);
        }
    }

    /// Takes the committed id asked for, as far as the local log is durable,
    /// for the next state file; returns whether it changed.
    pub(crate) fn settle_committed(&self) -> bool {
        let mut state = self.state.lock();
        let next = match (&state.committed_wanted, &state.flushed) {
            (Some(wanted), Some(flushed)) if wanted.index > flushed.index => Some(flushed.clone()),
            (Some(_), None) => state.saved.committed.clone(), // nothing known durable yet
            (wanted, _) => wanted.clone(),
        };
        if next > state.saved.committed {
            state.saved.committed = next;
            return true;
        }
        false
    }
}
