//! RocketMQ's `DefaultMessageStore` over this project's commit log: topics of
//! queues, all appended to one log, every queue indexed by one queue index
//! (`crates/queue-index`: no file and no mapping per queue).
//!
//! - [`MessageStore::put_message`] appends a message to the log with the next
//!   offset of its queue, assigned under the queue's put lock.
//! - Dispatch (a background thread, RocketMQ's `ReputMessageService`) reads the
//!   log and appends each message's entry (log offset, size, tags code) to the
//!   queue index, in memory, waking the consumers waiting on its queue. The
//!   flush service seals the entries of each log range into one run file
//!   (`queueindex/`) once the range is durable. Under sync flush dispatch
//!   reads only what is durable.
//! - Consumers read a queue by offset ([`MessageStore::get_messages`], with
//!   RocketMQ's statuses and tag filters), wait for new messages
//!   ([`MessageStore::wait_for`], [`MessageStore::arrival`]), and commit their
//!   offsets durably ([`MessageStore::commit_offset`]).
//! - A [`Consumer`] ([`MessageStore::consumer`]) follows topics as a member of a
//!   consumer group, shares their queues with the group's other members in
//!   this process, hands out messages as a batch, an iterator or a `Stream`,
//!   and commits what it handed out (at least once).
//! - The index finds messages by key within a time range
//!   ([`MessageStore::query_by_key`]), built by the same dispatch.
//! - Everything but the consumer offsets is derived from the log and rebuilt
//!   from it: opening a store keeps the queue index's sealed runs that load
//!   (each checked by its CRC) and of the key index what the dispatch
//!   checkpoint recorded as durable, dispatches the messages after them
//!   again, and rebuilds from the log whatever is damaged or missing, loudly ([`OpenReport`], [`StoreStats`]); a queue offset the log
//!   holds is never given again. [`inspect::check`] checks it all against the
//!   log, read-only. The repository's `docs/message-store.md` has the details.
//!
//! ```
//! use std::time::Duration;
//!
//! use message_store::{CommitLogConfig, FlushDiskType, GetRequest, GetStatus, Message, MessageStore, MessageStoreConfig, TagFilter};
//!
//! let dir = tempfile::tempdir()?;
//! let config = MessageStoreConfig::builder()
//!     .log(CommitLogConfig::builder().mapped_file_size_commit_log(1 << 20).flush_disk_type(FlushDiskType::SyncFlush).build()?)
//!     .build()?;
//! let store = MessageStore::open(dir.path(), config)?;
//! store.create_topic("orders", 4)?;
//! let put = store.put_message(&Message::new("orders", 2, "hello").with_tags("new"))?;
//! put.durability.wait()?; // durable, and soon dispatched
//! assert!(store.wait_for("orders", 2, put.queue_offset, Duration::from_secs(5))?.arrived());
//! let got = store.get_messages(&GetRequest::new("orders", 2, 0).filter(TagFilter::parse("new")?).group("readers"))?;
//! assert_eq!(got.status, GetStatus::Found);
//! assert_eq!(&got.messages[0].body[..], b"hello");
//! store.commit_offset("readers", "orders", 2, got.next_offset)?;
//! assert_eq!(store.queue_range("orders", 2)?, 0..1);
//! drop(got); // its bodies hold the log's mapping, and the store's lock
//! store.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layout: `store.rs` (the handle, its shared state, stats, shutdown),
//! `open.rs` (the open and recovery), `put.rs` (puts), `get.rs` (reading a
//! queue, messages by key), `records.rs` (the one read path from a log record to
//! a message, over the live log or the files `inspect` reads),
//! `poll.rs` (long polling), `consumer/` (the consumer, and in `group.rs`
//! how a group's members share queues), `maintenance.rs` (the services' work on the
//! derived data: seals, flushes, expiry), `message.rs` (the encoding inside a
//! log record), `topic.rs` (names, the topic registry) and `topic/admin.rs`
//! (creating and deleting topics), `queues.rs` (each queue in use: its put
//! lock, next offset and wait signal), `dispatch.rs` (dispatch into the queue
//! index and the key index), `checkpoint.rs` (the dispatch checkpoint),
//! `index.rs` (the key index), `offsets/` (consumer offsets: the journal, and
//! the store's operations on them in `api.rs`), `textfile.rs` (the small text
//! files of `config/`), `inspect/` (read-only views and the check),
//! `metrics.rs` (what the `metrics` recorder gets), `config.rs`, `error.rs`.

#![forbid(unsafe_code)]

mod checkpoint;
mod config;
mod consumer;
mod dispatch;
mod error;
mod get;
mod group;
mod index;
pub mod inspect;
mod maintenance;
mod message;
mod metrics;
mod offsets;
mod open;
#[cfg(test)]
mod pause;
#[cfg(planted_bugs)]
pub mod planted;
mod poll;
mod put;
mod queues;
mod records;
mod signal;
mod store;
mod textfile;
mod topic;

pub use bytes::Bytes;
/// The commit log under the store, whole: its configuration, records, errors
/// and tools (the types a store's user meets most are also re-exported below).
pub use commitlog;
/// The log's configuration and the durability of a put, as a store's user
/// meets them (the same types as in [`commitlog`]).
pub use commitlog::{CommitLogConfig, CommitLogConfigBuilder, DurabilityHandle, FlushDiskType, FlushError, LockHolder};
pub use config::{DispatchLimit, MessageStoreConfig, MessageStoreConfigBuilder};
pub use consumer::{Consumer, ConsumerConfig, Messages, OutOfRange, StartFrom};
pub use error::{FilterError, MessageError, NameError, StoreError};
pub use get::{GetRequest, GetResult, GetStatus, TagFilter, TimeBound};
pub use group::{BatchPutResult, PutResult};
pub use index::IndexConfig;
pub use message::{tags_code, Message, MessageLimits, StoredMessage};
pub use offsets::{CommittedOffset, OffsetReset, ResetTo};
pub use poll::{Arrival, Arrivals, Waited};
pub use store::{MessageStore, OpenReport, QueueStats, StoreStats};
pub use topic::{validate_group, validate_topic, MAX_GROUP_LEN, MAX_TOPIC_LEN};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The examples of the repository's docs/message-store.md, compiled and run
/// as doctests.
#[doc = include_str!("../../../docs/message-store.md")]
#[cfg(doctest)]
pub struct DocsDoctests;
