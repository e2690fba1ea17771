//! The active run: the entries of the log's newest records, in memory, one
//! row per queue, and how a seal takes the part of it below a log offset.

use crate::entry::{Entry, Extent, QueueMap};
use crate::error::IndexError;

/// A cut that starts a queue's row ([`crate::QueueIndex::truncate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// The log offset of the record that made it.
    pub(crate) at: u64,
    /// The cut left the queue with no entry at all: nothing below the row's
    /// first offset is the queue's any more.
    pub(crate) restart: bool,
}

/// Entries not sealed yet, per queue.
#[derive(Debug, Default, Clone)]
pub(crate) struct Active {
    /// The log offset the active run starts at (the last run's end).
    pub(crate) from: u64,
    /// One past the newest entry's record.
    pub(crate) last_end: u64,
    /// The newest entry's log offset (with appends in log order, entries
    /// must follow it).
    pub(crate) last_log_offset: Option<u64>,
    /// Each queue's row: its first queue offset and its entries from there.
    pub(crate) queues: QueueMap<(u64, Vec<Entry>)>,
    /// Queues whose row starts with a cut ([`crate::QueueIndex::truncate`]),
    /// with the log offset of the record that made it: such a row holds the
    /// queue from its first offset on whatever older rows say, even with no
    /// entry, and is sealed with the run that holds that record.
    pub(crate) cuts: QueueMap<Cut>,
    /// The extent at this run's start of each queue in `cuts` (what the
    /// queue table says of it: the cut is made again by the record).
    pub(crate) before: QueueMap<Extent>,
    /// Cuts that dropped entries of this run: the lowest log offset of the
    /// entries dropped, and the cut's. A seal between the two would write
    /// the queue without entries its range holds and before the record that
    /// cut them; [`seal_point`] keeps seals below the first.
    pub(crate) drops: Vec<(u64, u64)>,
    /// Entries in all rows.
    pub(crate) entries: usize,
}

impl Active {
    /// An empty active run starting at `from`.
    pub(crate) fn starting_at(from: u64) -> Active {
        Active { from, last_end: from, ..Active::default() }
    }

    /// `queue`'s row: its first offset and entries.
    pub(crate) fn row(&self, queue: u64) -> Option<(u64, &[Entry])> {
        self.queues.get(&queue).map(|(first, entries)| (*first, entries.as_slice()))
    }
}

/// Where a seal asked to end at `log_to` may end: below the entries a cut
/// past `log_to` dropped (so a run holds every entry of its range that was
/// not cut by a record inside it, and dispatching the log again from its end
/// finds each queue where its records left it).
pub(crate) fn seal_point(active: &Active, log_to: u64) -> u64 {
    // Each step down may bring more cuts past the point: until none does.
    let mut to = log_to;
    loop {
        let lower = active.drops.iter().filter(|(_, cut)| *cut >= to).map(|(dropped, _)| *dropped).fold(to, u64::min);
        if lower == to {
            return to;
        }
        to = lower;
    }
}

/// Takes `active`'s entries of records below `log_to` (and its cuts made by
/// records below it) out as the run to seal (`None`: `log_to` is the active
/// run's start, nothing to seal); `active` keeps the later ones and starts at
/// `log_to`. Refused, changing nothing, below the active run's start or
/// through a record.
pub(crate) fn split_below(active: &mut Active, log_to: u64) -> Result<Option<Active>, IndexError> {
    let from = active.from;
    let end = |e: &Entry| e.log_offset.saturating_add(u64::from(e.size));
    let bad = |last_end| IndexError::BadSeal { log_to, from, last_end };
    if log_to < from {
        return Err(bad(active.last_end));
    }
    if log_to == from {
        return Ok(None);
    }
    let mut rest = Active { last_log_offset: active.last_log_offset, ..Active::starting_at(log_to) };
    // As many rows as the last run had, from the start: a table that grows
    // rehashes every row it holds, on the path of an append.
    rest.queues.reserve(active.queues.len());
    rest.drops = active.drops.iter().copied().filter(|(_, cut)| *cut >= log_to).collect();
    let cuts_below = active.cuts.values().all(|cut| cut.at < log_to);
    if active.last_log_offset.is_none_or(|last| last < log_to) && cuts_below {
        if active.last_end > log_to {
            return Err(bad(active.last_end));
        }
        return Ok(Some(std::mem::replace(active, rest)));
    }
    // Some entries stay: every queue's are split where log_to falls.
    let mut straddles = None;
    for (_, entries) in active.queues.values() {
        let below = entries.partition_point(|e| e.log_offset < log_to);
        if let Some(last) = below.checked_sub(1).map(|i| end(&entries[i])).filter(|&e| e > log_to) {
            straddles = Some(last);
        }
    }
    if let Some(last_end) = straddles {
        return Err(bad(last_end));
    }
    let mut sealed = Active::starting_at(from);
    let mut kept = rest;
    active.drops.clear();
    kept.last_end = active.last_end;
    let mut cuts = std::mem::take(&mut active.cuts);
    for (queue, (first, mut entries)) in std::mem::take(&mut active.queues) {
        let cut = cuts.remove(&queue);
        if let Some(cut) = cut.filter(|cut| cut.at >= log_to) {
            // The cut and every entry after it (records past it) stay.
            kept.entries += entries.len();
            kept.queues.insert(queue, (first, entries));
            kept.cuts.insert(queue, cut);
            if let Some(extent) = active.before.remove(&queue) {
                kept.before.insert(queue, extent);
            }
            continue;
        }
        let below = entries.partition_point(|e| e.log_offset < log_to);
        if let Some(cut) = cut {
            // Sealed with its run, even with no entry below `log_to`.
            sealed.cuts.insert(queue, cut);
        }
        if below == entries.len() {
            sealed.entries += entries.len();
            sealed.queues.insert(queue, (first, entries));
        } else if below == 0 && cut.is_none() {
            kept.entries += entries.len();
            kept.queues.insert(queue, (first, entries));
        } else {
            let later = entries.split_off(below);
            sealed.entries += entries.len();
            kept.entries += later.len();
            sealed.queues.insert(queue, (first, entries));
            kept.queues.insert(queue, (first + below as u64, later));
        }
    }
    sealed.last_end = log_to;
    sealed.last_log_offset = active.last_log_offset;
    *active = kept;
    Ok(Some(sealed))
}

/// `earlier`'s entries followed by `later`'s (a seal that failed gives its
/// run back to the active run that followed it): a row of `later` that
/// starts with a cut replaces what `earlier` holds from its first offset on.
pub(crate) fn merge(mut earlier: Active, later: Active) -> Active {
    for (queue, (first, entries)) in later.queues {
        let cut = later.cuts.get(&queue).copied();
        match earlier.queues.get_mut(&queue) {
            Some((_, before)) if cut.is_none() => before.extend(entries),
            Some((earlier_first, before)) if *earlier_first < first => {
                // Cut inside the earlier row: it keeps its own start (and cut).
                before.truncate(usize::try_from(first - *earlier_first).unwrap_or(usize::MAX));
                before.extend(entries);
            }
            _ => {
                earlier.queues.insert(queue, (first, entries));
                match cut {
                    Some(cut) => earlier.cuts.insert(queue, cut),
                    None => earlier.cuts.remove(&queue),
                };
                // Its extent at the earlier run's start, unless that row knew it.
                if let Some(&extent) = later.before.get(&queue) {
                    earlier.before.entry(queue).or_insert(extent);
                }
            }
        }
    }
    earlier.drops.extend(later.drops);
    earlier.entries = earlier.queues.values().map(|(_, e)| e.len()).sum();
    earlier.last_end = earlier.last_end.max(later.last_end);
    earlier.last_log_offset = later.last_log_offset.max(earlier.last_log_offset);
    earlier
}
