//! The gather-policy seam of group commit: before each round's sync, wait for
//! producers on their way back, or sync now? And should a lone producer's wait
//! spin for its answer instead of sleeping?
//!
//! On few cores a thread's wake-up costs a round as much as its sync: a round that
//! syncs while the producers the last one answered are still coming back serves one
//! or two, and the rest wait a whole round. How long to wait depends on the
//! machine (its sync time against the producers' return time), so the rule is a
//! policy, chosen in [`FlushConfig::gather_policy`](crate::FlushConfig::gather_policy)
//! as flush policies are.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::group_commit::GroupCommitConfig;
use crate::{AdaptiveGatherPolicy, ProducersBackPolicy};

/// What a gather policy sees before a round's sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherInput {
    /// Requests queued (not yet in the round).
    pub queued: usize,
    /// Requests in flight: the last round's flush did not cover them.
    pub in_flight: usize,
    /// Time since the last round answered its requests.
    pub since_answers: Duration,
}

/// A gather policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherDecision {
    /// Sync now.
    Go,
    /// Wait, at most `within`, until `queued` requests are queued; then sync.
    /// The wait ends early when nothing is waiting at all or the service stops.
    WaitFor {
        /// The queue length that ends the wait.
        queued: usize,
        /// The longest wait (a scheduling delay on the real clock, not a deadline).
        within: Duration,
    },
}

/// How a gather ended, for the policy to learn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherOutcome {
    /// How long the round waited.
    pub waited: Duration,
    /// Whether the queue reached the length asked for (else the wait ran out).
    pub reached: bool,
    /// Time from the last round's answers to the end of the wait: when
    /// `reached`, how long the producers took to come back.
    pub since_answers: Duration,
}

/// What a round did, for the policy to learn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundReport {
    /// Requests the round acknowledged.
    pub acknowledged: usize,
    /// Requests it left in flight (bytes written after its sync began).
    pub left_in_flight: usize,
    /// How long its commit and flush took.
    pub sync: Duration,
}

/// Decides, for group commit, whether a round waits for producers before its
/// sync, and whether the next requests' blocking waits spin. One instance per
/// group-commit service, called one call at a time by whoever runs a round:
/// its thread, or a waiter that runs one in its own
/// ([`GroupCommit::try_run_round`](crate::GroupCommit::try_run_round)); rounds
/// are serial.
///
/// Contract: a policy never makes a request wait past its deadline (every wait
/// is bounded by what it returns, and deadlines are kept by the watcher thread
/// whatever it says), and what it answers changes only when, not whether, a
/// request is made durable: acknowledgement stays the flush's alone.
pub trait GatherPolicy: Send + 'static {
    /// Before a round's sync.
    fn before_sync(&mut self, input: &GatherInput) -> GatherDecision;
    /// After a wait that [`before_sync`](Self::before_sync) asked for.
    fn gathered(&mut self, outcome: &GatherOutcome) {
        let _ = outcome;
    }
    /// After a round whose flush succeeded; returns how long the blocking waits
    /// of requests queued from now on spin for their answer before they sleep
    /// (zero: they sleep at once).
    fn after_round(&mut self, report: &RoundReport) -> Duration;
}

/// Makes a group-commit service's gather policy each time one starts: put one in
/// [`FlushConfig::gather_policy`](crate::FlushConfig::gather_policy) as
/// [`GatherChoice::Custom`] to ship a policy without forking the facade.
pub trait GatherPolicyFactory: Send + Sync + fmt::Debug + 'static {
    /// A fresh policy for a service with this configuration.
    fn gather_policy(&self, config: &GroupCommitConfig) -> Box<dyn GatherPolicy>;
}

/// Which gather policy group commit runs.
///
/// With the `serde` feature the built-in choices read from configuration files
/// (`gather_policy = { kind = "adaptive" }`); `Custom` is code only.
#[derive(Clone, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "kind", rename_all = "snake_case")
)]
pub enum GatherChoice {
    /// [`ProducersBackPolicy`]: wait for as many as the last round served and
    /// left in flight, up to `group_commit_gather_us`; once rounds serve a lone
    /// producer, spin about a usual sync ([`lone_spin`](crate::lone_spin)),
    /// within `group_commit_spin_us`. The default.
    #[default]
    ProducersBack,
    /// [`AdaptiveGatherPolicy`]: the same waits, bounded by what it measures
    /// (no wait when producers come back slower than a sync takes), within the
    /// same knobs.
    Adaptive,
    /// A policy from outside this crate.
    #[cfg_attr(feature = "serde", serde(skip))]
    Custom(Arc<dyn GatherPolicyFactory>),
}

impl GatherChoice {
    /// The policy for a service with `config`.
    pub fn policy(&self, config: &GroupCommitConfig) -> Box<dyn GatherPolicy> {
        match self {
            GatherChoice::ProducersBack => Box::new(ProducersBackPolicy::new(config.gather, config.spin)),
            GatherChoice::Adaptive => Box::new(AdaptiveGatherPolicy::new(config.gather, config.spin)),
            GatherChoice::Custom(factory) => factory.gather_policy(config),
        }
    }
}

impl fmt::Debug for GatherChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatherChoice::ProducersBack => f.write_str("ProducersBack"),
            GatherChoice::Adaptive => f.write_str("Adaptive"),
            GatherChoice::Custom(factory) => f.debug_tuple("Custom").field(factory).finish(),
        }
    }
}

/// Built-in choices compare by value; custom ones are equal only to themselves.
impl PartialEq for GatherChoice {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (GatherChoice::ProducersBack, GatherChoice::ProducersBack) => true,
            (GatherChoice::Adaptive, GatherChoice::Adaptive) => true,
            (GatherChoice::Custom(a), GatherChoice::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for GatherChoice {}
