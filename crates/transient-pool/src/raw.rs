//! The only module of this crate with `unsafe` code: a page-aligned heap buffer.
//!
//! Invariants every function here upholds or relies on:
//! - `PageBuf::ptr` points to `len` bytes allocated by [`std::alloc::alloc_zeroed`]
//!   with `PageBuf::layout`, owned exclusively by the `PageBuf` until it is dropped.
//! - `len > 0` and the alignment is the system page size, so `mlock`/`munlock`
//!   cover exactly the buffer's pages.
//! - No raw pointer leaves this module; callers get slices whose lifetimes are tied
//!   to a borrow of the `PageBuf`.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;

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
}

// SAFETY: `PageBuf` owns its allocation exclusively (see module invariants); moving it
// to another thread moves that ownership, like a `Box<[u8]>`.
unsafe impl Send for PageBuf {}
// SAFETY: shared references only hand out `&[u8]` (safe) or go through the `unsafe`
// range accessors whose contracts forbid overlapping mutable access.
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
        NonNull::new(ptr).map(|ptr| PageBuf { ptr, layout, locked: false })
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

    /// Overwrites the whole buffer with zeros.
    pub(crate) fn zero(&mut self) {
        self.as_mut_slice().fill(0);
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr/len describe our live, initialised allocation; the shared borrow
        // of `self` keeps it alive. Concurrent writers only exist through the unsafe
        // accessors, whose callers promise not to overlap this range.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `&mut self` guarantees exclusive access to the whole allocation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }

    /// # Safety
    /// `start + len <= self.len()`, and for the lifetime of the returned slice no
    /// other reference to any byte of `[start, start + len)` may exist or be created.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn range_mut(&self, start: usize, len: usize) -> &mut [u8] {
        debug_assert!(start.checked_add(len).is_some_and(|end| end <= self.len()));
        // SAFETY: in bounds and unaliased per this function's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), len) }
    }

    /// # Safety
    /// `start + len <= self.len()`, and no mutable reference to any byte of
    /// `[start, start + len)` may exist while the returned slice lives.
    pub(crate) unsafe fn range(&self, start: usize, len: usize) -> &[u8] {
        debug_assert!(start.checked_add(len).is_some_and(|end| end <= self.len()));
        // SAFETY: in bounds and not mutably aliased per this function's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), len) }
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
        let buf = PageBuf::new(3 * page_size()).unwrap();
        assert_eq!(buf.as_slice().as_ptr() as usize % page_size(), 0);
        assert!(buf.as_slice().iter().all(|&b| b == 0));
        assert!(PageBuf::new(0).is_none());
    }

    #[test]
    fn disjoint_ranges_can_be_used_together() {
        let buf = PageBuf::new(8192).unwrap();
        // SAFETY: the two ranges are disjoint and in bounds.
        let (a, b) = unsafe { (buf.range_mut(0, 4096), buf.range_mut(4096, 4096)) };
        a.fill(1);
        b.fill(2);
        assert_eq!(buf.as_slice()[4095], 1);
        assert_eq!(buf.as_slice()[4096], 2);
    }
}
