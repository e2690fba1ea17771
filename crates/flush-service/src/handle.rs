//! The handle a producer gets for a durability request: block on it, with or
//! without a timeout, or `.await` it on any async runtime.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::sync::{lock, wait_timeout, Arc, Condvar, Mutex};
use crate::FlushError;

/// The result of a durability request.
pub type FlushResult = Result<(), FlushError>;

/// What a waiter can do to get its request completed sooner.
pub(crate) trait Helper: Send + Sync {
    /// Run by a blocked waiter before it sleeps: do the work that completes
    /// requests (a group-commit round) on the waiter's own thread, sparing two
    /// thread hand-offs. Returns true if it ran; false if someone else is running it.
    fn lead(&self) -> bool;
    /// Run by a waiter that cannot lead (an async task): wake the service thread.
    fn wake(&self);
}

pub(crate) type SharedHelper = Arc<dyn Helper>;

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
}

impl Completion {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Completes the request; returns false if it was already complete.
    pub(crate) fn complete(&self, result: FlushResult) -> bool {
        let waker = {
            let mut state = lock(&self.state);
            if state.result.is_some() {
                return false;
            }
            state.result = Some(result);
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
/// holds a lock that producers or the flusher need.
#[derive(Debug)]
pub struct DurabilityHandle {
    inner: Inner,
}

enum Inner {
    Ready(Option<FlushResult>),
    Pending(Arc<Completion>, Option<SharedHelper>),
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inner::Ready(r) => f.debug_tuple("Ready").field(r).finish(),
            Inner::Pending(c, h) => {
                f.debug_struct("Pending").field("completion", c).field("helper", &h.is_some()).finish()
            }
        }
    }
}

impl DurabilityHandle {
    /// A handle that is already resolved (async flush, or an immediate rejection).
    pub fn resolved(result: FlushResult) -> Self {
        DurabilityHandle { inner: Inner::Ready(Some(result)) }
    }

    pub(crate) fn pending(completion: Arc<Completion>) -> Self {
        DurabilityHandle { inner: Inner::Pending(completion, None) }
    }

    /// A pending handle whose blocking waits first try `helper`.
    pub(crate) fn pending_with_helper(completion: Arc<Completion>, helper: SharedHelper) -> Self {
        DurabilityHandle { inner: Inner::Pending(completion, Some(helper)) }
    }

    /// Adds a helper to a pending handle.
    pub(crate) fn with_helper(self, helper: SharedHelper) -> Self {
        match self.inner {
            Inner::Pending(c, _) => Self::pending_with_helper(c, helper),
            ready => DurabilityHandle { inner: ready },
        }
    }

    /// True once the result is known.
    pub fn is_done(&self) -> bool {
        match &self.inner {
            Inner::Ready(_) => true,
            Inner::Pending(c, _) => c.is_complete(),
        }
    }

    /// The result, if known, without waiting.
    pub fn try_result(&self) -> Option<FlushResult> {
        match &self.inner {
            Inner::Ready(r) => r.clone(),
            Inner::Pending(c, _) => lock(&c.state).result.clone(),
        }
    }

    /// Blocks until the request completes. Under group commit the waiting thread
    /// may itself run the flush round that completes it (no thread hand-off).
    pub fn wait(self) -> FlushResult {
        match self.inner {
            Inner::Ready(r) => r.expect("a ready handle holds its result until consumed"),
            Inner::Pending(c, helper) => loop {
                if let Some(result) = lock(&c.state).result.clone() {
                    return result;
                }
                if let Some(help) = &helper {
                    help.lead();
                }
                let state = lock(&c.state);
                if let Some(result) = state.result.clone() {
                    return result;
                }
                // Someone else is flushing (it, or the service thread, completes us),
                // or our round could not cover us yet: wait a little, never spin.
                drop(wait_timeout(&c.cond, state, Duration::from_millis(1)));
            },
        }
    }

    /// Blocks for at most `timeout`; `None` if the request is still pending (it
    /// stays pending: this is a bound on waiting, not a deadline for the flush).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<FlushResult> {
        match &self.inner {
            Inner::Ready(r) => r.clone(),
            Inner::Pending(c, helper) => {
                if let Some(help) = helper {
                    help.lead();
                }
                let deadline = std::time::Instant::now() + timeout;
                let mut state = lock(&c.state);
                loop {
                    if let Some(result) = state.result.clone() {
                        return Some(result);
                    }
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    state = wait_timeout(&c.cond, state, deadline - now);
                }
            }
        }
    }
}

impl Future for DurabilityHandle {
    type Output = FlushResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<FlushResult> {
        match &mut self.get_mut().inner {
            Inner::Ready(r) => Poll::Ready(r.take().expect("DurabilityHandle polled after completion")),
            Inner::Pending(c, helper) => {
                let mut state = lock(&c.state);
                match state.result.clone() {
                    Some(result) => Poll::Ready(result),
                    None => {
                        state.waker = Some(cx.waker().clone());
                        drop(state);
                        // A task must not block its executor by leading a round.
                        if let Some(help) = helper {
                            help.wake();
                        }
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
    fn wait_timeout_bounds_the_wait_only() {
        let c = Completion::new();
        let handle = DurabilityHandle::pending(Arc::clone(&c));
        assert!(handle.wait_timeout(Duration::from_millis(1)).is_none());
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
