//! What goes into the active run: appends, room for new queues, and cuts.

use crate::active::Cut;
#[cfg(doc)]
use crate::config::IndexConfig;
use crate::entry::{Entry, Extent};
use crate::error::IndexError;
use crate::index::{QueueIndex, State};

/// The most rows [`QueueIndex::reserve`] makes room for in the active run.
const ACTIVE_ROWS_RESERVED: usize = 65_536;

impl QueueIndex {
    /// Appends `queue`'s entry at `offset`, which must be the queue's end, for
    /// a record after every entry in the index (dispatch follows the log;
    /// with [`IndexConfig::appends_in_log_order`] off, after the queue's own
    /// newest entry or cut and at or past the active run's start). A queue
    /// the index has not seen starts at `offset` (a queue whose earlier
    /// entries expired, or one a rebuild starts mid-log), and so does one
    /// with no live entry whose end lies below `offset` (the records between
    /// went with the log's front).
    pub fn append(&self, queue: u64, offset: u64, entry: Entry) -> Result<(), IndexError> {
        let mut state = self.state.write();
        let State { extents, active, .. } = &mut *state;
        let in_order = if self.config.appends_in_log_order {
            active.last_log_offset.is_none_or(|last| entry.log_offset > last)
        } else {
            let row_last = active.queues.get(&queue).and_then(|(_, e)| e.last()).map(|e| e.log_offset);
            let cut = active.cuts.get(&queue).map(|cut| cut.at);
            row_last.is_none_or(|last| entry.log_offset > last) && cut.is_none_or(|at| entry.log_offset >= at)
        };
        let extent = extents.get(&queue).copied();
        // A queue with nothing live indexed may go on past its end: the
        // records between went with the log's front (an index rebuilt after
        // the log deleted part of what a lost run covered).
        let fits = |e: Extent| e.end == offset || (e.min == e.end && offset > e.end);
        // u64::MAX is never an entry's offset: the queue's end would pass it.
        if !in_order || entry.log_offset < active.from || extent.is_some_and(|e| !fits(e)) || offset == u64::MAX {
            return Err(IndexError::NotInOrder {
                queue,
                offset,
                expected: extent.map_or(offset, |e| e.end),
                log_offset: entry.log_offset,
                last_log_offset: active.last_log_offset.unwrap_or(active.from),
            });
        }
        let extent = extents.entry(queue).or_insert(Extent { min: offset, end: offset });
        if extent.end < offset {
            *extent = Extent { min: offset, end: offset };
        }
        extent.end = offset + 1;
        // Room for one entry at first: most of many queues hold one or two
        // in a run (a vector's first growth reserves four: 80 bytes).
        let row = active.queues.entry(queue).or_insert_with(|| (offset, Vec::with_capacity(1)));
        if row.0 + row.1.len() as u64 != offset {
            // Past the end of a row with nothing live: the row starts again
            // (a cut that emptied the queue still starts it).
            active.entries -= row.1.len();
            *row = (offset, Vec::with_capacity(1));
        }
        row.1.push(entry);
        active.entries += 1;
        active.last_log_offset = active.last_log_offset.max(Some(entry.log_offset));
        active.last_end = active.last_end.max(entry.log_offset.saturating_add(u64::from(entry.size)));
        Ok(())
    }

    /// Makes room for `queues` more queues (a topic of that many made), so
    /// that the tables do not grow, rehashing every queue they hold, on the
    /// path of an append as the queues get their first entries: the table of
    /// extents for all of them, the active run's for up to 65,536 (at each
    /// seal it keeps room for as many rows as the last run held).
    pub fn reserve(&self, queues: usize) {
        let mut state = self.state.write();
        state.extents.reserve(queues);
        state.active.queues.reserve(queues.min(ACTIVE_ROWS_RESERVED));
    }

    /// Cuts `queue` back to `from`: its entries from `from` on are gone and
    /// its next entry takes `from` (a raft group's conflicting suffix, or
    /// entries written again at new log offsets). `at_log` is the log offset
    /// of the record that says so: the cut is sealed with the run that holds
    /// it, so an open that dispatches the log again from a later run finds
    /// it made, and one from an earlier run meets the record again. Cut at or
    /// below its first offset, the queue is left with no entry at `from`
    /// (and may go on from any offset past it). Returns whether anything
    /// changed: nothing does for a queue the index does not know or `from`
    /// at or past its end. Refused for a record below the active run's start
    /// (a sealed range).
    pub fn truncate(&self, queue: u64, from: u64, at_log: u64) -> Result<bool, IndexError> {
        let mut state = self.state.write();
        let State { extents, active, .. } = &mut *state;
        if at_log < active.from {
            return Err(IndexError::CutInSealedRange { queue, from, at_log, sealed_to: active.from });
        }
        let Some(extent) = extents.get_mut(&queue).filter(|e| from < e.end) else { return Ok(false) };
        let was = *extent;
        extent.end = from;
        extent.min = extent.min.min(from);
        let extent = was;
        let before = active.queues.get(&queue).map_or(0, |(_, e)| e.len());
        let keep = match active.queues.get(&queue) {
            Some((first, _)) if *first < from && from > extent.min => {
                usize::try_from(from - first).unwrap_or(usize::MAX)
            }
            _ => 0,
        };
        // What this cut drops of the active run: entries from `keep` on, and
        // a cut that started the row if the row is replaced (a seal between
        // either and this cut must stay below them).
        let dropped_entry = active.queues.get(&queue).and_then(|(_, e)| e.get(keep)).map(|e| e.log_offset);
        let dropped_cut = active.cuts.get(&queue).map(|cut| cut.at).filter(|_| keep == 0);
        if let Some(dropped) = dropped_entry.into_iter().chain(dropped_cut).min() {
            active.drops.push((dropped, at_log));
        }
        match active.queues.get_mut(&queue) {
            Some((first, entries)) if *first < from && from > extent.min => entries.truncate(keep),
            row => {
                // What the queue table says of it until the cut is sealed:
                // its extent at the active run's start.
                let before = match row {
                    Some((first, _)) if !active.cuts.contains_key(&queue) => {
                        Extent { min: extent.min.min(*first), end: *first }
                    }
                    _ => Extent { min: extent.min, end: extent.end },
                };
                active.before.entry(queue).or_insert(before);
                active.queues.insert(queue, (from, Vec::new()));
                active.cuts.insert(queue, Cut { at: at_log, restart: from <= extent.min });
            }
        }
        let after = active.queues.get(&queue).map_or(0, |(_, e)| e.len());
        active.entries = active.entries - before + after;
        Ok(true)
    }
}
