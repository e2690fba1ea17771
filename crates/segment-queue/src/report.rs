//! What the queue's operations report.

use std::path::PathBuf;

/// Absolute progress of a queue-wide flush or commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueProgress {
    /// Where the position was before.
    pub from: u64,
    /// Where it is now.
    pub to: u64,
}

impl QueueProgress {
    /// Bytes the position moved.
    pub fn moved(&self) -> u64 {
        // `to >= from`: positions only move forward in a flush or commit.
        self.to.saturating_sub(self.from)
    }
}

/// What loading found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Segments loaded.
    pub segments: usize,
    /// A zero-length last file that was deleted (RocketMQ
    /// [#6904](https://github.com/apache/rocketmq/issues/6904)), if any.
    pub removed_empty_tail: Option<PathBuf>,
}

/// What a truncation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TruncateReport {
    /// Bytes erased from the segment that now ends at the truncation offset: from
    /// the offset to the last non-zero byte after it.
    pub bytes_dropped_in_place: u64,
    /// Segments deleted because they lay wholly above the offset.
    pub segments_deleted: usize,
}
