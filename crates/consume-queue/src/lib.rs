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

use std::path::Path;
use std::sync::Arc;

use commitlog::{CommitLog, QueueTarget, Record};
use flush_service::{AsyncFlush, FlushConfig, FlushStrategy, SystemClock};
use mapped_file::{AppendStatus, Appended, MappedFileError, Storage};
use parking_lot::Mutex;
use segment_queue::{QueueConfig, QueueError, SegmentQueue};

/// Bytes per entry (RocketMQ's `CQ_STORE_UNIT_SIZE`): offset (8), size (4), tag (8),
/// little-endian.
pub const CQ_STORE_UNIT_SIZE: usize = 20;

/// Entries per segment must be a multiple of this, so that a segment (entries × 20
/// bytes) is a whole number of 4 KiB pages and no entry straddles two segments.
pub const ENTRIES_PER_SEGMENT_MULTIPLE: usize = 1024;

/// One entry: where a record of the queue is in the commit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEntry {
    /// The record's commit-log offset.
    pub offset: u64,
    /// The record's size in the log (header included); never 0 (zeros mark "no entry").
    pub size: u32,
    /// A tag (RocketMQ's tags hash code), for filtering without reading the log.
    pub tag: u64,
}

impl CqEntry {
    /// Where the record ends in the log.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.size))
    }

    fn encode(&self) -> [u8; CQ_STORE_UNIT_SIZE] {
        let mut bytes = [0u8; CQ_STORE_UNIT_SIZE];
        bytes[..8].copy_from_slice(&self.offset.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.size.to_le_bytes());
        bytes[12..].copy_from_slice(&self.tag.to_le_bytes());
        bytes
    }

    /// The entry in `bytes` (its first 20), or `None` for "no entry" (size 0,
    /// or fewer than 20 bytes): how a reader of the files decodes them.
    pub fn decode(bytes: &[u8]) -> Option<CqEntry> {
        let word = |range: std::ops::Range<usize>| bytes.get(range).unwrap_or(&[]);
        let offset = u64::from_le_bytes(word(0..8).try_into().ok()?);
        let size = u32::from_le_bytes(word(8..12).try_into().ok()?);
        let tag = u64::from_le_bytes(word(12..20).try_into().ok()?);
        (size > 0).then_some(CqEntry { offset, size, tag })
    }
}

/// What [`ConsumeQueue::repair`] learns from a commit-log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatch {
    /// The record's index in this queue (RocketMQ keeps it in the message).
    pub index: u64,
    /// Its tag.
    pub tag: u64,
}

/// Errors of a [`ConsumeQueue`], naming what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CqError {
    /// The configuration cannot work.
    #[error("invalid consume queue config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// Entries go in index order and are never overwritten: the queue holds
    /// entries and the next one is `next`.
    #[error("consume queue entry {index} cannot be put: the next entry is {next}")]
    OutOfOrder {
        /// The index asked for.
        index: u64,
        /// The next index.
        next: u64,
    },
    /// An entry of size 0 (zeros mean "no entry").
    #[error("consume queue entry {index} has size 0: an entry must point at a record")]
    EmptyEntry {
        /// The index asked for.
        index: u64,
    },
    /// An index whose byte position does not fit in 64 bits.
    #[error("consume queue index {index} is beyond the addressable range")]
    IndexOverflow {
        /// The index asked for.
        index: u64,
    },
    /// The segments failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A segment failed.
    #[error(transparent)]
    File(#[from] MappedFileError),
    /// Reading the commit log during a repair failed.
    #[error(transparent)]
    Log(#[from] commitlog::Error),
    /// The flush service could not start.
    #[error(transparent)]
    Start(#[from] flush_service::StartError),
}

/// Configuration of a [`ConsumeQueue`], with RocketMQ's knob names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumeQueueConfig {
    /// Segment size in bytes (`mappedFileSizeConsumeQueue`; RocketMQ: 300,000
    /// entries). A multiple of 20 × 4096 = 81,920 bytes here
    /// ([`ENTRIES_PER_SEGMENT_MULTIPLE`] entries); the default is 300 × 1024 entries
    /// (6,144,000 bytes).
    pub mapped_file_size_consume_queue: usize,
    /// How often the flush service runs (`flushIntervalConsumeQueue`, 1000 ms).
    pub flush_interval_consume_queue_ms: u64,
    /// Pages that must be dirty before a flush (`flushConsumeQueueLeastPages`, 2).
    pub flush_consume_queue_least_pages: usize,
    /// A flush of whatever is dirty at least this often
    /// (`flushConsumeQueueThoroughInterval`, 60,000 ms).
    pub flush_consume_queue_thorough_interval_ms: u64,
    /// Prepare the next segment in the background.
    pub preallocate_next_segment: bool,
    /// Run the queue's own flush service (a thread). An owner of many queues
    /// turns it off and flushes them all from one thread
    /// ([`ConsumeQueue::flush_with`]), as RocketMQ's `FlushConsumeQueueService` does.
    pub own_flush_service: bool,
    /// The queue owns its storage: closing the queue (drop) releases it. An
    /// owner whose queues share one storage with each other or with a log
    /// turns it off, so closing a queue leaves the storage usable.
    pub owns_storage: bool,
}

impl Default for ConsumeQueueConfig {
    fn default() -> Self {
        Self::with_entries_per_segment(300 * ENTRIES_PER_SEGMENT_MULTIPLE)
    }
}

impl ConsumeQueueConfig {
    /// The defaults with segments of `entries` entries.
    pub fn with_entries_per_segment(entries: usize) -> Self {
        ConsumeQueueConfig {
            mapped_file_size_consume_queue: entries.saturating_mul(CQ_STORE_UNIT_SIZE),
            flush_interval_consume_queue_ms: 1000,
            flush_consume_queue_least_pages: 2,
            flush_consume_queue_thorough_interval_ms: 60_000,
            preallocate_next_segment: true,
            own_flush_service: true,
            owns_storage: true,
        }
    }

    fn validate(&self) -> Result<(), CqError> {
        let unit = CQ_STORE_UNIT_SIZE.saturating_mul(ENTRIES_PER_SEGMENT_MULTIPLE);
        let size = self.mapped_file_size_consume_queue;
        if size == 0 || !size.is_multiple_of(unit) {
            return Err(CqError::InvalidConfig {
                reason: format!("mapped_file_size_consume_queue {size} must be a positive multiple of {unit}"),
            });
        }
        if self.flush_interval_consume_queue_ms == 0 {
            return Err(CqError::InvalidConfig { reason: "flush_interval_consume_queue_ms must be positive".into() });
        }
        Ok(())
    }

    fn flush_config(&self) -> FlushConfig {
        FlushConfig {
            flush_interval_commit_log_ms: self.flush_interval_consume_queue_ms,
            flush_commit_log_least_pages: self.flush_consume_queue_least_pages,
            flush_commit_log_thorough_interval_ms: self.flush_consume_queue_thorough_interval_ms,
            ..FlushConfig::default()
        }
    }
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

/// The byte position of entry `index`.
fn position(index: u64) -> Result<u64, CqError> {
    index.checked_mul(CQ_STORE_UNIT_SIZE as u64).ok_or(CqError::IndexOverflow { index })
}

/// The index of the entry at byte `position` (a multiple of 20).
fn index_at(position: u64) -> u64 {
    const UNIT: std::num::NonZeroU64 = std::num::NonZeroU64::new(CQ_STORE_UNIT_SIZE as u64).expect("20");
    position / UNIT
}

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

    fn open_with(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: ConsumeQueueConfig,
        recovering: bool,
    ) -> Result<Self, CqError> {
        config.validate()?;
        let queue_config = QueueConfig {
            preallocate_next_segment: config.preallocate_next_segment,
            ..QueueConfig::new(config.mapped_file_size_consume_queue)
        };
        let queue = Arc::new(SegmentQueue::load(storage, dir, queue_config, None)?);
        let range = Self::scan(&queue)?;
        match range {
            Some((_, next)) if recovering => {
                let cut = queue.truncate_dirty_files(position(next)?)?;
                if cut.bytes_dropped_in_place > 0 || cut.segments_deleted > 0 {
                    tracing::warn!(dir = %dir.display(), next, "consume queue: bytes after the last entry erased");
                }
                queue.set_committed_where(position(next)?);
            }
            Some((_, next)) => {
                let end = position(next)?;
                if let Some(last) = queue.last_mapped_file() {
                    let pos = last.position_of(end).unwrap_or(last.file_size());
                    last.set_positions(pos)?;
                }
                queue.set_committed_where(end);
                queue.set_flushed_where(queue.flushed_where().min(end));
            }
            None => {}
        }
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
        let deleted = self.delete_before(first_live)?;
        let _write = self.write.lock();
        let mut range = self.range.lock();
        let Some((first, next)) = *range else { return Ok((deleted, 0)) };
        let new_first = first.max(first_live.min(next));
        *range = Some((new_first, next));
        Ok((deleted, new_first.saturating_sub(was_first)))
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
