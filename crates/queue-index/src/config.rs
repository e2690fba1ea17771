//! How an index keeps its files and takes its appends.

/// How a [`QueueIndex`](crate::QueueIndex) keeps its files.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexConfig {
    /// The queue table is rewritten once the runs sealed since hold at least
    /// this many directory rows (queues with entries), or as many as the
    /// table has queues, whichever is more: an open then reads at most about
    /// twice the table. 4,096.
    pub table_every_rows: usize,
    /// Appends come in log order (`true`, the default: one dispatcher
    /// follows the log, and an entry before the newest one is refused).
    /// `false` lets appends of different queues come out of log order (each
    /// queue's entries still follow one another): writers that append to the
    /// log and then index what they wrote, concurrently. Such an owner must
    /// seal only below the first record whose entry may still be coming.
    pub appends_in_log_order: bool,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig { table_every_rows: 4096, appends_in_log_order: true }
    }
}

impl IndexConfig {
    /// The default configuration with appends of different queues allowed
    /// out of log order ([`appends_in_log_order`](Self::appends_in_log_order)
    /// `false`).
    pub fn concurrent_appends() -> IndexConfig {
        IndexConfig { appends_in_log_order: false, ..IndexConfig::default() }
    }
}
