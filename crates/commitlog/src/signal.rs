//! What wakes the tails (`CommitLog::tail`): a
//! signal the log bumps at every append, flush and shutdown, which blocked and
//! async tails wait on.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Waker;

use parking_lot::{Condvar, Mutex};

/// What wakes tails: every append (once written), every flush, and shutdown.
/// Appends pay one atomic load while no tail waits.
#[derive(Debug, Default)]
pub(crate) struct TailSignal {
    /// Tails waiting (blocked or with a registered waker).
    pub(crate) interest: AtomicUsize,
    pub(crate) state: Mutex<SignalState>,
    pub(crate) cond: Condvar,
    pub(crate) closed: AtomicBool,
}

/// What a [`TailSignal`] guards: its sequence number and the wakers of async tails.
#[derive(Debug, Default)]
pub(crate) struct SignalState {
    /// Bumped at every signal: a waiter that saw one value waits for another.
    pub(crate) seq: u64,
    pub(crate) wakers: Vec<Waker>,
}

impl TailSignal {
    /// Something changed (data written or made durable, or the log closed).
    pub(crate) fn bump(&self) {
        // Pairs with the waiter's SeqCst increment before it looks for data: a
        // waiter that found nothing is counted before this load.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.interest.load(Ordering::SeqCst) > 0 {
            self.wake_all();
        }
    }

    /// Wakes every waiting tail, whether or not any is counted.
    fn wake_all(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.seq = state.seq.wrapping_add(1);
            let wakers = std::mem::take(&mut state.wakers);
            self.interest.fetch_sub(wakers.len(), Ordering::SeqCst);
            wakers
        };
        self.cond.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }

    /// The log shut down: every tail ends.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.wake_all();
    }
}
