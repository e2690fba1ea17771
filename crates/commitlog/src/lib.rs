//! A durable, append-only commit log in the style of Apache RocketMQ's `CommitLog`.
//!
//! Records go into fixed-size memory-mapped segments (`mapped-file`,
//! `segment-queue`), optionally through off-heap write buffers (`transient-pool`);
//! a flush strategy (`flush-service`) decides when they become durable:
//!
//! - [`FlushDiskType::SyncFlush`]: each append's [`DurabilityHandle`] resolves once
//!   the record is durable; many producers share one sync (group commit).
//! - [`FlushDiskType::AsyncFlush`]: appends are acknowledged at once and flushed in
//!   the background every `flush_interval_commit_log_ms`.
//!
//! Every record carries its length, magic, absolute offset, store timestamp and a
//! CRC32C over all of them and the body (the repository's `docs/format.md`). Opening a directory
//! recovers it: a torn tail is truncated, damage below the checkpointed offset is
//! reported as [`Error::Corrupt`].
//!
//! The public API names no type of a lower crate that it does not re-export here
//! (the errors, [`Storage`], [`SegmentQueue`] for [`QueueTarget`]). Raw access to
//! the segments under an open log (`CommitLog::segment_queue`, `scan`) is behind
//! the `internals` feature: through it, a caller could cut or delete segments
//! behind the log's checkpoint.
//!
//! ```
//! use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
//!
//! let dir = tempfile::tempdir()?;
//! let config = CommitLogConfig::builder()
//!     .mapped_file_size_commit_log(1 << 20)
//!     .max_message_size(64 << 10)
//!     .flush_disk_type(FlushDiskType::SyncFlush)
//!     .build()?;
//! let log = CommitLog::open(dir.path(), config.clone())?;
//! let put = log.append(b"hello")?;
//! let offset = put.wrote_offset;
//! put.durability.wait()?; // durable now
//! assert_eq!(&log.read(offset)?.body[..], b"hello");
//! log.shutdown()?;
//!
//! let reopened = CommitLog::open(dir.path(), config)?;
//! assert!(reopened.recovery_report().clean_shutdown);
//! let bodies: Vec<_> = reopened.iter_from(0).map(|r| r.map(|r| r.body)).collect::<Result<_, _>>()?;
//! assert_eq!(bodies, vec![&b"hello"[..]]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
// Offsets parsed from untrusted bytes: no silent wrap-around, no truncating casts.
#![warn(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

pub mod admin;
mod append;
mod checkpoint;
mod clean;
mod config;
mod error;
#[cfg(any(test, feature = "failpoints"))]
pub mod failpoints;
#[cfg(not(any(test, feature = "failpoints")))]
mod failpoints;
pub mod format;
pub mod inspect;
mod log;
pub mod metrics;
#[cfg(planted_bugs)]
pub mod planted;
mod queue_target;
mod read;
mod record;
mod recovery;
mod scan;
mod signal;
mod store;
mod tail;
mod writer;

pub use append::{AppendResult, BatchAppendResult, GroupAppendResult};
pub use checkpoint::{Checkpoint, CHECKPOINT_FILE};
pub use clean::CleanStats;
pub use config::{CommitLogConfig, CommitLogConfigBuilder, FlushDiskType, MAX_POOL_BUFFERS};
pub use error::{Error, LockHolder, PutMessageStatus};
pub use flush_service::{
    Decision, DurabilityHandle, FlushConfig, FlushError, FlushPolicy, FlushStats, GatherChoice, GatherDecision,
    GatherInput, GatherOutcome, GatherPolicy, GatherPolicyFactory, GroupCommitConfig, PolicyChoice, PolicyFactory,
    PolicyInput, RoundReport, StartError, TargetState,
};
pub use log::{CommitLog, FlushListener};
pub use mapped_file::{MappedFileError, SyncFailure};
pub use queue_target::QueueTarget;
pub use read::Records;
pub use record::Record;
#[cfg(feature = "internals")]
pub use recovery::scan;
pub use recovery::{RecoveryReport, ScanEnd};
pub use segment_queue::{PreparationStats, SegmentPreparation};
pub use segment_queue::{QueueError, SegmentDir, SegmentQueue, TruncateReport};
pub use store::{ABORT_FILE, LOCK_FILE, SEGMENT_DIR, SEGMENT_PATHS_FILE};
/// The I/O seam [`CommitLog::open_with_storage`] takes, and the real storage
/// [`CommitLog::open`] uses.
pub use store_io::{DiskSpace, LockError, MmapStorage, Storage};
pub use tail::{Tail, TailLimit};
pub use transient_pool::PoolError;
pub use writer::BatchWriter;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
