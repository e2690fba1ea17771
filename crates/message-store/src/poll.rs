//! Long polling (RocketMQ's `PullRequestHoldService`, without its scan): a
//! consumer at the end of a queue waits for the queue's next message. Dispatch
//! wakes the waiters of the queue it appended to, at once; nothing polls, and a
//! message dispatched between a consumer's empty read and its wait is not
//! missed (the wait compares against the queue's dispatched end under the
//! signal's lock: RocketMQ PR #7359's gap does not exist here).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::queues::Queue;
use crate::{MessageStore, StoreError};

impl MessageStore {
    /// Blocks until `topic`'s queue holds a message at `offset` or later (its
    /// end passes `offset`), the store shuts down, or `timeout` passes (a
    /// timeout too long to add to now, `Duration::MAX` say, waits without
    /// one). Returns whether a message is there to read.
    pub fn wait_for(&self, topic: &str, queue_id: u32, offset: u64, timeout: Duration) -> Result<bool, StoreError> {
        let queue = self.queue(topic, queue_id)?;
        self.consume_queue_of(topic, queue_id)?; // opened: its end is announced
        Ok(queue.signal.wait_past(offset, Instant::now().checked_add(timeout)))
    }

    /// A future that resolves when `topic`'s queue holds a message at `offset`
    /// or later (`true`), or the store shuts down (`false`). It has no timer of
    /// its own: wrap it in the runtime's timeout (`tokio::time::timeout`).
    pub fn arrival(&self, topic: &str, queue_id: u32, offset: u64) -> Result<Arrival, StoreError> {
        let queue = self.queue(topic, queue_id)?;
        self.consume_queue_of(topic, queue_id)?;
        Ok(Arrival { queue, offset })
    }
}

/// The future of [`MessageStore::arrival`].
#[derive(Debug)]
pub struct Arrival {
    queue: Arc<Queue>,
    offset: u64,
}

impl Future for Arrival {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        match self.queue.signal.poll_past(self.offset, cx.waker()) {
            Some(passed) => Poll::Ready(passed),
            None => Poll::Pending,
        }
    }
}
