//! Sync flush with group commit: RocketMQ's `GroupCommitService` and
//! `FlushDiskWatcher`.
//!
//! Producers put requests ("offset X must be durable") into the *write* list under a short lock and
//! wake the service. The service swaps the write list into its *in-flight* list (the seed's
//! double-list swap: producers never wait for a flush), commits write buffers if configured (so the
//! flush covers them: [#7523](https://github.com/apache/rocketmq/issues/7523)), flushes once, swaps
//! again and completes every request the flush covered, those queued while it ran included. Before
//! the flush a round may [gather](GroupCommit::gather) the producers the last round served, and a
//! waiter may spin briefly for its answer, as the round's [`GatherPolicy`] says
//! ([`ProducersBackPolicy`] by default): on few cores, thread wake-ups otherwise cost a round as
//! much as its sync. A request whose bytes span two segments is
//! covered because the target's flush crosses segment boundaries
//! ([#3408](https://github.com/apache/rocketmq/issues/3408)). A flush error completes every waiting
//! request with that error; later requests fail at once, because the target's failure latch says so
//! ([#2706](https://github.com/apache/rocketmq/issues/2706),
//! [#9713](https://github.com/apache/rocketmq/issues/9713)).
//!
//! Deadlines: requests are queued in arrival order with one timeout, so their
//! deadlines are ordered too; the watcher thread completes expired requests from
//! the front of both lists with [`FlushError::Timeout`] even while the flusher is
//! stuck in a slow sync. The first completion wins.
//!
//! Rounds in the waiter's own thread: a producer blocked in
//! [`DurabilityHandle::wait`] on a request that
//! [`SyncFlush`](crate::SyncFlush) queued runs the round itself
//! ([`try_run_round`](GroupCommit::try_run_round)) when no round runs and the
//! gather policy would sync at once (a lone producer, or every producer the
//! policy waits for already queued), as PostgreSQL's backends flush the WAL
//! themselves: the sync starts without a hand-off to the service thread, and
//! its answer needs no wake-up back. Rounds stay serial (one lock, never
//! waited for by a waiter: a waiter that finds a round running waits for its
//! answer as before), so a waiter is never held inside a sync another thread
//! started; the service thread still runs every round the waiters do not.

use std::collections::VecDeque;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::TargetError;
use crate::handle::{Completion, DurabilityHandle};
use crate::spin::SpinGate;
use crate::sync::{lock, try_lock, wait_timeout, Arc, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};
use crate::{
    FlushError, FlushTarget, FlushedCallback, FlushedReport, GatherDecision, GatherInput, GatherOutcome, GatherPolicy,
    ProducersBackPolicy, RoundReport,
};

/// RocketMQ's `RETRY_TIMES_OVER`: final flush attempts on shutdown.
pub const RETRY_TIMES_OVER: usize = 10;

/// Configuration of group commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitConfig {
    /// Deadline of a request (`syncFlushTimeout`, default 5000 ms).
    pub sync_flush_timeout: Duration,
    /// Commit write buffers before each flush (set when a write-buffer pool is used).
    pub commit_before_flush: bool,
    /// How long the service waits for a wake-up before flushing anyway
    /// (RocketMQ's `waitForRunning(10)`).
    pub wait_interval: Duration,
    /// Longest a round waits for the producers the last round acknowledged
    /// ([`GroupCommit::gather`]): the built-in gather policies' bound.
    pub gather: Duration,
    /// Longest a waiter spins for its answer before it sleeps, when the gather
    /// policy says to (the built-in ones: while rounds serve a lone producer,
    /// about a usual sync, [`lone_spin`](crate::lone_spin)); the service spins
    /// as long for the next request.
    pub spin: Duration,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        GroupCommitConfig {
            sync_flush_timeout: Duration::from_millis(5000),
            commit_before_flush: false,
            wait_interval: Duration::from_millis(10),
            gather: Duration::from_micros(100),
            spin: Duration::from_micros(1000),
        }
    }
}

#[derive(Debug)]
struct Request {
    next_offset: u64,
    deadline: Duration,
    completion: Arc<Completion>,
}

#[derive(Debug, Default)]
struct WriteList {
    requests: VecDeque<Request>,
    closed: bool,
    /// While a round gathers: the queue length that ends its wait (0: none waits).
    gather_want: usize,
}

/// Counters of a group-commit service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Flushes issued (a round flushes even with nothing to sync).
    pub flushes: u64,
    /// Flushes that made bytes durable (moved the flushed offset): the syncs
    /// the disk saw.
    pub syncing_flushes: u64,
    /// Requests completed durable.
    pub acknowledged: u64,
    /// Requests completed with a timeout.
    pub timeouts: u64,
    /// Requests completed with a storage error.
    pub failed: u64,
    /// Requests rejected or completed because the service stopped.
    pub stopped: u64,
    /// Lone waiters' spins that did not win: ran out before their answer, or
    /// lost their CPU on the way (descheduled while they spun). Each keeps the
    /// next waits from spinning (8 after a first miss, twice as many after
    /// each miss in a row, at most 1024), so a spin that is not winning (a
    /// slow disk, or CPUs busy with other work) bows out.
    pub spins_lost: u64,
}

#[derive(Debug, Default)]
struct Counters {
    flushes: AtomicU64,
    syncing_flushes: AtomicU64,
    acknowledged: AtomicU64,
    timeouts: AtomicU64,
    failed: AtomicU64,
    stopped: AtomicU64,
}

/// The group-commit core, without threads: producers call
/// [`put_request`](Self::put_request); a service thread (or a test) calls
/// [`swap`](Self::swap), [`flush_swapped`](Self::flush_swapped) and
/// [`expire`](Self::expire).
pub struct GroupCommit {
    target: Arc<dyn FlushTarget>,
    clock: Arc<dyn Clock>,
    config: GroupCommitConfig,
    write: Mutex<WriteList>,
    /// Signalled when the write list reaches what a gathering round waits for.
    gathered: Condvar,
    inflight: Mutex<VecDeque<Request>>,
    /// Held for a whole round (swap, commit, flush, complete) by whoever runs it:
    /// the service thread, shutdown's drain, or a waiting producer that found it
    /// free ([`try_run_round`](Self::try_run_round)). A waiting producer never
    /// waits for it: its wait must not end inside a sync another thread runs.
    round: Mutex<()>,
    /// Decides gathers and spins: the threads that run rounds lock it.
    policy: Mutex<Box<dyn GatherPolicy>>,
    /// How long new requests' blocking waits spin (ns), as the policy last said.
    spin_ns: AtomicU64,
    /// Whether those spins are winning: a wait spins only if it admits it.
    spin_gate: Arc<SpinGate>,
    /// When the last round answered its requests.
    last_answers: Mutex<Option<std::time::Instant>>,
    /// Whether the last round ran in a waiter's thread
    /// ([`try_run_round`](Self::try_run_round)): the service thread then has
    /// no next request to spin for.
    last_round_by_waiter: AtomicBool,
    counters: Counters,
    on_flushed: Option<FlushedCallback>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").field("config", &self.config).field("stats", &self.stats()).finish()
    }
}

impl GroupCommit {
    /// A group-commit core over `target`.
    pub fn new(
        target: Arc<dyn FlushTarget>,
        clock: Arc<dyn Clock>,
        config: GroupCommitConfig,
        on_flushed: Option<FlushedCallback>,
    ) -> Self {
        GroupCommit {
            target,
            clock,
            config,
            write: Mutex::new(WriteList::default()),
            gathered: Condvar::new(),
            inflight: Mutex::new(VecDeque::new()),
            round: Mutex::new(()),
            policy: Mutex::new(Box::new(ProducersBackPolicy::new(config.gather, config.spin))),
            spin_ns: AtomicU64::new(0),
            spin_gate: Arc::new(SpinGate::default()),
            last_answers: Mutex::new(None),
            last_round_by_waiter: AtomicBool::new(false),
            counters: Counters::default(),
            on_flushed,
        }
    }

    /// With `policy` deciding gathers and spins instead of the default
    /// [`ProducersBackPolicy`].
    pub fn with_gather_policy(self, policy: Box<dyn GatherPolicy>) -> Self {
        *lock(&self.policy) = policy;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &GroupCommitConfig {
        &self.config
    }

    /// Queues a request that bytes below `next_offset` (`wroteOffset + wroteBytes`)
    /// become durable. Does not wake the service; the caller does. Rejected at once
    /// after a flush error or once the service is closed.
    pub fn put_request(&self, next_offset: u64) -> DurabilityHandle {
        if let Some(source) = self.failure() {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            return DurabilityHandle::resolved(Err(FlushError::Failed { offset: next_offset, source }));
        }
        // A lone producer's wait spins (bounded) for its answer: the round that
        // serves it is usually microseconds from done.
        // Not while spins run out before their answers (the gate).
        let completion = match self.spin() {
            spin if spin.is_zero() || !self.spin_gate.admits() => Completion::new(),
            spin => Completion::with_spin(spin, Arc::clone(&self.spin_gate)),
        };
        let deadline = self.clock.now() + self.config.sync_flush_timeout;
        let gathered = {
            let mut write = lock(&self.write);
            if write.closed {
                drop(write);
                self.counters.stopped.fetch_add(1, Ordering::Relaxed);
                return DurabilityHandle::resolved(Err(FlushError::Stopped { offset: next_offset }));
            }
            write.requests.push_back(Request { next_offset, deadline, completion: Arc::clone(&completion) });
            write.gather_want > 0 && write.requests.len() >= write.gather_want
        };
        if gathered {
            self.gathered.notify_one();
        }
        DurabilityHandle::pending(completion)
    }

    /// One round: swap, then [`flush_swapped`](Self::flush_swapped), holding the
    /// round lock. If a waiter held the lock, or ran the last round (in its
    /// own thread, [`try_run_round`](Self::try_run_round)), and left nothing
    /// to do, no round: an empty one would teach the gather policy that
    /// rounds serve no one.
    pub fn run_round(&self) -> usize {
        let (_round, contended) = match try_lock(&self.round) {
            Some(round) => (round, false),
            None => (lock(&self.round), true),
        };
        if (contended || self.last_round_by_waiter()) && self.pending() == 0 && self.nothing_unflushed() {
            return 0;
        }
        self.last_round_by_waiter.store(false, Ordering::Relaxed);
        self.swap();
        self.flush_swapped()
    }

    /// Whether the last round ran in a waiter's thread: its producer syncs
    /// by itself, and the service thread need not spin for its next request.
    pub fn last_round_by_waiter(&self) -> bool {
        self.last_round_by_waiter.load(Ordering::Relaxed)
    }

    /// Whether every byte written is flushed (and committed, with write
    /// buffers): a round would sync nothing.
    fn nothing_unflushed(&self) -> bool {
        let state = self.target.state();
        state.unflushed_bytes == 0 && (!self.config.commit_before_flush || state.uncommitted_bytes == 0)
    }

    /// Runs a round in the calling thread, a producer waiting for its
    /// request's answer, if no round runs now, something waits, and the gather
    /// policy would sync at once (it asks for no gather, or the requests it
    /// would gather are queued already). Returns whether it ran one; if not,
    /// the service thread runs the next round (a [`DurabilityHandle`] wakes
    /// it then). The caller is held for the round's sync and no longer: it
    /// never waits for a round another thread runs.
    ///
    /// A round or a gather policy that panics (a defect in the target or the
    /// policy) answers every waiter [`FlushError::Stopped`] and closes the
    /// service, as a panic in the service thread's round does; the caller gets
    /// its answer, not the panic.
    pub fn try_run_round(&self) -> bool {
        self.try_run_round_unless(|| false)
    }

    /// [`try_run_round`](Self::try_run_round), unless `answered` says, once
    /// the round lock is held, that the caller's request was answered
    /// meanwhile: a waiter runs no round it does not need.
    pub(crate) fn try_run_round_unless(&self, answered: impl Fn() -> bool) -> bool {
        let Some(_round) = try_lock(&self.round) else { return false };
        if answered() {
            return false;
        }
        let input = self.gather_input();
        if self.is_closed() || input.queued + input.in_flight == 0 {
            return false;
        }
        // The policy and the round may panic (a defect in either): answered
        // as the service thread answers it, never passed to the waiter.
        let round = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let decision = lock(&self.policy).before_sync(&input);
            if matches!(decision, GatherDecision::WaitFor { queued: wanted, within } if input.queued < wanted && !within.is_zero())
            {
                return false;
            }
            self.last_round_by_waiter.store(true, Ordering::Relaxed);
            self.swap();
            self.flush_swapped();
            true
        }));
        let Ok(ran) = round else {
            tracing::error!("a group-commit round run by a waiter panicked; every waiting request is answered Stopped");
            self.abandon();
            return true;
        };
        ran
    }

    /// Before a round's sync: asks the gather policy whether to wait for more
    /// requests, and waits as it says (bounded, on the real clock: a scheduling
    /// delay, not a deadline), sleeping, never spinning: on few cores the
    /// producers need the CPU this thread would burn, and the producer that
    /// completes the count wakes it. Returns at once when nothing waits at all.
    pub fn gather(&self) {
        // Read once: a waiter's round may move requests meanwhile; the wait is
        // bounded either way.
        let input = self.gather_input();
        let decision = lock(&self.policy).before_sync(&input);
        let GatherDecision::WaitFor { queued: want_queued, within } = decision else { return };
        let started = std::time::Instant::now();
        let Some(deadline) = started.checked_add(within) else { return };
        let mut write = lock(&self.write);
        write.gather_want = want_queued;
        while !write.closed && (input.in_flight > 0 || !write.requests.is_empty()) && write.requests.len() < want_queued
        {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            write = wait_timeout(&self.gathered, write, deadline - now);
        }
        write.gather_want = 0;
        let reached = write.requests.len() >= want_queued;
        drop(write);
        let outcome = GatherOutcome {
            waited: started.elapsed(),
            reached,
            since_answers: lock(&self.last_answers).map_or(Duration::ZERO, |at| at.elapsed()),
        };
        lock(&self.policy).gathered(&outcome);
    }

    /// What the gather policy decides by, as it stands now.
    fn gather_input(&self) -> GatherInput {
        GatherInput {
            queued: lock(&self.write).requests.len(),
            in_flight: lock(&self.inflight).len(),
            since_answers: lock(&self.last_answers).map_or(Duration::ZERO, |at| at.elapsed()),
        }
    }

    /// Whether spins are winning: the waits' and the service's own.
    pub(crate) fn spin_gate(&self) -> &SpinGate {
        &self.spin_gate
    }

    /// How long a new request's blocking wait spins for its answer before it
    /// sleeps, as the gather policy said after the last round (zero: none).
    pub fn spin(&self) -> Duration {
        Duration::from_nanos(self.spin_ns.load(Ordering::Relaxed))
    }

    /// Moves queued requests to the in-flight list (RocketMQ's `swapRequests`, run
    /// in `onWaitEnd`). Producers hold the write lock only for a push.
    pub fn swap(&self) {
        let taken = std::mem::take(&mut lock(&self.write).requests);
        if !taken.is_empty() {
            lock(&self.inflight).extend(taken);
        }
    }

    /// Requests waiting in either list.
    pub fn pending(&self) -> usize {
        lock(&self.write).requests.len() + lock(&self.inflight).len()
    }

    /// The second half of a round (RocketMQ's `doCommit`, which flushes despite its
    /// name): commit write buffers (if configured) and flush once, then complete
    /// every in-flight request the flush covered. Requests not covered stay in
    /// flight (or time out). Flushes even with no request, so bytes of producers
    /// that do not wait (`wait_store_msg_ok = false`) become durable too. Returns
    /// the number of requests acknowledged.
    #[doc(alias = "do_commit")]
    pub fn flush_swapped(&self) -> usize {
        if let Some(source) = self.failure() {
            self.fail_all(&source);
            return 0;
        }
        let flushed_before = self.target.state().flushed_where;
        let sync_started = std::time::Instant::now();
        let result = if self.config.commit_before_flush {
            self.target.commit(0).and_then(|_| self.target.flush(0))
        } else {
            self.target.flush(0)
        };
        let sync = sync_started.elapsed();
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(flushed) => {
                if flushed > flushed_before {
                    self.counters.syncing_flushes.fetch_add(1, Ordering::Relaxed);
                }
                // Requests queued while the sync ran may be covered by it too (their
                // bytes were in place before it started): one sync serves them all.
                self.swap();
                // What is durable *now*: the target's offsets may have moved back
                // since the flush returned (its tail was truncated, and new bytes
                // may be written where the old ones were, not yet synced). Read
                // after the swap, so every request in flight was queued before it:
                // a request whose bytes follow a truncation sees it here.
                let durable = flushed.min(self.target.state().flushed_where);
                // Told before anyone is answered: the owner may have to record
                // something durably first (the commit log's checkpoint, when the
                // flush reached a new segment).
                if let Some(callback) = &self.on_flushed {
                    let covered = lock(&self.inflight).iter().filter(|r| r.next_offset <= durable).count();
                    callback(FlushedReport {
                        flushed_where: durable,
                        store_timestamp: self.target.state().store_timestamp,
                        requests_acknowledged: covered,
                    });
                }
                let acknowledged = self.complete_covered(durable);
                *lock(&self.last_answers) = Some(std::time::Instant::now());
                // Left in flight: not covered by this flush.
                let left_in_flight = lock(&self.inflight).len();
                let report = RoundReport { acknowledged, left_in_flight, sync };
                let spin = lock(&self.policy).after_round(&report);
                self.spin_ns.store(u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
                acknowledged
            }
            Err(source) => {
                // The target latched (its contract): `failure()` reports it from now
                // on, so later requests fail at once without a flag of our own.
                tracing::error!(error = %source, "group commit flush failed; failing every waiting request");
                self.fail_all(&source);
                0
            }
        }
    }

    /// Completes the in-flight requests at or below `durable`, which must be at
    /// or below the target's `flushed_where` read after the requests were
    /// queued (the durability invariant: acknowledged only when a successful
    /// flush covers it and no truncation uncovered it since).
    fn complete_covered(&self, durable: u64) -> usize {
        let now = self.clock.now();
        let mut acknowledged = 0;
        let mut inflight = lock(&self.inflight);
        inflight.retain(|request| {
            if request.next_offset <= durable {
                // Counted before the waiter wakes: it reads a count that includes it.
                let counter = &self.counters.acknowledged;
                if request.completion.complete_then(Ok(()), || {
                    counter.fetch_add(1, Ordering::Relaxed);
                }) {
                    acknowledged += 1;
                }
                false
            } else if now >= request.deadline {
                self.time_out(request);
                false
            } else {
                !request.completion.is_complete()
            }
        });
        acknowledged
    }

    fn time_out(&self, request: &Request) {
        let timeout_ms = self.config.sync_flush_timeout.as_millis() as u64;
        let error = FlushError::Timeout { offset: request.next_offset, timeout_ms };
        request.completion.complete_then(Err(error), || {
            self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        });
    }

    fn fail_all(&self, source: &TargetError) {
        self.swap();
        let failed: Vec<Request> = lock(&self.inflight).drain(..).collect();
        for request in failed {
            let error = FlushError::Failed { offset: request.next_offset, source: Arc::clone(source) };
            request.completion.complete_then(Err(error), || {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            });
        }
    }

    fn stop_request(&self, request: &Request) {
        request.completion.complete_then(Err(FlushError::Stopped { offset: request.next_offset }), || {
            self.counters.stopped.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Completes requests past their deadline with [`FlushError::Timeout`]
    /// (RocketMQ's `FlushDiskWatcher`). Returns how many timed out.
    pub fn expire(&self) -> usize {
        let now = self.clock.now();
        let before = self.counters.timeouts.load(Ordering::Relaxed);
        {
            // Completed requests at the front are dropped on the way.
            let mut inflight = lock(&self.inflight);
            while inflight.front().is_some_and(|r| now >= r.deadline || r.completion.is_complete()) {
                let request = inflight.pop_front().expect("front exists");
                self.time_out(&request);
            }
        }
        {
            let mut write = lock(&self.write);
            while write.requests.front().is_some_and(|r| now >= r.deadline) {
                let request = write.requests.pop_front().expect("front exists");
                self.time_out(&request);
            }
        }
        (self.counters.timeouts.load(Ordering::Relaxed) - before) as usize
    }

    /// Closes the service: new requests are rejected, pending ones get up to
    /// [`RETRY_TIMES_OVER`] final flushes, and any still pending then complete with
    /// [`FlushError::Stopped`].
    pub fn drain(&self) {
        let _round = lock(&self.round);
        lock(&self.write).closed = true;
        for _ in 0..RETRY_TIMES_OVER {
            self.swap();
            if lock(&self.inflight).is_empty() && self.failure().is_some() {
                break;
            }
            self.flush_swapped();
            if lock(&self.inflight).is_empty() {
                break;
            }
        }
        self.swap();
        for request in lock(&self.inflight).drain(..) {
            self.stop_request(&request);
        }
    }

    /// Answers every request still pending with [`FlushError::Stopped`] and closes
    /// the service. The last resort of shutdown, e.g. after the flusher thread died:
    /// no request is ever left without an answer.
    pub fn abandon(&self) {
        lock(&self.write).closed = true;
        self.swap();
        let left: Vec<Request> = lock(&self.inflight).drain(..).collect();
        for request in left {
            self.stop_request(&request);
        }
    }

    /// True once [`drain`](Self::drain) ran.
    pub fn is_closed(&self) -> bool {
        lock(&self.write).closed
    }

    /// The target's latched failure, if any ([`FlushTarget::failure`]): the one
    /// record of a failed sync, kept by the storage, not copied here.
    pub fn failure(&self) -> Option<TargetError> {
        self.target.failure()
    }

    /// Counters.
    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            flushes: self.counters.flushes.load(Ordering::Relaxed),
            syncing_flushes: self.counters.syncing_flushes.load(Ordering::Relaxed),
            acknowledged: self.counters.acknowledged.load(Ordering::Relaxed),
            timeouts: self.counters.timeouts.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            stopped: self.counters.stopped.load(Ordering::Relaxed),
            spins_lost: self.spin_gate.misses(),
        }
    }
}
