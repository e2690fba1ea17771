//! The flush knobs, under RocketMQ's names in snake_case, with RocketMQ's defaults.

use std::time::Duration;

use crate::policy::{GatherChoice, PolicyChoice};

/// Flush-service configuration. Every field is a RocketMQ `MessageStoreConfig` knob
/// (`flushIntervalCommitLog` → `flush_interval_commit_log_ms`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(default, deny_unknown_fields))]
pub struct FlushConfig {
    /// Async flush interval (`flushIntervalCommitLog`, 500 ms).
    pub flush_interval_commit_log_ms: u64,
    /// Async flush threshold in 4 KiB pages (`flushCommitLogLeastPages`, 4).
    pub flush_commit_log_least_pages: usize,
    /// A thorough (least pages 0) async flush at least this often
    /// (`flushCommitLogThoroughInterval`, 10 s).
    pub flush_commit_log_thorough_interval_ms: u64,
    /// Async flush sleeps its interval regardless of puts (`flushCommitLogTimed`,
    /// true); false: a put (with `wake_flush_when_put_message`) wakes it early.
    pub flush_commit_log_timed: bool,
    /// Write-buffer commit interval (`commitIntervalCommitLog`, 200 ms).
    pub commit_interval_commit_log_ms: u64,
    /// Commit threshold in 4 KiB pages (`commitCommitLogLeastPages`, 4).
    pub commit_commit_log_least_pages: usize,
    /// A thorough commit at least this often (`commitCommitLogThoroughInterval`, 200 ms).
    pub commit_commit_log_thorough_interval_ms: u64,
    /// Deadline of a sync-flush request (`syncFlushTimeout`, 5000 ms).
    pub sync_flush_timeout_ms: u64,
    /// A put wakes the commit service (`wakeCommitWhenPutMessage`, true).
    pub wake_commit_when_put_message: bool,
    /// A put wakes the async flush service (`wakeFlushWhenPutMessage`, false).
    pub wake_flush_when_put_message: bool,
    /// Group commit's wait between rounds when not woken (RocketMQ's
    /// `waitForRunning(10)`, 10 ms).
    pub group_commit_interval_ms: u64,
    /// Longest a group-commit round waits, before its sync, for the producers the
    /// previous round acknowledged to come back with their next request
    /// (microseconds, 100; 0 never waits): the bound of the built-in gather
    /// policies ([`gather_policy`](Self::gather_policy)). With the default one a
    /// round waits only while fewer requests wait (queued or left in flight)
    /// than the last round acknowledged and left in flight, so a lone producer
    /// never waits. Like MySQL's `binlog_group_commit_sync_delay` with its
    /// no-delay count taken from the last round.
    pub group_commit_gather_us: u64,
    /// While rounds serve a lone producer (eight rounds in a row of one request
    /// each), the longest its durable wait spins for the answer before it
    /// sleeps, and the service for the producer's next request (microseconds,
    /// 1000; 0 never spins). Within it both spin a quarter more than a sync
    /// usually takes ([`lone_spin`](crate::lone_spin)); past it neither spins. Saves
    /// the wake-ups of both threads, 40-60 µs each of a durable batch's 300-400
    /// on a virtual machine (the repository's docs/benchmarks.md); never used
    /// while rounds serve several producers, whose CPU a spinning thread would take.
    pub group_commit_spin_us: u64,
    /// A producer blocked in [`DurabilityHandle::wait`](crate::DurabilityHandle::wait)
    /// runs the group-commit round itself when no round runs and the gather
    /// policy would sync at once (a lone producer, or every producer it would
    /// gather already queued), as PostgreSQL's backends flush the WAL and
    /// raft-engine's and RocksDB's write-group leaders sync: no hand-off to
    /// the service thread and no wake-up back (true, the default). It never
    /// waits inside a sync another thread runs; but a sync it runs itself
    /// holds it until the disk answers, past the request's deadline if the
    /// disk stalls (answered [`FlushError::Timeout`](crate::FlushError::Timeout)
    /// then). False: the service thread runs every round, and `wait` returns
    /// by the deadline however long a sync takes (RocketMQ's
    /// `GroupCommitService`). `wait_timeout` and `.await` never run a round
    /// either way.
    pub group_commit_in_waiter: bool,
    /// Bound on joining a service thread at shutdown (RocketMQ: 5 min for flushers).
    pub service_join_time_ms: u64,
    /// The policy the async flush and commit services ask when to act (RocketMQ's
    /// rule by default).
    pub policy: PolicyChoice,
    /// The policy group commit (sync flush) asks before each round's sync: wait
    /// for producers on their way back, and spin a waiter or not
    /// ([`GatherChoice::ProducersBack`] by default, or
    /// [`GatherChoice::Adaptive`], which measures sync and return times).
    pub gather_policy: GatherChoice,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            flush_interval_commit_log_ms: 500,
            flush_commit_log_least_pages: 4,
            flush_commit_log_thorough_interval_ms: 10_000,
            flush_commit_log_timed: true,
            commit_interval_commit_log_ms: 200,
            commit_commit_log_least_pages: 4,
            commit_commit_log_thorough_interval_ms: 200,
            sync_flush_timeout_ms: 5000,
            wake_commit_when_put_message: true,
            wake_flush_when_put_message: false,
            group_commit_interval_ms: 10,
            group_commit_gather_us: 100,
            group_commit_spin_us: 1000,
            group_commit_in_waiter: true,
            service_join_time_ms: 5 * 60 * 1000,
            policy: PolicyChoice::RocketMq,
            gather_policy: GatherChoice::ProducersBack,
        }
    }
}

impl FlushConfig {
    pub(crate) fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }
}
