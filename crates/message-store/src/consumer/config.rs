//! A consumer's settings: where a group starts, what it does at an offset
//! out of range, its batch and its auto-commit.

use std::time::Duration;

/// Where a group starts reading a queue it has no committed offset in
/// (RocketMQ's `ConsumeFromWhere`). The start is committed at once, so the
/// queue's next owner starts there too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StartFrom {
    /// The queue's first message (`CONSUME_FROM_FIRST_OFFSET`): nothing the
    /// queue holds is missed. The default.
    #[default]
    Earliest,
    /// The queue's end (`CONSUME_FROM_LAST_OFFSET`): only messages put after
    /// the group first reads the queue.
    Latest,
    /// The first message stored at or after this time, in milliseconds since
    /// the Unix epoch (`CONSUME_FROM_TIMESTAMP`).
    Time(u64),
}

/// What a [`Consumer`](crate::Consumer) does when a queue's offset is outside what the queue
/// holds (RocketMQ's `OFFSET_TOO_SMALL` and `OFFSET_OVERFLOW_BADLY`, Kafka's
/// `auto.offset.reset` at an out-of-range offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OutOfRange {
    /// Go on from the queue's first message (the messages before expired with
    /// the log's front) or from its end (the messages past it were taken back
    /// by a crash under async flush), with a warning. The default: a consumer
    /// never stops on it.
    #[default]
    GoOn,
    /// Fail the poll with [`StoreError::OffsetOutOfRange`](crate::StoreError::OffsetOutOfRange); the offset stays,
    /// for the application (or an operator's `offsets reset`) to decide.
    Fail,
}

/// How a [`Consumer`](crate::Consumer) reads and commits.
///
/// ```
/// use std::time::Duration;
/// use message_store::{ConsumerConfig, StartFrom};
///
/// let config = ConsumerConfig::default().start_from(StartFrom::Latest).max_batch(64).auto_commit(Some(Duration::from_secs(1)));
/// assert_eq!(config.max_batch, 64);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerConfig {
    /// Where to start in a queue the group has no offset in.
    pub start_from: StartFrom,
    /// The most messages one [`Consumer::poll`](crate::Consumer::poll) returns, and one read of a
    /// queue fetches (RocketMQ's `pullBatchSize`, 32).
    pub max_batch: usize,
    /// What to do at an offset outside its queue's range.
    pub out_of_range: OutOfRange,
    /// Commit what was handed out before each poll once this long has passed
    /// since the last commit (RocketMQ's lite pull consumer and Kafka commit
    /// automatically every 5 s); `None` (the default): only
    /// [`Consumer::commit`](crate::Consumer::commit) and [`Consumer::close`](crate::Consumer::close) commit.
    pub auto_commit: Option<Duration>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            start_from: StartFrom::Earliest,
            max_batch: 32,
            out_of_range: OutOfRange::GoOn,
            auto_commit: None,
        }
    }
}

impl ConsumerConfig {
    /// Sets [`start_from`](Self::start_from).
    pub fn start_from(mut self, start_from: StartFrom) -> Self {
        self.start_from = start_from;
        self
    }

    /// Sets [`max_batch`](Self::max_batch) (at least 1).
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// Sets [`out_of_range`](Self::out_of_range).
    pub fn out_of_range(mut self, out_of_range: OutOfRange) -> Self {
        self.out_of_range = out_of_range;
        self
    }

    /// Sets [`auto_commit`](Self::auto_commit).
    pub fn auto_commit(mut self, every: Option<Duration>) -> Self {
        self.auto_commit = every;
        self
    }
}
