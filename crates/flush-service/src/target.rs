//! What the flush services flush: a small trait. The storage side implements it
//! (the `commitlog` facade adapts its segment queue); this crate implements it only
//! for its in-memory test double.

use crate::error::TargetError;
use crate::sync::Arc;

/// Everything a flush service or policy reads of a target, in one snapshot: a new
/// input is one more field here (and one more line in each target's
/// [`state`](FlushTarget::state)), not a method threaded through every target.
/// Targets outside this crate build it with `..TargetState::default()` for the
/// fields they do not know, so a field added later does not break them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetState {
    /// Offset below which everything is durable.
    pub flushed_where: u64,
    /// Offset below which everything is committed.
    pub committed_where: u64,
    /// Bytes readable but not yet durable.
    pub unflushed_bytes: u64,
    /// Bytes appended but not yet committed.
    pub uncommitted_bytes: u64,
    /// Store timestamp (ms) of the newest data the last flush covered, for the
    /// checkpoint's physical timestamp.
    pub store_timestamp: u64,
}

/// Something with a commit step and a flush step over a growing byte range.
///
/// Contract:
/// - `flush` returns the new `flushed_where`; `Ok` means every byte below it is
///   durable. After one `Err`, every later `flush` and `commit` must fail too (a
///   failed sync is final, fsyncgate) and [`failure`](Self::failure) must return
///   the error: the target owns the one failure latch, and the services keep no
///   copy, so a failure seen by anyone (a service, a manual flush, shutdown) stops
///   everyone. The services never report a request durable after an error.
/// - `commit` moves bytes from write buffers into the flushable range and returns
///   the new `committed_where`. Without write buffers it is a no-op: the
///   default, which answers the latched failure or `state().committed_where`
///   (such a target reports everything written as committed).
/// - Offsets move backwards only when the target's tail is truncated (a
///   replicated log's conflicting suffix): `state().flushed_where` and `committed_where`
///   are lowered to the cut *before* any byte is written where the cut bytes
///   were. The services never trust a `flush` result alone: group commit
///   acknowledges a request only if its offset is at or below both what the
///   flush returned and `flushed_where` read after the request was queued, so
///   bytes written after a truncation are acknowledged by a flush that began
///   after them, never by one that returned before the cut. A request for bytes
///   that the truncation cut before any round acknowledged them is answered by
///   its deadline ([`FlushError::Timeout`](crate::FlushError::Timeout)), never
///   as durable; a truncating owner avoids that by letting a round acknowledge
///   everything below its end first (as `commitlog`'s `truncate_from` does).
///
/// A target needs `flush`, `state` and `failure`; [`FailureLatch`] is the
/// latch ready-made (`failure` is `latch.get()`, and `flush` runs its work
/// through `latch.guard`).
pub trait FlushTarget: Send + Sync + 'static {
    /// Makes data durable when at least `least_pages` 4 KiB pages are pending (0:
    /// any byte; a full segment always qualifies). Returns `flushed_where`.
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError>;
    /// Commits write-buffer data, with the same threshold. Returns
    /// `committed_where`. The default is a target without write buffers'.
    fn commit(&self, least_pages: usize) -> Result<u64, TargetError> {
        let _ = least_pages;
        match self.failure() {
            Some(failure) => Err(failure),
            None => Ok(self.state().committed_where),
        }
    }
    /// Where the target stands now. Cheap: every round and wake-up asks it.
    fn state(&self) -> TargetState;
    /// The first failure, once any flush or commit (by anyone) failed; `None`
    /// before. Once `Some`, always `Some`. Cheap: the put path asks it.
    fn failure(&self) -> Option<TargetError>;
}

impl<T: FlushTarget + ?Sized> FlushTarget for Arc<T> {
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError> {
        (**self).flush(least_pages)
    }
    fn commit(&self, least_pages: usize) -> Result<u64, TargetError> {
        (**self).commit(least_pages)
    }
    fn state(&self) -> TargetState {
        (**self).state()
    }
    fn failure(&self) -> Option<TargetError> {
        (**self).failure()
    }
}

/// The failure latch a [`FlushTarget`] must keep, ready-made: the first error
/// of any flush or commit, kept for good (a failed sync is final: fsyncgate).
///
/// ```
/// use flush_service::{FailureLatch, FlushTarget, TargetError, TargetState};
///
/// struct File { latch: FailureLatch /* , the file */ }
///
/// impl FlushTarget for File {
///     fn flush(&self, _least_pages: usize) -> Result<u64, TargetError> {
///         // Refused once anything failed; a failure here is kept.
///         self.latch.guard(|| Ok(0 /* fdatasync, then the durable end */))
///     }
///     fn state(&self) -> TargetState {
///         TargetState::default()
///     }
///     fn failure(&self) -> Option<TargetError> {
///         self.latch.get()
///     }
/// }
/// ```
#[derive(Debug, Default)]
pub struct FailureLatch {
    first: std::sync::OnceLock<TargetError>,
}

impl FailureLatch {
    /// An unset latch.
    pub fn new() -> Self {
        FailureLatch::default()
    }

    /// The first failure, once one was recorded.
    pub fn get(&self) -> Option<TargetError> {
        self.first.get().cloned()
    }

    /// Records `error` unless an earlier failure is kept; returns the kept one.
    pub fn record(&self, error: TargetError) -> TargetError {
        let this = Arc::clone(&error);
        // Either this one is kept now, or an earlier one already was.
        let _ = self.first.set(error);
        self.first.get().cloned().unwrap_or(this)
    }

    /// Runs `work` unless a failure is kept (then that failure, without
    /// running it), recording the error `work` returns.
    pub fn guard<T>(&self, work: impl FnOnce() -> Result<T, TargetError>) -> Result<T, TargetError> {
        if let Some(failure) = self.get() {
            return Err(failure);
        }
        work().map_err(|error| self.record(error))
    }
}
