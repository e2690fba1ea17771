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
//! The segment directory list is how a store remembers where its segments are,
//! and the checkpoint's front offset where its first segment starts. An open
//! refuses rather than finding a shorter log:
//! - a configuration that leaves out a listed directory
//!   ([`Error::SegmentDirNotConfigured`]);
//! - a listed directory that does not exist ([`Error::SegmentDirMissing`]; it is
//!   never created again: an unmounted disk's mount point may be gone);
//! - segments missing from the front, or a last segment ending below the
//!   checkpoint's flushed offset ([`Error::SegmentsMissing`], naming the listed
//!   directories that hold no segment: an unmounted disk's empty mount point).
//!
//! All of these are checked before anything is written. The list only grows at
//! open, by the directories the configuration adds; a directory leaves it only
//! by an operator's explicit step ([`admin::forget_segment_dir`](crate::admin::forget_segment_dir)),
//! and a loss of segments is accepted only by [`admin::salvage`](crate::admin::salvage).
//! The read-only tools read the list to find every segment.
//!
//! Every file here goes through the [`Storage`] seam, so a simulated power cut
//! covers the markers and the checkpoint as well as the segments.

use std::path::{Path, PathBuf};

use mapped_file::Storage;
use segment_queue::SegmentDir;

use crate::checkpoint::Checkpoint;
use crate::error::io_err;
use crate::Error;

/// Name of the segment directory inside the store directory.
pub const SEGMENT_DIR: &str = "commitlog";
/// Name of the lock file (held by `MmapStorage`).
pub const LOCK_FILE: &str = mapped_file::LOCK_FILE;
/// Name of the abort marker, present while a process has the log open.
pub const ABORT_FILE: &str = "abort";
/// Prefix of the directories `commitlog recover --salvage` ([`admin::salvage`](crate::admin::salvage))
/// moves bytes and files into, inside the segment directory they came from (so a
/// move never crosses file systems): `salvaged-<ms since the Unix epoch>`. The log
/// and the tools ignore them.
pub const SALVAGE_DIR_PREFIX: &str = "salvaged-";
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

/// [`recorded_dirs`] with plain file reads, before the store is locked (locking a
/// directory creates it, so a recorded one that is missing must be seen first).
pub(crate) fn recorded_dirs_unlocked(dir: &Path) -> Result<Vec<SegmentDir>, Error> {
    let path = dir.join(SEGMENT_PATHS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => decode_dirs(&bytes, &path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let default = segment_dir(dir);
            let holds_segments = std::fs::read_dir(&default).is_ok_and(|entries| {
                entries.flatten().any(|e| mapped_file::parse_file_name(&e.file_name().to_string_lossy()).is_some())
            });
            Ok(if holds_segments { vec![SegmentDir::writable(default)] } else { Vec::new() })
        }
        Err(source) => Err(Error::Io { path, source }),
    }
}

/// The segment files in `dirs`, as `(start, start + file length, path)`,
/// sorted, by plain directory reads (before the lock).
pub(crate) fn segment_files_unlocked(dirs: &[SegmentDir]) -> Vec<(u64, u64, PathBuf)> {
    let mut found: Vec<(u64, u64, PathBuf)> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(&d.path).ok())
        .flat_map(|entries| entries.flatten())
        .filter_map(|e| {
            let start = mapped_file::parse_file_name(&e.file_name().to_string_lossy())?;
            let len = e.metadata().ok()?.len();
            Some((start, start.saturating_add(len), e.path()))
        })
        .collect();
    found.sort();
    found
}

/// The segment size of the segments already in `dirs`, when they agree on
/// one: every segment file has that length, a valid segment size (a multiple
/// of 4096). `None` for a store without segments, or one whose files
/// disagree (then the configured size stands, and a file of another size is
/// the clear error it always was: damage is not a size to adopt).
pub(crate) fn existing_segment_size(storage: &dyn Storage, dirs: &[SegmentDir]) -> Result<Option<usize>, Error> {
    let mut sizes = std::collections::BTreeSet::new();
    for d in dirs {
        let entries = match storage.list(&d.path) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(io_err(&d.path)(err)),
        };
        // Zero-length leftovers (a creation cut short) are load's to remove.
        sizes.extend(
            entries.iter().filter(|e| e.len > 0 && mapped_file::parse_file_name(&e.name).is_some()).map(|e| e.len),
        );
    }
    Ok(match sizes.into_iter().collect::<Vec<u64>>()[..] {
        [len] if len % 4096 == 0 => usize::try_from(len).ok(),
        _ => None,
    })
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

/// Refuses a store one of whose recorded directories does not exist: it is not
/// created again (the mount point of a disk that is not mounted, say).
pub(crate) fn check_recorded_dirs_exist(
    storage: &dyn Storage,
    recorded: &[SegmentDir],
    dir: &Path,
) -> Result<(), Error> {
    for seg_dir in recorded {
        match storage.list(&seg_dir.path) {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::SegmentDirMissing { store: dir.to_path_buf(), dir: seg_dir.path.clone() });
            }
            Err(source) => return Err(Error::Io { path: seg_dir.path.clone(), source }),
        }
    }
    Ok(())
}

/// The directories of `recorded` holding none of the segment files `segments`.
pub(crate) fn dirs_without_segments(recorded: &[SegmentDir], segments: &[&Path]) -> Vec<PathBuf> {
    recorded
        .iter()
        .filter(|d| !segments.iter().any(|s| s.parent() == Some(d.path.as_path())))
        .map(|d| d.path.clone())
        .collect()
}

/// Refuses a log whose segments do not reach from the checkpoint's front to its
/// flushed offset: the front's segments, or the last ones, went missing (the
/// log deletes from the front only after recording the new front). A format-1
/// checkpoint has no front; only the end is checked then.
pub(crate) fn check_segments_present(
    checkpoint: Option<&Checkpoint>,
    segments: &[(u64, u64, PathBuf)],
    recorded: &[SegmentDir],
    dir: &Path,
) -> Result<(), Error> {
    let Some(checkpoint) = checkpoint else { return Ok(()) };
    #[cfg(planted_bugs)]
    if crate::planted::is_active(crate::planted::Bug::SegmentsUnchecked) {
        return Ok(()); // the planted bug: whatever is found is the log
    }
    let durable = checkpoint.flushed_offset;
    let found = segments.first().zip(segments.last()).map(|(first, last)| (first.0, last.1));
    let front_missing = match (checkpoint.front_offset, found) {
        (Some(front), Some((first, _))) => first > front,
        (Some(front), None) => durable > front,
        (None, _) => false,
    };
    let end_missing = found.is_some_and(|(_, end)| end < durable);
    if !front_missing && !end_missing {
        return Ok(());
    }
    Err(Error::SegmentsMissing {
        store: dir.to_path_buf(),
        front: checkpoint.front_offset,
        durable,
        found,
        empty_dirs: dirs_without_segments(
            recorded,
            &segments.iter().map(|(_, _, path)| path.as_path()).collect::<Vec<_>>(),
        ),
    })
}

/// Records the directories of an opened store: the configured ones (which
/// include every recorded one, [`check_dirs_configured`]). Written only when
/// it changes, so a store in `<dir>/commitlog` alone never gets the file.
pub(crate) fn record_dirs(storage: &dyn Storage, dir: &Path, configured: &[SegmentDir]) -> Result<(), Error> {
    let path = dir.join(SEGMENT_PATHS_FILE);
    if configured == [SegmentDir::writable(segment_dir(dir))] {
        // The default layout: no file (a store that had one recorded the default
        // directory alone only after `forget_segment_dir` removed the others).
        return match storage.read_small(&path).map_err(io_err(&path))? {
            Some(_) => storage.remove(&path).map_err(io_err(&path)),
            None => Ok(()),
        };
    }
    write_dirs(storage, dir, configured)
}

/// Writes the segment directory list (durably), unless it says this already.
pub(crate) fn write_dirs(storage: &dyn Storage, dir: &Path, dirs: &[SegmentDir]) -> Result<(), Error> {
    let path = dir.join(SEGMENT_PATHS_FILE);
    if storage.read_small(&path).map_err(io_err(&path))?.is_some_and(|bytes| bytes == encode_dirs(dirs).as_bytes()) {
        return Ok(());
    }
    tracing::info!(dirs = dirs.len(), "segment directories recorded");
    storage.replace_small(&path, encode_dirs(dirs).as_bytes()).map_err(io_err(&path))
}

/// Reads the abort marker and the checkpoint without changing anything.
pub(crate) fn read(storage: &dyn Storage, dir: &Path) -> Result<Opened, Error> {
    let abort = dir.join(ABORT_FILE);
    let clean_shutdown = storage.read_small(&abort).map_err(io_err(&abort))?.is_none();
    let checkpoint = Checkpoint::load(storage, dir)?;
    Ok(Opened { clean_shutdown, checkpoint })
}

/// Writes the abort marker (with this process's id): from here until
/// [`mark_clean_shutdown`], a crash makes the next open recover abnormally.
pub(crate) fn mark_open(storage: &dyn Storage, dir: &Path) -> Result<(), Error> {
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    let abort = dir.join(ABORT_FILE);
    storage.replace_small(&abort, std::process::id().to_string().as_bytes()).map_err(io_err(&abort))
}

/// Who holds the lock of the store in `dir`: this process, if the storage says
/// so, else the process whose id the abort marker holds (read with a plain file
/// read: the lock is someone else's).
pub(crate) fn lock_holder(dir: &Path, by_this_process: bool) -> crate::error::LockHolder {
    use crate::error::LockHolder;
    if by_this_process {
        return LockHolder::ThisProcess;
    }
    let pid = std::fs::read_to_string(dir.join(ABORT_FILE)).ok().and_then(|s| s.trim().parse::<u32>().ok());
    match pid {
        Some(pid) if pid == std::process::id() => LockHolder::ThisProcess,
        Some(pid) => LockHolder::OtherProcess(pid),
        None => LockHolder::Unknown,
    }
}

/// Refuses a store path that exists and is not a directory, with an error that
/// says so (rather than the file system's "File exists").
pub(crate) fn check_store_path(dir: &Path) -> Result<(), Error> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(Error::NotADirectory { path: dir.to_path_buf() }),
        _ => Ok(()),
    }
}

/// Removes the abort marker (durably): the next open recovers normally. Called
/// last in a clean shutdown, after the final flush and checkpoint.
pub(crate) fn mark_clean_shutdown(storage: &dyn Storage, dir: &Path) -> Result<(), Error> {
    let abort = dir.join(ABORT_FILE);
    storage.remove(&abort).map_err(io_err(&abort))
}
