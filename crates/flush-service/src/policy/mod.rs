//! The policy seams, one built-in policy per file:
//!
//! - **Flush policies** ("run now, with how many least pages?"): the periodic
//!   flush and commit services ask theirs each time they wake. [`RocketMqPolicy`]
//!   (`rocketmq.rs`) is RocketMQ's rule and the default;
//!   [`DirtyBytesOrAgePolicy`] (`dirty_bytes_or_age.rs`) is an example of another.
//! - **Gather policies** (`gather.rs`: "sync now, or wait for producers on their
//!   way back, and should a waiter spin?"): group commit asks its policy before
//!   each round's sync. [`ProducersBackPolicy`] (`producers_back.rs`) is the
//!   default; [`AdaptiveGatherPolicy`] (`adaptive_gather.rs`) measures the
//!   machine's sync time and the producers' return time.
//!
//! To add one: implement [`FlushPolicy`] (and [`PolicyFactory`], which must be
//! `Debug`, to build one per target), then set `FlushConfig::policy` to
//! [`PolicyChoice::Custom`] with the factory; the repository's `docs/flush-policies.md` walks through a complete
//! policy with its test.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{FlushConfig, TargetState};

mod adaptive_gather;
mod dirty_bytes_or_age;
mod gather;
mod producers_back;
mod rocketmq;

pub use adaptive_gather::AdaptiveGatherPolicy;
pub use dirty_bytes_or_age::DirtyBytesOrAgePolicy;
pub use gather::{
    GatherChoice, GatherDecision, GatherInput, GatherOutcome, GatherPolicy, GatherPolicyFactory, RoundReport,
};
pub use producers_back::{lone_spin, ProducersBackPolicy, LONE_ROUNDS};
pub use rocketmq::RocketMqPolicy;

/// What a policy sees when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyInput {
    /// Now, on the service's clock.
    pub now: Duration,
    /// Bytes pending (unflushed for a flush service, uncommitted for a commit service).
    pub pending_bytes: u64,
    /// How long bytes have been pending, as observed at the service's wake-ups
    /// (`None` when nothing is pending). Approximate by up to one interval.
    pub pending_age: Option<Duration>,
    /// Everything else about the target, as it stood at this wake-up.
    pub target: TargetState,
}

/// A policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Do nothing this time.
    Skip,
    /// Flush (or commit) when at least `least_pages` pages are pending (0: any byte).
    Run {
        /// The least-pages threshold to pass to the target.
        least_pages: usize,
    },
}

/// Decides when a periodic service acts. Called from the service's own thread only.
pub trait FlushPolicy: Send + 'static {
    /// Decides for this wake-up.
    fn decide(&mut self, input: &PolicyInput) -> Decision;
}

/// What the async services need from a policy provider: a fresh policy for the
/// flush service and one for the commit service, each time services start.
///
/// Implement it to ship a policy to users of the `commitlog` facade without
/// forking it: put it in [`FlushConfig::policy`] as [`PolicyChoice::Custom`].
pub trait PolicyFactory: Send + Sync + fmt::Debug + 'static {
    /// The policy of the flush service (`FlushRealTimeService`).
    fn flush_policy(&self, config: &FlushConfig) -> Box<dyn FlushPolicy>;
    /// The policy of the write-buffer commit service (`CommitRealTimeService`).
    fn commit_policy(&self, config: &FlushConfig) -> Box<dyn FlushPolicy>;
}

/// Which policy the async services run, chosen in [`FlushConfig::policy`].
///
/// With the `serde` feature the built-in choices read from configuration files
/// (`policy = { kind = "dirty_bytes_or_age", max_dirty_bytes = 8388608, max_age_ms = 200 }`);
/// `Custom` is code only.
#[derive(Clone, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "kind", rename_all = "snake_case")
)]
pub enum PolicyChoice {
    /// RocketMQ's rule ([`RocketMqPolicy`]) with the config's least-pages and
    /// thorough-interval knobs, for both services. The default.
    #[default]
    RocketMq,
    /// [`DirtyBytesOrAgePolicy`] for the flush service with these bounds; RocketMQ's
    /// rule for the commit service.
    DirtyBytesOrAge {
        /// Flush once this many bytes are pending.
        max_dirty_bytes: u64,
        /// Flush once bytes have been pending this long (ms).
        max_age_ms: u64,
    },
    /// A policy from outside this crate.
    #[cfg_attr(feature = "serde", serde(skip))]
    Custom(Arc<dyn PolicyFactory>),
}

impl PolicyChoice {
    /// The flush service's policy for `config`.
    pub fn flush_policy(&self, config: &FlushConfig) -> Box<dyn FlushPolicy> {
        match self {
            PolicyChoice::RocketMq => Box::new(rocketmq_flush_policy(config)),
            PolicyChoice::DirtyBytesOrAge { max_dirty_bytes, max_age_ms } => Box::new(DirtyBytesOrAgePolicy {
                max_dirty_bytes: *max_dirty_bytes,
                max_age: Duration::from_millis(*max_age_ms),
            }),
            PolicyChoice::Custom(factory) => factory.flush_policy(config),
        }
    }

    /// The commit service's policy for `config`.
    pub fn commit_policy(&self, config: &FlushConfig) -> Box<dyn FlushPolicy> {
        match self {
            PolicyChoice::RocketMq | PolicyChoice::DirtyBytesOrAge { .. } => Box::new(RocketMqPolicy::new(
                config.commit_commit_log_least_pages,
                Duration::from_millis(config.commit_commit_log_thorough_interval_ms),
            )),
            PolicyChoice::Custom(factory) => factory.commit_policy(config),
        }
    }
}

fn rocketmq_flush_policy(config: &FlushConfig) -> RocketMqPolicy {
    RocketMqPolicy::new(
        config.flush_commit_log_least_pages,
        Duration::from_millis(config.flush_commit_log_thorough_interval_ms),
    )
}

impl fmt::Debug for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyChoice::RocketMq => f.write_str("RocketMq"),
            PolicyChoice::DirtyBytesOrAge { max_dirty_bytes, max_age_ms } => f
                .debug_struct("DirtyBytesOrAge")
                .field("max_dirty_bytes", max_dirty_bytes)
                .field("max_age_ms", max_age_ms)
                .finish(),
            PolicyChoice::Custom(factory) => f.debug_tuple("Custom").field(factory).finish(),
        }
    }
}

/// Built-in choices compare by value; custom ones are equal only to themselves
/// (the same factory).
impl PartialEq for PolicyChoice {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PolicyChoice::RocketMq, PolicyChoice::RocketMq) => true,
            (
                PolicyChoice::DirtyBytesOrAge { max_dirty_bytes: a, max_age_ms: b },
                PolicyChoice::DirtyBytesOrAge { max_dirty_bytes: c, max_age_ms: d },
            ) => a == c && b == d,
            (PolicyChoice::Custom(a), PolicyChoice::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for PolicyChoice {}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A flush policy's input at `ms`, with `pending_bytes` pending for `age_ms`.
    pub(crate) fn at(ms: u64, pending_bytes: u64, age_ms: Option<u64>) -> PolicyInput {
        PolicyInput {
            now: Duration::from_millis(ms),
            pending_bytes,
            pending_age: age_ms.map(Duration::from_millis),
            target: TargetState::default(),
        }
    }
}
