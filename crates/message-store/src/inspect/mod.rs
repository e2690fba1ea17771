//! Read-only inspection of a message store directory, open or not: its topics,
//! each queue's offsets, the consumer offsets and the recorded dispatch point,
//! a queue's durable messages ([`read_queue`]), and a check of all the
//! derived data against the log ([`check`]). Nothing is created, locked or
//! written: what `commitlog topics` and `commitlog receive --follow` read,
//! safe beside a running store (figures are as of the log's last flush).
//!
//! The queues are seen as the store's next open would see them: the queue
//! index's sealed runs (copied into memory and checked, none changed), then
//! the log's durable messages after them, dispatched in memory.

mod check;
mod files;

use std::collections::BTreeMap;
use std::path::Path;

use queue_index::{Entry, QueueIndex};

use crate::checkpoint::{self, checkpoint_path, Loaded};
use crate::error::{io_err, StoreError};
use crate::get::TagFilter;
use crate::message::{decode, decode_header, StoredMessage};
use crate::offsets;
use crate::records::{Named, QueueWalk, Read, Records};
use crate::store::queue_index_dir;
use crate::topic::{parse_topics, queue_key, topics_path, TopicEntry};

pub use check::{check, Check, Derived, Problem};
use files::SegmentFiles;

/// A queue as the store's files show it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueView {
    /// The topic.
    pub topic: String,
    /// The queue.
    pub queue_id: u32,
    /// Its first offset whose message the log still holds.
    pub min_offset: u64,
    /// Its end: the offset its next message takes.
    pub max_offset: u64,
    /// Entries of it in sealed queue-index runs (the rest are dispatched from
    /// the log by the next open).
    pub sealed_end: u64,
}

/// A consumer group's committed offset in a queue: the same type as
/// [`MessageStore::committed_offsets`](crate::MessageStore::committed_offsets) returns.
pub type GroupOffset = crate::CommittedOffset;

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(io_err(path)(err)),
    }
}

/// The topics of the store in `root`, with their queue counts.
pub fn topics(root: &Path) -> Result<Vec<(String, u32)>, StoreError> {
    let path = topics_path(root);
    Ok(match read_optional(&path)? {
        Some(bytes) => parse_topics(&path, bytes)?.topics.into_iter().map(|(t, e)| (t, e.queues)).collect(),
        None => Vec::new(),
    })
}

/// Every committed consumer offset of the store in `root`.
pub fn consumer_offsets(root: &Path) -> Result<Vec<GroupOffset>, StoreError> {
    Ok(offsets::read_all(root, read_optional)?.into_iter().map(crate::CommittedOffset::new).collect())
}

/// The dispatch point recorded in the store in `root` (every message below it
/// was in the key index, flushed, when it was recorded).
pub fn dispatch_point(root: &Path) -> Result<Option<u64>, StoreError> {
    let path = checkpoint_path(root);
    match read_optional(&path)?.map(|bytes| checkpoint::parse(&bytes)) {
        None | Some(Loaded::Missing) => Ok(None),
        Some(Loaded::PointOnly(point)) => Ok(Some(point)),
        Some(Loaded::Recorded(recorded)) => Ok(Some(recorded.point)),
        Some(Loaded::Damaged(reason)) => Err(StoreError::BadFile { path, reason }),
    }
}

/// The configuration to open the existing store in `root` with over `log`:
/// the defaults, with the shapes its files show (the key index's slots and
/// items, topics wider than the default limit), so that a tool that does not know how a program configured the
/// store never takes its files for damage (a file of another size would be
/// removed and rebuilt).
pub fn existing_config(root: &Path, log: commitlog::CommitLogConfig) -> Result<crate::MessageStoreConfig, StoreError> {
    with_existing_shapes(root, crate::MessageStoreConfig::new(log))
}

/// `config` with the shapes the store in `root` shows, as
/// [`existing_config`] over the defaults: for a configuration read from a
/// file.
pub fn with_existing_shapes(
    root: &Path,
    mut config: crate::MessageStoreConfig,
) -> Result<crate::MessageStoreConfig, StoreError> {
    let widest = topics(root).unwrap_or_default().into_iter().map(|(_, queues)| queues).max().unwrap_or(0);
    config.max_queues_per_topic = config.max_queues_per_topic.max(widest);
    let index = SegmentFiles::list(&root.join("index"))?;
    if let Some((_, path, _)) = index.files.first() {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        if let Ok((shape, _)) = crate::index::file_items(&bytes, None, Some(0)) {
            config.index = shape;
        }
    }
    Ok(config)
}

/// The queues of a store as its next open would find them: the queue index's
/// runs, read from a copy in memory, and the log's durable messages after
/// them dispatched into it.
pub(crate) struct Snapshot {
    pub(crate) index: QueueIndex,
    pub(crate) report: queue_index::OpenReport,
    /// The registry's topics (empty if it does not parse: [`check`] says so).
    pub(crate) topics: BTreeMap<String, TopicEntry>,
    pub(crate) listing: commitlog::inspect::Listing,
    /// The log's durable end (its checkpoint's flushed offset).
    pub(crate) durable: u64,
    /// The log's last run shut down cleanly (no abort marker): no process
    /// has it open, and the shutdown sealed the queue index up to the
    /// dispatch point it recorded.
    pub(crate) clean_shutdown: bool,
    /// The log's first offset.
    pub(crate) front: u64,
    /// Messages of the log after the runs that do not follow their queue in
    /// the index: (log offset, why).
    pub(crate) tail_problems: Vec<(u64, String)>,
}

impl Snapshot {
    /// Reads the store in `root`.
    pub(crate) fn read(root: &Path) -> Result<Snapshot, StoreError> {
        let topics_file = topics_path(root);
        let topics = match read_optional(&topics_file)? {
            Some(bytes) => parse_topics(&topics_file, bytes).map(|p| p.topics).unwrap_or_default(),
            None => BTreeMap::new(),
        };
        let dir = queue_index_dir(root);
        // Runs copied into memory: the tail dispatched below is appended to
        // the copy, and a store open meanwhile is not disturbed.
        let (index, report) = QueueIndex::open_read_only(&store_io::CopyStorage, &dir)?;
        let listing = commitlog::inspect::list_segments(root)?;
        let files = commitlog::inspect::store_files(root);
        let durable = files.checkpoint.map_or(0, |c| c.flushed_offset);
        let clean_shutdown = !files.abort_marker;
        let front = listing.segments.first().map_or(0, |s| s.start_offset);
        let mut snapshot =
            Snapshot { index, report, topics, listing, durable, clean_shutdown, front, tail_problems: Vec::new() };
        let from = snapshot.report.replay_from.max(front);
        snapshot.scan_log(from, |snapshot, offset, size, header| {
            let Some(key) = snapshot.key_of_record(&header.topic, header.queue_id, offset) else { return };
            let entry =
                Entry { log_offset: offset, size: u32::try_from(size).unwrap_or(u32::MAX), tag: header.tags_code };
            if let Err(err) = snapshot.index.append(key, header.queue_offset, entry) {
                snapshot.tail_problems.push((offset, err.to_string()));
            }
        })?;
        Ok(snapshot)
    }

    /// Calls `visit(self, offset, size, header)` for each durable message of
    /// the log from `from` (a record's start) on.
    pub(crate) fn scan_log(
        &mut self,
        from: u64,
        mut visit: impl FnMut(&mut Self, u64, u64, crate::message::Header),
    ) -> Result<(), StoreError> {
        let size = self.listing.segment_size;
        let segments: Vec<_> = self
            .listing
            .segments
            .iter()
            .filter(|s| s.start_offset < self.durable && s.len == size && s.start_offset + size > from)
            .cloned()
            .collect();
        for segment in segments {
            let bytes = commitlog::inspect::read_segment(&segment)?;
            let pos = usize::try_from(from.saturating_sub(segment.start_offset)).unwrap_or(usize::MAX);
            let mut messages = Vec::new();
            let durable = self.durable;
            commitlog::inspect::scan_segment(&bytes, segment.start_offset, pos, |offset, _, body| {
                let size = (commitlog::format::HEADER_SIZE + body.len()) as u64;
                if offset + size <= durable {
                    if let Ok(header) = decode_header(body) {
                        messages.push((offset, size, header));
                    }
                }
            });
            for (offset, size, header) in messages {
                visit(self, offset, size, header);
            }
        }
        Ok(())
    }

    /// The key of the queue a record of `topic`'s queue at `offset` is
    /// dispatched to (as [`crate::queues::Queues::key_of_record`]).
    pub(crate) fn key_of_record(&self, topic: &str, queue_id: u32, offset: u64) -> Option<u64> {
        let entry = self.topics.get(topic)?;
        (queue_id < entry.queues && offset >= entry.since).then(|| queue_key(entry.id, queue_id))
    }

    /// The key of `topic`'s queue, if the registry has it.
    pub(crate) fn key(&self, topic: &str, queue_id: u32) -> Option<u64> {
        let entry = self.topics.get(topic)?;
        (queue_id < entry.queues).then(|| queue_key(entry.id, queue_id))
    }

    /// `key`'s first offset whose record the log still holds, and its end.
    pub(crate) fn range(&self, key: u64) -> (u64, u64) {
        let Some((min, end)) = self.index.extent(key) else { return (0, 0) };
        // Entries are in log order: the first live one by binary search.
        let (mut low, mut high) = (min, end);
        while low < high {
            let mid = low + (high - low) / 2;
            match self.index.get(key, mid, 1).first() {
                Some(e) if e.log_offset < self.front => low = mid + 1,
                _ => high = mid,
            }
        }
        (low, end)
    }

    fn view(&self, topic: &str, queue_id: u32) -> QueueView {
        let key = self.key(topic, queue_id);
        let (min_offset, max_offset) = key.map_or((0, 0), |k| self.range(k));
        let sealed_end = match key {
            Some(key) => {
                let in_runs = |offset: u64| {
                    self.index.get(key, offset, 1).first().is_some_and(|e| e.log_offset < self.report.replay_from)
                };
                let (mut low, mut high) = (min_offset, max_offset);
                while low < high {
                    let mid = low + (high - low) / 2;
                    if in_runs(mid) {
                        low = mid + 1;
                    } else {
                        high = mid;
                    }
                }
                low
            }
            None => 0,
        };
        QueueView { topic: topic.to_string(), queue_id, min_offset, max_offset, sealed_end }
    }
}

/// `topic`'s queue `queue_id` as the store's files show it.
pub fn queue(root: &Path, topic: &str, queue_id: u32) -> Result<QueueView, StoreError> {
    Ok(Snapshot::read(root)?.view(topic, queue_id))
}

/// Every queue of every topic of the store in `root`, as [`queue`] shows each
/// (the files read once).
pub fn queues(root: &Path) -> Result<Vec<QueueView>, StoreError> {
    let snapshot = Snapshot::read(root)?;
    let mut views = Vec::new();
    for (topic, entry) in &snapshot.topics {
        for queue_id in 0..entry.queues {
            views.push(snapshot.view(topic, queue_id));
        }
    }
    Ok(views)
}

/// What [`read_queue`] read.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueueRead {
    /// The messages that passed the filter, in queue order.
    pub messages: Vec<StoredMessage>,
    /// The offset to read from next.
    pub next_offset: u64,
    /// Set when the offset asked for was below the queue's first live message
    /// (its messages expired with the log's front): reading went on from this one.
    pub skipped_to: Option<u64>,
    /// Reading stopped at damage: the entry at `next_offset`, in a sealed
    /// queue-index run, does not name its message (`commitlog recover`
    /// rebuilds the index from the log).
    pub damaged: Option<DamagedEntry>,
}

/// A queue-index entry that [`read_queue`] found damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DamagedEntry {
    /// Its queue offset.
    pub queue_offset: u64,
    /// The log offset it names (`None`: the entry is missing).
    pub log_offset: Option<u64>,
}

/// Reads up to `max_count` messages of `topic`'s queue `queue_id` from
/// `offset`, from the files of the store in `root`, open or not, changing
/// nothing: each entry from the queue index's runs or the log's durable tail,
/// its message from the log's segment files. Entries whose records the
/// log's cleaning deleted are skipped (`skipped_to`). Only durable messages
/// are returned: nothing a crash can take back. An entry not naming its
/// message stops the read with `damaged` set, after the messages before it.
pub fn read_queue(
    root: &Path,
    topic: &str,
    queue_id: u32,
    offset: u64,
    max_count: usize,
    filter: &TagFilter,
) -> Result<QueueRead, StoreError> {
    let snapshot = Snapshot::read(root)?;
    let mut read = QueueRead { messages: Vec::new(), next_offset: offset, skipped_to: None, damaged: None };
    let Some(key) = snapshot.key(topic, queue_id) else { return Ok(read) };
    let (first, end) = snapshot.range(key);
    if offset < first {
        read.next_offset = first;
        read.skipped_to = Some(first);
    }
    let mut walk = QueueWalk::new(&snapshot.listing, topic, queue_id, read.next_offset);
    'batches: while read.messages.len() < max_count && walk.at() < end {
        let batch = snapshot.index.get(key, walk.at(), 256);
        if batch.is_empty() {
            break;
        }
        for entry in batch {
            if read.messages.len() >= max_count {
                break;
            }
            match walk.read(&entry)? {
                Read::Message(message) => {
                    if filter.passes(&message) {
                        read.messages.push(message);
                    }
                }
                // Its record went with the log's front meanwhile.
                Read::Expired => read.skipped_to = Some(walk.at()),
                Read::Damaged => {
                    read.damaged = Some(DamagedEntry { queue_offset: walk.at(), log_offset: Some(entry.log_offset) });
                    break 'batches;
                }
            }
        }
    }
    read.next_offset = walk.at();
    Ok(read)
}

/// The message of the record `entry` names, read from the segment files, if
/// a valid record of that size starts there.
pub(crate) fn message_of(listing: &commitlog::inspect::Listing, entry: &Entry) -> Option<StoredMessage> {
    let size = listing.segment_size.max(1);
    let end = entry.log_offset.saturating_add(u64::from(entry.size));
    let segment = listing
        .segments
        .iter()
        .find(|s| s.start_offset <= entry.log_offset && entry.log_offset < s.start_offset + size)?;
    if end > segment.start_offset + size {
        return None; // no record crosses a segment's end (a damaged entry's size)
    }
    let bytes =
        commitlog::inspect::read_segment_range(segment, entry.log_offset - segment.start_offset, entry.size as usize)
            .ok()?;
    let mut record = None;
    let scan = commitlog::inspect::scan_segment(&bytes, entry.log_offset, 0, |offset, store_timestamp_ms, body| {
        if record.is_none() {
            record = Some(commitlog::Record {
                offset,
                size: u64::from(entry.size),
                store_timestamp_ms,
                body: bytes::Bytes::copy_from_slice(body),
            });
        }
    });
    let record = record.filter(|r| r.offset == entry.log_offset && scan.end_offset == end)?;
    decode(&record).ok()
}

/// The log's segment files as listed: what a queue-index entry names is read
/// from them directly ([`message_of`]); an entry below the first segment
/// names a record the log's cleaning deleted.
impl Records for commitlog::inspect::Listing {
    fn named(&self, entry: &Entry) -> Result<Named, StoreError> {
        let front = self.segments.first().map_or(0, |s| s.start_offset);
        Ok(match message_of(self, entry) {
            Some(message) => Named::Message(message),
            None if entry.log_offset < front => Named::Expired,
            None => Named::Other,
        })
    }
}
