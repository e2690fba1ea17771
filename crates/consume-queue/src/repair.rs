//! Making an index agree with its log after a restart (RocketMQ's dispatch of
//! what the index missed): [`ConsumeQueue::repair`].

use commitlog::{CommitLog, Record};

use crate::entry::CqEntry;
use crate::error::CqError;
use crate::ConsumeQueue;

/// What [`ConsumeQueue::repair`] learns from a commit-log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatch {
    /// The record's index in this queue (RocketMQ keeps it in the message).
    pub index: u64,
    /// Its tag.
    pub tag: u64,
}

/// What [`ConsumeQueue::repair`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Entries at the front naming records the log deleted (below its first
    /// offset): they expired with them, as after [`ConsumeQueue::delete_expired`].
    pub entries_expired: u64,
    /// Entries dropped from the tail because the log does not hold their records.
    pub entries_dropped: u64,
    /// Records of the log put into the index.
    pub entries_dispatched: u64,
}

impl ConsumeQueue {
    /// Makes the index agree with `log` (RocketMQ's dispatch after a restart).
    /// `dispatch` says which records of the log are this queue's, and their index.
    ///
    /// First, entries naming records the log deleted from its front expire, as
    /// with [`delete_expired`](Self::delete_expired).
    /// 0. Entries are dropped from the tail while the log does not hold their
    ///    record (beyond its end, or no record of that size there).
    /// 1. Every entry not checked since [`open`](Self::open) found it (those of
    ///    the last segments, where a crash can leave torn entries; entries put
    ///    since are checked already) must name a record of the log, of its size,
    ///    that `dispatch` gives its index; the first that does not, and every
    ///    entry after it, is dropped.
    /// 2. If the log's first record of this queue (at or after `start`) has an
    ///    index below the queue's first entry, the index lost its front (zeros
    ///    that looked like the queue's start): it is rebuilt from there.
    /// 3. The records after the last entry are dispatched. If one claims an index
    ///    the queue already passed, the index and the log disagree: it is rebuilt.
    ///
    /// Afterwards the index never claims a record the log does not hold. Cost at
    /// open: one log read per entry of the last three segments.
    pub fn repair(
        &self,
        log: &CommitLog,
        start: u64,
        dispatch: impl FnMut(&Record) -> Option<Dispatch>,
    ) -> Result<RepairReport, CqError> {
        self.repair_from_index(log, start, 0, dispatch)
    }

    /// [`repair`](Self::repair) for an index that wants no entry below
    /// `min_index` (a replicated log's entries up to its purged id, whose records
    /// the log may still hold): records whose index is below it are neither
    /// checked, nor dispatched, nor taken for the queue's lost front. So records
    /// left far below the queue's first entry (a snapshot installed far ahead of
    /// the log) never make it rebuild the gap between them: an open costs the
    /// same whatever the gap.
    pub fn repair_from_index(
        &self,
        log: &CommitLog,
        start: u64,
        min_index: u64,
        mut dispatch: impl FnMut(&Record) -> Option<Dispatch>,
    ) -> Result<RepairReport, CqError> {
        let mut dispatch = move |record: &Record| dispatch(record).filter(|d| d.index >= min_index);
        // Entries of records the log's cleaning deleted are not damage.
        let mut report = RepairReport { entries_expired: self.expire(log.min_offset())?.1, ..RepairReport::default() };
        // The tail first, whenever it was put: a log can lose or cut its tail
        // after the entries were checked.
        while let Some((index, entry)) = self.last()? {
            let holds = entry.end() <= log.max_offset()
                && log.read(entry.offset).is_ok_and(|r| r.size == u64::from(entry.size));
            if holds {
                break;
            }
            self.truncate_from(index)?;
            report.entries_dropped = report.entries_dropped.saturating_add(1);
        }
        // 1. The unchecked entries (not those below `min_index`: unwanted).
        let from = (*self.unverified_from.lock()).max(self.min_index()).max(min_index);
        let next = self.next_index(); // after the tail's cut
        let mut previous_end = 0u64;
        for index in from..next {
            let holds = match self.get(index)? {
                Some(entry) => {
                    entry.offset >= previous_end
                        && entry.end() <= log.max_offset()
                        && log.read(entry.offset).is_ok_and(|record| {
                            record.size == u64::from(entry.size) && dispatch(&record).is_some_and(|d| d.index == index)
                        })
                        && {
                            previous_end = entry.end();
                            true
                        }
                }
                None => false,
            };
            if !holds {
                report.entries_dropped = report.entries_dropped.saturating_add(next.saturating_sub(index));
                self.truncate_from(index)?;
                break;
            }
        }
        // 2. The front, and 3. what follows the last entry. The log's first
        // wanted record: when the queue holds entry `min_index` (or its first
        // entry, if later) and the log agrees, it is that one (records before it
        // have lower indexes), found in one read; otherwise by scanning the log.
        let from = start.max(log.min_offset());
        let wanted = min_index.max(self.min_index());
        let known = match self.get(wanted)? {
            Some(entry) if wanted == min_index && entry.offset >= from => log
                .read(entry.offset)
                .ok()
                .filter(|r| r.size == u64::from(entry.size) && dispatch(r).is_some_and(|d| d.index == wanted))
                .map(|r| (wanted, r.offset)),
            _ => None,
        };
        let first_record = known.or_else(|| {
            log.iter_from(from)
                .map_while(Result::ok)
                .find_map(|record| dispatch(&record).map(|d| (d.index, record.offset)))
        });
        let rebuild_from = match (first_record, self.is_empty()) {
            (None, _) => None,
            (Some((_, offset)), true) => Some(offset),
            (Some((index, offset)), false) if index < self.min_index() => {
                tracing::warn!(index, first = self.min_index(), "consume queue lost its first entries; rebuilding");
                report.entries_dropped =
                    report.entries_dropped.saturating_add(self.next_index().saturating_sub(self.min_index()));
                Some(offset)
            }
            (Some(_), false) => None,
        };
        let mut from = match (rebuild_from, self.last()?) {
            (Some(offset), _) => {
                self.clear()?;
                offset
            }
            (None, Some((_, last))) => last.end().max(log.min_offset()),
            (None, None) => start.max(log.min_offset()),
        };
        let mut rebuilt = rebuild_from.is_some();
        'dispatch: loop {
            for record in log.iter_from(from) {
                let record = record?;
                let Some(found) = dispatch(&record) else { continue };
                let size = u32::try_from(record.size).unwrap_or(u32::MAX); // a record fits a u32 segment
                match self.put(found.index, CqEntry { offset: record.offset, size, tag: found.tag }) {
                    Ok(()) => report.entries_dispatched = report.entries_dispatched.saturating_add(1),
                    Err(CqError::OutOfOrder { .. }) if !rebuilt => {
                        tracing::warn!(index = found.index, "consume queue and log disagree; rebuilding");
                        report.entries_dropped = report.entries_dropped.saturating_add(self.next_index());
                        self.clear()?;
                        from = first_record.map_or(from, |(_, offset)| offset);
                        rebuilt = true;
                        report.entries_dispatched = 0;
                        continue 'dispatch;
                    }
                    Err(err) => return Err(err),
                }
            }
            break;
        }
        *self.unverified_from.lock() = self.next_index();
        if report.entries_dropped > 0 || report.entries_dispatched > 0 {
            tracing::info!(?report, dir = %self.queue.dir().display(), "consume queue repaired from the log");
        }
        Ok(report)
    }
}
