//! Read-only inspection of a message store directory, open or not: its topics,
//! each queue's offsets (from the consume-queue files), the consumer offsets and
//! the recorded dispatch point, a queue's durable messages ([`read_queue`]),
//! and a check of all the derived data against the log ([`check`]). Nothing is created, locked or written: what `commitlog
//! topics` and `commitlog receive --follow` read, safe beside a running store
//! (figures are as of the last flush).

mod check;
mod files;

use std::path::Path;

use consume_queue::CqEntry;

use crate::checkpoint::{self, checkpoint_path, Loaded, Recorded};
use crate::error::{io_err, StoreError};
use crate::get::TagFilter;
use crate::message::{decode, StoredMessage};
use crate::offsets;
use crate::queues::queue_dir;
use crate::topic::{parse_topics, topics_path};

pub use check::{check, Check, Derived, Problem};
use files::QueueFiles;

/// A queue as its files show it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueView {
    /// The topic.
    pub topic: String,
    /// The queue.
    pub queue_id: u32,
    /// The first offset with an entry (not below what the dispatch
    /// checkpoint recorded: entries the log's cleaning expired are not counted).
    pub min_offset: u64,
    /// One past the last entry on disk.
    pub max_offset: u64,
    /// Consume-queue files.
    pub files: usize,
    /// The queue's first offset and end as the dispatch checkpoint recorded
    /// them (`None`: no usable checkpoint).
    pub recorded: Option<(u64, u64)>,
    /// Why the files look damaged (entries missing below the recorded end,
    /// files that are not segments): the next open repairs the queue from
    /// the log.
    pub damaged: Option<String>,
}

/// A consumer group's committed offset in a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The queue.
    pub queue_id: u32,
    /// The next offset it consumes.
    pub offset: u64,
}

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
        Some(bytes) => parse_topics(&path, bytes)?.into_iter().collect(),
        None => Vec::new(),
    })
}

/// Every committed consumer offset of the store in `root`.
pub fn consumer_offsets(root: &Path) -> Result<Vec<GroupOffset>, StoreError> {
    Ok(offsets::read_all(root, read_optional)?
        .into_iter()
        .map(|((group, topic, queue_id), offset)| GroupOffset { group, topic, queue_id, offset })
        .collect())
}

/// The dispatch point recorded in the store in `root` (every message below it
/// was in its consume queue, flushed, when it was recorded).
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
/// the defaults, with the shapes its files show (entries per consume-queue
/// segment, the index's slots and items), so that a tool that does not know
/// how a program configured the store never takes its files for damage (a
/// file of another size would be removed and rebuilt).
pub fn existing_config(root: &Path, log: commitlog::CommitLogConfig) -> Result<crate::MessageStoreConfig, StoreError> {
    let mut config = crate::MessageStoreConfig::new(log);
    let unit = consume_queue::CQ_STORE_UNIT_SIZE as u64;
    let segment_len = |dir: &Path| QueueFiles::list(dir).ok().and_then(|f| f.files.first().map(|(_, _, len)| *len));
    'topics: for (topic, count) in topics(root)? {
        for queue_id in 0..count {
            if let Some(len) = segment_len(&queue_dir(root, &topic, queue_id)) {
                let entries = len / unit;
                let multiple = consume_queue::ENTRIES_PER_SEGMENT_MULTIPLE as u64;
                if len.is_multiple_of(unit) && entries > 0 && entries.is_multiple_of(multiple) {
                    config.consume_queue_entries_per_segment = usize::try_from(entries).unwrap_or(usize::MAX);
                }
                break 'topics;
            }
        }
    }
    let index = QueueFiles::list(&root.join("index"))?;
    if let Some((_, path, _)) = index.files.first() {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        if let Ok((shape, _)) = crate::index::file_items(&bytes, None, Some(0)) {
            config.index = shape;
        }
    }
    Ok(config)
}

/// The dispatch checkpoint of the store in `root`, if one parses.
fn recorded(root: &Path) -> Result<Option<Recorded>, StoreError> {
    Ok(match read_optional(&checkpoint_path(root))?.map(|bytes| checkpoint::parse(&bytes)) {
        Some(Loaded::Recorded(recorded)) => Some(recorded),
        _ => None,
    })
}

/// `topic`'s queue `queue_id` as its consume-queue files show it: the first
/// entry of the first file, and the last entry before the first empty one,
/// beside what the dispatch checkpoint recorded.
pub fn queue(root: &Path, topic: &str, queue_id: u32) -> Result<QueueView, StoreError> {
    view_of(root, recorded(root)?.as_ref(), topic, queue_id)
}

/// Every queue of every topic of the store in `root`, as [`queue`] shows each
/// (the checkpoint read once).
pub fn queues(root: &Path) -> Result<Vec<QueueView>, StoreError> {
    let recorded = recorded(root)?;
    let mut views = Vec::new();
    for (topic, count) in topics(root)? {
        for queue_id in 0..count {
            views.push(view_of(root, recorded.as_ref(), &topic, queue_id)?);
        }
    }
    Ok(views)
}

fn view_of(root: &Path, recorded: Option<&Recorded>, topic: &str, queue_id: u32) -> Result<QueueView, StoreError> {
    let files = QueueFiles::list(&queue_dir(root, topic, queue_id))?;
    let (first, end) = files.extent()?;
    let recorded = recorded.map(|r| r.extent(topic, queue_id));
    let damaged = match recorded {
        _ if !files.foreign.is_empty() => Some(format!("files that are not segments: {}", files.foreign[0].display())),
        Some((min, recorded_end)) if min < recorded_end && end < recorded_end => Some(format!(
            "its files end at {end}, below the end {recorded_end} the dispatch checkpoint recorded: the next open repairs it from the log"
        )),
        _ => None,
    };
    let min_offset = recorded.map_or(first, |(min, _)| first.max(min)).min(end.max(first));
    Ok(QueueView {
        topic: topic.to_string(),
        queue_id,
        min_offset,
        max_offset: end,
        files: files.files.len(),
        recorded,
        damaged,
    })
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
    /// Reading stopped at damage: the entry at `next_offset`, below the
    /// queue's end the dispatch checkpoint recorded, is missing or does not
    /// name its message (the next open of the store repairs it from the log).
    pub damaged: Option<DamagedEntry>,
}

/// A consume-queue entry that [`read_queue`] found damaged.
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
/// nothing: each entry from the consume-queue files, its message from the
/// log's segment files. Entries whose records the log's cleaning deleted are
/// skipped (`skipped_to`). It stops at the first entry not yet written or
/// whose record is not yet durable (past the log checkpoint's flushed offset),
/// so nothing it returns can be taken back by a crash. Below the queue's end
/// as the dispatch checkpoint recorded it, entries are final: one missing or
/// not naming its message stops the read with `damaged` set (damage, which
/// the next open of the store repairs from the log), after the messages
/// before it. Past that end reading
/// stops there instead, quietly: the running store may be writing it, or a
/// crash left it for the next open to cut.
pub fn read_queue(
    root: &Path,
    topic: &str,
    queue_id: u32,
    offset: u64,
    max_count: usize,
    filter: &TagFilter,
) -> Result<QueueRead, StoreError> {
    let durable = commitlog::inspect::store_files(root).checkpoint.map_or(0, |c| c.flushed_offset);
    let recorded = recorded(root)?.map(|r| r.extent(topic, queue_id));
    let (recorded_min, final_below) = recorded.unwrap_or((0, 0));
    let mut files = QueueFiles::list(&queue_dir(root, topic, queue_id))?;
    let mut read = QueueRead { messages: Vec::new(), next_offset: offset, skipped_to: None, damaged: None };
    if files.files.is_empty() && final_below == 0 {
        return Ok(read);
    }
    let first = files.extent()?.0.max(recorded_min);
    if offset < first {
        read.next_offset = first;
        read.skipped_to = Some(first);
    }
    let listing = commitlog::inspect::list_segments(root)?;
    let front = listing.segments.first().map_or(0, |s| s.start_offset);
    while read.messages.len() < max_count {
        let index = read.next_offset;
        let Some(entry) = files.entry(index)? else {
            if index < final_below {
                read.damaged = Some(DamagedEntry { queue_offset: index, log_offset: None });
            }
            break;
        };
        if entry.offset < front {
            // Its record went with the log's front: on to the first live one.
            read.next_offset += 1;
            read.skipped_to = Some(read.next_offset);
            continue;
        }
        if entry.end() > durable && index >= final_below {
            break; // not durable yet (below the recorded end, it is: or damage)
        }
        let message = message_of(&listing, &entry)
            .filter(|m| m.topic == topic && m.queue_id == queue_id && m.queue_offset == index);
        let Some(message) = message else {
            if index < final_below {
                read.damaged = Some(DamagedEntry { queue_offset: index, log_offset: Some(entry.offset) });
            }
            break;
        };
        read.next_offset += 1;
        if filter.passes(&message) {
            read.messages.push(message);
        }
    }
    Ok(read)
}

/// The message of the record `entry` names, read from the segment files, if
/// a valid record of that size starts there.
pub(crate) fn message_of(listing: &commitlog::inspect::Listing, entry: &CqEntry) -> Option<StoredMessage> {
    let size = listing.segment_size.max(1);
    let segment =
        listing.segments.iter().find(|s| s.start_offset <= entry.offset && entry.offset < s.start_offset + size)?;
    if entry.end() > segment.start_offset + size {
        return None; // no record crosses a segment's end (a damaged entry's size)
    }
    let bytes =
        commitlog::inspect::read_segment_range(segment, entry.offset - segment.start_offset, entry.size as usize)
            .ok()?;
    let mut record = None;
    let scan = commitlog::inspect::scan_segment(&bytes, entry.offset, 0, |offset, store_timestamp_ms, body| {
        if record.is_none() {
            record = Some(commitlog::Record {
                offset,
                size: u64::from(entry.size),
                store_timestamp_ms,
                body: bytes::Bytes::copy_from_slice(body),
            });
        }
    });
    let record = record.filter(|r| r.offset == entry.offset && scan.end_offset == entry.end())?;
    decode(&record).ok()
}
