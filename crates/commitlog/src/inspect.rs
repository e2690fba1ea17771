//! Read-only inspection of a store directory, for tools: nothing here takes the
//! lock, writes the abort marker, truncates or deletes. Segments are read with plain
//! file reads (one segment in memory at a time), never mapped.

use std::fs;
use std::path::{Path, PathBuf};

use mapped_file::MappedFileError;
use segment_queue::{check_layout, ListedSegment, QueueError};

pub use crate::scan::{scan_segment, SegmentScan};
use crate::store::{ABORT_FILE, LOCK_FILE, SEGMENT_DIR, SEGMENT_PATHS_FILE};
use crate::SegmentDir;
use crate::{Checkpoint, Error};

/// One segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    /// Its path.
    pub path: PathBuf,
    /// Its start offset (from its name).
    pub start_offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// Something wrong in a store directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file concerned.
    pub path: PathBuf,
    /// The absolute offset concerned, if any.
    pub offset: Option<u64>,
    /// What is wrong.
    pub message: String,
}

/// The segment files of a store directory, and what is wrong with the set.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Segments with well-formed names, sorted by start offset.
    pub segments: Vec<SegmentFile>,
    /// The segment size: the size most segments have.
    pub segment_size: u64,
    /// Foreign files, wrong sizes, gaps, misalignment.
    pub problems: Vec<Problem>,
}

/// Checks that `dir` looks like a store directory: it exists and has a
/// `commitlog/` folder or a list of segment directories
/// ([`SEGMENT_PATHS_FILE`]). A clear error otherwise.
pub fn check_store_dir(dir: &Path) -> Result<(), Error> {
    let meta = fs::metadata(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
    if !meta.is_dir() {
        return Err(Error::NotADirectory { path: dir.to_path_buf() });
    }
    if !dir.join(SEGMENT_DIR).is_dir() && !dir.join(SEGMENT_PATHS_FILE).is_file() {
        return Err(Error::InvalidConfig {
            reason: format!("{} is not a commit log: it has no {SEGMENT_DIR}/ folder", dir.display()),
        });
    }
    Ok(())
}

/// The segment directories of a store directory, as the store recorded them
/// (`<dir>/commitlog` alone unless it lists others in [`SEGMENT_PATHS_FILE`]).
pub fn segment_dirs(dir: &Path) -> Result<Vec<SegmentDir>, Error> {
    let path = dir.join(SEGMENT_PATHS_FILE);
    match fs::read(&path) {
        Ok(bytes) => crate::store::decode_dirs(&bytes, &path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(vec![SegmentDir::writable(dir.join(SEGMENT_DIR))]),
        Err(source) => Err(Error::Io { path, source }),
    }
}

/// Lists the segments of a store directory, in every segment directory it
/// recorded, without changing anything. A recorded directory that is missing is
/// a problem.
pub fn list_segments(dir: &Path) -> Result<Listing, Error> {
    check_store_dir(dir)?;
    let mut listing = Listing::default();
    for seg_dir in segment_dirs(dir)?.into_iter().map(|d| d.path) {
        if !seg_dir.is_dir() {
            listing.problems.push(Problem {
                path: seg_dir,
                offset: None,
                message: "segment directory is missing: the segments it held are not listed".into(),
            });
            continue;
        }
        list_dir(&seg_dir, &mut listing)?;
    }
    listing.segments.sort_by_key(|s| s.start_offset);
    let mut sizes: Vec<u64> = listing.segments.iter().map(|s| s.len).filter(|&l| l > 0).collect();
    sizes.sort_unstable();
    listing.segment_size = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
    let size = listing.segment_size;
    // The rules `SegmentQueue::load` enforces, in its words.
    let listed: Vec<ListedSegment> = listing
        .segments
        .iter()
        .map(|s| ListedSegment { start_offset: s.start_offset, path: s.path.clone(), len: s.len })
        .collect();
    for problem in check_layout(&listed, size) {
        let path = problem_path(&problem);
        let offset = listed.iter().find(|s| s.path == path).map(|s| s.start_offset);
        listing.problems.push(Problem { path, offset, message: problem.to_string() });
    }
    missing_segments(dir, &mut listing);
    // A segment that would end past `u64::MAX` cannot hold an addressable byte; it
    // is reported (above) and left out, so nothing computes offsets inside it.
    listing.segments.retain(|s| s.start_offset.checked_add(size.max(s.len)).is_some());
    Ok(listing)
}

/// Adds a problem when the segments do not reach from the checkpoint's front to
/// its flushed offset (the check an open makes, [`Error::SegmentsMissing`]).
fn missing_segments(dir: &Path, listing: &mut Listing) {
    let files = store_files(dir);
    let Some(checkpoint) = files.checkpoint else { return };
    let first = listing.segments.first().map(|s| s.start_offset);
    let end = listing.segments.last().map(|s| s.start_offset.saturating_add(listing.segment_size.max(s.len)));
    let path = Checkpoint::path(dir);
    if let Some(front) = checkpoint.front_offset {
        let missing_to = match first {
            Some(first) if first > front => Some(first),
            None if checkpoint.flushed_offset > front => Some(checkpoint.flushed_offset),
            _ => None,
        };
        if let Some(to) = missing_to {
            listing.problems.push(Problem {
                path: path.clone(),
                offset: Some(front),
                message: format!(
                    "segments missing at the front: the log starts at {front}, but no segment holds [{front}, {to})                      (a segment directory whose disk is not mounted?)"
                ),
            });
        }
    }
    // A log open elsewhere may have made a segment and checkpointed into it
    // since the listing: only a closed store's end is checked.
    let open_elsewhere = files.locked;
    if let Some(end) = end.filter(|&end| end < checkpoint.flushed_offset && !open_elsewhere) {
        listing.problems.push(Problem {
            path,
            offset: Some(end),
            message: format!(
                "segments missing at the end: the checkpoint says data is durable up to {}, but the last segment ends at {end}",
                checkpoint.flushed_offset
            ),
        });
    }
}

/// Adds the segment files of one segment directory to `listing`.
fn list_dir(seg_dir: &Path, listing: &mut Listing) -> Result<(), Error> {
    let entries = fs::read_dir(seg_dir).map_err(|source| Error::Io { path: seg_dir.to_path_buf(), source })?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io { path: seg_dir.to_path_buf(), source })?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let meta = entry.metadata().map_err(|source| Error::Io { path: path.clone(), source })?;
        if name == segment_queue::RECYCLE_DIR && meta.is_dir() {
            continue; // spare files for new segments, not part of the log
        }
        if name.starts_with(crate::store::SALVAGE_DIR_PREFIX) && meta.is_dir() {
            continue; // what a salvage moved aside, no longer part of the log
        }
        if name == LOCK_FILE && meta.is_file() {
            continue; // the lock of a segment directory outside the store directory
        }
        match mapped_file::parse_file_name(&name) {
            Some(start_offset) if meta.is_file() => {
                listing.segments.push(SegmentFile { path, start_offset, len: meta.len() })
            }
            _ => listing.problems.push(Problem {
                path,
                offset: None,
                message: "not a segment file (name is not 20 digits)".into(),
            }),
        }
    }
    Ok(())
}

fn problem_path(problem: &QueueError) -> PathBuf {
    match problem {
        QueueError::WrongSize { path, .. }
        | QueueError::Misaligned { path, .. }
        | QueueError::Gap { path, .. }
        | QueueError::Duplicate { path, .. } => path.clone(),
        QueueError::File(MappedFileError::OffsetOverflow { path, .. }) => path.clone(),
        _ => PathBuf::new(),
    }
}

/// Reads a segment file into memory.
pub fn read_segment(segment: &SegmentFile) -> Result<Vec<u8>, Error> {
    fs::read(&segment.path).map_err(|source| Error::Io { path: segment.path.clone(), source })
}

/// `len` bytes of a segment file from `pos` (fewer if the file is shorter):
/// for reading on from where an earlier read stopped.
pub fn read_segment_range(segment: &SegmentFile, pos: u64, len: usize) -> Result<Vec<u8>, Error> {
    use std::io::{Read, Seek, SeekFrom};
    let io_err = |source| Error::Io { path: segment.path.clone(), source };
    let mut file = fs::File::open(&segment.path).map_err(io_err)?;
    file.seek(SeekFrom::Start(pos)).map_err(io_err)?;
    let mut bytes = Vec::with_capacity(len);
    file.take(len as u64).read_to_end(&mut bytes).map_err(io_err)?;
    Ok(bytes)
}

/// The files beside the segments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreFiles {
    /// The checkpoint, if present and readable.
    pub checkpoint: Option<Checkpoint>,
    /// A problem reading the checkpoint.
    pub checkpoint_problem: Option<String>,
    /// The abort marker exists: the log is open, or its last process died.
    pub abort_marker: bool,
    /// The PID written in the abort marker.
    pub abort_pid: Option<u32>,
    /// A process holds the lock now.
    pub locked: bool,
}

/// Reads the checkpoint, abort marker and lock state without changing anything.
pub fn store_files(dir: &Path) -> StoreFiles {
    let path = Checkpoint::path(dir);
    let loaded = match fs::read(&path) {
        Ok(bytes) => Checkpoint::decode(&bytes, &path).map(Some),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io { path, source }),
    };
    let (checkpoint, checkpoint_problem) = match loaded {
        Ok(c) => (c, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let abort = dir.join(ABORT_FILE);
    let abort_pid = fs::read_to_string(&abort).ok().and_then(|s| s.trim().parse().ok());
    // Probe the lock with a shared try-lock on a read-only handle: no file is
    // created, and the probe's lock ends when the handle closes.
    let locked = match fs::File::open(dir.join(LOCK_FILE)) {
        Ok(file) => matches!(file.try_lock_shared(), Err(fs::TryLockError::WouldBlock)),
        Err(_) => false,
    };
    StoreFiles { checkpoint, checkpoint_problem, abort_marker: abort.exists(), abort_pid, locked }
}
