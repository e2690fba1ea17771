//! [`check`]: every piece of derived data of a store directory against its
//! log, read-only (what `commitlog verify` runs on a message store).
//!
//! The log is read once, in order, up to its durable end. Each message is
//! looked up at its queue offset in its queue's files (below the end the
//! dispatch checkpoint recorded, where entries are final), and each of its
//! keys in the index files (below the recorded point); the checkpoint, the
//! topic registry and the consumer offsets are compared with what the log
//! holds. Problems are what the next open of the store repairs from the log
//! (a damaged consume queue, index or checkpoint) or says it cannot (a
//! consumer offset beyond its queue's end is lowered).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use consume_queue::CqEntry;

use super::files::QueueFiles;
use super::read_optional;
use crate::checkpoint::{self, checkpoint_path, IndexRecord, Loaded, Recorded};
use crate::error::StoreError;
use crate::index::{file_items, key_hash};
use crate::message::decode_header;
use crate::offsets;
use crate::queues::queue_dir;
use crate::topic::{parse_topics, topics_path};

/// Which data a [`Problem`] is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Derived {
    /// A consume queue (its files, from `index` on).
    ConsumeQueue,
    /// The key index.
    Index,
    /// The dispatch checkpoint, `config/dispatch`.
    Checkpoint,
    /// The topic registry, `config/topics`.
    Topics,
    /// The consumer offsets, `config/consumer_offsets` (not derived: the
    /// open lowers one past its queue's end, nothing else).
    ConsumerOffsets,
    /// The log itself (its messages' own queue offsets).
    Log,
}

/// A place where derived data disagrees with the log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// Which data.
    pub kind: Derived,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// The queue, for a consume queue's problem.
    pub queue: Option<(String, u32)>,
    /// The first queue offset concerned, for a consume queue's problem.
    pub index: Option<u64>,
    /// What is wrong, and what the next open does about it.
    pub message: String,
}

/// What [`check`] read and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// Messages read from the log (below its durable end).
    pub messages: u64,
    /// Queues of the registry.
    pub queues: usize,
    /// Consume-queue entries compared with their message.
    pub entries: u64,
    /// Keys looked up in the index.
    pub keys: u64,
    /// Index items checked against their message.
    pub items: u64,
    /// Consumer offsets compared with their queue's end.
    pub offsets: usize,
    /// What disagrees with the log, at most one problem per queue and per
    /// index file.
    pub problems: Vec<Problem>,
}

/// What the scan of the log learns of one queue.
#[derive(Debug, Default)]
struct QueueState {
    files: Option<QueueFiles>,
    /// The offset the queue's next message in the log should have.
    next_in_log: Option<u64>,
    /// One past the last queue offset of its messages below the recorded point.
    end_below_point: Option<u64>,
    /// A problem was reported for it (one per queue).
    reported: bool,
}

/// Checks the derived data of the store in `root` (closed, or as of its last
/// flush beside a running one: entries past the recorded checkpoint are not
/// judged) against its log, changing nothing.
pub fn check(root: &Path) -> Result<Check, StoreError> {
    let mut out = Check::default();
    let problem = |kind: Derived, path: PathBuf, queue: Option<(String, u32)>, index: Option<u64>, message: String| {
        Problem { kind, path, queue, index, message }
    };
    let listing = commitlog::inspect::list_segments(root)?;
    let durable = commitlog::inspect::store_files(root).checkpoint.map_or(0, |c| c.flushed_offset);
    let front = listing.segments.first().map_or(0, |s| s.start_offset);
    let recorded = match read_optional(&checkpoint_path(root))?.map(|b| checkpoint::parse(&b)) {
        Some(Loaded::Recorded(recorded)) if recorded.point <= durable.max(front) => Some(recorded),
        Some(Loaded::Recorded(recorded)) => {
            let message = format!(
                "its dispatch point {} is past the log's durable end {durable}: the next open rebuilds every queue and the index from the log",
                recorded.point
            );
            out.problems.push(problem(Derived::Checkpoint, checkpoint_path(root), None, None, message));
            None
        }
        Some(Loaded::Damaged(why)) => {
            let message = format!("{why}: the next open rebuilds every queue and the index from the log");
            out.problems.push(problem(Derived::Checkpoint, checkpoint_path(root), None, None, message));
            None
        }
        Some(Loaded::PointOnly(_)) | Some(Loaded::Missing) | None => None,
    };
    let topics_file = topics_path(root);
    let registry: BTreeMap<String, u32> = match read_optional(&topics_file)? {
        Some(bytes) => parse_topics(&topics_file, bytes).unwrap_or_else(|err| {
            out.problems.push(problem(
                Derived::Topics,
                topics_file.clone(),
                None,
                None,
                format!("{err}: the next open recovers it"),
            ));
            BTreeMap::new()
        }),
        None => BTreeMap::new(),
    };
    let point = recorded.as_ref().map_or(u64::MAX, |r| r.point);
    let mut queues: HashMap<(String, u32), QueueState> = HashMap::new();
    let mut unknown: HashSet<String> = HashSet::new();
    // Keyed messages below the point: offset → their keys' hashes.
    let mut keyed: HashMap<u64, Vec<u64>> = HashMap::new();
    for segment in &listing.segments {
        if segment.start_offset >= durable || segment.len != listing.segment_size {
            continue; // not durable yet, or what `commitlog verify` reports about the log itself
        }
        let bytes = commitlog::inspect::read_segment(segment)?;
        let mut messages = Vec::new();
        commitlog::inspect::scan_segment(&bytes, segment.start_offset, 0, |offset, _, body| {
            let size = (commitlog::format::HEADER_SIZE + body.len()) as u64;
            if offset + size <= durable {
                if let Ok(header) = decode_header(body) {
                    messages.push((offset, size, header));
                }
            }
        });
        for (offset, size, header) in messages {
            out.messages += 1;
            if registry.get(&header.topic).is_none_or(|&count| header.queue_id >= count)
                && unknown.insert(header.topic.clone())
            {
                let message = format!(
                    "the log holds messages of {}/{} (at {offset}), which the registry lacks: the next open recovers it",
                    header.topic, header.queue_id
                );
                out.problems.push(problem(Derived::Topics, topics_file.clone(), None, None, message));
            }
            if offset < point && !header.keys.is_empty() {
                keyed.insert(offset, header.keys.iter().map(|k| key_hash(&header.topic, k)).collect());
            }
            let key = (header.topic.clone(), header.queue_id);
            let state = queues.entry(key.clone()).or_default();
            if state.next_in_log.is_some_and(|next| next != header.queue_offset) && !state.reported {
                state.reported = true;
                let message = format!(
                    "the log holds queue offset {} of {}/{} at {offset} after {}: the log's own queue offsets are not dense",
                    header.queue_offset,
                    key.0,
                    key.1,
                    state.next_in_log.unwrap_or(0).saturating_sub(1)
                );
                out.problems.push(problem(
                    Derived::Log,
                    segment.path.clone(),
                    Some(key.clone()),
                    Some(header.queue_offset),
                    message,
                ));
            }
            state.next_in_log = Some(header.queue_offset + 1);
            if offset < point {
                state.end_below_point = Some(header.queue_offset + 1);
            }
            // Below the recorded end entries are final; with no checkpoint, all are judged.
            let judged = recorded.as_ref().is_none_or(|r| header.queue_offset < r.extent(&key.0, key.1).1);
            if !judged || state.reported {
                continue;
            }
            let files = match &mut state.files {
                Some(files) => files,
                files => files.insert(QueueFiles::list(&queue_dir(root, &key.0, key.1))?),
            };
            out.entries += 1;
            let size32 = u32::try_from(size).unwrap_or(u32::MAX);
            let found = files.entry(header.queue_offset)?;
            let wrong = match found {
                Some(CqEntry { offset: o, size: s, tag }) if o == offset && s == size32 && tag == header.tags_code => {
                    None
                }
                Some(entry) => Some(format!(
                    "entry {} names log offset {} ({} bytes), not its message at {offset} ({size} bytes)",
                    header.queue_offset, entry.offset, entry.size
                )),
                None => Some(format!("entry {} (its message at log offset {offset}) is missing", header.queue_offset)),
            };
            if let Some(wrong) = wrong {
                state.reported = true;
                let message = format!("{wrong}: the next open repairs the queue from the log");
                let path = queue_dir(root, &key.0, key.1);
                out.problems.push(problem(Derived::ConsumeQueue, path, Some(key), Some(header.queue_offset), message));
            }
        }
    }
    // Each queue: its files, and what the checkpoint recorded of it.
    for (topic, &count) in &registry {
        for queue_id in 0..count {
            out.queues += 1;
            let key = (topic.clone(), queue_id);
            let dir = queue_dir(root, topic, queue_id);
            let state = queues.entry(key.clone()).or_default();
            let files = match &mut state.files {
                Some(files) => files,
                files => files.insert(QueueFiles::list(&dir)?),
            };
            if let (Some(foreign), false) = (files.foreign.first(), state.reported) {
                state.reported = true;
                let message = format!("{} is not a consume-queue segment: move it out", foreign.display());
                out.problems.push(problem(Derived::ConsumeQueue, dir.clone(), Some(key.clone()), None, message));
            }
            let recorded_extent = recorded.as_ref().map(|r| r.extent(topic, queue_id));
            if let (Some((_, recorded_end)), Some(log_end), false) =
                (recorded_extent, state.end_below_point, state.reported)
            {
                if log_end != recorded_end {
                    let message = format!(
                        "the dispatch checkpoint records its end at {recorded_end}, but below its point the log holds messages up to {log_end}"
                    );
                    out.problems.push(problem(Derived::Checkpoint, checkpoint_path(root), Some(key), None, message));
                }
            }
        }
    }
    if let Some(recorded) = &recorded {
        check_index(root, recorded, front, &keyed, &mut out)?;
    }
    let offsets_file = offsets::offsets_dir(root);
    {
        match offsets::read_all(root, read_optional) {
            Ok(offsets) => {
                for ((group, topic, queue_id), offset) in offsets {
                    out.offsets += 1;
                    let key = (topic, queue_id);
                    let end = queues.get(&key).and_then(|s| s.next_in_log).unwrap_or(0);
                    let end = end.max(recorded.as_ref().map_or(0, |r| r.extent(&key.0, key.1).1));
                    if offset > end {
                        let message = format!(
                            "group {group}'s offset {offset} on {}/{} is past the queue's end {end} (the log lost messages it had read): the next open lowers it",
                            key.0, key.1
                        );
                        out.problems.push(problem(
                            Derived::ConsumerOffsets,
                            offsets_file.clone(),
                            Some(key),
                            Some(offset),
                            message,
                        ));
                    }
                }
            }
            Err(err) => {
                out.problems.push(problem(Derived::ConsumerOffsets, offsets_file.clone(), None, None, err.to_string()))
            }
        }
    }
    Ok(out)
}

/// The index files against the keyed messages below the recorded point:
/// every key found, every trusted item naming a key of its message.
fn check_index(
    root: &Path,
    recorded: &Recorded,
    front: u64,
    keyed: &HashMap<u64, Vec<u64>>,
    out: &mut Check,
) -> Result<(), StoreError> {
    let dir = root.join("index");
    let live = match recorded.index {
        IndexRecord::Off => return Ok(()), // not built below the point
        IndexRecord::Empty => None,
        IndexRecord::Live(mark) => Some(mark),
    };
    let files = QueueFiles::list(&dir)?;
    let mut shape = None;
    let mut items: HashSet<(u64, u64)> = HashSet::new();
    let mut lost = false;
    for (start, path, _) in &files.files {
        let live_items = match live {
            Some(mark) if mark.live_file == *start => Some(mark.items),
            Some(mark) if mark.live_file < *start => break, // made after the point
            Some(_) => None,
            None => break,
        };
        let bytes = std::fs::read(path).map_err(crate::error::io_err(path))?;
        let file = match file_items(&bytes, shape, live_items) {
            Ok((file_shape, file)) => {
                shape = Some(file_shape);
                file
            }
            Err(why) => {
                let message = format!("{why}: the next open rebuilds the index from the log");
                out.problems.push(Problem {
                    kind: Derived::Index,
                    path: path.clone(),
                    queue: None,
                    index: None,
                    message,
                });
                lost = true;
                continue;
            }
        };
        let mut bad = None;
        for (n, (hash, offset)) in file.iter().enumerate() {
            out.items += 1;
            let names = *offset < front || keyed.get(offset).is_some_and(|hashes| hashes.contains(hash));
            if !names && bad.is_none() {
                bad = Some(n + 1);
            }
            items.insert((*hash, *offset));
        }
        if let Some(n) = bad {
            let message =
                format!("item {n} names no key of a message: the next open rebuilds the index if it sees it, `commitlog recover` does");
            out.problems.push(Problem { kind: Derived::Index, path: path.clone(), queue: None, index: None, message });
        }
    }
    if live.is_some_and(|mark| !files.files.iter().any(|(start, ..)| *start == mark.live_file)) {
        let message =
            "the live index file the dispatch checkpoint records is missing: the next open rebuilds the index";
        out.problems.push(Problem {
            kind: Derived::Index,
            path: dir.clone(),
            queue: None,
            index: None,
            message: message.into(),
        });
        lost = true;
    }
    let mut missing = 0u64;
    let mut first_missing = None;
    for (offset, hashes) in keyed {
        if *offset < front {
            continue;
        }
        for hash in hashes {
            out.keys += 1;
            if !items.contains(&(*hash, *offset)) {
                missing += 1;
                first_missing = first_missing.min(Some(*offset)).or(Some(*offset));
            }
        }
    }
    if missing > 0 && !lost {
        let message = format!(
            "{missing} keys of messages below the dispatch point are not in it (the first at log offset {}): `commitlog recover` rebuilds it",
            first_missing.unwrap_or(0)
        );
        out.problems.push(Problem { kind: Derived::Index, path: dir, queue: None, index: None, message });
    }
    Ok(())
}
