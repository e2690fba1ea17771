//! Where dispatched messages are announced, queue by queue: the dispatched
//! end, the consumers blocked on it, and the futures registered on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Where dispatched messages are announced: the queue's dispatched end, and who
/// waits for it to pass an offset.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<SignalState>,
    arrived: Condvar,
}

#[derive(Debug, Default)]
struct SignalState {
    /// The offset the next dispatched message of the queue gets (its max).
    dispatched: u64,
    /// Set at shutdown: waiters return.
    closed: bool,
    /// Futures waiting, each under its own token (see
    /// [`Arrival`](crate::Arrival), [`Arrivals`](crate::Arrivals)): a future registers once however often it is polled, and
    /// takes its registration back when dropped, so futures that time out on
    /// an idle queue leave nothing behind.
    wakers: Vec<(u64, Waker)>,
    /// [`Signal::publish`] moved the end and [`Signal::wake`] has not run since.
    wake_owed: bool,
    /// Threads blocked in [`Signal::wait_past`].
    blocked: usize,
    /// The tokens of futures waiting, until they take their registration
    /// back (a wake takes their wakers, not their interest).
    interested: Vec<u64>,
}

/// Tokens of futures waiting on signals.
static TOKENS: AtomicU64 = AtomicU64::new(1);

pub(crate) fn new_token() -> u64 {
    TOKENS.fetch_add(1, Ordering::Relaxed)
}

impl Signal {
    /// Announces that the queue's dispatched end is `end`.
    pub(crate) fn arrive(&self, end: u64) {
        self.wake_if(|state| {
            let moved = end > state.dispatched;
            state.dispatched = state.dispatched.max(end);
            moved
        });
    }

    /// Moves the dispatched end to `end` without waking anyone yet: a waiter
    /// that looks now sees it, one already waiting is woken by
    /// [`wake`](Self::wake). True the first time since the last wake (the
    /// caller then owes it one). Dispatch publishes every message of a round
    /// this way and wakes the queues once, at the end of a stretch of
    /// records: a consumer woken per message, on two cores, preempted the
    /// dispatcher in the middle of its round (the 5-18 ms tail at 100,000
    /// messages/s).
    pub(crate) fn publish(&self, end: u64) -> bool {
        let mut state = self.state.lock();
        if end > state.dispatched {
            state.dispatched = end;
        }
        !std::mem::replace(&mut state.wake_owed, true)
    }

    /// Wakes the waiters of what [`publish`](Self::publish) moved.
    pub(crate) fn wake(&self) {
        self.wake_if(|state| {
            state.wake_owed = false;
            true
        });
    }

    /// Wakes every waiter for good.
    pub(crate) fn close(&self) {
        self.wake_if(|state| {
            state.closed = true;
            true
        });
    }

    /// Applies `change` under the lock and, if it says so, wakes every
    /// blocked waiter and registered future (outside the lock).
    fn wake_if(&self, change: impl FnOnce(&mut SignalState) -> bool) {
        let wakers = {
            let mut state = self.state.lock();
            if !change(&mut state) {
                return;
            }
            std::mem::take(&mut state.wakers)
        };
        self.arrived.notify_all();
        wakers.into_iter().for_each(|(_, w)| w.wake());
    }

    /// Blocks until the dispatched end passes `offset`, the signal closes, or
    /// `deadline` (`None`: no deadline); returns whether it passed.
    pub(crate) fn wait_past(&self, offset: u64, deadline: Option<Instant>) -> bool {
        let mut state = self.state.lock();
        state.blocked += 1;
        while state.dispatched <= offset && !state.closed {
            match deadline {
                Some(deadline) => {
                    if self.arrived.wait_until(&mut state, deadline).timed_out() {
                        break;
                    }
                }
                None => self.arrived.wait(&mut state),
            }
        }
        state.blocked -= 1;
        state.dispatched > offset
    }

    /// Whether the signal is closed (the store shut down, or the queue's
    /// topic was deleted).
    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Whether a thread is blocked on the signal or a future waits on it
    /// (woken or not since it last looked): someone waits for the queue's
    /// next message now.
    pub(crate) fn waited_on(&self) -> bool {
        let state = self.state.lock();
        state.blocked > 0 || !state.interested.is_empty()
    }

    /// Polls for the dispatched end passing `offset`: `Some(passed)` when it did
    /// or the signal closed, else `None` with `waker` registered under `token`
    /// (replacing what that token registered before).
    pub(crate) fn poll_past(&self, offset: u64, token: u64, waker: &Waker) -> Option<bool> {
        let mut state = self.state.lock();
        if state.dispatched > offset || state.closed {
            return Some(state.dispatched > offset);
        }
        if !state.interested.contains(&token) {
            state.interested.push(token);
        }
        match state.wakers.iter_mut().find(|(t, _)| *t == token) {
            Some((_, w)) if w.will_wake(waker) => {}
            Some((_, w)) => w.clone_from(waker),
            None => state.wakers.push((token, waker.clone())),
        }
        None
    }

    /// Takes back what `token` registered.
    pub(crate) fn forget(&self, token: u64) {
        let mut state = self.state.lock();
        state.wakers.retain(|(t, _)| *t != token);
        state.interested.retain(|t| *t != token);
    }

    /// Futures registered now.
    pub(crate) fn registered(&self) -> usize {
        self.state.lock().wakers.len()
    }
}
