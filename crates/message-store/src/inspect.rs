//! Read-only inspection of a message store directory, open or not: its topics,
//! each queue's offsets (from the consume-queue files), the consumer offsets and
//! the recorded dispatch point, and a queue's durable messages
//! ([`read_queue`]). Nothing is created, locked or written: what `commitlog
//! topics` and `commitlog receive --follow` read, safe beside a running store
//! (figures are as of the last flush).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use consume_queue::{CqEntry, CQ_STORE_UNIT_SIZE};

use crate::checkpoint::{self, checkpoint_path, Loaded};
use crate::error::{io_err, StoreError};
use crate::get::TagFilter;
use crate::message::{decode, StoredMessage};
use crate::offsets::{offsets_path, parse_offsets};
use crate::queues::queue_dir;
use crate::topic::{parse_topics, topics_path};

/// A queue as its files show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueView {
    /// The topic.
    pub topic: String,
    /// The queue.
    pub queue_id: u32,
    /// The first offset with an entry.
    pub min_offset: u64,
    /// One past the last entry on disk.
    pub max_offset: u64,
    /// Consume-queue files.
    pub files: usize,
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
    let path = offsets_path(root);
    let Some(bytes) = read_optional(&path)? else { return Ok(Vec::new()) };
    Ok(parse_offsets(&path, bytes)?
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

/// The consume-queue files of a queue, by start byte, sorted.
fn queue_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut files: Vec<(u64, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                (name.len() == 20).then(|| name.parse::<u64>().ok()).flatten().map(|start| (start, e.path()))
            })
            .collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(io_err(dir)(err)),
    };
    files.sort();
    Ok(files)
}

/// `topic`'s queue `queue_id` as its consume-queue files show it: the first
/// entry of the first file, and the last entry before the first empty one.
pub fn queue(root: &Path, topic: &str, queue_id: u32) -> Result<QueueView, StoreError> {
    view_of(topic, queue_id, &queue_files(&queue_dir(root, topic, queue_id))?)
}

/// [`queue`] over its files, listed already.
fn view_of(topic: &str, queue_id: u32, files: &[(u64, PathBuf)]) -> Result<QueueView, StoreError> {
    let unit = CQ_STORE_UNIT_SIZE as u64;
    let entries = |path: &Path| -> Result<Vec<bool>, StoreError> {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        Ok(bytes.chunks_exact(CQ_STORE_UNIT_SIZE).map(|c| c[8..12] != [0; 4]).collect())
    };
    let mut view = QueueView { topic: topic.to_string(), queue_id, min_offset: 0, max_offset: 0, files: files.len() };
    if let Some((start, path)) = files.first() {
        let first = entries(path)?;
        let k = first.iter().position(|&e| e).unwrap_or(first.len()) as u64;
        view.min_offset = start / unit + k;
    }
    if let Some((start, path)) = files.last() {
        let last = entries(path)?;
        // Leading holes of a queue's first file are its start, not its end.
        let skip = if files.len() == 1 { (view.min_offset - start / unit) as usize } else { 0 };
        let n = last.iter().skip(skip).position(|&e| !e).map_or(last.len(), |p| p + skip) as u64;
        view.max_offset = (start / unit + n).max(view.min_offset);
    }
    Ok(view)
}

/// What [`read_queue`] read.
#[derive(Debug, Clone)]
pub struct QueueRead {
    /// The messages that passed the filter, in queue order.
    pub messages: Vec<StoredMessage>,
    /// The offset to read from next.
    pub next_offset: u64,
    /// Set when the offset asked for was below the queue's first entry (its
    /// messages expired): reading went on from this one.
    pub skipped_to: Option<u64>,
}

/// Reads up to `max_count` messages of `topic`'s queue `queue_id` from
/// `offset`, from the files of the store in `root`, open or not, changing
/// nothing: each entry from the consume-queue files, its message from the
/// log's segment files. It stops at the first entry not yet written or whose
/// record is not yet durable (past the log checkpoint's flushed offset), so
/// nothing it returns can be taken back by a crash. An entry below the
/// recorded dispatch point that does not name its message is an
/// [`StoreError::IndexMismatch`]; above it reading stops there (the running
/// store may be writing it, or a crash left it for the next open to cut).
pub fn read_queue(
    root: &Path,
    topic: &str,
    queue_id: u32,
    offset: u64,
    max_count: usize,
    filter: &TagFilter,
) -> Result<QueueRead, StoreError> {
    let durable = commitlog::inspect::store_files(root).checkpoint.map_or(0, |c| c.flushed_offset);
    let files = queue_files(&queue_dir(root, topic, queue_id))?;
    let unit = CQ_STORE_UNIT_SIZE as u64;
    let mut read = QueueRead { messages: Vec::new(), next_offset: offset, skipped_to: None };
    if let Some((start, _)) = files.first() {
        let first = view_of(topic, queue_id, &files)?.min_offset.max(start / unit);
        if offset < first {
            read.next_offset = first;
            read.skipped_to = Some(first);
        }
    }
    let mut segments: Option<commitlog::inspect::Listing> = None;
    // The consume-queue file read last, kept open for the entries after it.
    let mut open: Option<(u64, std::fs::File)> = None;
    while read.messages.len() < max_count {
        let at = read.next_offset.saturating_mul(unit);
        let Some((start, path)) = files.iter().rev().find(|(start, _)| *start <= at) else { break };
        if open.as_ref().is_none_or(|(opened, _)| opened != start) {
            open = Some((*start, std::fs::File::open(path).map_err(io_err(path))?));
        }
        let Some((_, file)) = &open else { break };
        let mut bytes = [0u8; CQ_STORE_UNIT_SIZE];
        match file.read_exact_at(&mut bytes, at - start) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(err) => return Err(io_err(path)(err)),
        }
        let Some(entry) = CqEntry::decode(&bytes) else { break };
        if entry.end() > durable {
            break;
        }
        if segments.is_none() {
            segments = Some(commitlog::inspect::list_segments(root)?);
        }
        let Some(listing) = &segments else { break };
        let message = message_of(listing, &entry)
            .filter(|m| m.topic == topic && m.queue_id == queue_id && m.queue_offset == read.next_offset);
        let Some(message) = message else {
            // Below the recorded dispatch point entries are flushed and final:
            // a wrong one is damage. Above it, one may be mid-write by the
            // running store, or left by a crash for the next open to cut:
            // stop there and let the caller look again.
            if entry.offset < dispatch_point(root)?.unwrap_or(0) {
                return Err(StoreError::IndexMismatch {
                    topic: topic.to_string(),
                    queue_id,
                    queue_offset: read.next_offset,
                    log_offset: entry.offset,
                });
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
fn message_of(listing: &commitlog::inspect::Listing, entry: &CqEntry) -> Option<StoredMessage> {
    let size = listing.segment_size.max(1);
    let segment =
        listing.segments.iter().find(|s| s.start_offset <= entry.offset && entry.offset < s.start_offset + size)?;
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
