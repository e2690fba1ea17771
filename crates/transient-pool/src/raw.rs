//! The only module of this crate with `unsafe` code: a page-aligned heap buffer.
//!
//! Invariants every function here upholds or relies on:
//! - `PageBuf::ptr` points to `len` bytes allocated by [`std::alloc::alloc_zeroed`]
//!   with `PageBuf::layout`, owned exclusively by the `PageBuf` until it is dropped.
//! - `len > 0` and the alignment is the system page size, so `mlock`/`munlock`
//!   cover exactly the buffer's pages.
//! - No raw pointer leaves this module; callers get slices whose lifetimes are tied
//!   to a borrow of the `PageBuf`.
//! - Concurrent access through `&PageBuf` is partitioned by `written`: bytes below
//!   it are published and never written again while shared (only through
//!   `&mut PageBuf`); bytes at and above it belong to the one appender holding
//!   `append_lock`. [`PageBuf::published`] hands out only the first kind,
//!   [`PageBuf::append`] only the second, so the public API of this crate is safe.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// The system page size, falling back to 4 KiB when `sysconf` cannot tell.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
}

/// A zero-initialised, page-aligned buffer of fixed length.
pub(crate) struct PageBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    locked: bool,
    /// Bytes below are published: complete, and never written through `&self`.
    written: AtomicUsize,
    /// Held by the one appender writing at and above `written`.
    append_lock: Mutex<()>,
}

// SAFETY: `PageBuf` owns its allocation exclusively (see module invariants); moving it
// to another thread moves that ownership, like a `Box<[u8]>`.
unsafe impl Send for PageBuf {}
// SAFETY: shared references hand out `&[u8]` only below `written` and `&mut [u8]`
// only at and above it, to the one appender holding `append_lock` (module header).
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// Allocates `len` zeroed bytes aligned to the page size; `None` if `len` is zero
    /// or the allocator refuses.
    pub(crate) fn new(len: usize) -> Option<Self> {
        if len == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len, page_size()).ok()?;
        // SAFETY: `layout` has a non-zero size, checked above.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(ptr).map(|ptr| PageBuf {
            ptr,
            layout,
            locked: false,
            written: AtomicUsize::new(0),
            append_lock: Mutex::new(()),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    pub(crate) fn is_locked(&self) -> bool {
        self.locked
    }

    /// Pins the buffer's pages in RAM (`mlock`).
    pub(crate) fn lock(&mut self) -> io::Result<()> {
        if self.locked {
            return Ok(());
        }
        // SAFETY: the range is exactly our own live allocation.
        let rc = unsafe { libc::mlock(self.ptr.as_ptr().cast(), self.len()) };
        if rc == 0 {
            self.locked = true;
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Overwrites the whole buffer with zeros and unpublishes everything.
    pub(crate) fn zero(&mut self) {
        self.as_mut_slice().fill(0);
        *self.written.get_mut() = 0;
    }

    /// Bytes published by [`append`](Self::append) (or set by [`reset`](Self::reset)).
    pub(crate) fn written(&self) -> usize {
        // Acquire pairs with the appender's Release: the bytes below are complete.
        self.written.load(Ordering::Acquire)
    }

    /// Moves the published position to `pos` (at most the length): bytes from there
    /// on are the appender's again. Exclusive access, so no published slice exists.
    pub(crate) fn reset(&mut self, pos: usize) {
        *self.written.get_mut() = pos.min(self.len());
    }

    /// Runs `fill` on the free tail `[written, len)` as the one appender, and
    /// publishes the bytes it says it wrote. `fill` returns that count and a value;
    /// a count larger than the tail publishes nothing and is returned as `Err`.
    /// Returns where the tail started.
    pub(crate) fn append<T>(&self, fill: impl FnOnce(usize, &mut [u8]) -> (usize, T)) -> Result<(usize, T), usize> {
        let _append = self.append_lock.lock();
        let start = self.written.load(Ordering::Relaxed); // only moved under this lock or `&mut`
        let len = self.len() - start;
        // SAFETY: in bounds (`start <= len()` always holds); we hold `append_lock`, so
        // no other appender runs, and `published` never hands out bytes at or above
        // `written == start` (module header): nobody else references the tail.
        let tail = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), len) };
        let (wrote, value) = fill(start, tail);
        if wrote > len {
            return Err(wrote);
        }
        // Release: whoever loads the new position sees the bytes written below it.
        self.written.store(start + wrote, Ordering::Release);
        Ok((start, value))
    }

    /// The published bytes `[start, start + len)`, or `None` unless they lie wholly
    /// below `written`.
    pub(crate) fn published(&self, start: usize, len: usize) -> Option<&[u8]> {
        let end = start.checked_add(len)?;
        if end > self.written() {
            return None;
        }
        // SAFETY: in bounds (`written <= len()`), and below `written`: complete
        // (Acquire above) and never written through `&self` again, while `&self`
        // lives nothing can reset the position (that takes `&mut`).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), len) })
    }

    /// The whole buffer, exclusively.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `&mut self` guarantees exclusive access to the whole allocation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: unlocking our own live allocation; failure only leaks the lock,
            // which the kernel drops with the mapping anyway.
            unsafe { libc::munlock(self.ptr.as_ptr().cast(), self.len()) };
        }
        // SAFETY: allocated in `new` with exactly this layout and not freed before.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_and_zeroed() {
        let mut buf = PageBuf::new(3 * page_size()).unwrap();
        assert_eq!(buf.as_mut_slice().as_ptr() as usize % page_size(), 0);
        assert!(buf.as_mut_slice().iter().all(|&b| b == 0));
        assert!(PageBuf::new(0).is_none());
    }

    #[test]
    fn an_appender_and_readers_share_a_buffer_across_threads() {
        let buf = PageBuf::new(8192).unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..64u8 {
                    buf.append(|_, tail| {
                        tail[..64].fill(i);
                        (64, ())
                    })
                    .unwrap();
                }
            });
            scope.spawn(|| {
                // Whatever is published is complete: 64 copies of its index each.
                // Fewer rounds under Miri, which interprets every byte access.
                for _ in 0..if cfg!(miri) { 20 } else { 1000 } {
                    let written = buf.written();
                    let bytes = buf.published(0, written).unwrap();
                    for (i, chunk) in bytes.chunks(64).enumerate() {
                        assert!(chunk.iter().all(|&b| b == i as u8));
                    }
                }
            });
        });
        assert_eq!(buf.written(), 4096);
        assert!(buf.published(4090, 7).is_none(), "beyond the published bytes");
        assert_eq!(buf.append(|_, tail| (tail.len() + 1, ())).unwrap_err(), 4097, "an overrun publishes nothing");
        assert_eq!(buf.written(), 4096);
    }
}
