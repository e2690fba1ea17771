//! An append's flush callback, answered by whoever completes its durability
//! handle: the group-commit service once the sync is done (or its deadline
//! watcher, or the log's shutdown). No thread of the store's own waits in
//! between, so the wake-up that reaches openraft is the only one after the
//! sync.
//!
//! The handle is polled once, at the append, with a waker of this module's
//! own; the completer calls that waker after it has published the result,
//! outside its locks, and the waker polls again and answers the callback.
//! Each group counts its callbacks not yet answered, so that a truncation or a
//! drop can wait for them ([`drain`]): none may report entries the cut removes
//! as durable after new ones take their place.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use commitlog::{DurabilityHandle, FlushError};
use openraft::storage::LogFlushed;
use openraft::{LogId, RaftTypeConfig};
use parking_lot::Mutex;

use crate::group::Group;

/// One append waiting for its bytes to be durable; `None` once answered.
struct Pending<C: RaftTypeConfig>(Mutex<Option<(DurabilityHandle, Answer<C>)>>);

/// What answering an append takes: its group, its last id, openraft's callback.
struct Answer<C: RaftTypeConfig> {
    group: Arc<Group<C>>,
    last: LogId<C::NodeId>,
    callback: LogFlushed<C>,
}

/// Answers `callback` once `handle` resolves, from the thread that resolves it
/// (at once if it already has): `Ok` raises the group's flushed id to `last`.
pub(crate) fn answer_when_durable<C: RaftTypeConfig>(
    handle: DurabilityHandle,
    group: Arc<Group<C>>,
    last: LogId<C::NodeId>,
    callback: LogFlushed<C>,
) {
    #[cfg(planted_bugs)]
    let handle = if crate::planted::is_active(crate::planted::Bug::AnsweredBeforeDurable) {
        DurabilityHandle::resolved(Ok(()))
    } else {
        handle
    };
    group.unanswered.fetch_add(1, Ordering::AcqRel);
    let pending = Arc::new(Pending(Mutex::new(Some((handle, Answer { group, last, callback })))));
    pending.poll();
}

impl<C: RaftTypeConfig> Pending<C> {
    /// Polls the handle with this append's waker; answers (outside the lock)
    /// if it resolved.
    fn poll(self: &Arc<Self>) {
        let (result, answer) = {
            let mut slot = self.0.lock();
            let Some((handle, _)) = slot.as_mut() else { return }; // answered already
            let waker = Waker::from(Arc::clone(self));
            match Pin::new(handle).poll(&mut Context::from_waker(&waker)) {
                Poll::Pending => return,
                Poll::Ready(result) => (result, slot.take().expect("matched above").1),
            }
        };
        answer.give(result);
    }
}

impl<C: RaftTypeConfig> Answer<C> {
    fn give(self, result: Result<(), FlushError>) {
        let Answer { group, last, callback } = self;
        if result.is_ok() {
            group.raise_flushed(last);
        }
        callback.log_io_completed(result.map_err(io::Error::other));
        answered_one(&group);
    }
}

impl<C: RaftTypeConfig> Wake for Pending<C> {
    fn wake(self: Arc<Self>) {
        self.poll();
    }
}

/// One of the group's callbacks was answered: wakes [`drain`] at the last.
fn answered_one<C: RaftTypeConfig>(group: &Group<C>) {
    if group.unanswered.fetch_sub(1, Ordering::AcqRel) == 1 {
        group.answered.notify_waiters();
    }
}

/// Waits until every callback of the group's earlier appends is answered. The
/// caller holds the group's write lock, so no new append can begin meanwhile.
pub(crate) async fn drain<C: RaftTypeConfig>(group: &Group<C>) {
    loop {
        let mut answered = std::pin::pin!(group.answered.notified());
        // Registered before the count is read: an answer in between wakes it.
        answered.as_mut().enable();
        if group.unanswered.load(Ordering::Acquire) == 0 {
            return;
        }
        answered.await;
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::time::Duration;

    use super::*;

    openraft::declare_raft_types!(
        /// Entries of strings.
        Strings: D = String, R = (),
    );

    #[tokio::test]
    async fn drain_waits_until_the_groups_last_callback_is_answered() {
        let group = Arc::new(Group::<Strings>::new(1, 0, 0, crate::state::GroupState::default()));
        drain(&*group).await; // nothing unanswered: at once
        group.unanswered.store(2, Ordering::Release);
        let draining = tokio::spawn({
            let group = Arc::clone(&group);
            async move { drain(&*group).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        answered_one(&*group);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!draining.is_finished(), "drain returned with a callback unanswered");
        answered_one(&*group);
        tokio::time::timeout(Duration::from_secs(5), draining).await.expect("drain woke at the last answer").unwrap();
    }
}
