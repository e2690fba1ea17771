//! This crate (the message store)'s deliberate bugs for the crash suite (built
//! only with `--cfg planted_bugs`), off unless switched on at run time. A suite
//! that never sees them caught proves nothing.

/// A planted bug of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Bug {
    /// Dispatch reads up to the log's written end under the durable limit:
    /// consumers see messages a power cut takes back (RocketMQ #8239).
    DispatchBeforeDurable = 1,
    /// Queue-index entries made durable before their records: a seal of
    /// the queue index does not wait for the log's flush, and an open trusts
    /// an index that covers more than the log holds. After a power cut under
    /// async flush, entries name records the log lost (or writes again).
    IndexBeforeRecords = 2,
    /// A put takes its queue offset under the queue's lock but appends after
    /// releasing it: two producers can take one offset, or append out of order.
    OffsetOutsidePutLock = 4,
    /// The dispatch point is recorded without flushing the index first: after
    /// a power cut, keys of messages below the point are gone from the index.
    IndexNotFlushed = 8,
    /// The dispatch checkpoint taken for the queue index's: an open starts
    /// dispatch at the checkpoint's point, though the queue index was sealed
    /// only up to an earlier one; the messages between are in no queue, and
    /// their offsets are given again.
    CheckpointBeforeIndex = 16,
    /// The queue index expires a log segment ahead of the log: the runs of a
    /// segment the log still holds are deleted, its messages unreachable.
    IndexExpiredEarly = 32,
    /// A consumer-offset commit returns once its record is in the journal's
    /// memory, before the sync: a power cut takes back a commit that returned.
    OffsetCommitNotSynced = 64,
    /// Offset reuse after index loss: an open leaves dispatching the log
    /// past the queue index to the background thread, and takes puts
    /// before; a put then takes its queue's end from an index that lost
    /// entries (a run dropped, the index deleted), an offset given before.
    ReplayLeftToBackground = 128,
    /// The queue index keeps its runs after the log deleted their segments:
    /// each queue's first offset stays on messages that are gone.
    IndexKeptAfterSegment = 256,
    /// A compaction of the consumer-offsets journal keeps in memory the
    /// names of groups and topics its snapshot leaves out (no offset holds
    /// them): a later commit uses such a name by id without naming it, and
    /// the next open cannot read the journal.
    CompactionKeepsUnusedNames = 512,
    /// A topic made under async flush keeps its creation point (the log's
    /// written end) though a power cut took the log back below it: every
    /// later put to the topic lies below the point and is never dispatched.
    TopicMadePastDurableLog = 1024,
    /// An open adds back the topics the dispatch checkpoint names and the
    /// registry lacks, though the registry was read whole: a topic deleted
    /// after the last checkpoint comes back after a crash.
    DeletionUndoneByCheckpoint = 2048,
    /// A put indexes its message and wakes the queue's consumers though its
    /// record is still in the write buffer, past the log's readable end: the
    /// woken consumer's read fails (`IndexMismatch`).
    WokenBeforeReadable = 4096,
    /// The log deletes segments whose queue-index entries are still in
    /// memory: a power cut then loses the end of a queue whose messages were
    /// all in them, and its offsets are given again.
    FrontPastUnsealedEntries = 8192,
}

// `activate` (the crash suite switches a bug on) and `is_active` (asked where it is planted).
store_io::planted_switch!(Bug);
