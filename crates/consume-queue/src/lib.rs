//! RocketMQ's `ConsumeQueue`: an index of fixed-size entries over a commit log.
//!
//! Entry *i* of a queue is the 20 bytes at byte `i * 20` of its own segment
//! directory ([`CQ_STORE_UNIT_SIZE`]): the commit-log offset of a record, the
//! record's size, and a tag (RocketMQ's tags hash code), so "the 1,000th record of
//! this queue" is arithmetic and one read. The segments are the same layers the
//! log uses ([`segment_queue::SegmentQueue`] over [`mapped_file`]), flushed by the
//! same machinery ([`flush_service::AsyncFlush`], with the queue's own interval and
//! least-pages knobs).
//!
//! The index is derived data: [`ConsumeQueue::repair`] makes it agree with the log
//! after a restart, as RocketMQ's `ReputMessageService` dispatch does. It drops
//! entries that claim records the log does not hold (a torn or truncated log tail)
//! and dispatches the records the index has not seen. So the index is flushed
//! lazily: a crash loses nothing that the log still has.
//!
//! ```
//! use std::sync::Arc;
//! use consume_queue::{ConsumeQueue, ConsumeQueueConfig, CqEntry};
//! use mapped_file::{SimStorage, Storage};
//!
//! let storage: Arc<dyn Storage> = Arc::new(SimStorage::new());
//! let queue = ConsumeQueue::open(storage, "/q".as_ref(), ConsumeQueueConfig::with_entries_per_segment(1024))?;
//! queue.put(0, CqEntry { offset: 0, size: 100, tag: 7 })?;
//! queue.put(1, CqEntry { offset: 100, size: 60, tag: 7 })?;
//! assert_eq!(queue.get(1)?, Some(CqEntry { offset: 100, size: 60, tag: 7 }));
//! assert_eq!(queue.next_index(), 2);
//! queue.shutdown()?;
//! # Ok::<(), consume_queue::CqError>(())
//! ```

#![forbid(unsafe_code)]
// Offsets: no silent wrap-around, no truncating casts.
#![warn(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

mod config;
mod entry;
mod error;
mod repair;

use std::path::Path;
use std::sync::Arc;

use commitlog::QueueTarget;
use flush_service::{AsyncFlush, FlushStrategy, SystemClock};
use mapped_file::{AppendStatus, Appended, Storage};
use parking_lot::Mutex;
use segment_queue::{QueueConfig, SegmentQueue};

pub use config::ConsumeQueueConfig;
use entry::{index_at, position};
pub use entry::{CqEntry, CQ_STORE_UNIT_SIZE, ENTRIES_PER_SEGMENT_MULTIPLE};
pub use error::CqError;
pub use repair::{Dispatch, RepairReport};

/// A consume queue in one directory. `Send + Sync`; one writer at a time (puts,
/// truncation and deletion serialize on a lock), any number of readers.
pub struct ConsumeQueue {
    queue: Arc<SegmentQueue>,
    /// The queue's own flush service, if it runs one.
    flusher: Option<AsyncFlush>,
    /// Release the storage on close ([`ConsumeQueueConfig::owns_storage`]).
    owns_storage: bool,
    /// Flush on drop (off after [`ConsumeQueue::close_unflushed`]).
    flush_on_drop: bool,
    /// Puts, truncation, deletion and repair, one at a time.
    write: Mutex<()>,
    /// The first index holding an entry (entries below it in the first segment
    /// are zeros: the queue started there), and the index after the last entry.
    /// `None` while the queue has no segment.
    range: Mutex<Option<(u64, u64)>>,
    /// Entries from this index on were found at open and not yet checked against
    /// the log: the part written since the last flush may hold torn entries.
    unverified_from: Mutex<u64>,
}

impl std::fmt::Debug for ConsumeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeQueue").field("dir", &self.queue.dir()).field("range", &*self.range.lock()).finish()
    }
}

/// How many segments from the end [`ConsumeQueue::open`] scans for the last
/// entry (RocketMQ recovers from the third-last consume-queue file): only the
/// part written since the last flush can hold a hole, and a flush runs at least
/// every `flush_consume_queue_thorough_interval_ms`.
const SCANNED_SEGMENTS: usize = 3;

impl ConsumeQueue {
    /// Opens (or creates) the queue in `dir`, finds its last entry and cuts what
    /// follows it, and starts its flush service. The last
    /// [`SCANNED_SEGMENTS`](self) segments are scanned forward: the first entry of
    /// zeros after an entry ends the queue (a hole left by a crash, since entries
    /// are flushed lazily, cuts everything after it; [`repair`](Self::repair)
    /// dispatches it again from the log).
    pub fn open(storage: Arc<dyn Storage>, dir: &Path, config: ConsumeQueueConfig) -> Result<Self, CqError> {
        Self::open_with(storage, dir, config, true)
    }

    /// [`open`](Self::open) for a queue this process wrote and closed itself
    /// (closed when idle, say): its files end with its last entry followed by
    /// zeros, so the positions are set there without the erase and sync of
    /// the tail that a recovery needs. Whatever it left unsynced stays so:
    /// the caller that closed it without its flush still owes that sync.
    pub fn reopen(storage: Arc<dyn Storage>, dir: &Path, config: ConsumeQueueConfig) -> Result<Self, CqError> {
        Self::open_with(storage, dir, config, false)
    }

    /// [`reopen`](Self::reopen) for an owner that kept the queue's extent when
    /// it closed it: the first index and the next are `first` and `next` (the
    /// first as corrected by [`delete_expired`](Self::delete_expired), or an
    /// empty queue's start from [`start_empty_at`](Self::start_empty_at),
    /// neither of which its files show), with no scan.
    pub fn reopen_at(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: ConsumeQueueConfig,
        first: u64,
        next: u64,
    ) -> Result<Self, CqError> {
        let queue = Self::load(storage, dir, &config)?;
        Self::end_at(&queue, next)?;
        let range = (next > 0 || queue.segment_count() > 0).then_some((first.min(next), next));
        Self::with_range(queue, config, range)
    }

    /// Opens (or creates) the queue in `dir` for an owner that knows where it
    /// ends: every entry below index `end` was durable when the owner recorded
    /// `end` (flushed first), so nothing is scanned for holes. Entries at and
    /// above `end` are erased (written after, they may be torn) and the
    /// positions set there; the first index is the first segment's first entry
    /// (its leading zeros are the queue's start). Files that end before `end`
    /// end the queue with them: a [`next_index`](Self::next_index) below `end`
    /// tells the owner entries are missing. [`first_damaged`](Self::first_damaged)
    /// checks what was found.
    pub fn open_to(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: ConsumeQueueConfig,
        end: u64,
    ) -> Result<Self, CqError> {
        let queue = Self::load(storage, dir, &config)?;
        let range = match (queue.first_mapped_file(), queue.last_mapped_file()) {
            (Some(first_segment), Some(last_segment)) => {
                let start = index_at(first_segment.file_from_offset());
                if end <= start {
                    // Nothing these files hold was recorded: written after, stale.
                    queue.clear()?;
                    return Self::with_range(queue, config, None);
                }
                let next = end.min(index_at(last_segment.file_end()));
                let cut = queue.truncate_dirty_files(position(next)?)?;
                if cut.bytes_dropped_in_place > 0 || cut.segments_deleted > 0 {
                    tracing::debug!(dir = %dir.display(), next, "consume queue: entries written after the recorded end erased");
                }
                queue.set_committed_where(position(next)?);
                let bytes = first_segment.read(0, first_segment.read_position())?;
                let zeros = bytes.chunks_exact(CQ_STORE_UNIT_SIZE).take_while(|c| CqEntry::decode(c).is_none()).count();
                drop(bytes);
                Some((start.saturating_add(zeros as u64).min(next), next))
            }
            _ => None,
        };
        Self::with_range(queue, config, range)
    }

    /// The segments of the queue in `dir`.
    fn load(storage: Arc<dyn Storage>, dir: &Path, config: &ConsumeQueueConfig) -> Result<Arc<SegmentQueue>, CqError> {
        config.validate()?;
        let queue_config = QueueConfig {
            preallocate_next_segment: config.preallocate_next_segment,
            ..QueueConfig::new(config.mapped_file_size_consume_queue)
        };
        Ok(Arc::new(SegmentQueue::load(storage, dir, queue_config, None)?))
    }

    fn open_with(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: ConsumeQueueConfig,
        recovering: bool,
    ) -> Result<Self, CqError> {
        let queue = Self::load(storage, dir, &config)?;
        let range = Self::scan(&queue)?;
        match range {
            Some((_, next)) if recovering => {
                let cut = queue.truncate_dirty_files(position(next)?)?;
                if cut.bytes_dropped_in_place > 0 || cut.segments_deleted > 0 {
                    tracing::warn!(dir = %dir.display(), next, "consume queue: bytes after the last entry erased");
                }
                queue.set_committed_where(position(next)?);
            }
            Some((_, next)) => Self::end_at(&queue, next)?,
            None => {}
        }
        Self::with_range(queue, config, range)
    }

    /// Sets the positions of a queue this process wrote at index `next`, with
    /// no erase: what follows is zeros, and what it left unsynced stays so.
    fn end_at(queue: &SegmentQueue, next: u64) -> Result<(), CqError> {
        let end = position(next)?;
        if let Some(last) = queue.last_mapped_file() {
            let pos = last.position_of(end).unwrap_or(last.file_size());
            last.set_positions(pos)?;
        }
        queue.set_committed_where(end);
        queue.set_flushed_where(queue.flushed_where().min(end));
        Ok(())
    }

    /// The queue over loaded segments whose entries span `range`, with its
    /// flush service if it runs one.
    fn with_range(
        queue: Arc<SegmentQueue>,
        config: ConsumeQueueConfig,
        range: Option<(u64, u64)>,
    ) -> Result<Self, CqError> {
        let flusher = if config.own_flush_service {
            let target = Arc::new(QueueTarget::new(Arc::clone(&queue)));
            Some(AsyncFlush::start(target, Arc::new(SystemClock::new()), &config.flush_config(), false, None)?)
        } else {
            None
        };
        let unverified_from = Mutex::new(match range {
            Some((first, _)) => first.max(index_at(Self::window_start(&queue))),
            None => 0,
        });
        Ok(ConsumeQueue {
            queue,
            flusher,
            owns_storage: config.owns_storage,
            flush_on_drop: true,
            write: Mutex::new(()),
            range: Mutex::new(range),
            unverified_from,
        })
    }

    /// The byte position where the scanned window starts: the start of the
    /// [`SCANNED_SEGMENTS`]-th segment from the end.
    fn window_start(queue: &SegmentQueue) -> u64 {
        let segments = queue.segments();
        let from = segments.len().saturating_sub(SCANNED_SEGMENTS);
        segments.get(from).map_or(0, |s| s.file_from_offset())
    }

    /// Finds the first and the next index: forward over the last segments, the
    /// first segment's leading zeros being the queue's start. An entry of zeros,
    /// or one whose offset is not above the previous entry's (torn: a crash kept
    /// only some of its sectors), ends the queue.
    fn scan(queue: &SegmentQueue) -> Result<Option<(u64, u64)>, CqError> {
        let segments = queue.segments();
        let Some(first_segment) = segments.first() else { return Ok(None) };
        let from = segments.len().saturating_sub(SCANNED_SEGMENTS);
        let mut first = None;
        let mut next = index_at(segments[from].file_from_offset());
        let mut previous: Option<u64> = None;
        'segments: for (i, segment) in segments.iter().enumerate().skip(from) {
            let bytes = segment.read(0, segment.read_position())?;
            for (k, chunk) in bytes.chunks_exact(CQ_STORE_UNIT_SIZE).enumerate() {
                let index = index_at(segment.file_from_offset()).saturating_add(k as u64);
                match CqEntry::decode(chunk) {
                    Some(entry) if previous.is_none_or(|p| entry.offset > p) => {
                        first.get_or_insert(index);
                        previous = Some(entry.offset);
                        next = index.saturating_add(1);
                    }
                    Some(_) => break 'segments,
                    // Leading zeros of the first segment: the queue starts later.
                    None if i == 0 && first.is_none() => next = index.saturating_add(1),
                    None => break 'segments,
                }
            }
        }
        let first = match (from, first) {
            (0, Some(first)) => first,
            // Segments, but no entry: empty, from the first segment's start.
            (0, None) => {
                let start = index_at(first_segment.file_from_offset());
                return Ok(Some((start, start)));
            }
            // Earlier segments hold entries from their start (only the first may
            // begin with zeros): find the first entry of the first segment.
            _ => {
                let bytes = first_segment.read(0, first_segment.read_position())?;
                let k = bytes.chunks_exact(CQ_STORE_UNIT_SIZE).position(|c| CqEntry::decode(c).is_some());
                index_at(first_segment.file_from_offset()).saturating_add(k.unwrap_or(0) as u64)
            }
        };
        Ok(Some((first, next)))
    }

    /// The first index holding an entry (0 for an empty queue).
    pub fn min_index(&self) -> u64 {
        self.range.lock().map_or(0, |(first, _)| first)
    }

    /// The index the next entry gets: one past the last (0 for a queue that never
    /// had one).
    pub fn next_index(&self) -> u64 {
        self.range.lock().map_or(0, |(_, next)| next)
    }

    /// True when the queue holds no entry.
    pub fn is_empty(&self) -> bool {
        self.range.lock().is_none_or(|(first, next)| first >= next)
    }

    /// Puts entry `index`. A queue that holds entries takes the next index or a
    /// later one ([`CqError::OutOfOrder`] for an earlier one: entries are never
    /// overwritten); the ones skipped read as none (RocketMQ's `fillPreBlank`),
    /// and a restart ends the queue at such a gap until [`repair`](Self::repair)
    /// dispatches what follows again. An empty queue starts at any index.
    pub fn put(&self, index: u64, entry: CqEntry) -> Result<(), CqError> {
        self.put_batch(index, &[entry])
    }

    /// Puts `entries` at `first_index`, `first_index + 1`, …, as [`put`](Self::put).
    pub fn put_batch(&self, first_index: u64, entries: &[CqEntry]) -> Result<(), CqError> {
        let _write = self.write.lock();
        let mut range = self.range.lock();
        match *range {
            Some((first, next)) if first < next && first_index < next => {
                return Err(CqError::OutOfOrder { index: first_index, next })
            }
            Some((first, next)) if first < next && first_index > next => {
                // RocketMQ's `fillPreBlank`: the missing entries read as none.
                tracing::warn!(index = first_index, next, "consume queue: entries missing before this one");
            }
            _ => {}
        }
        for (k, entry) in entries.iter().enumerate() {
            let index = first_index.saturating_add(k as u64);
            if entry.size == 0 {
                return Err(CqError::EmptyEntry { index });
            }
            self.write_entry(index, entry)?;
            let first = match *range {
                Some((first, next)) if first < next => first,
                _ => index,
            };
            *range = Some((first, index.saturating_add(1)));
        }
        Ok(())
    }

    /// Writes one entry at its position, padding with zeros from the segment's
    /// end of data (an empty queue starting past a segment's start).
    fn write_entry(&self, index: u64, entry: &CqEntry) -> Result<(), CqError> {
        let at = position(index)?;
        let bytes = entry.encode();
        loop {
            let file = self.queue.roll_to_writable_segment(at)?;
            if file.file_end() <= at {
                // The last segment ends before this entry: it stays as it is (its
                // tail zeros are "no entry") and the next one is made.
                file.append_with(0, |_, tail| {
                    tail.fill(0);
                    AppendStatus::Written { bytes: tail.len(), value: () }
                })?;
                continue;
            }
            let pos = file.position_of(at).ok_or(CqError::IndexOverflow { index })?;
            let Some(gap) = pos.checked_sub(file.wrote_position()) else {
                // Below what the segment holds: never overwrite.
                return Err(CqError::OutOfOrder { index, next: index_at(file.offset_at(file.wrote_position())) });
            };
            let need = gap.saturating_add(CQ_STORE_UNIT_SIZE);
            let appended = file.append_sized(0, need, |_, tail| {
                if tail.len() < need {
                    return AppendStatus::DoesNotFit;
                }
                tail[..gap].fill(0);
                tail[gap..need].copy_from_slice(&bytes);
                AppendStatus::Written { bytes: need, value: () }
            })?;
            return match appended {
                Appended::Written { .. } => Ok(()),
                Appended::DoesNotFit { .. } => Err(CqError::OutOfOrder { index, next: index_at(file.file_end()) }),
            };
        }
    }

    /// Makes an empty queue start at `index`: its first entry and its end are
    /// `index` until the next put (which takes `index` or later). For an owner
    /// that knows the queue's messages up to there are gone (expired with its
    /// log) but its offsets must go on from there. Refused for a queue that
    /// holds entries.
    pub fn start_empty_at(&self, index: u64) -> Result<(), CqError> {
        let _write = self.write.lock();
        let mut range = self.range.lock();
        match *range {
            Some((first, next)) if first < next => Err(CqError::OutOfOrder { index, next }),
            _ => {
                *range = Some((index, index));
                Ok(())
            }
        }
    }

    /// Entry `index`, or `None` if the queue does not hold it (below its first
    /// entry or not put yet).
    pub fn get(&self, index: u64) -> Result<Option<CqEntry>, CqError> {
        let (first, next) = match *self.range.lock() {
            Some(range) => range,
            None => return Ok(None),
        };
        if index < first || index >= next {
            return Ok(None);
        }
        let Some(file) = self.queue.find_mapped_file_by_offset(position(index)?, false) else {
            return Ok(None); // its segment was deleted from the front
        };
        let pos = file.position_of(position(index)?).ok_or(CqError::IndexOverflow { index })?;
        let bytes = file.read(pos, CQ_STORE_UNIT_SIZE)?;
        Ok(CqEntry::decode(&bytes))
    }

    /// The last entry, with its index.
    pub fn last(&self) -> Result<Option<(u64, CqEntry)>, CqError> {
        if self.is_empty() {
            return Ok(None);
        }
        let index = self.next_index().saturating_sub(1); // not empty: next > first
        Ok(self.get(index)?.map(|entry| (index, entry)))
    }

    /// Drops every entry at and above `index` for good (erased and synced).
    pub fn truncate_from(&self, index: u64) -> Result<(), CqError> {
        let _write = self.write.lock();
        let mut range = self.range.lock();
        let Some((first, next)) = *range else { return Ok(()) };
        if index >= next {
            return Ok(());
        }
        // Not below the first segment's start: the segment holding the cut stays.
        let cut = index.max(index_at(self.queue.min_offset()));
        self.queue.truncate_dirty_files(position(cut)?)?;
        *range = Some((first.min(cut), cut));
        Ok(())
    }

    /// Deletes every segment and entry: the next put starts the queue at any index.
    pub fn clear(&self) -> Result<(), CqError> {
        let _write = self.write.lock();
        let mut range = self.range.lock();
        self.queue.clear()?;
        *range = None;
        Ok(())
    }

    /// Deletes segments from the front that hold only entries below `index`
    /// (flushing first; never the last segment). Returns how many. Entries of a
    /// segment that stays are still readable.
    pub fn delete_before(&self, index: u64) -> Result<usize, CqError> {
        let _write = self.write.lock();
        self.queue.flush(0)?;
        let deleted = self.queue.delete_expired_file_by_offset(position(index)?, usize::MAX)?;
        let mut range = self.range.lock();
        if let Some((first, next)) = *range {
            *range = Some((first.max(index_at(self.queue.min_offset())), next));
        }
        Ok(deleted)
    }

    /// The first index whose entry names a record at or after `log_offset`
    /// ([`next_index`](Self::next_index) if none does), by binary search: entries
    /// name records in log order, as every queue over one log does, and
    /// [`open`](Self::open) ends the queue at the first entry whose offset does
    /// not grow (a torn one), so the search never meets one out of order. Gaps
    /// (indexes with no entry) count as the entry after them.
    pub fn first_index_at_or_after(&self, log_offset: u64) -> Result<u64, CqError> {
        let (mut low, mut high) = (self.min_index(), self.next_index());
        while low < high {
            let mid = low.saturating_add(high.saturating_sub(low) / 2);
            let mut k = mid;
            let mut found = None;
            while k < high && found.is_none() {
                found = self.get(k)?;
                if found.is_none() {
                    k = k.saturating_add(1);
                }
            }
            match found {
                Some(entry) if entry.offset < log_offset => low = k.saturating_add(1),
                _ => high = mid,
            }
        }
        Ok(low)
    }

    /// The index at the start of the `segments`-th segment from the end (the
    /// first segment's start if there are fewer): where a check of the recent
    /// entries begins (RocketMQ recovers a consume queue's last three files).
    pub fn last_segments_start(&self, segments: usize) -> u64 {
        let all = self.queue.segments();
        let from = all.len().saturating_sub(segments.max(1));
        all.get(from).map_or(0, |s| index_at(s.file_from_offset()))
    }

    /// The first index in `[from, next)` where the queue stops being a
    /// plausible index of a log: an entry missing (zeros), naming a record
    /// that starts before the previous entry's record ends, or ending past
    /// `limit`. `None` when every entry there is plausible. For an owner that
    /// knows these entries were durable (below the end it recorded), any such
    /// entry is damage. Reads each entry once, a segment at a time.
    pub fn first_damaged(&self, from: u64, limit: u64) -> Result<Option<u64>, CqError> {
        let (first, next) = match *self.range.lock() {
            Some(range) => range,
            None => return Ok(None),
        };
        let mut index = from.max(first);
        let mut previous_end = 0u64;
        while index < next {
            let Some(file) = self.queue.find_mapped_file_by_offset(position(index)?, false) else {
                return Ok(Some(index)); // a segment missing inside the queue
            };
            let start = file.position_of(position(index)?).ok_or(CqError::IndexOverflow { index })?;
            let end = file.position_of(position(next)?).unwrap_or(file.file_size());
            let bytes = file.read(start, end.saturating_sub(start))?;
            for chunk in bytes.chunks_exact(CQ_STORE_UNIT_SIZE) {
                match CqEntry::decode(chunk) {
                    Some(entry) if entry.offset >= previous_end && entry.end() <= limit => previous_end = entry.end(),
                    _ => return Ok(Some(index)),
                }
                index = index.saturating_add(1);
            }
            if bytes.len() < end.saturating_sub(start) {
                return Ok(Some(index)); // a short read: the segment ends early
            }
        }
        Ok(None)
    }

    /// Expires the entries naming records below `log_min_offset`, the log's first
    /// offset once its cleaning deleted its oldest segments (RocketMQ's
    /// `CleanConsumeQueueService`): the segments holding only such entries are
    /// deleted (never the last), and the queue starts at the first entry the log
    /// still holds, so expired entries read as none. Returns the segments
    /// deleted. [`repair`](Self::repair) does the same at open.
    pub fn delete_expired(&self, log_min_offset: u64) -> Result<usize, CqError> {
        Ok(self.expire(log_min_offset)?.0)
    }

    /// [`delete_expired`](Self::delete_expired); also returns how many entries expired.
    fn expire(&self, log_min_offset: u64) -> Result<(usize, u64), CqError> {
        let was_first = self.min_index();
        let first_live = self.first_index_at_or_after(log_min_offset)?;
        // A segment goes only when the first live entry lies past its end;
        // otherwise no flush and no deletion, only the first index moves.
        let second_starts = self.queue.segments().get(1).map(|s| index_at(s.file_from_offset()));
        let deleted =
            if second_starts.is_some_and(|start| start <= first_live) { self.delete_before(first_live)? } else { 0 };
        let _write = self.write.lock();
        let mut range = self.range.lock();
        let Some((first, next)) = *range else { return Ok((deleted, 0)) };
        let new_first = first.max(first_live.min(next));
        *range = Some((new_first, next));
        Ok((deleted, new_first.saturating_sub(was_first)))
    }

    /// The lowest log first offset at which [`delete_expired`](Self::delete_expired)
    /// would delete a segment: one past the record the first segment's last
    /// entry names (`u64::MAX` with one segment, which never goes; 0 if that
    /// entry is missing). Lets an owner of many closed queues tell which to
    /// open for expiry.
    pub fn expiry_threshold(&self) -> Result<u64, CqError> {
        let segments = self.queue.segments();
        let Some(second) = segments.get(1) else { return Ok(u64::MAX) };
        let last_of_first = index_at(second.file_from_offset()).saturating_sub(1);
        Ok(match self.get(last_of_first)? {
            Some(entry) => entry.offset.saturating_add(1),
            None => 0,
        })
    }

    /// Flushes every entry now; returns the flushed byte position.
    pub fn flush(&self) -> Result<u64, CqError> {
        self.flush_with(0)
    }

    /// Flushes if at least `least_pages` pages are dirty (0: any byte), as a
    /// flush service would (a clean queue costs no system call); returns the
    /// flushed byte position.
    pub fn flush_with(&self, least_pages: usize) -> Result<u64, CqError> {
        Ok(self.queue.flush(least_pages)?.to)
    }

    /// Closes the queue without its final flush: what was put stays in the
    /// page cache, and the caller makes it durable another way before relying
    /// on it (a sync of the whole directory, `Storage::sync_all_under`). One
    /// sync for many queues closed instead of one each.
    pub fn close_unflushed(mut self) {
        self.flush_on_drop = false;
    }

    /// Stops the flush service and flushes everything.
    pub fn shutdown(&self) -> Result<(), CqError> {
        if let Some(flusher) = &self.flusher {
            flusher.shutdown();
        }
        self.queue.flush(0)?;
        self.queue.shutdown();
        Ok(())
    }
}

impl Drop for ConsumeQueue {
    fn drop(&mut self) {
        if let Some(flusher) = &self.flusher {
            flusher.shutdown();
        }
        if self.flush_on_drop {
            if let Err(err) = self.queue.flush(0) {
                tracing::warn!(%err, "consume queue: final flush failed");
            }
        }
        if self.owns_storage {
            self.queue.close();
        } else {
            self.queue.drop_segments();
        }
    }
}

#[cfg(test)]
mod tests;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
