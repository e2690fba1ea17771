//! An in-memory [`FlushTarget`] for tests and benchmarks: counts flushes, can fail
//! them, can simulate sync latency, and can be truncated (offsets moving back).

use std::time::Duration;

use crate::sync::{lock, Arc, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::{FlushTarget, TargetError, TargetState};

const PAGE: u64 = 4096;

/// The error [`MemoryTarget`] returns once failing.
#[derive(Debug, thiserror::Error)]
#[error("injected flush failure")]
pub struct InjectedFailure;

/// A byte counter standing in for a segment queue.
#[derive(Debug, Default)]
pub struct MemoryTarget {
    wrote: AtomicU64,
    committed: AtomicU64,
    flushed: AtomicU64,
    write_buffer: bool,
    flushes: AtomicU64,
    commits: AtomicU64,
    fail_flushes: AtomicBool,
    latched: AtomicBool,
    flush_latency: Mutex<Option<Duration>>,
}

impl MemoryTarget {
    /// Appends become flushable at once (no write buffer).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Appends must be committed before a flush covers them (a write buffer).
    pub fn with_write_buffer() -> Arc<Self> {
        Arc::new(MemoryTarget { write_buffer: true, ..Self::default() })
    }

    /// Each flush sleeps this long (simulated sync latency), for benchmarks.
    pub fn set_flush_latency(&self, latency: Duration) {
        *lock(&self.flush_latency) = Some(latency);
    }

    /// Appends `bytes`; returns the end offset (`wroteOffset + wroteBytes`).
    pub fn append(&self, bytes: u64) -> u64 {
        let end = self.wrote.fetch_add(bytes, Ordering::AcqRel) + bytes;
        if !self.write_buffer {
            self.committed.fetch_max(end, Ordering::AcqRel);
        }
        end
    }

    /// Cuts everything at and above `offset` (a truncated tail): the wrote,
    /// committed and flushed offsets are lowered to it, as a segment queue's
    /// truncation lowers them before anything is written where the cut bytes
    /// were. No-op above the end.
    pub fn truncate(&self, offset: u64) {
        self.flushed.fetch_min(offset, Ordering::AcqRel);
        self.committed.fetch_min(offset, Ordering::AcqRel);
        self.wrote.fetch_min(offset, Ordering::AcqRel);
    }

    /// From now on every flush fails, and stays failed (a latched sync error).
    pub fn fail_flushes(&self) {
        self.fail_flushes.store(true, Ordering::Release);
    }

    /// Flushes attempted.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Acquire)
    }

    /// Commits attempted.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Acquire)
    }

    /// Bytes appended.
    pub fn wrote(&self) -> u64 {
        self.wrote.load(Ordering::Acquire)
    }

    fn readable(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Offset below which everything is durable.
    pub fn flushed_where(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// Offset below which everything is committed.
    pub fn committed_where(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Bytes readable but not yet durable.
    pub fn unflushed_bytes(&self) -> u64 {
        self.readable().saturating_sub(self.flushed_where())
    }
}

fn due(done: u64, target: u64, least_pages: usize) -> bool {
    target > done && (least_pages == 0 || target / PAGE - done / PAGE >= least_pages as u64)
}

impl FlushTarget for MemoryTarget {
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError> {
        self.flushes.fetch_add(1, Ordering::AcqRel);
        if self.fail_flushes.load(Ordering::Acquire) || self.latched.load(Ordering::Acquire) {
            self.latched.store(true, Ordering::Release);
            return Err(Arc::new(InjectedFailure));
        }
        let latency = *lock(&self.flush_latency);
        let target = self.readable();
        let done = self.flushed.load(Ordering::Acquire);
        if due(done, target, least_pages) {
            if let Some(latency) = latency {
                std::thread::sleep(latency);
            }
            self.flushed.fetch_max(target, Ordering::AcqRel);
        }
        Ok(self.flushed.load(Ordering::Acquire))
    }

    fn commit(&self, least_pages: usize) -> Result<u64, TargetError> {
        self.commits.fetch_add(1, Ordering::AcqRel);
        if self.latched.load(Ordering::Acquire) {
            return Err(Arc::new(InjectedFailure));
        }
        let wrote = self.wrote.load(Ordering::Acquire);
        let done = self.committed.load(Ordering::Acquire);
        if due(done, wrote, least_pages) {
            self.committed.fetch_max(wrote, Ordering::AcqRel);
        }
        Ok(self.committed.load(Ordering::Acquire))
    }

    fn state(&self) -> TargetState {
        TargetState {
            flushed_where: self.flushed_where(),
            committed_where: self.committed_where(),
            unflushed_bytes: self.unflushed_bytes(),
            uncommitted_bytes: self.wrote().saturating_sub(self.committed_where()),
            store_timestamp: self.flushed_where(),
        }
    }

    fn failure(&self) -> Option<TargetError> {
        self.latched.load(Ordering::Acquire).then(|| Arc::new(InjectedFailure) as TargetError)
    }
}

/// A target that runs a hook once, right after a real flush of `inner` returned
/// and before its caller sees the result: the window in which another thread
/// may truncate the target (tests of what group commit does when offsets move
/// back). Everything else goes straight to `inner`.
pub struct HookAfterFlush<T> {
    inner: T,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl<T: FlushTarget> HookAfterFlush<T> {
    /// Over `inner`, with no hook armed.
    pub fn new(inner: T) -> Arc<Self> {
        Arc::new(HookAfterFlush { inner, hook: Mutex::new(None) })
    }

    /// Runs `hook` after the next flush (once).
    pub fn arm(&self, hook: impl FnOnce() + Send + 'static) {
        *lock(&self.hook) = Some(Box::new(hook));
    }
}

impl<T> std::fmt::Debug for HookAfterFlush<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookAfterFlush").finish_non_exhaustive()
    }
}

impl<T: FlushTarget> FlushTarget for HookAfterFlush<T> {
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError> {
        let flushed = self.inner.flush(least_pages)?;
        let hook = lock(&self.hook).take();
        if let Some(hook) = hook {
            hook();
        }
        Ok(flushed)
    }
    fn commit(&self, least_pages: usize) -> Result<u64, TargetError> {
        self.inner.commit(least_pages)
    }
    fn state(&self) -> TargetState {
        self.inner.state()
    }
    fn failure(&self) -> Option<TargetError> {
        self.inner.failure()
    }
}
