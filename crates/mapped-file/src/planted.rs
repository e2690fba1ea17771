//! This crate (one segment)'s deliberate bugs for the crash suite (built only with `--cfg
//! planted_bugs`), off unless switched on at run time. A suite that never sees
//! them caught proves nothing. Each crate owns its own: a lower crate knows
//! nothing of the bugs of one above it.

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

// `activate` (the crash suite switches a bug on) and `is_active` (asked where it is planted).
store_io::planted_switch!(Bug);
