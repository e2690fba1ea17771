//! RocketMQ's `ServiceThread`: a named background thread with a wake-up that is
//! never lost, an interruptible wait, and a bounded join.
//!
//! Protocol (checked by the loom model `loom_wakeup_is_never_lost`): `wakeup` sets `notified` and
//! then notifies *under the mutex*; `wait_for_running` clears `notified` or, finding it clear,
//! re-checks it under the mutex before sleeping. A wake-up that lands between the check and the
//! sleep therefore blocks on the mutex until the waiter sleeps, and its notification reaches it. An
//! idle service sleeps on the condition variable, never spins
//! ([ROCKETMQ-33](https://issues.apache.org/jira/browse/ROCKETMQ-33)).

use std::time::Duration;

use crate::sync::{fence, lock, wait_timeout, Arc, AtomicBool, Condvar, Mutex, Ordering};

/// State shared between a service thread and its handle.
#[derive(Debug, Default)]
pub struct ServiceState {
    notified: AtomicBool,
    /// The service naps between busy rounds ([`nap`](ServiceState::nap)):
    /// [`wakeup_unless_napping`](ServiceState::wakeup_unless_napping) leaves
    /// it to wake by itself.
    napping: AtomicBool,
    stopped: AtomicBool,
    finished: Mutex<bool>,
    /// True while the service sleeps in [`wait_for_running`](Self::wait_for_running):
    /// a wake-up of a busy service then makes no `futex` call.
    mutex: Mutex<bool>,
    cond: Condvar,
}

impl ServiceState {
    /// A fresh, running, un-notified state.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Wakes the service if it waits; if it is busy, its next wait returns at once.
    pub fn wakeup(&self) {
        // AcqRel: the waiter that clears the flag sees everything done before this.
        if !self.notified.swap(true, Ordering::AcqRel) {
            // Under the mutex: a service not asleep yet re-checks `notified`
            // under it before it sleeps, and one asleep said so under it.
            let asleep = lock(&self.mutex);
            if *asleep {
                self.cond.notify_all();
            }
        }
    }

    /// [`wakeup`](Self::wakeup), unless the service naps
    /// ([`nap`](Self::nap)): it then wakes by itself within its nap and
    /// finds the work, so a producer whose work a busy service takes in its
    /// next round pays no wake-up (a lock, a `futex` call and, if it slept,
    /// the service's trip through the scheduler) per call.
    ///
    /// Nothing is lost: the caller's work, done before this call, is seen
    /// either by the service's next look for work after
    /// [`end_nap`](Self::end_nap), or here, as a service no longer napping,
    /// which is then woken (Dekker's pattern: a `SeqCst` fence on each side
    /// between the write and the read of the other side's flag; the loom
    /// model `loom_a_napping_service_misses_no_work`).
    pub fn wakeup_unless_napping(&self) {
        fence(Ordering::SeqCst);
        if !self.napping.load(Ordering::SeqCst) {
            self.wakeup();
        }
    }

    /// Marks the service napping (see [`nap`](Self::nap)) without waiting.
    pub fn begin_nap(&self) {
        self.napping.store(true, Ordering::SeqCst);
    }

    /// Naps for at most `nap` between two busy rounds: callers of
    /// [`wakeup_unless_napping`](Self::wakeup_unless_napping) do not wake the
    /// service meanwhile ([`wakeup`](Self::wakeup) and [`stop`](Self::stop)
    /// still do). The service must call [`end_nap`](Self::end_nap) before it
    /// waits for longer than a nap.
    pub fn nap(&self, nap: Duration) {
        self.begin_nap();
        self.wait_for_running(nap, || {});
    }

    /// Ends naps: from here on
    /// [`wakeup_unless_napping`](Self::wakeup_unless_napping) wakes the
    /// service. Returns true if it napped: it must then look for work once
    /// more before a longer wait, since work that came during the nap did not
    /// wake it.
    pub fn end_nap(&self) -> bool {
        let napped = self.napping.swap(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        napped
    }

    /// Whether the service sleeps in [`wait_for_running`](Self::wait_for_running)
    /// (or [`nap`](Self::nap)) now: a test's way to know a wake-up it makes
    /// next is the only thing that can wake it early.
    pub fn is_asleep(&self) -> bool {
        *lock(&self.mutex)
    }

    /// Whether the service naps ([`begin_nap`](Self::begin_nap) until
    /// [`end_nap`](Self::end_nap)): callers of
    /// [`wakeup_unless_napping`](Self::wakeup_unless_napping) leave it asleep.
    pub fn is_napping(&self) -> bool {
        self.napping.load(Ordering::SeqCst)
    }

    /// Asks the service to stop and wakes it.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _guard = lock(&self.mutex);
        self.notified.store(true, Ordering::Release);
        self.cond.notify_all();
    }

    /// True once [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// RocketMQ's `waitForRunning`: returns at once if woken since the last wait,
    /// else sleeps until woken, stopped, or `interval` passes; then runs
    /// `on_wait_end` (where group commit swaps its request lists).
    pub fn wait_for_running(&self, interval: Duration, on_wait_end: impl FnOnce()) {
        if !self.notified.swap(false, Ordering::AcqRel) {
            let mut asleep = lock(&self.mutex);
            // Re-check under the mutex: a `wakeup` after our swap cannot look
            // until we sleep (it needs the mutex), and then finds us asleep, so
            // it is not lost.
            if !self.notified.load(Ordering::Acquire) && !self.is_stopped() {
                *asleep = true;
                asleep = wait_timeout(&self.cond, asleep, interval);
                *asleep = false;
            }
            drop(asleep);
            self.notified.store(false, Ordering::Release);
        }
        on_wait_end();
    }

    /// [`wait_for_running`](Self::wait_for_running), but first polls the
    /// wake-up flag for up to `spin` (zero: not at all): a service expecting its
    /// next request within microseconds takes it without being put to sleep and
    /// woken, which on a virtual machine costs tens of microseconds. The waker's
    /// side is unchanged, so nothing is lost either way. Returns true if the
    /// spin won: the wake-up (or stop) came within it, and the thread kept its
    /// CPU while it spun (false without a spin).
    pub fn wait_for_running_spinning(&self, spin: Duration, interval: Duration, on_wait_end: impl FnOnce()) -> bool {
        #[cfg(not(loom))]
        let won = !spin.is_zero()
            && crate::spin::spin_until(spin, || self.notified.load(Ordering::Acquire) || self.is_stopped());
        #[cfg(loom)]
        let won = {
            let _ = spin;
            false
        };
        self.wait_for_running(interval, on_wait_end);
        won
    }

    /// Sleeps `interval` regardless of wake-ups, returning early only on stop
    /// (the timed mode of the async flush, RocketMQ's `Thread.sleep`).
    pub fn sleep(&self, interval: Duration) {
        let deadline = std::time::Instant::now() + interval;
        let mut guard = lock(&self.mutex);
        while !self.is_stopped() {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            guard = wait_timeout(&self.cond, guard, deadline - now);
        }
    }

    fn mark_finished(&self) {
        *lock(&self.finished) = true;
        let _guard = lock(&self.mutex);
        self.cond.notify_all();
    }

    fn wait_finished(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if *lock(&self.finished) {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            let guard = lock(&self.mutex);
            if *lock(&self.finished) {
                return true;
            }
            drop(wait_timeout(&self.cond, guard, (deadline - now).min(Duration::from_millis(50))));
        }
    }
}

/// A running service thread.
#[derive(Debug)]
pub struct ServiceThread {
    name: String,
    state: Arc<ServiceState>,
    handle: Option<crate::sync::thread::JoinHandle<()>>,
}

impl ServiceThread {
    /// Spawns `name` running `body`, which should loop until
    /// [`ServiceState::is_stopped`] and then drain.
    pub fn spawn(
        name: &str,
        state: Arc<ServiceState>,
        body: impl FnOnce(&ServiceState) + Send + 'static,
    ) -> std::io::Result<Self> {
        let thread_state = Arc::clone(&state);
        let run = move || {
            // Marks the thread finished even if `body` panics, so shutdown never
            // waits out its whole join bound for a thread that is already gone.
            struct Finished(Arc<ServiceState>);
            impl Drop for Finished {
                fn drop(&mut self) {
                    self.0.mark_finished();
                }
            }
            let finished = Finished(thread_state);
            body(&finished.0);
        };
        #[cfg(not(loom))]
        let handle = std::thread::Builder::new().name(name.to_string()).spawn(run)?;
        #[cfg(loom)]
        let handle = loom::thread::spawn(run);
        Ok(ServiceThread { name: name.to_string(), state, handle: Some(handle) })
    }

    /// A service that runs `work` every `interval` until stopped (sleeping through
    /// wake-ups). Stopping ends the sleep at once and `work` does not run after
    /// it: a run during shutdown (a deletion, a file write) could race the final
    /// steps the owner takes after joining.
    pub fn spawn_every(
        name: &str,
        interval: Duration,
        mut work: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::spawn(name, ServiceState::new(), move |s| loop {
            s.sleep(interval);
            if s.is_stopped() {
                return;
            }
            work();
        })
    }

    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The shared state (for `wakeup`).
    pub fn state(&self) -> &Arc<ServiceState> {
        &self.state
    }

    /// Stops the thread and joins it, waiting at most `join_timeout` (RocketMQ's
    /// `getJoinTime`). Returns false if the thread did not finish in time; it is
    /// then left detached and logged.
    pub fn shutdown(&mut self, join_timeout: Duration) -> bool {
        self.state.stop();
        let Some(handle) = self.handle.take() else {
            return true;
        };
        if cfg!(loom) || self.state.wait_finished(join_timeout) {
            let _ = handle.join();
            true
        } else {
            tracing::error!(service = %self.name, ?join_timeout, "service thread did not stop in time; detaching");
            false
        }
    }
}

impl Drop for ServiceThread {
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.shutdown(Duration::from_secs(90));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_wakeup_before_the_wait_is_not_lost() {
        let state = ServiceState::new();
        state.wakeup();
        let started = std::time::Instant::now();
        let mut ran = false;
        state.wait_for_running(Duration::from_secs(3600), || ran = true);
        assert!(ran, "on_wait_end runs");
        assert!(started.elapsed() < Duration::from_secs(60), "returned without waiting the interval");
    }

    #[test]
    fn a_wakeup_during_the_wait_ends_it_and_stop_ends_the_thread() {
        let state = ServiceState::new();
        let rounds = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&rounds);
        let mut thread = ServiceThread::spawn("test-service", Arc::clone(&state), move |s| {
            while !s.is_stopped() {
                s.wait_for_running(Duration::from_secs(3600), || {
                    counter.fetch_add(1, Ordering::SeqCst);
                });
            }
        })
        .unwrap();
        assert_eq!(thread.name(), "test-service");
        // Each wake-up must end a one-hour wait; the test would hang otherwise.
        for i in 1..=3 {
            while rounds.load(Ordering::SeqCst) < i {
                state.wakeup();
                std::thread::yield_now();
            }
        }
        assert!(thread.shutdown(Duration::from_secs(60)));
        assert!(state.is_stopped());
    }

    #[test]
    fn sleep_ignores_wakeups_but_not_stop() {
        let state = ServiceState::new();
        let stopper = Arc::clone(&state);
        let t = std::thread::spawn(move || stopper.stop());
        state.sleep(Duration::from_secs(3600));
        t.join().unwrap();
        assert!(state.is_stopped());
    }

    #[test]
    fn a_panicking_service_is_joined_at_once() {
        let state = ServiceState::new();
        let mut thread = ServiceThread::spawn("panics", Arc::clone(&state), |_| panic!("planted")).unwrap();
        let started = std::time::Instant::now();
        assert!(thread.shutdown(Duration::from_secs(600)));
        assert!(started.elapsed() < Duration::from_secs(300), "did not wait out the join bound");
    }

    #[test]
    fn a_periodic_service_runs_on_its_interval_and_never_after_stop() {
        use std::sync::atomic::AtomicUsize;
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&runs);
        let mut hourly = ServiceThread::spawn_every("hourly", Duration::from_secs(3600), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        assert!(hourly.shutdown(Duration::from_secs(10)));
        assert_eq!(runs.load(Ordering::SeqCst), 0, "stopping ended the sleep, and nothing ran after it");
        let counter = Arc::clone(&runs);
        let mut frequent = ServiceThread::spawn_every("frequent", Duration::from_millis(1), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while runs.load(Ordering::SeqCst) < 3 {
            assert!(std::time::Instant::now() < deadline, "never ran");
            std::thread::yield_now();
        }
        assert!(frequent.shutdown(Duration::from_secs(10)));
    }

    #[test]
    fn join_is_bounded() {
        let state = ServiceState::new();
        let release = Arc::new(std::sync::Barrier::new(2));
        let inner = Arc::clone(&release);
        let mut thread = ServiceThread::spawn("stuck", Arc::clone(&state), move |_| {
            inner.wait();
        })
        .unwrap();
        assert!(!thread.shutdown(Duration::from_millis(20)), "a stuck thread is reported, not waited on forever");
        release.wait();
    }
}
