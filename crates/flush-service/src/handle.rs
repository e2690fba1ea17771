//! The handle a producer gets for a durability request: block on it, with or
//! without a timeout, or `.await` it on any async runtime.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::spin::SpinGate;
use crate::sync::{lock, wait_timeout, Arc, AtomicBool, Condvar, Mutex, Ordering};
use crate::FlushError;

/// The result of a durability request.
pub type FlushResult = Result<(), FlushError>;

#[derive(Debug, Default)]
struct State {
    result: Option<FlushResult>,
    waker: Option<Waker>,
    /// Threads asleep on the condition variable: a completion with none (the
    /// waiter spun, or ran the round itself) makes no `futex` call.
    sleepers: usize,
}

/// The completing side of a request. The first completion wins; later ones
/// (e.g. a flush finishing after the deadline watcher timed the request out) are
/// ignored, so the handle's answer never changes.
#[derive(Debug, Default)]
pub(crate) struct Completion {
    state: Mutex<State>,
    cond: Condvar,
    /// Set with the result: what a spinning waiter watches.
    done: AtomicBool,
    /// How long a blocking waiter spins on `done` before it sleeps.
    spin: Duration,
    /// Told how a full spin ended.
    gate: Option<Arc<SpinGate>>,
}

impl Completion {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A completion whose blocking waiter spins up to `spin` before it sleeps:
    /// for a request expected to complete within microseconds.
    /// `gate` learns whether each full spin caught its answer.
    pub(crate) fn with_spin(spin: Duration, gate: Arc<SpinGate>) -> Arc<Self> {
        Arc::new(Completion { spin, gate: Some(gate), ..Self::default() })
    }

    /// Spins up to `within` (at most the completion's own spin) for the result.
    fn spin_for_result(&self, within: Duration) {
        let within = within.min(self.spin);
        if within.is_zero() {
            return;
        }
        let won = crate::spin::spin_until(within, || self.done.load(Ordering::Acquire));
        // A spin cut short by its caller's own bound says nothing of the service.
        if let Some(gate) = self.gate.as_ref().filter(|_| within == self.spin) {
            gate.record(won);
        }
    }

    /// Completes the request; returns false if it was already complete.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn complete(&self, result: FlushResult) -> bool {
        self.complete_then(result, || {})
    }

    /// Completes the request, running `won` (a counter's increment) before any
    /// waiter can see the result: a caller woken by this completion reads
    /// counters that include it. Returns false, without running `won`, if the
    /// request was already complete.
    pub(crate) fn complete_then(&self, result: FlushResult, won: impl FnOnce()) -> bool {
        let (waker, sleepers) = {
            let mut state = lock(&self.state);
            if state.result.is_some() {
                return false;
            }
            won();
            state.result = Some(result);
            self.done.store(true, Ordering::Release);
            (state.waker.take(), state.sleepers)
        };
        // A waiter counts itself asleep under the lock, after it found no
        // result there: one not counted yet will see the result.
        if sleepers > 0 {
            self.cond.notify_all();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    pub(crate) fn is_complete(&self) -> bool {
        lock(&self.state).result.is_some()
    }
}

/// A pending or finished durability request.
///
/// A sync-flush request always completes: with `Ok` once its bytes are durable,
/// [`FlushError::Timeout`] at its deadline, [`FlushError::Failed`] on a storage
/// error, or [`FlushError::Stopped`] if the service stops first. Waiting never
/// holds a lock that producers or the flusher need.
///
/// [`wait`](Self::wait) on a request of [`SyncFlush`](crate::SyncFlush) may
/// run the group-commit round itself, in the waiting thread, when no round
/// runs and the gather policy would sync at once
/// ([`GroupCommit::try_run_round`](crate::GroupCommit::try_run_round)): a
/// lone producer's sync then starts without a hand-off to the service thread
/// and ends without a wake-up back. It never waits inside a round another
/// thread runs, so it returns by the request's deadline (plus the watcher's
/// tick), or, when it ran the sync itself and the disk stalled, when that
/// sync returns (answered [`FlushError::Timeout`] if the deadline passed).
/// [`wait_timeout`](Self::wait_timeout) and `.await` never run a round:
/// `wait_timeout` returns by its timeout however long a sync takes. The
/// flushed-offset callbacks of a round run in the thread that runs it.
#[derive(Debug)]
pub struct DurabilityHandle {
    inner: Inner,
    /// Who runs the request's round, for a request of a sync-flush service.
    rounds: Option<Rounds>,
}

/// Who runs a sync-flush request's round: the waiter itself
/// ([`GroupCommit::try_run_round`](crate::GroupCommit::try_run_round)) or the
/// service thread, woken by the handle the first time it is waited on,
/// polled or dropped while pending (a lone producer's own round needs no
/// service at all).
/// Held weakly: a handle kept after its log is gone keeps nothing of it alive.
#[derive(Debug)]
struct Rounds {
    core: std::sync::Weak<crate::GroupCommit>,
    service: std::sync::Weak<crate::ServiceState>,
    /// Set once the service was woken for this request.
    woken: AtomicBool,
}

#[derive(Debug)]
enum Inner {
    Ready(FlushResult),
    Pending(Arc<Completion>),
}

/// How long a blocking wait sleeps before it looks again. Every request is
/// completed by someone (the flusher, the deadline watcher, or shutdown), so this
/// only bounds each sleep; it is not a polling interval.
const WAIT_SLICE: Duration = Duration::from_millis(100);

impl DurabilityHandle {
    /// A handle that is already resolved (async flush, or an immediate rejection).
    pub fn resolved(result: FlushResult) -> Self {
        DurabilityHandle { inner: Inner::Ready(result), rounds: None }
    }

    pub(crate) fn pending(completion: Arc<Completion>) -> Self {
        DurabilityHandle { inner: Inner::Pending(completion), rounds: None }
    }

    /// This handle, whose [`wait`](Self::wait) may run `core`'s round in the
    /// waiting thread ([`GroupCommit::try_run_round`](crate::GroupCommit::try_run_round)),
    /// and which wakes `service` (the thread running `core`'s other rounds)
    /// the first time it is waited on without running one, polled, asked
    /// for its result, or dropped, while pending.
    pub(crate) fn with_rounds(mut self, core: &Arc<crate::GroupCommit>, service: &Arc<crate::ServiceState>) -> Self {
        if matches!(self.inner, Inner::Pending(_)) {
            self.rounds = Some(Rounds {
                core: Arc::downgrade(core),
                service: Arc::downgrade(service),
                woken: AtomicBool::new(false),
            });
        }
        self
    }

    /// Wakes the service for this request if it is pending and the service
    /// was not woken for it yet: someone now waits for its answer (or no one
    /// ever will, and its bytes must still become durable).
    fn wake_service(&self) {
        if let (Some(rounds), Inner::Pending(c)) = (&self.rounds, &self.inner) {
            if !c.done.load(Ordering::Acquire) && !rounds.woken.swap(true, Ordering::AcqRel) {
                if let Some(service) = rounds.service.upgrade() {
                    service.wakeup();
                }
            }
        }
    }

    /// True once the result is known.
    pub fn is_done(&self) -> bool {
        self.wake_service();
        match &self.inner {
            Inner::Ready(_) => true,
            Inner::Pending(c) => c.is_complete(),
        }
    }

    /// The result, if known, without waiting.
    pub fn try_result(&self) -> Option<FlushResult> {
        self.wake_service();
        match &self.inner {
            Inner::Ready(r) => Some(r.clone()),
            Inner::Pending(c) => lock(&c.state).result.clone(),
        }
    }

    /// Blocks until the request completes: durable, failed, stopped, or timed out
    /// at its deadline (`sync_flush_timeout_ms` after it was submitted). Takes
    /// the handle by reference: the result it returns stays the handle's answer
    /// (waiting again, or polling it, gives the same), and a struct holding the
    /// handle (a put's result) stays whole. May run the round in this thread
    /// (see the [type's documentation](Self)).
    pub fn wait(&self) -> FlushResult {
        match &self.inner {
            Inner::Ready(r) => r.clone(),
            Inner::Pending(c) => {
                // One round at most; if none ran here, or it did not answer the
                // request (its bytes were cut by a truncation), the service's.
                if let Some(core) = self.rounds.as_ref().and_then(|rounds| rounds.core.upgrade()) {
                    if !c.done.load(Ordering::Acquire) {
                        core.try_run_round_unless(|| c.done.load(Ordering::Acquire));
                    }
                }
                self.wake_service();
                c.spin_for_result(Duration::MAX);
                let mut state = lock(&c.state);
                loop {
                    if let Some(result) = state.result.clone() {
                        return result;
                    }
                    state.sleepers = state.sleepers.saturating_add(1);
                    state = wait_timeout(&c.cond, state, WAIT_SLICE);
                    state.sleepers = state.sleepers.saturating_sub(1);
                }
            }
        }
    }

    /// Blocks for at most `timeout`; `None` if the request is still pending (it
    /// stays pending: this is a bound on waiting, not a deadline for the flush).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<FlushResult> {
        match &self.inner {
            Inner::Ready(r) => Some(r.clone()),
            Inner::Pending(c) => {
                self.wake_service();
                // A timeout too large for an `Instant` means no bound at all.
                let deadline = std::time::Instant::now().checked_add(timeout);
                c.spin_for_result(timeout);
                let mut state = lock(&c.state);
                loop {
                    if let Some(result) = state.result.clone() {
                        return Some(result);
                    }
                    let now = std::time::Instant::now();
                    let slice = match deadline {
                        Some(deadline) if now >= deadline => return None,
                        Some(deadline) => deadline - now,
                        None => WAIT_SLICE,
                    };
                    state.sleepers = state.sleepers.saturating_add(1);
                    state = wait_timeout(&c.cond, state, slice);
                    state.sleepers = state.sleepers.saturating_sub(1);
                }
            }
        }
    }
}

impl Future for DurabilityHandle {
    type Output = FlushResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<FlushResult> {
        let this = self.get_mut();
        let poll = match &this.inner {
            Inner::Ready(r) => return Poll::Ready(r.clone()),
            Inner::Pending(c) => {
                let mut state = lock(&c.state);
                match state.result.clone() {
                    Some(result) => Poll::Ready(result),
                    None => {
                        state.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        };
        if poll.is_pending() {
            this.wake_service();
        }
        poll
    }
}

impl Drop for DurabilityHandle {
    /// A pending request no one waits for still becomes durable: the service
    /// is woken for it, unless it was already.
    fn drop(&mut self) {
        self.wake_service();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn first_completion_wins() {
        let c = Completion::new();
        let handle = DurabilityHandle::pending(Arc::clone(&c));
        assert!(!handle.is_done());
        assert!(c.complete(Err(FlushError::Timeout { offset: 1, timeout_ms: 5 })));
        assert!(!c.complete(Ok(())), "a late success does not overwrite the timeout");
        assert!(matches!(handle.wait(), Err(FlushError::Timeout { offset: 1, .. })));
    }

    #[test]
    fn waiting_borrows_the_handle_and_its_answer_stays() {
        struct Put {
            offset: u64,
            durability: DurabilityHandle,
        }
        let c = Completion::new();
        let put = Put { offset: 7, durability: DurabilityHandle::pending(Arc::clone(&c)) };
        c.complete(Err(FlushError::Timeout { offset: 7, timeout_ms: 5 }));
        assert!(matches!(put.durability.wait(), Err(FlushError::Timeout { offset: 7, .. })));
        assert!(matches!(put.durability.wait(), Err(FlushError::Timeout { .. })), "the same answer again");
        assert_eq!(put.offset, 7, "the holder is still whole");
        let ready = DurabilityHandle::resolved(Ok(()));
        assert!(ready.wait().is_ok() && ready.wait().is_ok() && matches!(ready.try_result(), Some(Ok(()))));
    }

    #[test]
    fn wait_timeout_bounds_the_wait_only() {
        let c = Completion::new();
        let handle = DurabilityHandle::pending(Arc::clone(&c));
        assert!(handle.wait_timeout(Duration::from_millis(1)).is_none());
        let other = Arc::clone(&c);
        let completer = std::thread::spawn(move || other.complete(Ok(())));
        assert!(matches!(handle.wait_timeout(Duration::MAX), Some(Ok(()))), "an unbounded wait, no overflow");
        completer.join().unwrap();
        let c = Completion::new();
        let handle = DurabilityHandle::pending(Arc::clone(&c));
        c.complete(Ok(()));
        assert!(matches!(handle.wait_timeout(Duration::from_millis(1)), Some(Ok(()))));
    }

    #[test]
    fn the_handle_is_a_future_woken_on_completion() {
        let c = Completion::new();
        let mut handle = DurabilityHandle::pending(Arc::clone(&c));
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(std::sync::Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut handle).poll(&mut cx).is_pending());
        c.complete(Ok(()));
        assert!(flag.0.load(Ordering::SeqCst), "waker called");
        assert!(matches!(Pin::new(&mut handle).poll(&mut cx), Poll::Ready(Ok(()))));
        let mut ready = DurabilityHandle::resolved(Ok(()));
        assert!(matches!(Pin::new(&mut ready).poll(&mut cx), Poll::Ready(Ok(()))));
    }

    #[test]
    fn a_blocked_waiter_is_released_by_another_thread() {
        let c = Completion::new();
        let handle = DurabilityHandle::pending(Arc::clone(&c));
        let t = std::thread::spawn(move || handle.wait());
        c.complete(Ok(()));
        assert!(t.join().unwrap().is_ok());
    }
}
