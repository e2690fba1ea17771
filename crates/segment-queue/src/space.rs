//! The look at the disk before a new segment takes its space: a producer must not
//! outrun a disk guard that looks only on a timer.

use std::path::{Path, PathBuf};

use mapped_file::Storage;

use crate::QueueError;

/// What a look found: the directory's disk has room for a new segment, or not.
pub(crate) enum Room {
    /// Room, or no limit, or the storage cannot tell.
    Yes,
    /// A new segment would take the used share to the limit or above.
    No {
        /// The used share now, in percent.
        used_percent: f64,
    },
}

/// Whether a new segment of `size` bytes fits in `dir` below `limit_percent`
/// of its file system. No limit, or a storage that cannot tell, always has
/// room; a failed look is logged and counts as room (the file system still
/// refuses a full disk, as an error at creation: segments are preallocated).
pub(crate) fn room(storage: &dyn Storage, dir: &Path, size: usize, limit_percent: Option<u32>) -> Room {
    let Some(limit_percent) = limit_percent else { return Room::Yes };
    let space = match storage.disk_space(dir) {
        Ok(Some(space)) => space,
        Ok(None) => return Room::Yes,
        Err(err) => {
            tracing::warn!(dir = %dir.display(), %err, "cannot read the disk's free space before creating a segment");
            return Room::Yes;
        }
    };
    if space.used_percent_after(u64::try_from(size).unwrap_or(u64::MAX)) >= f64::from(limit_percent) {
        Room::No { used_percent: space.used_percent() }
    } else {
        Room::Yes
    }
}

/// The first of `candidates` (in order) whose disk has room for a new segment of
/// `size` bytes; [`QueueError::DiskFull`] naming the least used one if none has.
pub(crate) fn first_with_room<'a>(
    storage: &dyn Storage,
    candidates: impl IntoIterator<Item = &'a Path>,
    size: usize,
    limit_percent: Option<u32>,
) -> Result<&'a Path, QueueError> {
    let mut least: Option<(PathBuf, f64)> = None;
    for dir in candidates {
        match room(storage, dir, size, limit_percent) {
            Room::Yes => return Ok(dir),
            Room::No { used_percent } => {
                if least.as_ref().is_none_or(|(_, l)| used_percent < *l) {
                    least = Some((dir.to_path_buf(), used_percent));
                }
            }
        }
    }
    let (dir, used_percent) = least.unwrap_or_default();
    tracing::warn!(dir = %dir.display(), used_percent, ?limit_percent, "no disk has room for a new segment");
    Err(QueueError::DiskFull {
        dir,
        used_percent,
        limit_percent: limit_percent.unwrap_or(100),
        segment_bytes: size as u64,
    })
}
