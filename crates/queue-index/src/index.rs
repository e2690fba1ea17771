//! The handle: the index's state (the queues' extents, the active run, the
//! run being sealed, the sealed runs) behind its locks, and what it says of
//! itself: reads, extents, ends, sizes.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::active::{Active, Cut};
use crate::config::IndexConfig;
use crate::entry::{Entry, Extent, QueueMap};
use crate::read::{read_runs, Located};
use crate::run::Run;

/// What the index holds, under its lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) extents: QueueMap<Extent>,
    pub(crate) active: Active,
    /// The run being written by a seal: read from here until it is mapped.
    pub(crate) sealing: Option<Arc<Active>>,
    /// Sealed runs in log order, contiguous.
    pub(crate) runs: Vec<Arc<Run>>,
    /// Runs expired (out of the extents and the table) whose files a
    /// deletion failed to remove, in log order: the next expiry deletes them
    /// before any later run, so the files on disk stay contiguous (a gap
    /// reads as a lost run at open) and none stays for good.
    pub(crate) undeleted: Vec<Arc<Run>>,
    /// Directory rows of the runs sealed since the queue table was written.
    pub(crate) rows_since_table: usize,
    /// The log offset the queue table on disk holds extents as of (0: none).
    pub(crate) table_point: u64,
    /// The ends kept in the file `ends` (reported in
    /// [`OpenReport::table_ends`](crate::OpenReport::table_ends)), while it exists: the next
    /// [`QueueIndex::seed_ends`] seeds them too, writes the table and deletes
    /// the file.
    pub(crate) kept_ends: Option<Vec<(u64, u64)>>,
}

/// The index of many queues over one commit log (see the crate documentation).
#[derive(Debug)]
pub struct QueueIndex {
    pub(crate) dir: PathBuf,
    pub(crate) config: IndexConfig,
    /// One seal at a time.
    pub(crate) sealer: parking_lot::Mutex<()>,
    /// Queues read at old offsets: the runs holding each.
    pub(crate) locator: parking_lot::Mutex<QueueMap<Located>>,
    pub(crate) state: RwLock<State>,
}

impl QueueIndex {
    /// Up to `max` of `queue`'s entries from `offset` on (fewer at its end;
    /// none below its first indexed offset or for a queue it does not know).
    /// Each offset's entry comes from the newest row that holds it: after a
    /// [`truncate`](Self::truncate), the entries written since, never those
    /// cut.
    pub fn get(&self, queue: u64, offset: u64, max: usize) -> Vec<Entry> {
        let state = self.state.read();
        let Some(extent) = state.extents.get(&queue).copied() else { return Vec::new() };
        if offset < extent.min || offset >= extent.end || max == 0 {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(max.min(usize::try_from(extent.end - offset).unwrap_or(max)));
        // The rows in memory, newest first: the active run's, then the one a
        // seal is writing.
        let rows = [state.active.row(queue), state.sealing.as_deref().and_then(|s| s.row(queue))];
        let mut at = offset;
        while out.len() < max && at < extent.end {
            // A newer row starting past `at` holds the queue from there on.
            let mut limit = extent.end;
            let mut held = None;
            for (first, entries) in rows.iter().flatten() {
                let row_end = first + entries.len() as u64;
                if *first <= at && at < row_end {
                    held = Some((*first, *entries));
                    break;
                }
                if *first <= at {
                    // A newer row that ends at or before `at` cut the queue there.
                    return out;
                }
                limit = limit.min(*first);
            }
            let before = at;
            match held {
                Some((first, entries)) => {
                    let stop = limit.min(first + entries.len() as u64);
                    while at < stop && out.len() < max {
                        out.push(entries[usize::try_from(at - first).unwrap_or(usize::MAX)]);
                        at += 1;
                    }
                }
                None => at = read_runs(&self.locator, &state.runs, queue, at, limit, max, &mut out),
            }
            if at == before {
                break; // a hole: nothing holds `at`
            }
        }
        out
    }

    /// `queue`'s first indexed offset and its end (the offset its next entry
    /// takes); `None` for a queue with no entry indexed in this index's life.
    pub fn extent(&self, queue: u64) -> Option<(u64, u64)> {
        self.state.read().extents.get(&queue).map(|e| (e.min, e.end))
    }

    /// Every queue's end, `(queue, end)`, in no order: what an owner keeps
    /// before it rebuilds the index from the log, to give
    /// [`seed_ends`](Self::seed_ends) the ends of queues whose records the
    /// log no longer holds.
    pub fn ends(&self) -> Vec<(u64, u64)> {
        self.state.read().extents.iter().map(|(&queue, extent)| (queue, extent.end)).collect()
    }

    /// Unmaps every run (their files stay): what a shutdown does, so that
    /// the storage's lock is released. Reads find only the active run after.
    pub fn close(&self) {
        let _no_seal = self.sealer.lock();
        let mut state = self.state.write();
        state.runs.clear();
        state.undeleted.clear();
        drop(state);
        self.locator.lock().clear();
    }

    /// Heap bytes the index's tables hold (the extents of every queue, the
    /// active run), from their capacities: what a queue costs in memory. The
    /// runs' mapped pages are the page cache's, not counted.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let state = self.state.read();
        // hashbrown: a control byte per bucket beside each (key, value).
        let extents = state.extents.capacity() * (size_of::<(u64, Extent)>() + 1);
        let active = state.active.queues.capacity() * (size_of::<(u64, (u64, Vec<Entry>))>() + 1)
            + state.active.queues.values().map(|(_, e)| e.capacity() * size_of::<Entry>()).sum::<usize>()
            + state.active.cuts.capacity() * (size_of::<(u64, Cut)>() + 1)
            + state.active.before.capacity() * (size_of::<(u64, Extent)>() + 1);
        extents + active + state.runs.capacity() * size_of::<Arc<Run>>()
    }

    /// Queues known (with at least one entry in this index's life).
    pub fn queue_count(&self) -> usize {
        self.state.read().extents.len()
    }

    /// Sealed runs (each one file and one mapping).
    pub fn run_count(&self) -> usize {
        self.state.read().runs.len()
    }

    /// Entries in the active run (in memory, not sealed yet).
    pub fn active_entries(&self) -> usize {
        self.state.read().active.entries
    }

    /// The log offset the index covers from: its first run's start (its
    /// active run's, with no run). An owner whose log holds records below it
    /// (at open: runs lost at the front) must rebuild the index: entries
    /// cannot be put before those of later runs.
    pub fn covers_from(&self) -> u64 {
        let state = self.state.read();
        state.runs.first().map_or(state.active.from, |r| r.log_from)
    }

    /// Where the active run starts: every entry of a record below it is in a
    /// sealed, synced run.
    pub fn sealed_to(&self) -> u64 {
        let state = self.state.read();
        state.sealing.as_ref().map_or(state.active.from, |s| s.from)
    }
}
