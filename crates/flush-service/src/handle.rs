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
        let waker = {
            let mut state = lock(&self.state);
            if state.result.is_some() {
                return false;
            }
            won();
            state.result = Some(result);
            self.done.store(true, Ordering::Release);
            state.waker.take()
        };
        self.cond.notify_all();
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
/// holds a lock that producers or the flusher need, and the waiting thread never
/// runs a flush itself, so a slow sync cannot hold it past its own bound:
/// [`wait_timeout`](Self::wait_timeout) returns by its timeout, and
/// [`wait`](Self::wait) by the request's deadline (plus the watcher's tick).
#[derive(Debug)]
pub struct DurabilityHandle {
    inner: Inner,
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
        DurabilityHandle { inner: Inner::Ready(result) }
    }

    pub(crate) fn pending(completion: Arc<Completion>) -> Self {
        DurabilityHandle { inner: Inner::Pending(completion) }
    }

    /// True once the result is known.
    pub fn is_done(&self) -> bool {
        match &self.inner {
            Inner::Ready(_) => true,
            Inner::Pending(c) => c.is_complete(),
        }
    }

    /// The result, if known, without waiting.
    pub fn try_result(&self) -> Option<FlushResult> {
        match &self.inner {
            Inner::Ready(r) => Some(r.clone()),
            Inner::Pending(c) => lock(&c.state).result.clone(),
        }
    }

    /// Blocks until the request completes: durable, failed, stopped, or timed out
    /// at its deadline (`sync_flush_timeout_ms` after it was submitted). Takes
    /// the handle by reference: the result it returns stays the handle's answer
    /// (waiting again, or polling it, gives the same), and a struct holding the
    /// handle (a put's result) stays whole.
    pub fn wait(&self) -> FlushResult {
        match &self.inner {
            Inner::Ready(r) => r.clone(),
            Inner::Pending(c) => {
                c.spin_for_result(Duration::MAX);
                let mut state = lock(&c.state);
                loop {
                    if let Some(result) = state.result.clone() {
                        return result;
                    }
                    state = wait_timeout(&c.cond, state, WAIT_SLICE);
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
                    state = wait_timeout(&c.cond, state, slice);
                }
            }
        }
    }
}

impl Future for DurabilityHandle {
    type Output = FlushResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<FlushResult> {
        match &mut self.get_mut().inner {
            Inner::Ready(r) => Poll::Ready(r.clone()),
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
        }
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
