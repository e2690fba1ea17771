//! The store-directory protocol: what lives beside the segments and what it means.
//!
//! ```text
//! <dir>/lock        held (flock) by the storage while the log is open
//! <dir>/abort       present while a process has the log open: found at open, the
//!                   last process died, and recovery is abnormal
//! <dir>/checkpoint  how far data was durable (see `checkpoint`)
//! <dir>/commitlog/  the segments (by default)
//! <dir>/segment-paths  the segment directories, when they are not just
//!                   `commitlog/` (a store over several disks): one per line,
//!                   `writable <path>` or `read-only <path>`
//! ```
//!
//! The segment directory list is how a store remembers where its segments are:
//! an open that leaves out a listed directory is refused
//! ([`Error::SegmentDirNotConfigured`]) rather than finding a shorter log, and the
//! read-only tools read it to find every segment. It is rewritten at open, before
//! any new segment can be made, with every writable directory and each read-only
//! one that still holds a segment, so a directory leaves the list once it is
//! read-only and empty.
//!
//! Every file here goes through the [`Storage`] seam, so a simulated power cut
//! covers the markers and the checkpoint as well as the segments.

use std::path::{Path, PathBuf};

use mapped_file::Storage;
use segment_queue::SegmentDir;

use crate::checkpoint::Checkpoint;
use crate::Error;

/// Name of the segment directory inside the store directory.
pub const SEGMENT_DIR: &str = "commitlog";
/// Name of the lock file (held by `MmapStorage`).
pub const LOCK_FILE: &str = mapped_file::LOCK_FILE;
/// Name of the abort marker, present while a process has the log open.
pub const ABORT_FILE: &str = "abort";
/// Name of the file listing the segment directories of a store that does not
/// keep them all in [`SEGMENT_DIR`].
pub const SEGMENT_PATHS_FILE: &str = "segment-paths";

/// What opening a store directory found.
#[derive(Debug)]
pub(crate) struct Opened {
    /// No abort marker: the last process shut down cleanly.
    pub(crate) clean_shutdown: bool,
    /// The checkpoint, if any.
    pub(crate) checkpoint: Option<Checkpoint>,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// The segment directory of a store directory that has only one (the default).
pub(crate) fn segment_dir(dir: &Path) -> PathBuf {
    dir.join(SEGMENT_DIR)
}

/// The segment directories a configuration asks for: `store_path_commit_log`
/// (`<dir>/commitlog` when empty) and the read-only ones, in that order; a
/// directory in both lists is read-only.
pub(crate) fn configured_dirs(dir: &Path, config: &crate::CommitLogConfig) -> Vec<SegmentDir> {
    let writable = if config.store_path_commit_log.is_empty() {
        vec![segment_dir(dir)]
    } else {
        config.store_path_commit_log.clone()
    };
    let read_only = &config.read_only_commit_log_store_paths;
    let mut dirs: Vec<SegmentDir> =
        writable.into_iter().map(|path| SegmentDir { read_only: read_only.contains(&path), path }).collect();
    for path in read_only {
        if !dirs.iter().any(|d| &d.path == path) {
            dirs.push(SegmentDir::read_only(path.clone()));
        }
    }
    dirs
}

/// Encodes a segment directory list.
fn encode_dirs(dirs: &[SegmentDir]) -> String {
    dirs.iter()
        .map(|d| format!("{} {}\n", if d.read_only { "read-only" } else { "writable" }, d.path.display()))
        .collect()
}

/// Decodes the segment directory list read from `path`.
pub(crate) fn decode_dirs(bytes: &[u8], path: &Path) -> Result<Vec<SegmentDir>, Error> {
    let damaged = |reason: String| Error::SegmentPaths { path: path.to_path_buf(), reason };
    let text = std::str::from_utf8(bytes).map_err(|_| damaged("not UTF-8".into()))?;
    let mut dirs = Vec::new();
    for (number, line) in (1u64..).zip(text.lines()).filter(|(_, l)| !l.trim().is_empty()) {
        let (kind, dir) = line.split_once(' ').ok_or_else(|| damaged(format!("line {number}: no path")))?;
        let read_only = match kind {
            "writable" => false,
            "read-only" => true,
            other => return Err(damaged(format!("line {number}: {other:?} is neither writable nor read-only"))),
        };
        dirs.push(SegmentDir { path: PathBuf::from(dir), read_only });
    }
    if dirs.is_empty() {
        return Err(damaged("no directory listed".into()));
    }
    Ok(dirs)
}

/// The segment directories a store recorded. Without the file, the store keeps
/// its segments in `<dir>/commitlog` alone, if anywhere: that directory, when it
/// holds a segment, else nothing (a new store).
pub(crate) fn recorded_dirs(storage: &dyn Storage, dir: &Path) -> Result<Vec<SegmentDir>, Error> {
    let path = dir.join(SEGMENT_PATHS_FILE);
    match storage.read_small(&path).map_err(io_err(&path))? {
        Some(bytes) => decode_dirs(&bytes, &path),
        None => {
            let default = segment_dir(dir);
            // Not there yet: a new store.
            let listed = storage.list(&default).unwrap_or_default();
            let holds_segments = listed.iter().any(|e| mapped_file::parse_file_name(&e.name).is_some());
            Ok(if holds_segments { vec![SegmentDir::writable(default)] } else { Vec::new() })
        }
    }
}

/// Refuses a configuration that leaves out a directory the store recorded.
pub(crate) fn check_dirs_configured(
    recorded: &[SegmentDir],
    configured: &[SegmentDir],
    dir: &Path,
) -> Result<(), Error> {
    match recorded.iter().find(|r| !configured.iter().any(|c| c.path == r.path)) {
        Some(missing) => Err(Error::SegmentDirNotConfigured { store: dir.to_path_buf(), dir: missing.path.clone() }),
        None => Ok(()),
    }
}

/// Records the directories of an opened queue: every writable one, and each
/// read-only one still holding a segment. Written only when it changes, so a
/// store in `<dir>/commitlog` alone never gets the file.
pub(crate) fn record_dirs(storage: &dyn Storage, dir: &Path, queue: &segment_queue::SegmentQueue) -> Result<(), Error> {
    let segments = queue.segments();
    let holds_segments = |d: &SegmentDir| segments.iter().any(|s| s.path().parent() == Some(d.path.as_path()));
    let keep: Vec<SegmentDir> = queue.dirs().iter().filter(|d| !d.read_only || holds_segments(d)).cloned().collect();
    let path = dir.join(SEGMENT_PATHS_FILE);
    if keep == [SegmentDir::writable(segment_dir(dir))] {
        // Back to the default layout: the file goes (durably).
        return match storage.read_small(&path).map_err(io_err(&path))? {
            Some(_) => storage.remove(&path).map_err(io_err(&path)),
            None => Ok(()),
        };
    }
    if storage.read_small(&path).map_err(io_err(&path))?.is_some_and(|bytes| bytes == encode_dirs(&keep).as_bytes()) {
        return Ok(());
    }
    tracing::info!(dirs = keep.len(), "segment directories recorded");
    storage.replace_small(&path, encode_dirs(&keep).as_bytes()).map_err(io_err(&path))
}

/// Reads the abort marker and the checkpoint, then writes the abort marker (with
/// this process's id): from here until [`mark_clean_shutdown`], a crash makes the
/// next open recover abnormally.
pub(crate) fn open(storage: &dyn Storage, dir: &Path) -> Result<Opened, Error> {
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    let abort = dir.join(ABORT_FILE);
    let clean_shutdown = storage.read_small(&abort).map_err(io_err(&abort))?.is_none();
    let checkpoint = Checkpoint::load(storage, dir)?;
    storage.replace_small(&abort, std::process::id().to_string().as_bytes()).map_err(io_err(&abort))?;
    Ok(Opened { clean_shutdown, checkpoint })
}

/// Removes the abort marker (durably): the next open recovers normally. Called
/// last in a clean shutdown, after the final flush and checkpoint.
pub(crate) fn mark_clean_shutdown(storage: &dyn Storage, dir: &Path) -> Result<(), Error> {
    let abort = dir.join(ABORT_FILE);
    storage.remove(&abort).map_err(io_err(&abort))
}
