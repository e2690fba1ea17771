//! Segment file names (the start offset, 20 zero-padded digits) and the
//! offset-space checks every new segment passes.

use std::path::{Path, PathBuf};

use crate::error::MappedFileError;

/// Width of a segment file name.
pub const FILE_NAME_LEN: usize = 20;

/// What [`temporary_file_name`] appends to a segment's name.
pub const TEMPORARY_SUFFIX: &str = ".tmp";

/// The name a segment starting at `offset` is written under before it is
/// renamed into place ([`MappedFile::create_temporary`](crate::MappedFile::create_temporary)):
/// its name with [`TEMPORARY_SUFFIX`], which [`parse_file_name`] never takes.
pub fn temporary_file_name(offset: u64) -> String {
    format!("{}{TEMPORARY_SUFFIX}", file_name(offset))
}

/// The file name of the segment starting at `offset`: 20 zero-padded digits.
pub fn file_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// Parses a segment file name back into its start offset; `None` unless the name
/// is exactly 20 ASCII digits.
pub fn parse_file_name(name: &str) -> Option<u64> {
    if name.len() != FILE_NAME_LEN || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// The absolute offset one past the end of a segment of `file_size` bytes that
/// starts at `file_from_offset`; `None` if it does not fit in a `u64`.
pub fn segment_end(file_from_offset: u64, file_size: usize) -> Option<u64> {
    u64::try_from(file_size).ok().and_then(|size| file_from_offset.checked_add(size))
}

/// Every absolute offset of a segment, and the one past its end, must fit in a
/// `u64`: positions are added to the start offset everywhere.
pub(crate) fn check_offset_space(path: &Path, file_from_offset: u64, file_size: usize) -> Result<(), MappedFileError> {
    match segment_end(file_from_offset, file_size) {
        Some(_) => Ok(()),
        None => Err(MappedFileError::OffsetOverflow {
            path: path.to_path_buf(),
            file_from_offset,
            file_size: file_size as u64,
        }),
    }
}

/// The path of a new segment of `file_size` bytes at `file_from_offset` in `dir`,
/// once the size and the offset space are checked.
pub(crate) fn new_segment_path(
    dir: &Path,
    file_from_offset: u64,
    file_size: usize,
) -> Result<PathBuf, MappedFileError> {
    checked_path(dir.join(file_name(file_from_offset)), file_from_offset, file_size)
}

/// [`new_segment_path`] under the segment's [`temporary_file_name`].
pub(crate) fn new_temporary_path(
    dir: &Path,
    file_from_offset: u64,
    file_size: usize,
) -> Result<PathBuf, MappedFileError> {
    checked_path(dir.join(temporary_file_name(file_from_offset)), file_from_offset, file_size)
}

/// `path`, once the size and the offset space of its segment are checked.
fn checked_path(path: PathBuf, file_from_offset: u64, file_size: usize) -> Result<PathBuf, MappedFileError> {
    if file_size == 0 {
        return Err(MappedFileError::BadPosition { path, pos: 0, file_size });
    }
    check_offset_space(&path, file_from_offset, file_size)?;
    Ok(path)
}
