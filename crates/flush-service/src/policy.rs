//! The flush-policy seam: "run now, with how many least pages?"
//!
//! The periodic flush and commit services ask their policy each time they wake.
//! [`RocketMqPolicy`] is RocketMQ's rule and the default; [`DirtyBytesOrAgePolicy`]
//! is an example of another. See `docs/flush-policies.md` for how to add one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::FlushConfig;

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

/// RocketMQ's rule: always run with `least_pages`, except once every
/// `thorough_interval` with 0 ("flush everything").
#[derive(Debug, Clone)]
pub struct RocketMqPolicy {
    least_pages: usize,
    thorough_interval: Duration,
    last_thorough: Option<Duration>,
}

impl RocketMqPolicy {
    /// `least_pages` normally, 0 once every `thorough_interval`.
    pub fn new(least_pages: usize, thorough_interval: Duration) -> Self {
        RocketMqPolicy { least_pages, thorough_interval, last_thorough: None }
    }
}

impl FlushPolicy for RocketMqPolicy {
    fn decide(&mut self, input: &PolicyInput) -> Decision {
        let thorough = match self.last_thorough {
            None => true,
            Some(last) => input.now.saturating_sub(last) >= self.thorough_interval,
        };
        if thorough {
            self.last_thorough = Some(input.now);
            Decision::Run { least_pages: 0 }
        } else {
            Decision::Run { least_pages: self.least_pages }
        }
    }
}

/// Example policy: flush everything as soon as `max_dirty_bytes` are pending or
/// the oldest pending byte is older than `max_age`; otherwise wait. It bounds both
/// how much an async crash can lose and how stale it can be.
#[derive(Debug, Clone, Copy)]
pub struct DirtyBytesOrAgePolicy {
    /// Flush once this many bytes are pending.
    pub max_dirty_bytes: u64,
    /// Flush once bytes have been pending this long.
    pub max_age: Duration,
}

impl FlushPolicy for DirtyBytesOrAgePolicy {
    fn decide(&mut self, input: &PolicyInput) -> Decision {
        let too_many = input.pending_bytes >= self.max_dirty_bytes && input.pending_bytes > 0;
        let too_old = input.pending_age.is_some_and(|age| age >= self.max_age);
        if too_many || too_old {
            Decision::Run { least_pages: 0 }
        } else {
            Decision::Skip
        }
    }
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
mod tests {
    use super::*;

    fn at(ms: u64, pending_bytes: u64, age_ms: Option<u64>) -> PolicyInput {
        PolicyInput { now: Duration::from_millis(ms), pending_bytes, pending_age: age_ms.map(Duration::from_millis) }
    }

    #[test]
    fn rocketmq_policy_is_thorough_once_per_interval() {
        let mut p = RocketMqPolicy::new(4, Duration::from_secs(10));
        assert_eq!(p.decide(&at(0, 0, None)), Decision::Run { least_pages: 0 }, "first run is thorough");
        assert_eq!(p.decide(&at(500, 0, None)), Decision::Run { least_pages: 4 });
        assert_eq!(p.decide(&at(9_999, 0, None)), Decision::Run { least_pages: 4 });
        assert_eq!(p.decide(&at(10_000, 0, None)), Decision::Run { least_pages: 0 });
        assert_eq!(p.decide(&at(10_500, 0, None)), Decision::Run { least_pages: 4 });
    }

    #[test]
    fn dirty_bytes_or_age_policy_flushes_on_either_bound() {
        let mut p = DirtyBytesOrAgePolicy { max_dirty_bytes: 1 << 20, max_age: Duration::from_millis(200) };
        assert_eq!(p.decide(&at(0, 0, None)), Decision::Skip);
        assert_eq!(p.decide(&at(0, 1000, Some(100))), Decision::Skip);
        assert_eq!(p.decide(&at(0, 1 << 20, Some(1))), Decision::Run { least_pages: 0 });
        assert_eq!(p.decide(&at(0, 10, Some(200))), Decision::Run { least_pages: 0 });
    }
}
