//! RocketMQ's flush services, rebuilt: when bytes of a commit log become durable.
//!
//! - [`SyncFlush`]: group commit (`GroupCommitService`). Each producer submits "bytes
//!   below offset X must be durable" and gets a [`DurabilityHandle`]; one flush
//!   answers every request it covered; a deadline watcher turns late requests into
//!   [`FlushError::Timeout`]; a storage error fails every waiting request and every
//!   later one.
//! - [`AsyncFlush`]: periodic flush (`FlushRealTimeService`) and, with a write-buffer
//!   pool, periodic commit (`CommitRealTimeService`), each driven by a
//!   [`FlushPolicy`].
//!
//! The services flush anything that implements [`FlushTarget`] (the segment queue
//! does), and the facade holds whichever [`FlushStrategy`] the config picks. This
//! crate never touches bytes, paths or the record format.
//!
//! ```
//! use flush_service::testing::MemoryTarget;
//! use flush_service::{FlushConfig, FlushStrategy, FlushTarget, SyncFlush, SystemClock};
//! use std::sync::Arc;
//!
//! let target = MemoryTarget::new();
//! let flush = SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &FlushConfig::default(), false, None)?;
//! let end = target.append(1024);
//! flush.submit(end).wait()?; // returns once bytes below `end` are durable
//! assert!(target.flushed_where() >= end);
//! flush.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod clock;
mod config;
mod error;
mod group_commit;
mod handle;
mod periodic;
mod policy;
mod service;
mod spin;
mod strategy;
mod sync;
mod target;
pub mod testing;
mod write_group;

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, not(loom)))]
mod tests;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::FlushConfig;
pub use error::{FlushError, StartError, TargetError};
pub use group_commit::{GroupCommit, GroupCommitConfig, GroupCommitStats, RETRY_TIMES_OVER};
pub use handle::{DurabilityHandle, FlushResult};
pub use periodic::{CommittedCallback, Periodic, PeriodicAction, PeriodicConfig, RunOutcome};
pub use policy::{
    lone_spin, AdaptiveGatherPolicy, Decision, DirtyBytesOrAgePolicy, FlushPolicy, GatherChoice, GatherDecision,
    GatherInput, GatherOutcome, GatherPolicy, GatherPolicyFactory, PolicyChoice, PolicyFactory, PolicyInput,
    ProducersBackPolicy, RocketMqPolicy, RoundReport, LONE_ROUNDS,
};
pub use service::{ServiceState, ServiceThread};
pub use strategy::{AsyncFlush, FlushStats, FlushStrategy, SyncFlush};
pub use target::{FailureLatch, FlushTarget, TargetState};
pub use write_group::{Answer, AnswerLeft, Leading, Member, Turn, WriteGroups};

/// What a flush reports for the checkpoint: how far data is durable and the
/// store timestamp of the newest durable data (RocketMQ's `physicMsgTimestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushedReport {
    /// Offset below which everything is durable.
    pub flushed_where: u64,
    /// Store timestamp (ms) of the newest data covered.
    pub store_timestamp: u64,
    /// Durability requests this flush covers (a group-commit round's batch,
    /// answered once the callback returns; 0 for a periodic or manual flush).
    pub requests_acknowledged: usize,
}

/// Receives a [`FlushedReport`] after each successful flush. Group commit calls
/// it *before* it answers the requests the flush covered, so an owner can make
/// something durable that must precede those acknowledgements.
pub type FlushedCallback = std::sync::Arc<dyn Fn(FlushedReport) + Send + Sync>;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
