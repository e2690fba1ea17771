//! This crate (the raft log store)'s deliberate bugs for the crash suite (built
//! only with `--cfg planted_bugs`), off unless switched on at run time. A suite
//! that never sees them caught proves nothing.

/// A planted bug of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Bug {
    /// A checkpoint seals the queue index to the log's end, not to what the
    /// log has made durable: a run then names records (and holds cuts) a
    /// power cut can take back. (An open also trusts such a run then: it
    /// would otherwise rebuild the index, which hides the first fault.)
    SealPastDurable = 1,
    /// A rewrite moves the group's index to the copies without waiting for
    /// them to be durable: a power cut that takes the copies leaves an index
    /// naming records that are gone, and the originals below the checkpoint
    /// are never replayed.
    RewriteNotAwaited = 2,
    /// An append's flush callback is answered as soon as the entries are
    /// written, before the sync: openraft counts them durable, and a power cut
    /// takes them.
    AnsweredBeforeDurable = 4,
    /// `save_vote` returns before the vote's record is durable: a power cut
    /// takes back a vote the node acted on.
    VoteNotAwaited = 8,
}

// `activate` (the crash suite switches a bug on) and `is_active` (asked where it is planted).
store_io::planted_switch!(Bug);
