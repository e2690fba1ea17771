//! Read-only inspection of a message store directory, open or not: its topics,
//! each queue's offsets (from the consume-queue files), the consumer offsets and
//! the recorded dispatch point. Nothing is created, locked or written: what
//! `commitlog topics` prints, and safe beside a running store (figures are as of
//! the last flush).

use std::path::{Path, PathBuf};

use consume_queue::CQ_STORE_UNIT_SIZE;

use crate::dispatch::{checkpoint_path, parse_point};
use crate::error::{io_err, StoreError};
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
    read_optional(&path)?.map(|bytes| parse_point(&path, &bytes)).transpose()
}

/// `topic`'s queue `queue_id` as its consume-queue files show it: the first
/// entry of the first file, and the last entry before the first empty one.
pub fn queue(root: &Path, topic: &str, queue_id: u32) -> Result<QueueView, StoreError> {
    let dir = queue_dir(root, topic, queue_id);
    let mut files: Vec<(u64, PathBuf)> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                (name.len() == 20).then(|| name.parse::<u64>().ok()).flatten().map(|start| (start, e.path()))
            })
            .collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(io_err(&dir)(err)),
    };
    files.sort();
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
