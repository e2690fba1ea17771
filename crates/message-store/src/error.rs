//! The store's errors: typed, naming what was asked.

use std::path::PathBuf;

/// Why a topic or group name is refused (RocketMQ's `TopicValidator` rules).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// Empty.
    #[error("a {kind} name cannot be empty")]
    Empty {
        /// "topic" or "group".
        kind: &'static str,
    },
    /// Longer than allowed.
    #[error("{kind} name {name:?} is {len} bytes long; at most {max}")]
    TooLong {
        /// "topic" or "group".
        kind: &'static str,
        /// The name.
        name: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A character outside `[%|a-zA-Z0-9_-]`.
    #[error("{kind} name {name:?} has {bad:?}; only letters, digits, '%', '|', '_' and '-' are allowed")]
    BadCharacter {
        /// "topic" or "group".
        kind: &'static str,
        /// The name.
        name: String,
        /// The first character refused.
        bad: char,
    },
}

/// Why a message is refused (nothing was appended).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The topic's name.
    #[error(transparent)]
    Topic(#[from] NameError),
    /// The body is larger than `max_body_size`.
    #[error("message body of {size} bytes exceeds max_body_size {max}")]
    BodyTooLarge {
        /// The body's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The properties encode to more than `max_properties_size`.
    #[error("message properties of {size} bytes exceed max_properties_size {max}")]
    PropertiesTooLarge {
        /// Their encoded size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A field breaks a rule.
    #[error("message {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A stored body does not decode as a message.
    #[error("malformed message: {reason}")]
    Malformed {
        /// What is wrong.
        reason: &'static str,
    },
}

/// Errors of a [`MessageStore`](crate::MessageStore).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The configuration cannot work.
    #[error("invalid message store config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The message is refused; nothing was appended.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// A group name is refused.
    #[error(transparent)]
    Name(#[from] NameError),
    /// The topic does not exist and auto-creation is off.
    #[error("topic {topic:?} does not exist (create it, or turn auto_create_topics on)")]
    UnknownTopic {
        /// The topic.
        topic: String,
    },
    /// The queue id is not below the topic's queue count.
    #[error("topic {topic:?} has {queues} queues; queue {queue_id} does not exist")]
    UnknownQueue {
        /// The topic.
        topic: String,
        /// The queue asked for.
        queue_id: u32,
        /// The topic's queue count.
        queues: u32,
    },
    /// A topic exists with another queue count.
    #[error("topic {topic:?} exists with {existing} queues, not {asked}")]
    TopicExists {
        /// The topic.
        topic: String,
        /// Its queue count.
        existing: u32,
        /// The count asked for.
        asked: u32,
    },
    /// A batch to put is empty, or mixes topics or queues.
    #[error("a batch must be non-empty and for one topic and queue: {reason}")]
    BadBatch {
        /// What is wrong.
        reason: &'static str,
    },
    /// A consumer offset beyond the queue's end: it would skip messages not yet
    /// stored.
    #[error(
        "consumer offset {offset} for group {group:?} on {topic:?} queue {queue_id} is beyond the queue's end {max}"
    )]
    OffsetBeyondQueue {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The queue.
        queue_id: u32,
        /// The offset asked for.
        offset: u64,
        /// The queue's end (the next offset it will take).
        max: u64,
    },
    /// A consumer's offset in a queue is outside what the queue holds (its
    /// messages expired, or a crash took the end back), and the consumer is
    /// set to fail on it ([`OutOfRange::Fail`](crate::OutOfRange::Fail)).
    #[error(
        "group {group:?}'s offset {offset} in {topic:?} queue {queue_id} is outside the queue's range {min}..{max}"
    )]
    OffsetOutOfRange {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The queue.
        queue_id: u32,
        /// The offset.
        offset: u64,
        /// The queue's first offset.
        min: u64,
        /// The queue's end.
        max: u64,
    },
    /// A log offset given to find a message by
    /// ([`MessageStore::message_at_log_offset`](crate::MessageStore::message_at_log_offset))
    /// is not where a message's record starts: inside a record, past what
    /// is dispatched, or not a record at all.
    #[error(
        "log offset {log_offset} is not where a message starts (use the log offset a put returned, or a message's)"
    )]
    NotAMessageStart {
        /// The offset given.
        log_offset: u64,
    },
    /// A queue-index entry names a record the log does not hold as that
    /// message: the index and the log disagree (`commitlog verify` shows
    /// where; `commitlog recover`, or deleting `queueindex/`, rebuilds the
    /// index from the log).
    #[error("queue index {topic:?}/{queue_id} entry {queue_offset} names log offset {log_offset}, which is not that message")]
    IndexMismatch {
        /// The topic.
        topic: String,
        /// The queue.
        queue_id: u32,
        /// The entry.
        queue_offset: u64,
        /// The log offset it names.
        log_offset: u64,
    },
    /// A store file is damaged.
    #[error("{}: {reason}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The store is shut down.
    #[error("the message store is shut down")]
    Shutdown,
    /// The store's directory is locked: by another process, or by this one (a
    /// store of it is open, or a message body read from an earlier open is
    /// still alive). Nothing was opened.
    #[error("message store at {} is locked {}", dir.display(), LockedBy(*holder))]
    Locked {
        /// The store's directory.
        dir: PathBuf,
        /// Who holds the lock, as far as the store can tell.
        holder: commitlog::LockHolder,
    },
    /// Waiting for durability failed: a put's or a commit's sync timed out,
    /// the flush failed, or the store shut down before it was durable
    /// (what [`DurabilityHandle::wait`](commitlog::DurabilityHandle::wait)
    /// returns converts into this with `?`).
    #[error(transparent)]
    Durability(commitlog::FlushError),
    /// A subscription expression is malformed.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// The commit log failed.
    #[error(transparent)]
    Log(commitlog::Error),
    /// The queue index failed.
    #[error(transparent)]
    QueueIndex(#[from] queue_index::IndexError),
    /// A file of the store's own (the consumer-offsets journal) failed; the
    /// error names it.
    #[error(transparent)]
    File(#[from] mapped_file::MappedFileError),
}

impl From<commitlog::Error> for StoreError {
    /// The log's lock and durability errors arrive as [`StoreError::Locked`]
    /// and [`StoreError::Durability`], as the same failures met by the store
    /// directly do: one match per failure, whichever layer met it.
    fn from(error: commitlog::Error) -> Self {
        match error {
            commitlog::Error::Locked { dir, holder, .. } => StoreError::Locked { dir, holder },
            commitlog::Error::Durability(flush) => StoreError::Durability(flush),
            other => StoreError::Log(other),
        }
    }
}

impl From<commitlog::FlushError> for StoreError {
    fn from(error: commitlog::FlushError) -> Self {
        StoreError::Durability(error)
    }
}

/// How [`StoreError::Locked`] says who holds the lock, in the store's terms.
struct LockedBy(commitlog::LockHolder);

impl std::fmt::Display for LockedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            commitlog::LockHolder::ThisProcess => f.write_str(
                "by this process: a MessageStore of it is open already, or a message body (StoredMessage::body) \
                 read from an earlier open is still alive (drop it, or keep a copy with StoredMessage::into_owned)",
            ),
            other => other.fmt(f),
        }
    }
}

/// Why a subscription expression ([`TagFilter::parse`](crate::TagFilter::parse)) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// Two `||` with no tag between them, or one at either end.
    #[error("subscription expression {expression:?} has an empty tag (tags are separated by \"||\")")]
    EmptyTag {
        /// The expression.
        expression: String,
    },
    /// A tag holds a character no tag may hold: `|` (a separator written
    /// wrong, such as `|||` or a single `|`) or `*` (which stands alone, for
    /// every tag).
    #[error(
        "subscription expression {expression:?}: tag {tag:?} has {bad:?}; write `*` alone, or tags separated by \"||\""
    )]
    BadTag {
        /// The expression.
        expression: String,
        /// The tag refused, trimmed.
        tag: String,
        /// The character refused.
        bad: char,
    },
}

/// Maps an I/O error on `path` to [`StoreError::Io`].
pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}
