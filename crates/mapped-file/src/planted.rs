//! This crate (one segment)'s deliberate bugs for the crash suite (built only with `--cfg
//! planted_bugs`), off unless switched on at run time. A suite that never sees
//! them caught proves nothing. Each crate owns its own: a lower crate knows
//! nothing of the bugs of one above it.

use std::sync::atomic::{AtomicU16, Ordering};

/// A planted bug of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Bug {
    /// `MappedFile::flush` advances `flushed` without syncing: acknowledgements
    /// come before the bytes are durable.
    AckBeforeSync = 1,
    /// `MappedFile::flush` retries a failed sync instead of latching, and believes
    /// the retry (fsyncgate).
    RetryAfterFailedSync = 2,
    /// `MappedFile::truncate` moves positions but leaves the bytes past the cut in
    /// place (and unsynced): what recovery cut can come back.
    TruncateLeavesTail = 4,
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
