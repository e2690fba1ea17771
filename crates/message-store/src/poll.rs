//! Long polling (RocketMQ's `PullRequestHoldService`, without its scan): a
//! consumer at the end of a queue waits for the queue's next message, or a
//! consumer of many queues for the next message of any of them. Dispatch
//! wakes the waiters of the queue it appended to, at once; nothing polls, and a
//! message dispatched between a consumer's empty read and its wait is not
//! missed (the wait compares against the queue's dispatched end under the
//! signal's lock: RocketMQ PR #7359's gap does not exist here).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::queues::Queue;
use crate::signal::new_token;
use crate::{MessageStore, StoreError};

/// How a wait for a queue's message ended ([`MessageStore::wait_for`],
/// [`MessageStore::arrival`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waited {
    /// The queue holds a message at the offset waited for: read it.
    Arrived,
    /// The timeout passed first.
    TimedOut,
    /// The store shut down, or the queue's topic was deleted.
    Closed,
}

impl Waited {
    /// True for [`Waited::Arrived`].
    pub fn arrived(self) -> bool {
        self == Waited::Arrived
    }

    fn of(passed: bool, closed: bool) -> Self {
        match (passed, closed) {
            (true, _) => Waited::Arrived,
            (false, true) => Waited::Closed,
            (false, false) => Waited::TimedOut,
        }
    }
}

impl MessageStore {
    /// Blocks until `topic`'s queue holds a message at `offset` or later (its
    /// end passes `offset`), the store shuts down or the topic is deleted, or
    /// `timeout` passes (a timeout too long to add to now, `Duration::MAX`
    /// say, waits without one). A wait started as the store shuts down or
    /// the topic is deleted returns [`Waited::Closed`], or fails as one
    /// started after them does ([`StoreError::Shutdown`],
    /// [`StoreError::UnknownTopic`]).
    pub fn wait_for(&self, topic: &str, queue_id: u32, offset: u64, timeout: Duration) -> Result<Waited, StoreError> {
        let queue = self.watched(topic, queue_id)?;
        let passed = queue.signal.wait_past(offset, Instant::now().checked_add(timeout));
        Ok(Waited::of(passed, queue.signal.is_closed()))
    }

    /// A future that resolves when `topic`'s queue holds a message at `offset`
    /// or later ([`Waited::Arrived`]), or the store shuts down or the topic is
    /// deleted ([`Waited::Closed`]). It has no timer of its own: wrap it in
    /// the runtime's timeout (`tokio::time::timeout`). Made as the store
    /// shuts down or the topic is deleted, it resolves at once, or is not
    /// made, as for [`wait_for`](Self::wait_for).
    pub fn arrival(&self, topic: &str, queue_id: u32, offset: u64) -> Result<Arrival, StoreError> {
        Ok(Arrival { queue: self.watched(topic, queue_id)?, offset, token: new_token() })
    }

    /// Blocks until at least one of `watches` — each `(topic, queue_id,
    /// offset)` — has a message at its offset or later, the store shuts down,
    /// or `timeout` passes (`Duration::MAX`: no timeout). Returns the indexes
    /// (into `watches`, ascending) of every watch that has one: empty after a
    /// timeout or a shutdown. One wait over all of a consumer's queues, as
    /// RocketMQ's broker holds a consumer's pull requests: woken by the first
    /// dispatch to any of them, never by a timer. An empty `watches` returns
    /// at once.
    pub fn wait_for_any(&self, watches: &[(&str, u32, u64)], timeout: Duration) -> Result<Vec<usize>, StoreError> {
        let mut arrivals = self.arrivals(watches)?;
        let deadline = Instant::now().checked_add(timeout);
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(ready) = Pin::new(&mut arrivals).poll(&mut cx) {
                return Ok(ready);
            }
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(Vec::new());
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
    }

    /// A future that resolves when at least one of `watches` — each `(topic,
    /// queue_id, offset)` — has a message at its offset or later: to the
    /// indexes (into `watches`, ascending) of every watch that has one, or to
    /// none when the store shuts down. It has no timer of its own: wrap it in
    /// the runtime's timeout. Dropped, it leaves nothing registered.
    pub fn arrivals(&self, watches: &[(&str, u32, u64)]) -> Result<Arrivals, StoreError> {
        let watched = watches
            .iter()
            .map(|&(topic, queue_id, offset)| Ok((self.watched(topic, queue_id)?, offset)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Arrivals { watched, token: new_token() })
    }

    /// `topic`'s queue in use, its signal at the queue index's end: no file
    /// is touched.
    fn watched(&self, topic: &str, queue_id: u32) -> Result<Arc<Queue>, StoreError> {
        self.check_open()?;
        let queue = self.queue(topic, queue_id)?;
        queue.tailed.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(queue)
    }
}

/// Unparks the thread blocked in [`MessageStore::wait_for_any`] (or a
/// consumer's wait).
pub(crate) struct ThreadWaker(pub(crate) std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The future of [`MessageStore::arrival`].
#[derive(Debug)]
pub struct Arrival {
    queue: Arc<Queue>,
    offset: u64,
    token: u64,
}

impl Arrival {
    /// A wait for `queue`'s dispatched end to pass `offset`.
    pub(crate) fn of(queue: Arc<Queue>, offset: u64) -> Self {
        Arrival { queue, offset, token: new_token() }
    }
}

impl Future for Arrival {
    type Output = Waited;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Waited> {
        match self.queue.signal.poll_past(self.offset, self.token, cx.waker()) {
            Some(passed) => Poll::Ready(Waited::of(passed, true)),
            None => Poll::Pending,
        }
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        self.queue.signal.forget(self.token);
    }
}

/// The future of [`MessageStore::arrivals`].
#[derive(Debug)]
pub struct Arrivals {
    watched: Vec<(Arc<Queue>, u64)>,
    token: u64,
}

impl Future for Arrivals {
    type Output = Vec<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<usize>> {
        let mut ready = Vec::new();
        let mut closed = 0;
        for (i, (queue, offset)) in self.watched.iter().enumerate() {
            // Registered before the next is looked at: a message dispatched to
            // one already looked at wakes this future.
            match queue.signal.poll_past(*offset, self.token, cx.waker()) {
                Some(true) => ready.push(i),
                Some(false) => closed += 1,
                None => {}
            }
        }
        if !ready.is_empty() || closed == self.watched.len() {
            Poll::Ready(ready)
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        for (queue, _) in &self.watched {
            queue.signal.forget(self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::Signal;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Count(AtomicU64);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_future_registers_once_however_often_polled_and_forgets_when_dropped() {
        let signal = Signal::default();
        let count = Arc::new(Count(AtomicU64::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        for _ in 0..5 {
            assert_eq!(signal.poll_past(0, 7, &waker), None);
        }
        assert_eq!(signal.poll_past(0, 8, &waker), None);
        assert_eq!(signal.registered(), 2);
        signal.forget(7);
        assert_eq!(signal.registered(), 1);
        signal.arrive(1);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the one left is woken");
        assert_eq!(signal.registered(), 0);
        assert_eq!(signal.poll_past(0, 8, &waker), Some(true));
    }

    #[test]
    fn a_published_end_is_seen_at_once_and_waiters_are_woken_by_the_wake() {
        let signal = Arc::new(Signal::default());
        let waiter = {
            let signal = Arc::clone(&signal);
            std::thread::spawn(move || signal.wait_past(0, Some(Instant::now() + Duration::from_secs(10))))
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(signal.publish(1), "the first publish owes a wake");
        assert!(!signal.publish(2), "later ones before the wake do not");
        assert!(signal.wait_past(1, Some(Instant::now())), "a waiter that looks sees the published end");
        let count = Arc::new(Count(AtomicU64::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        assert_eq!(signal.poll_past(5, 1, &waker), None);
        signal.wake();
        assert!(waiter.join().unwrap(), "the blocked waiter is woken");
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "and the future");
        assert!(signal.publish(3), "a wake clears what is owed");
    }

    #[test]
    fn futures_that_time_out_leave_nothing_on_an_idle_queue() {
        // Each future a consumer wraps in a timeout is dropped before its
        // message comes; the queue's list of wakers must not grow with them.
        let queue = Arc::new(Queue::new(0));
        let waker = Waker::from(Arc::new(Count(AtomicU64::new(0))));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..100 {
            let mut one = Arrival { queue: Arc::clone(&queue), offset: 0, token: new_token() };
            assert!(Pin::new(&mut one).poll(&mut cx).is_pending());
            let other = Arc::new(Queue::new(1));
            let mut set = Arrivals { watched: vec![(Arc::clone(&queue), 0), (other, 3)], token: new_token() };
            assert!(Pin::new(&mut set).poll(&mut cx).is_pending());
            assert_eq!(queue.signal.registered(), 2);
        }
        assert_eq!(queue.signal.registered(), 0);
    }
}
