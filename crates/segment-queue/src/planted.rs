//! This crate (the segment queue)'s deliberate bugs for the crash suite (built only with `--cfg
//! planted_bugs`), off unless switched on at run time. A suite that never sees
//! them caught proves nothing. Each crate owns its own: a lower crate knows
//! nothing of the bugs of one above it.

use std::sync::atomic::{AtomicU16, Ordering};

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

static ACTIVE: AtomicU16 = AtomicU16::new(0);

/// Switches one of this crate's bugs on (`Some`) or all off (`None`), process-wide.
pub fn activate(bug: Option<Bug>) {
    ACTIVE.store(bug.map_or(0, |b| b as u16), Ordering::SeqCst);
}

/// True while `bug` is switched on.
pub fn is_active(bug: Bug) -> bool {
    ACTIVE.load(Ordering::SeqCst) & bug as u16 != 0
}
