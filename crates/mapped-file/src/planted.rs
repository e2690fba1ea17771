//! Deliberate bugs for the crash suite (built only with `--cfg planted_bugs`), off unless
//! switched on at run time. A suite that never sees them caught proves nothing.

use std::sync::atomic::{AtomicU16, Ordering};

/// A planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Bug {
    /// `MappedFile::flush` advances `flushed` without syncing: acknowledgements
    /// come before the bytes are durable.
    AckBeforeSync = 1,
    /// `MappedFile::flush` retries a failed sync instead of latching, and believes
    /// the retry (fsyncgate).
    RetryAfterFailedSync = 2,
    /// Recovery accepts records without checking their CRC.
    RecoveryWithoutCrc = 4,
    /// `MappedFile::truncate` moves positions but leaves the bytes past the cut in
    /// place (and unsynced): what recovery cut can come back.
    TruncateLeavesTail = 8,
    /// The commit log's checkpoint records the end of written data instead of the
    /// end of durable data: recovery trusts bytes a power cut took.
    CheckpointAheadOfData = 16,
    /// `CommitLog::truncate_from` cuts the tail without lowering the checkpoint
    /// first: recovery trusts the old end, past the cut.
    TruncateKeepsCheckpoint = 32,
    /// `SegmentQueue` records the log's new front after deleting segments from
    /// it, not before: a crash in between leaves a complete log that looks as if
    /// segments went missing, and the open refuses it.
    FrontAfterDeletion = 64,
    /// The open does not check that the segments reach from the checkpoint's
    /// front to its flushed offset: a segment directory not mounted opens as a
    /// shorter log.
    SegmentsUnchecked = 128,
    /// The checkpoint is not written when a flush reaches a new segment: records
    /// acknowledged in it are beyond the checkpoint, so their segment's
    /// directory missing opens as a shorter log.
    NewSegmentUnrecorded = 256,
    /// The checkpoint records a flush's offset without clamping it to the
    /// queue's flushed offset: a flush that returned before a truncation puts
    /// the checkpoint back above the cut, and the store no longer opens.
    CheckpointUnclamped = 512,
}

static ACTIVE: AtomicU16 = AtomicU16::new(0);

/// Switches one bug on (`Some`) or all off (`None`), process-wide.
pub fn activate(bug: Option<Bug>) {
    ACTIVE.store(bug.map_or(0, |b| b as u16), Ordering::SeqCst);
}

/// True while `bug` is switched on.
pub fn is_active(bug: Bug) -> bool {
    ACTIVE.load(Ordering::SeqCst) & bug as u16 != 0
}
