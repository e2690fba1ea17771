//! [`check`]: every piece of derived data of a store directory against its
//! log, read-only (what `commitlog verify` runs on a message store).
//!
//! The queue index is read as the next open would read it ([`Snapshot`]):
//! runs that fail their checks are problems (the open drops them and
//! dispatches their range again). The log is then read once, in order, up to
//! its durable end: each message below the runs' end is looked up at its
//! queue offset in the runs, each of its keys in the key index files (below
//! the recorded point); the registry and the consumer offsets are compared
//! with what the log holds. Problems are what the next open of the store (or
//! `commitlog recover`) rebuilds from the log, or says it cannot (a consumer
//! offset beyond its queue's end is lowered), even where nothing was lost:
//! runs that end short of the dispatch point a clean shutdown recorded (all of
//! `queueindex/`, or its last runs, deleted since), and a missing dispatch
//! checkpoint beside a log that holds records. What an open after a crash
//! does anyway (dispatch the log past the runs again) is not a problem.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use queue_index::Entry;

use super::files::SegmentFiles;
use super::{message_of, read_optional, Snapshot};
use crate::checkpoint::{self, checkpoint_path, IndexRecord, Loaded, Recorded};
use crate::error::StoreError;
use crate::index::{file_items, key_hash};
use crate::offsets;
use crate::store::queue_index_dir;
use crate::topic::{parse_topics, topics_path};

/// Which data a [`Problem`] is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Derived {
    /// The queue index (a run, its table, or a queue's entries).
    QueueIndex,
    /// The key index.
    Index,
    /// The dispatch checkpoint, `config/dispatch`.
    Checkpoint,
    /// The topic registry, `config/topics`.
    Topics,
    /// The consumer offsets, `config/offsets/` (not derived: the open
    /// lowers one past its queue's end, nothing else).
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
    /// The queue, for a queue's problem.
    pub queue: Option<(String, u32)>,
    /// The first queue offset concerned, for a queue's problem.
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
    /// Queue-index entries compared with their message.
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

/// Checks the derived data of the store in `root` (closed, or as of the log's
/// last flush beside a running one) against its log, changing nothing.
pub fn check(root: &Path) -> Result<Check, StoreError> {
    let mut out = Check::default();
    let problem = |kind: Derived, path: PathBuf, queue: Option<(String, u32)>, index: Option<u64>, message: String| {
        Problem { kind, path, queue, index, message }
    };
    let mut snapshot = Snapshot::read(root)?;
    let (durable, front) = (snapshot.durable, snapshot.front);
    let index_dir = queue_index_dir(root);
    for (path, why) in &snapshot.report.dropped {
        let message =
            format!("{why}: the next open deletes it (and every run after it) and dispatches its log range again");
        out.problems.push(problem(Derived::QueueIndex, path.clone(), None, None, message));
    }
    if let Some(why) = &snapshot.report.table_unused {
        let message = format!("queue table not usable ({why}): the next open learns the queues from the runs");
        out.problems.push(problem(Derived::QueueIndex, index_dir.join("table"), None, None, message));
    }
    let recorded = match read_optional(&checkpoint_path(root))?.map(|b| checkpoint::parse(&b)) {
        Some(Loaded::Recorded(recorded)) if recorded.point <= durable.max(front) => Some(recorded),
        Some(Loaded::Recorded(recorded)) => {
            let message = format!(
                "its dispatch point {} is past the log's durable end {durable}: the next open rebuilds the key index from the log",
                recorded.point
            );
            out.problems.push(problem(Derived::Checkpoint, checkpoint_path(root), None, None, message));
            None
        }
        Some(Loaded::Damaged(why)) => {
            let message = format!("{why}: the next open rebuilds the key index from the log");
            out.problems.push(problem(Derived::Checkpoint, checkpoint_path(root), None, None, message));
            None
        }
        Some(Loaded::Missing) | None if log_holds_records(&snapshot.listing)? => {
            // The open writes it before the log takes a record: it was lost.
            let message = "it is missing: the next open rebuilds the key index from the log".to_string();
            out.problems.push(problem(Derived::Checkpoint, checkpoint_path(root), None, None, message));
            None
        }
        Some(Loaded::PointOnly(_)) | Some(Loaded::Missing) | None => None,
    };
    // A clean shutdown seals the queue index up to the dispatch point it
    // records: runs that end short of it were lost since (all of
    // `queueindex/`, or its last runs), and the next open dispatches the log
    // again from where they end. After a crash the runs may lag the point
    // (it is recorded between seals), and a store of the consume-queue layout
    // has none yet (its first open builds them).
    let converting = recorded.as_ref().is_some_and(|r| r.topics.values().any(|t| t.id.is_none()));
    if let Some(recorded) = recorded.as_ref().filter(|_| snapshot.clean_shutdown && !converting) {
        let runs_end = snapshot.report.replay_from.max(front);
        if runs_end < recorded.point {
            let message = format!(
                "its runs end at log offset {runs_end}, short of the dispatch point {} recorded at the last clean shutdown (runs were lost): the next open dispatches the log from {runs_end} again",
                recorded.point
            );
            out.problems.push(problem(Derived::QueueIndex, index_dir.clone(), None, None, message));
        }
    }
    let topics_file = topics_path(root);
    if let Some(bytes) = read_optional(&topics_file)? {
        if let Err(err) = parse_topics(&topics_file, bytes) {
            let message = format!("{err}: the next open recovers it");
            out.problems.push(problem(Derived::Topics, topics_file.clone(), None, None, message));
        }
    }
    for (offset, why) in std::mem::take(&mut snapshot.tail_problems) {
        let message = format!("the message at log offset {offset} does not follow its queue in the queue index ({why}): `commitlog recover` rebuilds the index from the log");
        out.problems.push(problem(Derived::QueueIndex, index_dir.clone(), None, None, message));
    }
    let point = recorded.as_ref().map_or(u64::MAX, |r| r.point);
    let sealed_to = snapshot.report.replay_from;
    // Per queue: the offset its next message in the log should have, and
    // whether a problem was reported for it (one per queue).
    let mut next_in_log: HashMap<(String, u32), u64> = HashMap::new();
    let mut reported: HashSet<(String, u32)> = HashSet::new();
    let mut unknown: HashSet<String> = HashSet::new();
    // Keyed messages below the point: offset → their keys' hashes.
    let mut keyed: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut found: Vec<Problem> = Vec::new();
    let mut counts = (0u64, 0u64);
    snapshot.scan_log(front, |snapshot, offset, size, header| {
        counts.0 += 1;
        let queue = (header.topic.clone(), header.queue_id);
        if snapshot.key(&header.topic, header.queue_id).is_none() && unknown.insert(header.topic.clone()) {
            let message = format!(
                "the log holds messages of {}/{} (at {offset}), which the registry lacks: the next open recovers it",
                header.topic, header.queue_id
            );
            found.push(problem(Derived::Topics, topics_file.clone(), None, None, message));
        }
        if offset < point && !header.keys.is_empty() {
            keyed.insert(offset, header.keys.iter().map(|k| key_hash(&header.topic, k)).collect());
        }
        let next = next_in_log.insert(queue.clone(), header.queue_offset + 1);
        if next.is_some_and(|next| next != header.queue_offset) && reported.insert(queue.clone()) {
            let message = format!(
                "the log holds queue offset {} of {}/{} at {offset} after {}: the log's own queue offsets are not dense",
                header.queue_offset,
                queue.0,
                queue.1,
                next.unwrap_or(0).saturating_sub(1)
            );
            found.push(problem(Derived::Log, root.join("commitlog"), Some(queue.clone()), Some(header.queue_offset), message));
        }
        // Entries of sealed runs are checked; the tail was dispatched by the snapshot itself.
        let Some(key) = snapshot.key_of_record(&header.topic, header.queue_id, offset) else { return };
        if offset >= sealed_to || reported.contains(&queue) {
            return;
        }
        counts.1 += 1;
        let want = Entry { log_offset: offset, size: u32::try_from(size).unwrap_or(u32::MAX), tag: header.tags_code };
        let wrong = match snapshot.index.get(key, header.queue_offset, 1).first() {
            Some(entry) if *entry == want => None,
            Some(entry) => Some(format!(
                "entry {} names log offset {} ({} bytes), not its message at {offset} ({size} bytes)",
                header.queue_offset, entry.log_offset, entry.size
            )),
            None => Some(format!("entry {} (its message at log offset {offset}) is missing", header.queue_offset)),
        };
        if let Some(wrong) = wrong {
            reported.insert(queue.clone());
            let message = format!("{wrong}: `commitlog recover` rebuilds the queue index from the log");
            found.push(problem(Derived::QueueIndex, index_dir.clone(), Some(queue), Some(header.queue_offset), message));
        }
    })?;
    out.problems.extend(found);
    (out.messages, out.entries) = counts;
    // Each queue: no entry past what the log holds of it.
    for (topic, entry) in snapshot.topics.clone() {
        for queue_id in 0..entry.queues {
            out.queues += 1;
            let queue = (topic.clone(), queue_id);
            let Some(key) = snapshot.key(&topic, queue_id) else { continue };
            let (_, end) = snapshot.range(key);
            let log_next = next_in_log.get(&queue).copied().unwrap_or(0);
            if end > log_next && !reported.contains(&queue) {
                let stray = snapshot.index.get(key, log_next.max(snapshot.index.extent(key).map_or(0, |e| e.0)), 1);
                if let Some(entry) = stray.first().filter(|e| e.log_offset >= front) {
                    if message_of(&snapshot.listing, entry).is_none_or(|m| m.topic != topic || m.queue_id != queue_id) {
                        let message = format!(
                            "it ends at {end}, but the log holds its messages up to {log_next} only (entry {log_next} names log offset {}): `commitlog recover` rebuilds the queue index from the log",
                            entry.log_offset
                        );
                        out.problems.push(problem(
                            Derived::QueueIndex,
                            index_dir.clone(),
                            Some(queue),
                            Some(log_next),
                            message,
                        ));
                    }
                }
            }
        }
    }
    if let Some(recorded) = &recorded {
        check_index(root, recorded, front, &keyed, &mut out)?;
    }
    let offsets_file = offsets::offsets_dir(root);
    match offsets::read_all(root, read_optional) {
        Ok(offsets) => {
            for ((group, topic, queue_id), offset) in offsets {
                out.offsets += 1;
                let end = snapshot.key(&topic, queue_id).map_or(0, |key| snapshot.range(key).1);
                if offset > end {
                    let message = format!(
                        "group {group}'s offset {offset} on {topic}/{queue_id} is past the queue's end {end} (the log lost messages it had read): the next open lowers it"
                    );
                    out.problems.push(problem(
                        Derived::ConsumerOffsets,
                        offsets_file.clone(),
                        Some((topic, queue_id)),
                        Some(offset),
                        message,
                    ));
                }
            }
        }
        Err(err) => out.problems.push(problem(Derived::ConsumerOffsets, offsets_file, None, None, err.to_string())),
    }
    Ok(out)
}

/// Whether the log holds any record (its first segment starts with one):
/// what makes the open rebuild the key index when the checkpoint is missing.
fn log_holds_records(listing: &commitlog::inspect::Listing) -> Result<bool, StoreError> {
    let Some(first) = listing.segments.first() else { return Ok(false) };
    let header = commitlog::inspect::read_segment_range(first, 0, 4)?;
    Ok(header.iter().any(|&b| b != 0))
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
    let files = SegmentFiles::list(&dir)?;
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
