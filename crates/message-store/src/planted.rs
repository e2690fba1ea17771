//! This crate (the message store)'s deliberate bugs for the crash suite (built
//! only with `--cfg planted_bugs`), off unless switched on at run time. A suite
//! that never sees them caught proves nothing.

use std::sync::atomic::{AtomicU16, Ordering};

/// A planted bug of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Bug {
    /// Dispatch reads up to the log's written end under the durable limit:
    /// consumers see messages a power cut takes back (RocketMQ #8239).
    DispatchBeforeDurable = 1,
    /// A consume queue opened after a crash is used as found: its entries past
    /// the dispatch point are neither cut nor checked against the log, so they
    /// can name records the log lost (or will write again).
    QueueNotCut = 2,
    /// A put takes its queue offset under the queue's lock but appends after
    /// releasing it: two producers can take one offset, or append out of order.
    OffsetOutsidePutLock = 4,
    /// The dispatch point is recorded without flushing the index first: after
    /// a power cut, keys of messages below the point are gone from the index.
    IndexNotFlushed = 8,
    /// A consume-queue file created without a sync does not say so: the next
    /// dispatch point is recorded without the file system sync that makes the
    /// file durable, and a power cut can take the file, with entries below the
    /// point, away.
    CreateNotSynced = 16,
    /// A repair of a damaged consume queue trusts the damage: the queue is
    /// cut at the first damaged entry and nothing below the dispatch point is
    /// put again from the log, so the messages after it are unreachable and
    /// their offsets given again.
    RepairTrustsDamage = 32,
    /// A consumer-offset commit returns once its record is in the journal's
    /// memory, before the sync: a power cut takes back a commit that returned.
    OffsetCommitNotSynced = 64,
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
