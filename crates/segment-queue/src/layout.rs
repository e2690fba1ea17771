//! The layout rules of a segment directory, in one place: [`SegmentQueue::load`]
//! refuses a directory at the first violation, and inspection tools list them all
//! with the same words.
//!
//! [`SegmentQueue::load`]: crate::SegmentQueue::load

use std::path::PathBuf;

use mapped_file::MappedFileError;

use crate::QueueError;

/// A segment file as listed: its start offset (from its name), path and length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSegment {
    /// Start offset, parsed from the 20-digit name.
    pub start_offset: u64,
    /// The file.
    pub path: PathBuf,
    /// Its length in bytes.
    pub len: u64,
}

/// Every violation of the layout rules in `files` (sorted by start offset), in file
/// order, for segments of `size` bytes:
///
/// - each file has `size` bytes, except that the last may have none (RocketMQ
///   [#6904](https://github.com/apache/rocketmq/issues/6904): a crash between creating and sizing
///   it; load deletes it);
/// - each starts at a multiple of `size`;
/// - each starts where the previous one ends (no gap), and no two start at the
///   same offset (a store over several directories could hold two);
/// - each ends inside the 64-bit offset space, since offsets are computed by adding
///   positions to the start.
///
/// Offsets are computed only for segments that passed the last rule.
pub fn check_layout(files: &[ListedSegment], size: u64) -> Vec<QueueError> {
    let mut problems = Vec::new();
    let mut expected_next: Option<u64> = None;
    let count = files.len();
    for (i, file) in files.iter().enumerate() {
        if let Some(previous) = i.checked_sub(1).map(|p| &files[p]).filter(|p| p.start_offset == file.start_offset) {
            problems.push(QueueError::Duplicate {
                path: file.path.clone(),
                other: previous.path.clone(),
                offset: file.start_offset,
            });
            continue; // the copy says nothing new about sizes or gaps
        }
        let last = i == count.saturating_sub(1);
        if file.len != size && !(file.len == 0 && last) {
            problems.push(QueueError::WrongSize { path: file.path.clone(), expected: size, actual: file.len });
        }
        if size > 0 && !file.start_offset.is_multiple_of(size) {
            problems.push(QueueError::Misaligned {
                path: file.path.clone(),
                offset: file.start_offset,
                file_size: size,
            });
        }
        if let Some(expected) = expected_next.filter(|&e| e != file.start_offset) {
            problems.push(QueueError::Gap { path: file.path.clone(), expected, found: file.start_offset });
        }
        expected_next = file.start_offset.checked_add(size);
        if expected_next.is_none() {
            problems.push(QueueError::File(MappedFileError::OffsetOverflow {
                path: file.path.clone(),
                file_from_offset: file.start_offset,
                file_size: size,
            }));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start_offset: u64, len: u64) -> ListedSegment {
        ListedSegment { start_offset, path: PathBuf::from(mapped_file::file_name(start_offset)), len }
    }

    #[test]
    fn each_rule_is_reported_once_per_file() {
        assert!(check_layout(&[seg(0, 4096), seg(4096, 4096), seg(8192, 0)], 4096).is_empty());
        let problems = check_layout(&[seg(0, 100), seg(8192, 4096), seg(12289, 4096), seg(u64::MAX - 100, 4096)], 4096);
        let kinds: Vec<&str> = problems
            .iter()
            .map(|p| match p {
                QueueError::WrongSize { .. } => "size",
                QueueError::Misaligned { .. } => "align",
                QueueError::Gap { .. } => "gap",
                QueueError::File(MappedFileError::OffsetOverflow { .. }) => "overflow",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["size", "gap", "align", "gap", "align", "gap", "overflow"]);
        let twice = [seg(0, 4096), ListedSegment { path: PathBuf::from("other/0"), ..seg(0, 4096) }, seg(4096, 4096)];
        let problems = check_layout(&twice, 4096);
        assert!(matches!(&problems[..], [QueueError::Duplicate { offset: 0, .. }]), "{problems:?}");
    }
}
