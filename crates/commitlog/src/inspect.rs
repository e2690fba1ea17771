//! Read-only inspection of a store directory, for tools: nothing here takes the
//! lock, writes the abort marker, truncates or deletes. Segments are read with plain
//! file reads (one segment in memory at a time), never mapped.

use std::fs;
use std::path::{Path, PathBuf};

use crate::format::{parse, Invalid, Parsed};
use crate::log::{ABORT_FILE, LOCK_FILE, SEGMENT_DIR};
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
/// `commitlog/` folder. A clear error otherwise.
pub fn check_store_dir(dir: &Path) -> Result<(), Error> {
    let meta = fs::metadata(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
    if !meta.is_dir() {
        return Err(Error::InvalidConfig { reason: format!("{} is not a directory", dir.display()) });
    }
    let segments = dir.join(SEGMENT_DIR);
    if !segments.is_dir() {
        return Err(Error::InvalidConfig {
            reason: format!("{} is not a commit log: it has no {SEGMENT_DIR}/ folder", dir.display()),
        });
    }
    Ok(())
}

/// Lists the segments of a store directory without changing anything.
pub fn list_segments(dir: &Path) -> Result<Listing, Error> {
    check_store_dir(dir)?;
    let seg_dir = dir.join(SEGMENT_DIR);
    let mut listing = Listing::default();
    let entries = fs::read_dir(&seg_dir).map_err(|source| Error::Io { path: seg_dir.clone(), source })?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io { path: seg_dir.clone(), source })?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let meta = entry.metadata().map_err(|source| Error::Io { path: path.clone(), source })?;
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
    listing.segments.sort_by_key(|s| s.start_offset);
    let mut sizes: Vec<u64> = listing.segments.iter().map(|s| s.len).filter(|&l| l > 0).collect();
    sizes.sort_unstable();
    listing.segment_size = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
    let size = listing.segment_size;
    // A segment that would end past `u64::MAX` cannot hold an addressable byte;
    // it is reported and left out, so nothing computes offsets inside it.
    let (segments, overflowing): (Vec<SegmentFile>, Vec<SegmentFile>) = std::mem::take(&mut listing.segments)
        .into_iter()
        .partition(|s| s.start_offset.checked_add(size.max(s.len)).is_some());
    listing.segments = segments;
    for seg in overflowing {
        listing.problems.push(Problem {
            path: seg.path,
            offset: Some(seg.start_offset),
            message: format!(
                "starts at {}: {} bytes from there overflow the 64-bit offset space",
                seg.start_offset,
                size.max(seg.len)
            ),
        });
    }
    let count = listing.segments.len();
    for (i, seg) in listing.segments.iter().enumerate() {
        if seg.len != size && !(seg.len == 0 && i + 1 == count) {
            listing.problems.push(Problem {
                path: seg.path.clone(),
                offset: Some(seg.start_offset),
                message: format!("has {} bytes, other segments have {size}", seg.len),
            });
        }
        if size > 0 && !seg.start_offset.is_multiple_of(size) {
            listing.problems.push(Problem {
                path: seg.path.clone(),
                offset: Some(seg.start_offset),
                message: format!("start offset is not a multiple of the segment size {size}"),
            });
        }
        if let Some(prev) = i.checked_sub(1).map(|p| &listing.segments[p]) {
            if prev.start_offset + size != seg.start_offset {
                listing.problems.push(Problem {
                    path: seg.path.clone(),
                    offset: Some(seg.start_offset),
                    message: format!("gap: the previous segment ends at {}", prev.start_offset + size),
                });
            }
        }
    }
    Ok(listing)
}

/// What a segment holds, from its first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// Valid records.
    pub records: u64,
    /// Offset of the first valid record.
    pub first_offset: Option<u64>,
    /// Offset of the last valid record.
    pub last_offset: Option<u64>,
    /// Where the valid data ends.
    pub end_offset: u64,
    /// True if the segment ends with a valid blank (the log continues in the next).
    pub ends_with_blank: bool,
    /// The invalid record that stopped the scan, if any.
    pub invalid: Option<(u64, Invalid)>,
}

/// Reads a segment file into memory.
pub fn read_segment(segment: &SegmentFile) -> Result<Vec<u8>, Error> {
    fs::read(&segment.path).map_err(|source| Error::Io { path: segment.path.clone(), source })
}

/// Calls `visit(offset, timestamp_ms, body)` for each valid record of a segment's
/// bytes from `from` (a file-relative record start), and reports where it stopped.
pub fn scan_segment(bytes: &[u8], start_offset: u64, from: usize, visit: impl FnMut(u64, u64, &[u8])) -> SegmentScan {
    scan_segment_checked(bytes, start_offset, from, true, visit)
}

/// [`scan_segment`] with the CRC check as a parameter (recovery's planted-bug switch).
pub(crate) fn scan_segment_checked(
    bytes: &[u8],
    start_offset: u64,
    from: usize,
    check_crc: bool,
    mut visit: impl FnMut(u64, u64, &[u8]),
) -> SegmentScan {
    let mut out = SegmentScan {
        records: 0,
        first_offset: None,
        last_offset: None,
        end_offset: start_offset + from as u64,
        ends_with_blank: false,
        invalid: None,
    };
    let mut pos = from;
    while pos < bytes.len() {
        let offset = start_offset + pos as u64;
        match parse(&bytes[pos..], offset, check_crc) {
            Parsed::Record { total, timestamp_ms } => {
                visit(offset, timestamp_ms, &bytes[pos + crate::format::HEADER_SIZE..pos + total]);
                out.records += 1;
                out.first_offset.get_or_insert(offset);
                out.last_offset = Some(offset);
                pos += total;
            }
            Parsed::Blank => {
                out.ends_with_blank = true;
                out.end_offset = start_offset + bytes.len() as u64;
                return out;
            }
            Parsed::End => break,
            Parsed::Invalid(reason) => {
                out.invalid = Some((offset, reason));
                break;
            }
        }
    }
    out.end_offset = start_offset + pos as u64;
    out
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
    let (checkpoint, checkpoint_problem) = match Checkpoint::load(dir) {
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
