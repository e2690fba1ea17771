//! Deliberate bugs for the crash suite (built only with `--cfg planted_bugs`), off unless
//! switched on at run time. A suite that never sees them caught proves nothing.

use std::sync::atomic::{AtomicU8, Ordering};

/// A planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
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
}

static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// Switches one bug on (`Some`) or all off (`None`), process-wide.
pub fn activate(bug: Option<Bug>) {
    ACTIVE.store(bug.map_or(0, |b| b as u8), Ordering::SeqCst);
}

/// True while `bug` is switched on.
pub fn is_active(bug: Bug) -> bool {
    ACTIVE.load(Ordering::SeqCst) & bug as u8 != 0
}
