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
        /// The file system's size, when even an empty one would refuse it.
        never: Option<u64>,
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
    let size = u64::try_from(size).unwrap_or(u64::MAX);
    if space.used_percent_after(size) >= f64::from(limit_percent) {
        let empty = mapped_file::DiskSpace { free: space.total, available: space.total, ..space };
        let never = (empty.used_percent_after(size) >= f64::from(limit_percent)).then_some(space.total);
        Room::No { used_percent: space.used_percent(), never }
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
    // The largest disk, while every one is too small for the segment even empty.
    let mut too_small: Option<(PathBuf, u64)> = None;
    let mut every_too_small = true;
    for dir in candidates {
        match room(storage, dir, size, limit_percent) {
            Room::Yes => return Ok(dir),
            Room::No { used_percent, never } => {
                if least.as_ref().is_none_or(|(_, l)| used_percent < *l) {
                    least = Some((dir.to_path_buf(), used_percent));
                }
                match never {
                    Some(total) if too_small.as_ref().is_none_or(|(_, t)| total > *t) => {
                        too_small = Some((dir.to_path_buf(), total));
                    }
                    Some(_) => {}
                    None => every_too_small = false,
                }
            }
        }
    }
    if let (true, Some((dir, disk_bytes))) = (every_too_small, too_small) {
        tracing::warn!(dir = %dir.display(), segment_bytes = size, disk_bytes, "a segment is larger than the disk allows");
        return Err(QueueError::SegmentLargerThanDisk {
            dir,
            segment_bytes: size as u64,
            disk_bytes,
            limit_percent: limit_percent.unwrap_or(100),
        });
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
