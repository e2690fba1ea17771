//! What leaves the index: the runs below the log's front (`expire`, raising
//! the queues' first offsets, also past cuts), and a deleted topic's queues
//! (`forget`).

use std::sync::Arc;

use mapped_file::Storage;

use crate::active::Active;
use crate::entry::{Extent, QueueMap};
use crate::error::IndexError;
use crate::index::{QueueIndex, State};
use crate::run::Run;

impl QueueIndex {
    /// Deletes every run whose log range lies wholly below `log_min` (the
    /// log's first offset after its cleaning), raising the first offset of
    /// each queue it held past its entries there, and of each queue with
    /// entries below `log_min` in the run that holds it (a run that spans
    /// the log's new front stays, its entries there are no longer read);
    /// returns the runs deleted. Readers holding entries keep them. Call it
    /// after [`open`](Self::open) too: the runs do not know the log's front.
    /// A run whose file cannot be deleted (the error returned) is out of the
    /// index already; its file, and those of the later expired runs, are
    /// deleted by the next expiry, first.
    pub fn expire(&self, storage: &dyn Storage, log_min: u64) -> Result<usize, IndexError> {
        let _no_seal = self.sealer.lock();
        let mut state = self.state.write();
        let gone = state.runs.iter().take_while(|r| r.log_to <= log_min).count();
        let expired: Vec<Arc<Run>> = state.runs.drain(..gone).collect();
        let State { extents, runs, active, .. } = &mut *state;
        if expired.iter().chain(runs.iter()).any(|r| r.cuts) || !active.cuts.is_empty() {
            raise_firsts_with_cuts(extents, &expired, runs, active, log_min);
        } else {
            for run in &expired {
                for (queue, span) in run.spans() {
                    if let Some(extent) = extents.get_mut(&queue) {
                        extent.min = extent.min.max(span.end());
                    }
                }
            }
            if let Some(front) = runs.first().filter(|r| r.log_from < log_min) {
                for (queue, span) in front.spans() {
                    let live = front.first_at_or_after(span, log_min);
                    if let Some(extent) = extents.get_mut(&queue) {
                        extent.min = extent.min.max(live);
                    }
                }
            }
            if runs.is_empty() {
                for (queue, (first, entries)) in &active.queues {
                    let below = entries.partition_point(|e| e.log_offset < log_min) as u64;
                    if let Some(extent) = extents.get_mut(queue) {
                        extent.min = extent.min.max(first + below);
                    }
                }
            }
        }
        // A queue whose entries all lie below the log's front is known from
        // then on only by the runs that hold them (or the table): with the
        // table's point below the front, one of those runs may be the only
        // record of the queue's end, and losing it (a damaged file deleted)
        // would start the queue again at 0. So the table is written then too,
        // though no run expired, once per move of the front past its point.
        // Not with cuts about (an owner whose queues are cut, a raft engine,
        // keeps its queues' state itself): the table's point then stays at a
        // seal.
        let cuts = state.runs.iter().any(|r| r.cuts) || !state.active.cuts.is_empty();
        let stale_table =
            state.table_point < log_min && state.active.from > state.table_point && !state.extents.is_empty() && !cuts;
        if !expired.is_empty() || stale_table {
            // The table first, then the files: a crash in between leaves runs
            // the next expiry deletes, never extents that forget them.
            self.write_table(storage, &mut state)?;
        }
        // The runs an earlier expiry could not delete go first: deleting a
        // later run while an earlier one stays would leave a gap on disk.
        let mut doomed = std::mem::take(&mut state.undeleted);
        doomed.extend(expired);
        drop(state);
        for (i, run) in doomed.iter().enumerate() {
            if let Err(err) = run.destroy() {
                tracing::warn!(path = %run.path().display(), %err, "expired queue-index run not deleted: the next expiry tries again");
                // Seals wait for this expiry (`_no_seal`), so nothing came
                // between: the runs left are the oldest files on disk.
                self.state.write().undeleted = doomed.split_off(i);
                return Err(err);
            }
        }
        Ok(gone)
    }

    /// Forgets every queue `gone` picks (a deleted topic's): its extent and
    /// its active entries go at once, and the queue table is rewritten
    /// without it, so that an open does not learn it again; its entries in
    /// sealed runs stay there, unread, until the runs expire. The owner must
    /// never append to a forgotten queue again. Returns the queues forgotten.
    pub fn forget(&self, storage: &dyn Storage, gone: impl Fn(u64) -> bool) -> Result<usize, IndexError> {
        let _no_seal = self.sealer.lock();
        let mut state = self.state.write();
        let before = state.extents.len();
        state.extents.retain(|queue, _| !gone(*queue));
        let forgotten = before - state.extents.len();
        let active = &mut state.active;
        let dropped: usize = active.queues.iter().filter(|(q, _)| gone(**q)).map(|(_, (_, e))| e.len()).sum();
        active.queues.retain(|queue, _| !gone(*queue));
        active.cuts.retain(|queue, _| !gone(*queue));
        active.before.retain(|queue, _| !gone(*queue));
        active.entries -= dropped;
        self.locator.lock().retain(|queue, _| !gone(*queue));
        if forgotten > 0 {
            self.write_table(storage, &mut state)?;
        }
        Ok(forgotten)
    }
}

/// Where a queue's raised first offset comes from, in
/// [`raise_firsts_with_cuts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raised {
    /// The end of its newest row in an expired run.
    Expired,
    /// Its first entry at or past the log's front in the run spanning it.
    Front,
    /// Its first entry at or past the log's front in the active run (no run left).
    Active,
}

/// [`QueueIndex::expire`]'s raising of first offsets when some queue was
/// cut: a queue's first offset goes up to where its newest expired row
/// ended (or to its first live entry in the run spanning the log's new
/// front, or in the active run when no run is left), but never past a newer
/// row that cut it lower (that row holds the queue from its start on: only
/// rows that cut can start below an older row's end), nor past its end.
fn raise_firsts_with_cuts(
    extents: &mut QueueMap<Extent>,
    expired: &[Arc<Run>],
    runs: &[Arc<Run>],
    active: &mut Active,
    log_min: u64,
) {
    let mut raise: QueueMap<(u64, Raised)> = QueueMap::default();
    for run in expired {
        for (queue, span) in run.spans() {
            raise.insert(queue, (span.end(), Raised::Expired));
        }
    }
    if let Some(front) = runs.first().filter(|r| r.log_from < log_min) {
        for (queue, span) in front.spans() {
            raise.insert(queue, (front.first_at_or_after(span, log_min), Raised::Front));
        }
    }
    // Newer rows that cut their queue lower: in runs that hold cuts (the
    // front run is newer only than the expired ones), and in the active run.
    for (i, run) in runs.iter().enumerate().filter(|(_, r)| r.cuts) {
        for (queue, span) in run.spans() {
            if let Some((to, from)) = raise.get_mut(&queue) {
                let newer = *from == Raised::Expired || (*from == Raised::Front && i > 0);
                if newer && span.first < *to {
                    *to = span.first;
                }
            }
        }
    }
    // What the queue table says of a queue cut in the active run is its
    // extent at the active run's start: raised as far as the runs say.
    for (queue, before) in &mut active.before {
        if let Some((to, _)) = raise.get(queue) {
            before.min = before.min.max(*to).min(before.end);
        }
    }
    if runs.is_empty() {
        for (queue, (first, entries)) in &active.queues {
            let below = entries.partition_point(|e| e.log_offset < log_min) as u64;
            raise.insert(*queue, (first + below, Raised::Active));
        }
    }
    for (queue, (first, _)) in &active.queues {
        if let Some((to, from)) = raise.get_mut(queue) {
            if *from != Raised::Active && *first < *to {
                *to = *first;
            }
        }
    }
    for (queue, (to, _)) in raise {
        if let Some(extent) = extents.get_mut(&queue) {
            extent.min = extent.min.max(to).min(extent.end);
        }
    }
}
