//! When commits are durable: the journal's syncs, shared by the commits
//! waiting for them, in the committing thread (`wait_staged`) or, for a
//! commit awaited as a future (`poll_durable`, `durable`), by the store's
//! offsets sync service (`serve`); a failed sync fails the waits it was to
//! end, and the close's last sync ends the rest.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use flush_service::{FlushError, ServiceState, TargetError};
use mapped_file::MappedFile;

use super::ConsumerOffsets;
use crate::error::StoreError;

#[derive(Debug, Default)]
pub(super) struct Syncs {
    /// Every ticket up to this one is durable.
    pub(super) durable: u64,
    /// A sync is under way.
    pub(super) syncing: bool,
    /// Syncs done (each covering every commit appended before it began).
    pub(super) count: u64,
    /// The highest ticket a commit waiting asynchronously asked the sync
    /// service for.
    pub(super) wanted: u64,
    /// The sync service's last failed sync: the ticket it was to make
    /// durable (waiters up to it fail with it), and why.
    pub(super) failed: Option<(u64, TargetError)>,
    /// Commits waiting asynchronously, by token: (ticket, waker).
    pub(super) waiters: HashMap<u64, (u64, Waker)>,
    /// The journal is closed: a waiter not durable by then fails.
    pub(super) closed: bool,
}

impl Syncs {
    /// Every ticket up to this one is settled: durable, or its sync failed.
    fn settled(&self) -> u64 {
        self.durable.max(self.failed.as_ref().map_or(0, |f| f.0))
    }

    /// Takes the wakers of the waiters whose wait is over (durable, failed,
    /// or closed).
    pub(super) fn finished(&mut self) -> Vec<Waker> {
        let (settled, closed) = (self.settled(), self.closed);
        let mut wakers = Vec::new();
        self.waiters.retain(|_, (ticket, waker)| {
            let done = closed || *ticket <= settled;
            if done {
                wakers.push(waker.clone());
            }
            !done
        });
        wakers
    }
}

pub(super) fn wake(wakers: Vec<Waker>) {
    for waker in wakers {
        waker.wake();
    }
}

/// Commits appended to the journal and not yet known durable: what
/// [`ConsumerOffsets::wait_staged`] and [`ConsumerOffsets::poll_durable`]
/// wait for.
#[derive(Debug)]
pub(crate) struct Staged {
    /// Durable once every ticket up to this one is.
    pub(super) ticket: u64,
    /// The journal they were appended to, and its base ticket (`None`: nothing
    /// was appended; wait for what is under way).
    pub(super) file: Option<(Arc<MappedFile>, u64)>,
}

impl Staged {
    /// Nothing to wait for.
    pub(crate) fn nothing() -> Self {
        Staged { ticket: 0, file: None }
    }

    /// The later of two (tickets grow, across generations too: the later
    /// covers the earlier).
    pub(crate) fn max(self, other: Staged) -> Staged {
        if other.ticket >= self.ticket {
            other
        } else {
            self
        }
    }
}

impl ConsumerOffsets {
    /// Closes the journal: a last sync for the commits waiting
    /// asynchronously (everything that returned is durable already), then
    /// its mapping goes; later changes fail with [`StoreError::Shutdown`],
    /// as does a wait its last sync did not cover.
    pub(crate) fn close(&self) {
        let ticket = self.current_ticket();
        if let Err(err) = self.wait_durable(ticket, None) {
            tracing::warn!(%err, "consumer offsets: the last sync before closing failed");
            self.fail(ticket, err);
        }
        self.inner.lock().journal = None;
        let wakers = {
            let mut syncs = self.syncs.lock();
            syncs.closed = true;
            syncs.finished()
        };
        wake(wakers);
    }

    /// What wakes the sync service.
    pub(crate) fn sync_wake(&self) -> &Arc<ServiceState> {
        &self.sync_wake
    }

    /// The sync service (a thread of the store's): syncs the journal for
    /// the commits waiting asynchronously ([`poll_durable`](Self::poll_durable)),
    /// one sync for all that asked since the last, until `state` stops.
    pub(crate) fn serve(&self, state: &ServiceState) {
        loop {
            let wanted = {
                let syncs = self.syncs.lock();
                (syncs.wanted > syncs.settled()).then_some(syncs.wanted)
            };
            match wanted {
                Some(ticket) => {
                    if let Err(err) = self.wait_durable(ticket, None) {
                        self.fail(ticket, err);
                    }
                }
                None if state.is_stopped() => return,
                None => state.wait_for_running(Duration::from_millis(100), || {}),
            }
        }
    }

    /// Fails the waiters up to `ticket` with `err` (a sync of the service's,
    /// or the last one before closing).
    pub(super) fn fail(&self, ticket: u64, err: StoreError) {
        let source: TargetError = match err {
            StoreError::Durability(FlushError::Failed { source, .. }) => source,
            other => Arc::new(other),
        };
        let wakers = {
            let mut syncs = self.syncs.lock();
            let upto = syncs.failed.as_ref().map_or(ticket, |f| f.0.max(ticket));
            syncs.failed = Some((upto, source));
            syncs.finished()
        };
        wake(wakers);
    }

    /// Whether what `staged` appended is durable, without syncing in this
    /// thread: pending, the waker registered under `token` (one
    /// registration however often polled) and the sync service asked, until
    /// a sync covers it; an error if the sync meant to cover it failed or
    /// the journal closed first. [`forget`](Self::forget) takes the
    /// registration back.
    pub(crate) fn poll_durable(
        &self,
        staged: &Staged,
        token: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), StoreError>> {
        let ticket = staged.ticket;
        let mut syncs = self.syncs.lock();
        if syncs.durable >= ticket {
            syncs.waiters.remove(&token);
            return Poll::Ready(Ok(()));
        }
        if let Some((upto, err)) = &syncs.failed {
            if *upto >= ticket {
                let source = Arc::clone(err);
                syncs.waiters.remove(&token);
                return Poll::Ready(Err(StoreError::Durability(FlushError::Failed { offset: ticket, source })));
            }
        }
        if syncs.closed {
            syncs.waiters.remove(&token);
            return Poll::Ready(Err(StoreError::Shutdown));
        }
        syncs.waiters.insert(token, (ticket, cx.waker().clone()));
        let ask = syncs.wanted < ticket;
        syncs.wanted = syncs.wanted.max(ticket);
        drop(syncs);
        if ask {
            self.sync_wake.wakeup();
        }
        Poll::Pending
    }

    /// Takes back the registration of a wait under `token` (a waiter dropped
    /// before its commit was durable).
    pub(crate) fn forget(&self, token: u64) {
        self.syncs.lock().waiters.remove(&token);
    }

    /// Waits asynchronously until what `staged` appended is durable
    /// ([`poll_durable`](Self::poll_durable) as a future).
    pub(crate) fn durable(&self, staged: Staged) -> Durable<'_> {
        Durable { offsets: self, staged, token: crate::signal::new_token() }
    }

    /// Blocks until what `staged` appended is durable, syncing the journal
    /// in this thread unless a sync is under way.
    pub(crate) fn wait_staged(&self, staged: Staged) -> Result<(), StoreError> {
        self.wait_durable(staged.ticket, staged.file)
    }

    /// Returns once every ticket up to `ticket` is durable: syncs the journal
    /// itself unless a sync is under way, which it waits for and then checks
    /// again (a sync that began before its append may not cover it).
    pub(super) fn wait_durable(&self, ticket: u64, file: Option<(Arc<MappedFile>, u64)>) -> Result<(), StoreError> {
        let mut syncs = self.syncs.lock();
        loop {
            if syncs.durable >= ticket {
                return Ok(());
            }
            if !syncs.syncing {
                break;
            }
            self.synced.wait(&mut syncs);
        }
        syncs.syncing = true;
        drop(syncs);
        let (file, base) = match file {
            Some(f) => f,
            None => {
                let inner = self.inner.lock();
                let Some(journal) = inner.journal.as_ref() else {
                    drop(inner);
                    self.syncs.lock().syncing = false;
                    self.synced.notify_all();
                    return Err(StoreError::Shutdown);
                };
                (Arc::clone(&journal.file), journal.base)
            }
        };
        let result = file.flush(0);
        let mut syncs = self.syncs.lock();
        syncs.syncing = false;
        if let Ok(progress) = &result {
            syncs.durable = syncs.durable.max(base.saturating_add(progress.to as u64));
            syncs.count = syncs.count.saturating_add(1);
        }
        let done = syncs.durable >= ticket;
        let wakers = syncs.finished();
        drop(syncs);
        self.synced.notify_all();
        wake(wakers);
        match result {
            // Flushed up to what was appended when the sync began: ours was.
            Ok(_) if done => Ok(()),
            // A compaction switched the journal meanwhile: the next round
            // syncs the one it now is (or finds the compaction covered us).
            Ok(_) => self.wait_durable(ticket, None),
            // A compaction may have covered it while this sync failed (the
            // old file deleted under it).
            Err(_) if done => Ok(()),
            Err(err) => {
                let source: TargetError = Arc::new(StoreError::from(err));
                Err(StoreError::Durability(FlushError::Failed { offset: ticket, source }))
            }
        }
    }
}

/// The future of [`ConsumerOffsets::durable`]: dropped before it is ready, it
/// leaves nothing registered.
#[derive(Debug)]
pub(crate) struct Durable<'a> {
    offsets: &'a ConsumerOffsets,
    staged: Staged,
    token: u64,
}

impl std::future::Future for Durable<'_> {
    type Output = Result<(), StoreError>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.offsets.poll_durable(&self.staged, self.token, cx)
    }
}

impl Drop for Durable<'_> {
    fn drop(&mut self) {
        self.offsets.forget(self.token);
    }
}
