//! This crate (the facade)'s deliberate bugs for the crash suite (built only with `--cfg
//! planted_bugs`), off unless switched on at run time. A suite that never sees
//! them caught proves nothing. Each crate owns its own: a lower crate knows
//! nothing of the bugs of one above it.

/// A planted bug of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Bug {
    /// Recovery accepts records without checking their CRC.
    RecoveryWithoutCrc = 1,
    /// The commit log's checkpoint records the end of written data instead of the
    /// end of durable data: recovery trusts bytes a power cut took.
    CheckpointAheadOfData = 2,
    /// `CommitLog::truncate_from` cuts the tail without lowering the checkpoint
    /// first: recovery trusts the old end, past the cut.
    TruncateKeepsCheckpoint = 4,
    /// The open does not check that the segments reach from the checkpoint's
    /// front to its flushed offset: a segment directory not mounted opens as a
    /// shorter log.
    SegmentsUnchecked = 8,
    /// The checkpoint is not written when a flush reaches a new segment: records
    /// acknowledged in it are beyond the checkpoint, so their segment's
    /// directory missing opens as a shorter log.
    NewSegmentUnrecorded = 16,
    /// The checkpoint records a flush's offset without clamping it to the
    /// queue's flushed offset: a flush that returned before a truncation puts
    /// the checkpoint back above the cut, and the store no longer opens.
    CheckpointUnclamped = 32,
}

// `activate` (the crash suite switches a bug on) and `is_active` (asked where it is planted).
store_io::planted_switch!(Bug);
