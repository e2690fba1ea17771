//! The strategy seam: what the facade holds, without caring which mode it is.

use std::fmt;
use std::time::Duration;

use crate::clock::Clock;
use crate::group_commit::{GroupCommit, GroupCommitConfig, GroupCommitStats};
use crate::periodic::{Periodic, PeriodicConfig};
use crate::policy::FlushPolicy;
use crate::service::{ServiceState, ServiceThread};
use crate::sync::{lock, Arc, Mutex};
use crate::{DurabilityHandle, FlushConfig, FlushTarget, FlushedCallback, StartError, TargetError};

/// How often the deadline watcher looks at waiting requests (RocketMQ: ≤ 10 ms).
const WATCHER_INTERVAL: Duration = Duration::from_millis(10);

/// Counters of a strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Group-commit counters (zero under async flush).
    pub group_commit: GroupCommitStats,
    /// Periodic flushes run (async flush).
    pub periodic_flushes: u64,
    /// Periodic commits run (write-buffer pool).
    pub periodic_commits: u64,
}

/// A flush strategy: started on construction, stopped by [`shutdown`](Self::shutdown).
pub trait FlushStrategy: Send + Sync + fmt::Debug {
    /// A put happened; wake whichever service the configuration says.
    fn wake_on_put(&self);
    /// Requests that bytes below `next_offset` become durable. Sync flush: the
    /// handle resolves when they are (or with a timeout or error); its
    /// [`wait`](DurabilityHandle::wait) may run the group-commit round in the
    /// waiting thread (`FlushConfig::group_commit_in_waiter`). Async flush: the
    /// handle is already resolved `Ok` (durability comes later, bounded by the
    /// flush interval).
    fn submit(&self, next_offset: u64) -> DurabilityHandle;
    /// True when [`submit`](Self::submit) handles wait for durability.
    fn is_sync(&self) -> bool;
    /// Stops the services: pending requests are flushed and completed, final
    /// commit/flush retries run, threads are joined. Idempotent.
    fn shutdown(&self);
    /// Counters.
    fn stats(&self) -> FlushStats;
    /// The first storage error any service hit, if any.
    fn failure(&self) -> Option<TargetError>;
}

fn spawn(
    name: &'static str,
    state: Arc<ServiceState>,
    body: impl FnOnce(&ServiceState) + Send + 'static,
) -> Result<ServiceThread, StartError> {
    ServiceThread::spawn(name, state, body).map_err(|source| StartError::Spawn { name, source })
}

fn stop_all(threads: &Mutex<Vec<ServiceThread>>, join_time: Duration) {
    // Stop in order: the first listed drains first (committer before flusher).
    let threads: Vec<ServiceThread> = lock(threads).drain(..).collect();
    for mut thread in threads {
        thread.shutdown(join_time);
    }
}

/// Sync flush: group commit plus the deadline watcher (`SYNC_FLUSH`).
pub struct SyncFlush {
    core: Arc<GroupCommit>,
    state: Arc<ServiceState>,
    /// `group_commit_in_waiter`: waiters may run rounds themselves.
    in_waiter: bool,
    threads: Mutex<Vec<ServiceThread>>,
    join_time: Duration,
}

impl fmt::Debug for SyncFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncFlush").field("core", &self.core).finish()
    }
}

impl SyncFlush {
    /// Starts `GroupCommitService` and `FlushDiskWatcher`. With
    /// `commit_before_flush` (a write-buffer pool is in use) each round commits
    /// before it flushes.
    pub fn start(
        target: Arc<dyn FlushTarget>,
        clock: Arc<dyn Clock>,
        config: &FlushConfig,
        commit_before_flush: bool,
        on_flushed: Option<FlushedCallback>,
    ) -> Result<Self, StartError> {
        let gc_config = GroupCommitConfig {
            sync_flush_timeout: FlushConfig::ms(config.sync_flush_timeout_ms),
            commit_before_flush,
            wait_interval: FlushConfig::ms(config.group_commit_interval_ms),
            gather: Duration::from_micros(config.group_commit_gather_us),
            spin: Duration::from_micros(config.group_commit_spin_us),
        };
        let policy = config.gather_policy.policy(&gc_config);
        let core = Arc::new(GroupCommit::new(target, clock, gc_config, on_flushed).with_gather_policy(policy));
        let state = ServiceState::new();
        let flusher = {
            let core = Arc::clone(&core);
            spawn("GroupCommitService", Arc::clone(&state), move |s| {
                let interval = core.config().wait_interval;
                // A panic in a round (a defect in a target, say) must not leave
                // producers waiting for answers that never come: every waiter is
                // answered `Stopped` and later requests are refused at once.
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    while !s.is_stopped() {
                        // While rounds serve a lone producer (the policy's spin is
                        // on), its next request comes microseconds after its answer:
                        // poll for it as long as its own wait would spin, instead
                        // of sleeping and paying a wake-up per round.
                        // Not while lone waiters' spins are losing (the gate); a
                        // spin of its own that loses closes the gate too.
                        // Nor while the producer runs its rounds itself.
                        let spin = if core.spin_gate().is_open() && !core.last_round_by_waiter() {
                            core.spin()
                        } else {
                            Duration::ZERO
                        };
                        let won = s.wait_for_running_spinning(spin, interval, || {});
                        if !spin.is_zero() {
                            core.spin_gate().record(won);
                        }
                        core.gather();
                        core.run_round();
                    }
                    core.drain();
                }));
                if served.is_err() {
                    tracing::error!("GroupCommitService panicked; every waiting request is answered Stopped");
                    core.abandon();
                }
            })?
        };
        let watcher = {
            let core = Arc::clone(&core);
            spawn("FlushDiskWatcher", ServiceState::new(), move |s| {
                while !s.is_stopped() {
                    s.sleep(WATCHER_INTERVAL);
                    core.expire();
                }
            })?
        };
        Ok(SyncFlush {
            core,
            state,
            in_waiter: config.group_commit_in_waiter,
            threads: Mutex::new(vec![flusher, watcher]),
            join_time: FlushConfig::ms(config.service_join_time_ms),
        })
    }

    /// The group-commit core (for stats and tests).
    pub fn core(&self) -> &Arc<GroupCommit> {
        &self.core
    }
}

impl FlushStrategy for SyncFlush {
    fn wake_on_put(&self) {
        self.state.wakeup();
    }

    fn submit(&self, next_offset: u64) -> DurabilityHandle {
        // The service thread runs every round a waiter does not run itself
        // (`DurabilityHandle::wait` runs one when none runs and the policy
        // would sync at once; it never waits inside another thread's sync).
        // The handle wakes the service when it is waited on without running
        // a round, polled, or dropped while pending, so a lone producer's
        // rounds cost no wake-up at all (with `group_commit_in_waiter`; else
        // the service is woken here and runs every round). A wake-up while
        // the service is mid-round makes it start the next round at once, so
        // requests that arrive during a sync are batched into the following
        // one.
        let handle = self.core.put_request(next_offset);
        if self.in_waiter {
            return handle.with_rounds(&self.core, &self.state);
        }
        if !handle.is_done() {
            self.state.wakeup();
        }
        handle
    }

    fn is_sync(&self) -> bool {
        true
    }

    fn shutdown(&self) {
        stop_all(&self.threads, self.join_time);
        // If the flusher could not be joined (or died), drain from here; whatever
        // is still pending then is answered `Stopped`, never left hanging.
        if !self.core.is_closed() {
            self.core.drain();
        }
        self.core.abandon();
    }

    fn stats(&self) -> FlushStats {
        FlushStats { group_commit: self.core.stats(), ..FlushStats::default() }
    }

    fn failure(&self) -> Option<TargetError> {
        self.core.failure()
    }
}

impl Drop for SyncFlush {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Async flush: `FlushRealTimeService`, plus `CommitRealTimeService` with a
/// write-buffer pool (`ASYNC_FLUSH`).
pub struct AsyncFlush {
    flusher: Arc<Periodic>,
    committer: Option<Arc<Periodic>>,
    flusher_state: Arc<ServiceState>,
    committer_state: Arc<ServiceState>,
    wake_commit_when_put_message: bool,
    wake_flush_when_put_message: bool,
    threads: Mutex<Vec<ServiceThread>>,
    join_time: Duration,
}

impl fmt::Debug for AsyncFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncFlush").field("flusher", &self.flusher).field("committer", &self.committer).finish()
    }
}

impl AsyncFlush {
    /// Starts the async services with the policies `config.policy` chooses
    /// (RocketMQ's by default). `with_write_buffer` adds the commit service.
    pub fn start(
        target: Arc<dyn FlushTarget>,
        clock: Arc<dyn Clock>,
        config: &FlushConfig,
        with_write_buffer: bool,
        on_flushed: Option<FlushedCallback>,
    ) -> Result<Self, StartError> {
        let flush_policy = config.policy.flush_policy(config);
        let commit_policy = with_write_buffer.then(|| config.policy.commit_policy(config));
        Self::start_with_policies(target, clock, config, flush_policy, commit_policy, on_flushed)
    }

    /// Starts the async services with custom policies; `commit_policy` present
    /// means a write-buffer pool is in use and the commit service runs.
    pub fn start_with_policies(
        target: Arc<dyn FlushTarget>,
        clock: Arc<dyn Clock>,
        config: &FlushConfig,
        flush_policy: Box<dyn FlushPolicy>,
        commit_policy: Option<Box<dyn FlushPolicy>>,
        on_flushed: Option<FlushedCallback>,
    ) -> Result<Self, StartError> {
        let flusher_state = ServiceState::new();
        let committer_state = ServiceState::new();
        let flusher = Arc::new(Periodic::flusher(
            Arc::clone(&target),
            Arc::clone(&clock),
            PeriodicConfig {
                interval: FlushConfig::ms(config.flush_interval_commit_log_ms),
                timed: config.flush_commit_log_timed,
            },
            flush_policy,
            on_flushed,
        ));
        let committer = commit_policy.map(|policy| {
            let wake = Arc::clone(&flusher_state);
            Arc::new(Periodic::committer(
                Arc::clone(&target),
                Arc::clone(&clock),
                PeriodicConfig { interval: FlushConfig::ms(config.commit_interval_commit_log_ms), timed: false },
                policy,
                Some(Box::new(move || wake.wakeup())),
            ))
        });
        let mut threads = Vec::new();
        if let Some(committer) = &committer {
            let committer = Arc::clone(committer);
            threads
                .push(spawn("CommitRealTimeService", Arc::clone(&committer_state), move |s| committer.run_service(s))?);
        }
        let body = Arc::clone(&flusher);
        threads.push(spawn("FlushRealTimeService", Arc::clone(&flusher_state), move |s| body.run_service(s))?);
        Ok(AsyncFlush {
            flusher,
            committer,
            flusher_state,
            committer_state,
            wake_commit_when_put_message: config.wake_commit_when_put_message,
            wake_flush_when_put_message: config.wake_flush_when_put_message,
            threads: Mutex::new(threads),
            join_time: FlushConfig::ms(config.service_join_time_ms),
        })
    }
}

impl FlushStrategy for AsyncFlush {
    fn wake_on_put(&self) {
        // RocketMQ's handleDiskFlush for ASYNC_FLUSH.
        if self.committer.is_some() {
            if self.wake_commit_when_put_message {
                self.committer_state.wakeup();
            }
        } else if self.wake_flush_when_put_message {
            self.flusher_state.wakeup();
        }
    }

    fn submit(&self, next_offset: u64) -> DurabilityHandle {
        let _ = next_offset;
        self.wake_on_put();
        DurabilityHandle::resolved(Ok(()))
    }

    fn is_sync(&self) -> bool {
        false
    }

    fn shutdown(&self) {
        stop_all(&self.threads, self.join_time);
    }

    fn stats(&self) -> FlushStats {
        FlushStats {
            periodic_flushes: self.flusher.runs(),
            periodic_commits: self.committer.as_ref().map_or(0, |c| c.runs()),
            ..FlushStats::default()
        }
    }

    fn failure(&self) -> Option<TargetError> {
        self.committer.as_ref().and_then(|c| c.failure()).or_else(|| self.flusher.failure())
    }
}

impl Drop for AsyncFlush {
    fn drop(&mut self) {
        self.shutdown();
    }
}
