//! What appends, commits and flushes report, and when a commit or flush is due.

use crate::OS_PAGE_SIZE;

/// What an append closure did with the free tail it was given.
#[derive(Debug)]
pub enum AppendStatus<T> {
    /// It wrote `bytes` bytes at the start of the tail; `value` is handed back.
    Written {
        /// How many bytes were written (at most the tail's length).
        bytes: usize,
        /// Anything the caller wants back.
        value: T,
    },
    /// The record does not fit; nothing was written.
    DoesNotFit,
}

/// What [`MappedFile::place`](crate::MappedFile::place) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// The bytes were placed at this absolute offset.
    Appended {
        /// Where the first byte went.
        offset: u64,
    },
    /// They did not fit: the segment's rest was padded (it is full now), and the
    /// caller goes on in the next segment.
    Padded,
}

/// The result of [`MappedFile::append_with`](crate::MappedFile::append_with).
#[derive(Debug)]
pub enum Appended<T> {
    /// Bytes were appended.
    Written {
        /// Absolute offset of the first byte written.
        wrote_offset: u64,
        /// Number of bytes written.
        bytes: usize,
        /// The closure's value.
        value: T,
    },
    /// The closure reported that its record does not fit in `remaining` bytes.
    DoesNotFit {
        /// Free bytes at the tail.
        remaining: usize,
    },
}

impl<T> Appended<T> {
    /// The absolute offset written at, if anything was written.
    pub fn wrote_offset(&self) -> Option<u64> {
        match self {
            Appended::Written { wrote_offset, .. } => Some(*wrote_offset),
            Appended::DoesNotFit { .. } => None,
        }
    }
}

/// How far a position moved in a commit or flush: from `from` to `to` (file-relative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Position before the call.
    pub from: usize,
    /// Position after the call.
    pub to: usize,
}

impl Progress {
    /// Bytes the position moved.
    pub fn moved(&self) -> usize {
        // `to >= from`: positions only move forward in a commit or flush.
        self.to.saturating_sub(self.from)
    }
}

/// RocketMQ's `isAbleToFlush` / `isAbleToCommit`: whether moving a position from
/// `done` to `target` is due. A full file always qualifies; `least_pages == 0`
/// means any byte; otherwise at least `least_pages` 4 KiB pages must be crossed.
pub fn is_due(done: usize, target: usize, file_size: usize, least_pages: usize) -> bool {
    if target <= done {
        return false;
    }
    if target == file_size || least_pages == 0 {
        return true;
    }
    // `target > done` (checked above), so the page counts do not underflow.
    (target / OS_PAGE_SIZE).saturating_sub(done / OS_PAGE_SIZE) >= least_pages
}
