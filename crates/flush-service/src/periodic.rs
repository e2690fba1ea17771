//! The periodic services: RocketMQ's `FlushRealTimeService` (async flush) and
//! `CommitRealTimeService` (write-buffer commit). One core, two actions.
//!
//! Each wake-up asks the [`FlushPolicy`] whether to act and with how many least
//! pages, then flushes (reporting the flushed offset and physical timestamp for
//! the checkpoint) or commits (waking the flusher when data moved). On shutdown
//! each retries its action with least pages 0 up to [`RETRY_TIMES_OVER`] times.

use std::time::Duration;

use crate::clock::Clock;
use crate::group_commit::RETRY_TIMES_OVER;
use crate::policy::{Decision, FlushPolicy, PolicyInput};
use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};
use crate::{FlushTarget, FlushedCallback, FlushedReport, TargetError, TargetState};

/// What a periodic service does when its policy says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeriodicAction {
    /// Make data durable (`FlushRealTimeService`).
    Flush,
    /// Copy write-buffer data into the segments (`CommitRealTimeService`).
    Commit,
}

/// Called after a commit moved data (wakes the flusher).
pub type CommittedCallback = Box<dyn Fn() + Send + Sync>;

/// How a periodic service waits between runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeriodicConfig {
    /// Interval between runs (`flushIntervalCommitLog` 500 ms, `commitIntervalCommitLog` 200 ms).
    pub interval: Duration,
    /// Sleep the whole interval, ignoring wake-ups (`flushCommitLogTimed`), instead
    /// of returning early when a put wakes the service.
    pub timed: bool,
}

/// One outcome of [`Periodic::run_once`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The policy said skip.
    Skipped,
    /// Acted with this threshold; the position moved from `from` to `to`.
    Ran {
        /// Least pages used.
        least_pages: usize,
        /// Position before.
        from: u64,
        /// Position after.
        to: u64,
    },
}

/// The core of a periodic service, without a thread.
pub struct Periodic {
    action: PeriodicAction,
    target: Arc<dyn FlushTarget>,
    clock: Arc<dyn Clock>,
    config: PeriodicConfig,
    policy: Mutex<Box<dyn FlushPolicy>>,
    pending_since: Mutex<Option<Duration>>,
    on_flushed: Option<FlushedCallback>,
    on_committed: Option<CommittedCallback>,
    runs: AtomicU64,
}

impl std::fmt::Debug for Periodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Periodic").field("action", &self.action).field("config", &self.config).finish()
    }
}

impl Periodic {
    /// A periodic flush service core; `on_flushed` receives checkpoint data.
    pub fn flusher(
        target: Arc<dyn FlushTarget>,
        clock: Arc<dyn Clock>,
        config: PeriodicConfig,
        policy: Box<dyn FlushPolicy>,
        on_flushed: Option<FlushedCallback>,
    ) -> Self {
        Self::new(PeriodicAction::Flush, target, clock, config, policy, on_flushed, None)
    }

    /// A periodic commit service core; `on_committed` runs when data moved.
    pub fn committer(
        target: Arc<dyn FlushTarget>,
        clock: Arc<dyn Clock>,
        config: PeriodicConfig,
        policy: Box<dyn FlushPolicy>,
        on_committed: Option<CommittedCallback>,
    ) -> Self {
        Self::new(PeriodicAction::Commit, target, clock, config, policy, None, on_committed)
    }

    fn new(
        action: PeriodicAction,
        target: Arc<dyn FlushTarget>,
        clock: Arc<dyn Clock>,
        config: PeriodicConfig,
        policy: Box<dyn FlushPolicy>,
        on_flushed: Option<FlushedCallback>,
        on_committed: Option<CommittedCallback>,
    ) -> Self {
        Periodic {
            action,
            target,
            clock,
            config,
            policy: Mutex::new(policy),
            pending_since: Mutex::new(None),
            on_flushed,
            on_committed,
            runs: AtomicU64::new(0),
        }
    }

    /// The action.
    pub fn action(&self) -> PeriodicAction {
        self.action
    }

    /// The wait configuration.
    pub fn config(&self) -> &PeriodicConfig {
        &self.config
    }

    /// Number of times the action ran.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// The target's latched failure, if any ([`FlushTarget::failure`]).
    pub fn failure(&self) -> Option<TargetError> {
        self.target.failure()
    }

    fn pending_bytes(&self, state: &TargetState) -> u64 {
        match self.action {
            PeriodicAction::Flush => state.unflushed_bytes,
            PeriodicAction::Commit => state.uncommitted_bytes,
        }
    }

    fn position(&self, state: &TargetState) -> u64 {
        match self.action {
            PeriodicAction::Flush => state.flushed_where,
            PeriodicAction::Commit => state.committed_where,
        }
    }

    /// One wake-up: ask the policy, act, report.
    pub fn run_once(&self) -> Result<RunOutcome, TargetError> {
        let now = self.clock.now();
        let target = self.target.state();
        let pending_bytes = self.pending_bytes(&target);
        let pending_age = {
            let mut since = lock(&self.pending_since);
            if pending_bytes == 0 {
                *since = None;
            } else if since.is_none() {
                *since = Some(now);
            }
            since.map(|s| now.saturating_sub(s))
        };
        let decision = lock(&self.policy).decide(&PolicyInput { now, pending_bytes, pending_age, target });
        let Decision::Run { least_pages } = decision else {
            return Ok(RunOutcome::Skipped);
        };
        self.act(least_pages).map(|(from, to)| RunOutcome::Ran { least_pages, from, to })
    }

    fn act(&self, least_pages: usize) -> Result<(u64, u64), TargetError> {
        let from = self.position(&self.target.state());
        let result = match self.action {
            PeriodicAction::Flush => self.target.flush(least_pages),
            PeriodicAction::Commit => self.target.commit(least_pages),
        };
        self.runs.fetch_add(1, Ordering::Relaxed);
        let to = match result {
            Ok(to) => to,
            Err(err) => {
                // The target latched (its contract), so the store refuses writes
                // from now on; nothing to record here.
                tracing::error!(action = ?self.action, error = %err, "periodic service failed; the store refuses writes from now on");
                return Err(err);
            }
        };
        if to > from {
            let state = self.target.state();
            if self.pending_bytes(&state) == 0 {
                *lock(&self.pending_since) = None;
            }
            match self.action {
                PeriodicAction::Flush => {
                    if let Some(callback) = &self.on_flushed {
                        callback(FlushedReport {
                            flushed_where: to,
                            store_timestamp: state.store_timestamp,
                            requests_acknowledged: 0,
                        });
                    }
                }
                PeriodicAction::Commit => {
                    if let Some(callback) = &self.on_committed {
                        callback();
                    }
                }
            }
        }
        Ok((from, to))
    }

    /// Final runs on shutdown: the action with least pages 0, up to
    /// [`RETRY_TIMES_OVER`] times, until nothing is pending or it fails.
    pub fn drain(&self) {
        for attempt in 0..RETRY_TIMES_OVER {
            match self.act(0) {
                Ok(_) if self.pending_bytes(&self.target.state()) == 0 => return,
                Ok(_) => {}
                Err(err) => {
                    tracing::error!(action = ?self.action, attempt, error = %err, "final run on shutdown failed");
                    return;
                }
            }
        }
        tracing::warn!(action = ?self.action, pending = self.pending_bytes(&self.target.state()), "data still pending after final retries");
    }

    /// The thread body: wait (or sleep, when timed), run, until stopped; then drain.
    pub(crate) fn run_service(&self, state: &crate::service::ServiceState) {
        while !state.is_stopped() {
            if self.config.timed {
                state.sleep(self.config.interval);
            } else {
                state.wait_for_running(self.config.interval, || {});
            }
            if state.is_stopped() {
                break;
            }
            // Errors are recorded (and latch the target); the loop keeps running so
            // shutdown still joins promptly.
            let _ = self.run_once();
        }
        self.drain();
    }
}
