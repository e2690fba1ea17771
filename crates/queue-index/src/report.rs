//! What an open found: the runs kept and dropped, where dispatch goes on, the
//! queue table's fate and the ends kept for a rebuild.

use std::path::PathBuf;

/// What [`QueueIndex::open`](crate::QueueIndex::open) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// Runs kept.
    pub runs: usize,
    /// Where the owner must dispatch the log from again: the end of the last
    /// run kept (its own start when the index is empty: 0, or the first
    /// dropped run's start).
    pub replay_from: u64,
    /// Runs dropped (damaged, or after a damaged or missing one): their files
    /// are deleted and their log ranges are dispatched again from
    /// `replay_from`. Each with why.
    pub dropped: Vec<(PathBuf, String)>,
    /// Why the queue table was not used (missing is not a reason): damaged,
    /// or it covers a run that was dropped. Extents then come from the runs
    /// alone, and queues whose runs all expired are forgotten.
    pub table_unused: Option<String>,
    /// Each queue's end, `(queue, end)`, as the queue table not used held it,
    /// and as the ends kept by an open or a
    /// [`remove_keeping_ends`](crate::QueueIndex::remove_keeping_ends) before a crash
    /// held them (empty when the table was used, missing or damaged and
    /// no ends were kept). An owner whose log no longer holds the records of
    /// the dropped runs gives these to [`seed_ends`](crate::QueueIndex::seed_ends)
    /// after it dispatched again: a queue whose records all went with the
    /// log's front then keeps its end, and its offsets are not given twice.
    /// They stay on disk (the file `ends`) until that `seed_ends` has written
    /// them into the queue table: a crash before it loses none, and the next
    /// open reports them again.
    pub table_ends: Vec<(u64, u64)>,
}
