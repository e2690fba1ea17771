//! RocketMQ's `TransientStorePool`: a fixed set of page-aligned, off-heap write
//! buffers, each the size of one segment, allocated once and reused.
//!
//! A segment with a write buffer attached takes appends into the buffer (no page
//! faults on the put path); a commit service later copies the bytes into the
//! mapped file. Borrowing hands out a [`WriteBuffer`] guard that goes back to the
//! pool when dropped. Running dry is a typed outcome, [`PoolError::Exhausted`], so
//! callers choose between waiting, falling back to the mapping, or rejecting.
//!
//! This crate knows nothing about files or offsets.
//!
//! ```
//! use transient_pool::{PoolConfig, TransientStorePool};
//!
//! let pool = TransientStorePool::new(PoolConfig::new(2, 64 * 1024))?;
//! let buf = pool.try_borrow()?;
//! buf.append(|_start, tail| {
//!     tail[..5].copy_from_slice(b"hello");
//!     (5, ())
//! })?;
//! assert_eq!(buf.published(0, 5), Some(&b"hello"[..]));
//! assert_eq!(pool.available_buffer_nums(), 1);
//! drop(buf); // back to the pool, zeroed
//! assert_eq!(pool.available_buffer_nums(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]

use std::fmt;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

#[allow(unsafe_code)]
mod raw;

use raw::PageBuf;

/// Whether the pool pins its buffers in RAM with `mlock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMemory {
    /// Never lock.
    Never,
    /// Try to lock; a failure is logged through `tracing` and the pool works unlocked.
    #[default]
    BestEffort,
    /// Locking must succeed, or creating the pool fails with [`PoolError::Lock`].
    Required,
}

/// Configuration of a [`TransientStorePool`], with RocketMQ's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of buffers (`transientStorePoolSize`, default 5).
    pub transient_store_pool_size: usize,
    /// Size of each buffer in bytes: one segment (`mappedFileSizeCommitLog`).
    pub buffer_size_bytes: usize,
    /// Whether buffers are pinned in RAM (RocketMQ always tries).
    pub lock_memory: LockMemory,
}

impl PoolConfig {
    /// RocketMQ's default pool size.
    pub const DEFAULT_POOL_SIZE: usize = 5;

    /// A config with `pool_size` buffers of `buffer_size_bytes` each, locked on a
    /// best-effort basis.
    pub fn new(pool_size: usize, buffer_size_bytes: usize) -> Self {
        PoolConfig { transient_store_pool_size: pool_size, buffer_size_bytes, lock_memory: LockMemory::BestEffort }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The config asked for zero buffers or zero-sized buffers.
    #[error("invalid pool config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: &'static str,
    },
    /// The allocator could not provide a buffer.
    #[error("could not allocate write buffer {index} of {size_bytes} bytes")]
    Alloc {
        /// Index of the buffer that failed.
        index: usize,
        /// Requested size.
        size_bytes: usize,
    },
    /// `mlock` failed and the config demands locking.
    #[error("could not mlock write buffer {index} of {size_bytes} bytes")]
    Lock {
        /// Index of the buffer that failed.
        index: usize,
        /// Requested size.
        size_bytes: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Every buffer is borrowed.
    #[error("transient store pool exhausted: all {pool_size} buffers are borrowed")]
    Exhausted {
        /// Total number of buffers in the pool.
        pool_size: usize,
    },
}

struct Shared {
    free: Mutex<Vec<PageBuf>>,
    pool_size: usize,
    buffer_size: usize,
}

impl Shared {
    fn give_back(&self, mut buf: PageBuf) {
        // Zero before returning so a later borrower never sees another segment's
        // bytes in its free tail: the same view a freshly preallocated file gives.
        buf.zero();
        self.free.lock().push(buf);
    }
}

/// The pool. Cheap to clone; clones share the buffers.
#[derive(Clone)]
pub struct TransientStorePool {
    shared: Arc<Shared>,
}

impl fmt::Debug for TransientStorePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransientStorePool")
            .field("pool_size", &self.shared.pool_size)
            .field("buffer_size", &self.shared.buffer_size)
            .field("available", &self.available_buffer_nums())
            .finish()
    }
}

impl TransientStorePool {
    /// Allocates every buffer up front (RocketMQ's `init`).
    pub fn new(config: PoolConfig) -> Result<Self, PoolError> {
        if config.transient_store_pool_size == 0 {
            return Err(PoolError::InvalidConfig { reason: "transient_store_pool_size is 0" });
        }
        if config.buffer_size_bytes == 0 {
            return Err(PoolError::InvalidConfig { reason: "buffer_size_bytes is 0" });
        }
        let size_bytes = config.buffer_size_bytes;
        let mut free = Vec::with_capacity(config.transient_store_pool_size);
        for index in 0..config.transient_store_pool_size {
            let mut buf = PageBuf::new(size_bytes).ok_or(PoolError::Alloc { index, size_bytes })?;
            match config.lock_memory {
                LockMemory::Never => {}
                LockMemory::BestEffort => {
                    if let Err(err) = buf.lock() {
                        tracing::warn!(index, size_bytes, %err, "could not mlock write buffer; continuing unlocked");
                    }
                }
                LockMemory::Required => {
                    buf.lock().map_err(|source| PoolError::Lock { index, size_bytes, source })?;
                }
            }
            free.push(buf);
        }
        Ok(TransientStorePool {
            shared: Arc::new(Shared {
                free: Mutex::new(free),
                pool_size: config.transient_store_pool_size,
                buffer_size: size_bytes,
            }),
        })
    }

    /// Borrows a buffer, or reports [`PoolError::Exhausted`] when none is free.
    pub fn try_borrow(&self) -> Result<WriteBuffer, PoolError> {
        let (buf, left) = {
            let mut free = self.shared.free.lock();
            (free.pop(), free.len())
        };
        let buf = buf.ok_or(PoolError::Exhausted { pool_size: self.shared.pool_size })?;
        // RocketMQ warns when fewer than 40% of the buffers are left.
        if left * 10 < self.shared.pool_size * 4 {
            tracing::warn!(left, pool_size = self.shared.pool_size, "transient store pool running low");
        }
        Ok(WriteBuffer { buf: Some(buf), pool: Arc::clone(&self.shared) })
    }

    /// How many buffers are free now (`availableBufferNums`).
    pub fn available_buffer_nums(&self) -> usize {
        self.shared.free.lock().len()
    }

    /// True when no buffer is free (`isTransientStorePoolDeficient`).
    pub fn is_deficient(&self) -> bool {
        self.available_buffer_nums() == 0
    }

    /// Total number of buffers.
    pub fn pool_size(&self) -> usize {
        self.shared.pool_size
    }

    /// Size of each buffer in bytes.
    pub fn buffer_size_bytes(&self) -> usize {
        self.shared.buffer_size
    }

    /// How many free buffers are pinned in RAM.
    pub fn locked_buffer_nums(&self) -> usize {
        self.shared.free.lock().iter().filter(|b| b.is_locked()).count()
    }
}

/// A borrowed buffer; it returns to its pool, zeroed, when dropped.
pub struct WriteBuffer {
    buf: Option<PageBuf>,
    pool: Arc<Shared>,
}

impl fmt::Debug for WriteBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteBuffer").field("len", &self.len()).finish()
    }
}

impl WriteBuffer {
    fn page(&self) -> &PageBuf {
        self.buf.as_ref().expect("WriteBuffer holds its PageBuf until drop")
    }

    /// Length in bytes (the pool's buffer size).
    pub fn len(&self) -> usize {
        self.page().len()
    }

    /// Always false: buffers are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bytes appended so far (the published prefix).
    pub fn written(&self) -> usize {
        self.page().written()
    }

    /// Appends into the free tail: `fill` gets the tail's start and the tail
    /// `[written, len)`, and returns how many bytes it wrote (from the start of the
    /// tail) and a value. Those bytes are then published. One appender at a time
    /// (others wait); readers of published bytes run meanwhile.
    ///
    /// Returns the tail's start and the value, or [`Overrun`] (nothing published) if
    /// `fill` claims more bytes than the tail has.
    pub fn append<T>(&self, fill: impl FnOnce(usize, &mut [u8]) -> (usize, T)) -> Result<(usize, T), Overrun> {
        let tail = self.len() - self.written();
        self.page().append(fill).map_err(|claimed| Overrun { claimed, tail })
    }

    /// The published bytes `[start, start + len)`, or `None` unless they lie wholly
    /// below [`written`](Self::written). Safe to hold while another thread appends.
    pub fn published(&self, start: usize, len: usize) -> Option<&[u8]> {
        self.page().published(start, len)
    }

    /// The published prefix, `[0, written)`.
    pub fn as_slice(&self) -> &[u8] {
        let page = self.page();
        page.published(0, page.written()).expect("the published prefix is published")
    }

    /// Moves the published position to `pos` (clamped to the length), for example
    /// to line the buffer up with a segment that already holds `pos` bytes.
    pub fn reset(&mut self, pos: usize) {
        self.page_mut().reset(pos);
    }

    /// The whole buffer, mutably (exclusive access, so no published view exists).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.page_mut().as_mut_slice()
    }

    fn page_mut(&mut self) -> &mut PageBuf {
        self.buf.as_mut().expect("WriteBuffer holds its PageBuf until drop")
    }
}

/// [`WriteBuffer::append`]'s fill claimed more bytes than the free tail has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("append claimed {claimed} bytes but the free tail has {tail}")]
pub struct Overrun {
    /// Bytes the fill said it wrote.
    pub claimed: usize,
    /// Bytes the tail had.
    pub tail: usize,
}

impl Drop for WriteBuffer {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give_back(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> TransientStorePool {
        let mut config = PoolConfig::new(n, 16 * 1024);
        config.lock_memory = LockMemory::Never;
        TransientStorePool::new(config).unwrap()
    }

    #[test]
    fn borrow_and_return_reuses_the_same_memory() {
        let pool = pool(1);
        let mut first = pool.try_borrow().unwrap();
        let addr = first.as_mut_slice().as_ptr() as usize;
        drop(first);
        let mut again = pool.try_borrow().unwrap();
        assert_eq!(again.as_mut_slice().as_ptr() as usize, addr, "no reallocation");
    }

    #[test]
    fn running_dry_is_a_typed_outcome() {
        let pool = pool(2);
        let a = pool.try_borrow().unwrap();
        let _b = pool.try_borrow().unwrap();
        assert!(pool.is_deficient());
        assert_eq!(pool.available_buffer_nums(), 0);
        assert!(matches!(pool.try_borrow(), Err(PoolError::Exhausted { pool_size: 2 })));
        drop(a);
        assert!(!pool.is_deficient());
        assert!(pool.try_borrow().is_ok());
    }

    #[test]
    fn returned_buffers_come_back_zeroed() {
        let pool = pool(1);
        let mut buf = pool.try_borrow().unwrap();
        buf.as_mut_slice().fill(0xAB);
        buf.append(|_, tail| (tail.len(), ())).unwrap();
        drop(buf);
        let mut buf = pool.try_borrow().unwrap();
        assert_eq!(buf.written(), 0, "nothing published");
        assert!(buf.as_mut_slice().iter().all(|&b| b == 0));
    }

    #[test]
    fn bad_configs_are_rejected() {
        assert!(matches!(TransientStorePool::new(PoolConfig::new(0, 4096)), Err(PoolError::InvalidConfig { .. })));
        assert!(matches!(TransientStorePool::new(PoolConfig::new(1, 0)), Err(PoolError::InvalidConfig { .. })));
    }

    #[test]
    #[cfg_attr(miri, ignore = "mlock is a system call Miri cannot run")]
    fn best_effort_locking_never_fails_creation() {
        let pool = TransientStorePool::new(PoolConfig::new(2, 8192)).unwrap();
        assert_eq!(pool.available_buffer_nums(), 2);
        assert!(pool.locked_buffer_nums() <= 2);
    }

    #[test]
    fn clones_share_buffers_across_threads() {
        let pool = pool(4);
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut b = pool.try_borrow().unwrap();
                    b.as_mut_slice()[0] = i;
                    b
                })
            })
            .collect();
        let bufs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(pool.available_buffer_nums(), 0);
        drop(bufs);
        assert_eq!(pool.available_buffer_nums(), 4);
    }

    #[test]
    fn views_beyond_the_published_bytes_are_refused() {
        let pool = pool(1);
        let mut buf = pool.try_borrow().unwrap();
        assert!(buf.published(0, 1).is_none());
        assert!(buf.published(usize::MAX, 2).is_none(), "no overflow");
        buf.reset(100);
        assert_eq!(buf.as_slice().len(), 100);
        assert!(buf.published(99, 1).is_some());
        assert!(buf.published(99, 2).is_none());
        buf.reset(usize::MAX);
        assert_eq!(buf.written(), 16 * 1024, "clamped to the length");
        let overrun = buf.append(|_, _| (1, ())).unwrap_err();
        assert_eq!(overrun, Overrun { claimed: 1, tail: 0 });
    }
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
