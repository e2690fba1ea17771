//! Operator steps on a closed store: the only ways a store forgets a segment
//! directory ([`forget_segment_dir`]) or accepts that records are gone
//! ([`salvage`]). An open never does either on its own: it refuses a store
//! whose recorded directories or segments are missing, and one damaged below
//! its checkpoint, naming what it found.
//!
//! Each step takes the store's lock (so it refuses while the log is open, with
//! [`Error::Locked`]), changes nothing when it refuses, moves aside rather than
//! deletes, and reports what it did. `commitlog forget-dir` and `commitlog
//! recover --salvage` run them; the repository's docs/operations.md says
//! when.

use std::fs;
use std::path::{Path, PathBuf};

use mapped_file::{LockError, MmapStorage, Storage};

use crate::checkpoint::Checkpoint;
use crate::format::Invalid;
use crate::inspect::{self, SegmentFile};
use crate::store;
use crate::{Error, SegmentDir};

pub use crate::store::SALVAGE_DIR_PREFIX;

/// What [`forget_segment_dir`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgetReport {
    /// The directory the store no longer lists.
    pub forgotten: PathBuf,
    /// The directories it lists now.
    pub remaining: Vec<SegmentDir>,
    /// Set when the remaining directories do not hold the log's front: the
    /// range `[front, first segment found)` (or up to the flushed offset when no
    /// segment is left). The next open refuses until [`salvage`] accepts the loss.
    pub front_missing: Option<(u64, u64)>,
}

fn refused(step: &'static str, reason: String) -> Error {
    Error::Refused { step, reason }
}

fn lock(roots: &[PathBuf]) -> Result<MmapStorage, Error> {
    MmapStorage::lock_all(roots).map_err(|err| match err {
        LockError::Locked { dir, lock_file, by_this_process } => {
            let holder = store::lock_holder(&roots[0], by_this_process);
            Error::Locked { dir, lock_file, holder }
        }
        LockError::Io { path, source } => Error::Io { path, source },
        other => Error::InvalidConfig { reason: other.to_string() },
    })
}

/// The segment files directly in `dir` (none if it does not exist).
fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| mapped_file::parse_file_name(&e.file_name().to_string_lossy()).is_some())
        .map(|e| e.path())
        .collect()
}

/// Removes `segment_dir` from the store's list of segment directories: the step
/// that retires a disk once its segments are gone (deleted by retention, or lost
/// with the disk). Refused, changing nothing, while the directory holds a
/// segment file, when it is not listed, or when no writable directory would be
/// left. The directory itself is not touched. Afterwards the configuration must
/// leave it out too (an open that lists it again adds it again).
///
/// If the remaining directories do not hold the log's front (the forgotten
/// directory was lost with segments in it), the report says so and the next
/// open refuses ([`Error::SegmentsMissing`]) until [`salvage`] accepts the loss.
pub fn forget_segment_dir(store_dir: &Path, segment_dir: &Path) -> Result<ForgetReport, Error> {
    const STEP: &str = "forget-dir";
    inspect::check_store_dir(store_dir)?;
    let storage = lock(&[store_dir.to_path_buf()])?;
    let recorded = store::recorded_dirs(&storage, store_dir)?;
    if !recorded.iter().any(|d| d.path == segment_dir) {
        let listed: Vec<String> = recorded.iter().map(|d| d.path.display().to_string()).collect();
        return Err(refused(
            STEP,
            format!(
                "{} is not one of the store's segment directories ({})",
                segment_dir.display(),
                if listed.is_empty() { "none recorded".to_string() } else { listed.join(", ") }
            ),
        ));
    }
    let held = segment_files(segment_dir);
    if let Some(first) = held.iter().min() {
        return Err(refused(
            STEP,
            format!(
                "{} still holds {} segment file(s), the first {}: wait until retention deletes them \
                 (keep it in read_only_commit_log_store_paths meanwhile), or move them to another of the \
                 store's directories while the log is closed",
                segment_dir.display(),
                held.len(),
                first.display()
            ),
        ));
    }
    let remaining: Vec<SegmentDir> = recorded.into_iter().filter(|d| d.path != segment_dir).collect();
    if remaining.is_empty() {
        return Err(refused(STEP, format!("{} is the store's only segment directory", segment_dir.display())));
    }
    if !remaining.iter().any(|d| !d.read_only) {
        return Err(refused(
            STEP,
            format!("no writable segment directory would be left beside {}", segment_dir.display()),
        ));
    }
    let front_missing = front_missing(&storage, store_dir, &remaining)?;
    store::record_dirs(&storage, store_dir, &remaining)?;
    tracing::info!(store = %store_dir.display(), forgotten = %segment_dir.display(), "segment directory forgotten");
    Ok(ForgetReport { forgotten: segment_dir.to_path_buf(), remaining, front_missing })
}

/// `[front, first)` when the segments of `dirs` start above the checkpoint's front.
fn front_missing(storage: &dyn Storage, store_dir: &Path, dirs: &[SegmentDir]) -> Result<Option<(u64, u64)>, Error> {
    let Some(checkpoint) = Checkpoint::load(storage, store_dir)? else { return Ok(None) };
    let Some(front) = checkpoint.front_offset else { return Ok(None) };
    let first = dirs
        .iter()
        .flat_map(|d| segment_files(&d.path))
        .filter_map(|p| p.file_name().and_then(|n| mapped_file::parse_file_name(&n.to_string_lossy())))
        .min();
    Ok(match first {
        Some(first) if first > front => Some((front, first)),
        None if checkpoint.flushed_offset > front => Some((front, checkpoint.flushed_offset)),
        _ => None,
    })
}

/// One file or range of bytes [`salvage`] moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Where it was.
    pub from: PathBuf,
    /// Where it is now.
    pub to: PathBuf,
    /// The log offset its bytes started at (`None` for a file that is not a
    /// segment).
    pub offset: Option<u64>,
    /// How many bytes.
    pub bytes: u64,
}

/// What [`salvage`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvageReport {
    /// The checkpoint before: front and flushed offset.
    pub checkpoint_before: Option<Checkpoint>,
    /// Where the log starts now (its first segment kept).
    pub front: u64,
    /// Where the valid log ends: every record below it was kept, nothing at or
    /// above it is part of the log any more.
    pub end: u64,
    /// Why the valid log ends there, if not at the end of data: an invalid
    /// record, a missing segment, a segment of the wrong size.
    pub stopped_by: Option<String>,
    /// Records lost at the front, `[front before, front now)`: segments the log
    /// never deleted but that are gone.
    pub front_lost: Option<(u64, u64)>,
    /// Durable records given up: the checkpoint's flushed offset was above `end`.
    pub durable_lost: Option<(u64, u64)>,
    /// What was moved aside, into `salvaged-<ms>` directories.
    pub moved: Vec<Moved>,
}

/// Makes a store that refuses to open (damage below its checkpoint, segments
/// missing at its front or its end) open again, keeping every valid record
/// before the first problem and losing nothing silently:
///
/// - The log is walked from its first segment with CRC checks. It ends at the
///   first invalid record, the first missing or wrong-sized segment, or the end
///   of data; everything from there is moved aside: the rest of that segment's
///   bytes copied into `<segment dir>/salvaged-<ms>/<segment>.from-<offset>`
///   (the next open erases them from the segment), later segment files and
///   foreign files renamed into the `salvaged-<ms>` directory of their own
///   segment directory.
/// - The checkpoint is rewritten: its front at the first segment kept, its
///   flushed offset no higher than the valid end.
///
/// The store is then opened as usual (recovery cuts the log at the valid end).
/// Refused, changing nothing, while the log is open, when a recorded segment
/// directory is missing ([`forget_segment_dir`] it first, or mount it), or when
/// the store holds no segment. Not atomic, but safe to run again: a crash in
/// the middle leaves moved files moved, and a second run finds the rest.
pub fn salvage(store_dir: &Path) -> Result<SalvageReport, Error> {
    const STEP: &str = "salvage";
    inspect::check_store_dir(store_dir)?;
    let recorded = store::recorded_dirs_unlocked(store_dir)?;
    if let Some(missing) = recorded.iter().find(|d| !d.path.is_dir()) {
        return Err(refused(
            STEP,
            format!(
                "segment directory {} is missing: mount it, or run forget-dir for it first",
                missing.path.display()
            ),
        ));
    }
    let mut roots = vec![store_dir.to_path_buf()];
    roots.extend(recorded.iter().filter(|d| !d.path.starts_with(store_dir)).map(|d| d.path.clone()));
    let storage = lock(&roots)?;
    let checkpoint = Checkpoint::load(&storage, store_dir)?;
    let listing = inspect::list_segments(store_dir)?;
    let Some(first) = listing.segments.first() else {
        return Err(refused(STEP, "the store holds no segment: there is nothing to salvage".into()));
    };
    let size = listing.segment_size;
    let walk = walk(&listing.segments, size)?;
    let front = first.start_offset;
    let mut report = SalvageReport {
        checkpoint_before: checkpoint,
        front,
        end: walk.end,
        stopped_by: walk.stopped_by.clone(),
        front_lost: checkpoint.and_then(|c| c.front_offset).filter(|&f| f < front).map(|f| (f, front)),
        durable_lost: checkpoint.map(|c| c.flushed_offset).filter(|&d| d > walk.end).map(|d| (walk.end, d)),
        moved: Vec::new(),
    };

    let stamp = mapped_file::epoch_ms(std::time::SystemTime::now());
    let aside = |segment_dir: &Path| segment_dir.join(format!("{SALVAGE_DIR_PREFIX}{stamp}"));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    // The rest of the segment the valid log ends in: copied, then erased by the
    // next open's recovery.
    if let Some(cut) = walk.cut_segment {
        let segment = &listing.segments[cut];
        let bytes = inspect::read_segment(segment)?;
        let from = usize::try_from(walk.end.saturating_sub(segment.start_offset)).unwrap_or(usize::MAX);
        let tail = bytes.get(from..).unwrap_or(&[]);
        if let Some(last) = tail.iter().rposition(|&b| b != 0) {
            let dir = segment.path.parent().unwrap_or(store_dir);
            let name = segment.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let to = aside(dir).join(format!("{name}.from-{}", walk.end));
            fs::create_dir_all(aside(dir)).map_err(io(&aside(dir)))?;
            write_durably(&to, &tail[..=last])?; // `last` indexes `tail`
            report.moved.push(Moved {
                from: segment.path.clone(),
                to,
                offset: Some(walk.end),
                bytes: u64::try_from(last).map_or(u64::MAX, |l| l.saturating_add(1)),
            });
        }
    }
    // Every later segment, and foreign files in the segment directories.
    let later = listing.segments.iter().skip(walk.kept);
    let mut files: Vec<(PathBuf, Option<u64>, u64)> =
        later.map(|s| (s.path.clone(), Some(s.start_offset), s.len)).collect();
    let segment_dirs = inspect::segment_dirs(store_dir)?;
    for problem in &listing.problems {
        let in_segment_dir = segment_dirs.iter().any(|d| problem.path.parent() == Some(d.path.as_path()));
        let foreign = in_segment_dir
            && problem.path.is_file()
            && problem.path.file_name().is_some_and(|n| mapped_file::parse_file_name(&n.to_string_lossy()).is_none());
        if foreign {
            let len = fs::metadata(&problem.path).map_or(0, |m| m.len());
            files.push((problem.path.clone(), None, len));
        }
    }
    for (from, offset, bytes) in files {
        let dir = from.parent().unwrap_or(store_dir).to_path_buf();
        let to = aside(&dir).join(from.file_name().unwrap_or_default());
        fs::create_dir_all(aside(&dir)).map_err(io(&aside(&dir)))?;
        storage.rename(&from, &to).map_err(io(&from))?;
        report.moved.push(Moved { from, to, offset, bytes });
    }
    let durable = checkpoint.map_or(0, |c| c.flushed_offset).min(walk.end);
    let timestamp = checkpoint.map_or(0, |c| c.physic_msg_timestamp);
    Checkpoint { flushed_offset: durable, physic_msg_timestamp: timestamp, front_offset: Some(front) }
        .store(&storage, store_dir)?;
    tracing::warn!(store = %store_dir.display(), ?report, "store salvaged");
    Ok(report)
}

/// Writes a new file and makes it and its directory entry durable.
fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut file = fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    mapped_file::sync_dir(path.parent().unwrap_or(Path::new("."))).map_err(io)
}

/// Where the valid log ends.
struct Walk {
    /// The end of the valid log.
    end: u64,
    /// Why it ends there, if not at the end of data.
    stopped_by: Option<String>,
    /// Segments wholly kept (from the first), the cut one included.
    kept: usize,
    /// The index of the segment the valid log ends in, if it is kept.
    cut_segment: Option<usize>,
}

/// Walks the segments from the first, with CRC checks, to the end of the valid log.
fn walk(segments: &[SegmentFile], size: u64) -> Result<Walk, Error> {
    let mut expected = segments.first().map_or(0, |s| s.start_offset);
    for (i, segment) in segments.iter().enumerate() {
        let stop = |end: u64, why: String, cut: Option<usize>| Walk {
            end,
            stopped_by: Some(why),
            kept: cut.map_or(i, |c| c.saturating_add(1)),
            cut_segment: cut,
        };
        if segment.start_offset != expected {
            return Ok(stop(expected, format!("segment missing at {expected}"), None));
        }
        if segment.len != size {
            let why = format!("{} has {} bytes, not {size}", segment.path.display(), segment.len);
            return Ok(stop(expected, why, None));
        }
        let bytes = inspect::read_segment(segment)?;
        let scan = inspect::scan_segment(&bytes, segment.start_offset, 0, |_, _, _| {});
        if let Some((offset, reason)) = scan.invalid {
            return Ok(stop(offset, format!("invalid record at {offset}: {reason}"), Some(i)));
        }
        if !scan.ends_with_blank {
            let end = scan.end_offset;
            return Ok(match segments.get(i.saturating_add(1)) {
                Some(next) => stop(
                    end,
                    format!(
                        "{}: data ends at {end}, but segment {} follows",
                        Invalid::UnexpectedEnd,
                        next.start_offset
                    ),
                    Some(i),
                ),
                None => Walk { end, stopped_by: None, kept: i.saturating_add(1), cut_segment: Some(i) },
            });
        }
        expected = segment.start_offset.saturating_add(size);
    }
    // Every segment ends with a blank: the valid log ends at the last one's end.
    Ok(Walk { end: expected, stopped_by: None, kept: segments.len(), cut_segment: None })
}
