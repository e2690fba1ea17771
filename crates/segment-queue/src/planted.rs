//! This crate (the segment queue)'s deliberate bugs for the crash suite (built only with `--cfg
//! planted_bugs`), off unless switched on at run time. A suite that never sees
//! them caught proves nothing. Each crate owns its own: a lower crate knows
//! nothing of the bugs of one above it.

/// A planted bug of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Bug {
    /// `SegmentQueue` records the log's new front after deleting segments from
    /// it, not before: a crash in between leaves a complete log that looks as if
    /// segments went missing, and the open refuses it.
    FrontAfterDeletion = 1,
    /// The preallocation thread creates a segment it prepares without making
    /// its directory entry durable, and roll-over trusts the file: a power cut
    /// loses the segment with every acknowledged record in it.
    PreparedFileNotDurable = 2,
}

// `activate` (the crash suite switches a bug on) and `is_active` (asked where it is planted).
store_io::planted_switch!(Bug);
