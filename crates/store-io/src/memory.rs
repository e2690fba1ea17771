//! The memory a segment lives in, and the two raw system calls the storage makes
//! (`statvfs`, `posix_fallocate`): the only module of this crate with `unsafe`
//! code but for the one mapping call in `MmapStorage`.
//!
//! Invariants:
//! - `SegmentMemory::ptr` points to `len > 0` bytes that stay valid until the
//!   `SegmentMemory` is dropped: either a shared file mapping owned by `Backing::Mmap`
//!   (never remapped, never shrunk) or a heap allocation made by `Box<[u8]>` and
//!   released only in `Drop`.
//! - Concurrent access is partitioned by positions, which `mapped-file`'s `Region`
//!   maintains:
//!   the appender alone writes at and above the wrote position (or the committer
//!   alone above the committed position when a write buffer is attached), and
//!   readers only read below the read position. The `unsafe fn` accessors below
//!   state that contract; no raw pointer leaves this module.
//! - The mapped file is never truncated, and never written except by its owner
//!   under the position protocol (through this mapping, or with `pwrite` when the
//!   segment writes without mmap and the mapping is read-only), while mapped (mmap
//!   hazard: SIGBUS, or bytes changing under a `&[u8]`): the caller of the `unsafe`
//!   [`SegmentMemory::map_file`] promises it, and the one caller, `MmapStorage`,
//!   keeps it by holding the directory's lock file for as long as the mapping lives
//!   ([`SegmentMemory::keeping_alive`]).
//! - A read-only mapping is never written through: `range_mut` asserts it, and
//!   `Region` sends every write of such a segment to the file instead.

use std::fs::File;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

enum Backing {
    Mmap(memmap2::MmapRaw),
    Heap,
}

/// The bytes of one segment: a shared file mapping, or heap memory for the
/// simulated storage. Built only through the safe constructors here; `MappedFile`
/// alone reads and writes it, partitioned by its positions.
pub struct SegmentMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// False for a read-only mapping: bytes reach its file through `pwrite`.
    writable: bool,
    backing: Backing,
    /// Dropped after `backing`: whatever must outlive the mapping (a directory lock).
    _keep_alive: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for SegmentMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backing {
            Backing::Mmap(_) => "mmap",
            Backing::Heap => "heap",
        };
        f.debug_struct("SegmentMemory")
            .field("kind", &kind)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

// SAFETY: the memory is owned by this value (or by the kernel mapping it owns);
// cross-thread access is governed by the position protocol in the module header.
unsafe impl Send for SegmentMemory {}
// SAFETY: as above; `&SegmentMemory` only gives out slices through `unsafe fn`s whose
// contracts forbid overlapping writes.
unsafe impl Sync for SegmentMemory {}

impl SegmentMemory {
    /// Maps the first `len` bytes of `file` shared and read-write. A zero `len` is
    /// an `InvalidInput` error. Use `MmapStorage`, which calls this under its lock.
    ///
    /// # Safety
    /// For as long as the returned memory (or anything keeping it alive) exists, the
    /// file must have at least `len` bytes and must not be written, truncated or
    /// mapped writable by anyone else, in this process or another: readers get
    /// `&[u8]` views of the mapping that must not change under them.
    pub unsafe fn map_file(file: &File, len: usize) -> io::Result<Self> {
        Self::map(file, len, true)
    }

    /// Maps the first `len` bytes of `file` shared and read-only, for a segment
    /// whose bytes are written with `pwrite` (write without mmap): readers see the
    /// page cache the writes land in. A zero `len` is an `InvalidInput` error.
    ///
    /// # Safety
    /// As for [`map_file`](Self::map_file), except that the owner of the returned
    /// memory may write the file itself (with `pwrite`), and only where the
    /// position protocol allows: at or above the published read position, or with
    /// no view outstanding.
    pub unsafe fn map_file_read_only(file: &File, len: usize) -> io::Result<Self> {
        Self::map(file, len, false)
    }

    fn map(file: &File, len: usize, writable: bool) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot map a zero-length segment"));
        }
        let options = {
            let mut options = memmap2::MmapOptions::new();
            options.len(len);
            options
        };
        let map = if writable { options.map_raw(file)? } else { options.map_raw_read_only(file)? };
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(SegmentMemory { ptr, len, writable, backing: Backing::Mmap(map), _keep_alive: None })
    }

    /// Keeps `guard` alive until this memory is gone (unmapped after the mapping):
    /// `MmapStorage` ties its directory lock to each mapping this way.
    pub fn keeping_alive(mut self, guard: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self._keep_alive = Some(guard);
        self
    }

    /// Heap memory holding `bytes` (the simulated storage's page cache view).
    /// Empty input is an `InvalidInput` error.
    pub fn heap(bytes: Vec<u8>) -> io::Result<Self> {
        if bytes.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot hold a zero-length segment"));
        }
        let len = bytes.len();
        let raw = Box::into_raw(bytes.into_boxed_slice());
        let ptr = NonNull::new(raw.cast::<u8>()).expect("Box::into_raw is never null");
        Ok(SegmentMemory { ptr, len, writable: true, backing: Backing::Heap, _keep_alive: None })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-length memory cannot be built.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True when the memory is a file mapping.
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Mmap(_))
    }

    /// False for a read-only mapping (a segment written without mmap).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// `msync(MS_SYNC)` of `[offset, offset + len)`; a no-op on heap memory.
    pub fn sync_range(&self, offset: usize, len: usize) -> io::Result<()> {
        match &self.backing {
            Backing::Mmap(map) => map.flush_range(offset, len),
            Backing::Heap => Ok(()),
        }
    }

    /// `madvise(MADV_POPULATE_WRITE)` of `[offset, offset + len)`: faults the pages
    /// in writable now (allocating and zeroing page-cache pages of unwritten
    /// extents), so the appender takes no page fault there later. A no-op on heap
    /// memory and read-only mappings.
    pub fn populate_write(&self, offset: usize, len: usize) -> io::Result<()> {
        match &self.backing {
            Backing::Mmap(map) if self.writable => map.advise_range(memmap2::Advice::PopulateWrite, offset, len),
            _ => Ok(()),
        }
    }

    /// Whether every page of `[offset, offset + len)` is in memory now
    /// (`mincore`: in the page cache, so a read of it takes no disk I/O).
    /// Always true for heap memory. An empty range is resident; a range
    /// past the end is an `InvalidInput` error. A snapshot: the kernel may
    /// evict the pages right after.
    pub fn is_resident(&self, offset: usize, len: usize) -> io::Result<bool> {
        let end = match offset.checked_add(len) {
            Some(end) if end <= self.len => end,
            _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "range past the end of the segment")),
        };
        if len == 0 || !self.is_mapped() {
            return Ok(true);
        }
        let page = page_size();
        // Whole pages from the one holding `offset` to the one holding `end - 1`:
        // inside the mapping, whose length the kernel rounds up to a page.
        let start = offset.saturating_sub(offset.checked_rem(page).unwrap_or(0));
        let span = end.saturating_sub(start); // `start <= offset <= end`
        let mut vec = vec![0u8; span.div_ceil(page)];
        // SAFETY: `start` lies within the mapping (at most `offset`, which is
        // below its end) and is page-aligned as mincore requires; the pages
        // from it cover `[start, end)`, all inside the mapping's last page;
        // `vec` holds one byte per page.
        let rc = unsafe { libc::mincore(self.ptr.as_ptr().add(start).cast(), span, vec.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().all(|b| b & 1 == 1))
    }

    /// `madvise(MADV_WILLNEED)` and, if asked, `mlock` over the whole mapping.
    pub fn advise_and_lock(&self, lock: bool) -> io::Result<()> {
        match &self.backing {
            Backing::Mmap(map) => {
                map.advise(memmap2::Advice::WillNeed)?;
                if lock {
                    map.lock()?;
                }
                Ok(())
            }
            Backing::Heap => Ok(()),
        }
    }

    /// Faults every page of the mapping into the page tables for reading
    /// (`MADV_POPULATE_READ`, Linux 5.14), or, where the kernel refuses it, asks
    /// for read-ahead (`MADV_WILLNEED`). Nothing to do for heap memory.
    pub fn populate(&self) -> io::Result<()> {
        match &self.backing {
            #[cfg(target_os = "linux")]
            Backing::Mmap(map) => match map.advise(memmap2::Advice::PopulateRead) {
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => map.advise(memmap2::Advice::WillNeed),
                other => other,
            },
            #[cfg(not(target_os = "linux"))]
            Backing::Mmap(map) => map.advise(memmap2::Advice::WillNeed),
            Backing::Heap => Ok(()),
        }
    }

    /// A shared view of `[start, start + len)`.
    ///
    /// # Safety
    /// The range is in bounds, and no mutable reference to any of its bytes exists
    /// while the returned slice lives (it lies below a published position).
    pub unsafe fn range(&self, start: usize, len: usize) -> &[u8] {
        assert!(start.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (asserted) and valid (module invariant); unaliased by
        // writers per this function's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), len) }
    }

    /// A mutable view of `[start, start + len)` through a shared reference.
    ///
    /// # Safety
    /// The range is in bounds, and no other reference to any of its bytes exists or
    /// is created while the returned slice lives (the caller is the single appender
    /// or committer for bytes above the published position).
    ///
    /// # Panics
    /// On a read-only mapping, which must be written through its file.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, start: usize, len: usize) -> &mut [u8] {
        assert!(self.writable, "a read-only segment mapping is written through its file");
        assert!(start.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (asserted) and valid (module invariant); exclusive per
        // this function's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), len) }
    }
}

impl Drop for SegmentMemory {
    fn drop(&mut self) {
        if let Backing::Heap = self.backing {
            let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: `ptr`/`len` came from `Box::into_raw` of a `Box<[u8]>` of this
            // length in `heap`, and this is the only place that frees it.
            drop(unsafe { Box::from_raw(slice) });
        }
        // A mapping is unmapped by `MmapRaw`'s own Drop.
    }
}

/// Size and free space of the file system holding `path` (`statvfs`), in bytes:
/// `(total, free, available to unprivileged users)`; `free - available` is the
/// space reserved for root.
pub(crate) fn statvfs(path: &std::path::Path) -> io::Result<(u64, u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: an all-zero `statvfs` is a valid value of the plain C struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is a NUL-terminated string and `stat` a valid, writable
    // `statvfs` for the duration of the call.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // `c_ulong` and `fsblkcnt_t` are 32 bits wide on some targets.
    #[allow(clippy::useless_conversion)]
    let fragment = u64::from(stat.f_frsize);
    #[allow(clippy::useless_conversion)]
    let (blocks, free, available) = (u64::from(stat.f_blocks), u64::from(stat.f_bfree), u64::from(stat.f_bavail));
    Ok((blocks.saturating_mul(fragment), free.saturating_mul(fragment), available.saturating_mul(fragment)))
}

/// `syncfs(fd)`: writes back everything dirty on the file system holding `fd`
/// and waits for it.
pub(crate) fn syncfs(fd: std::os::unix::io::RawFd) -> io::Result<()> {
    // SAFETY: syncfs takes no pointers; an invalid fd is reported as EBADF.
    if unsafe { libc::syncfs(fd) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `posix_fallocate(fd, 0, len)`; returns 0 or an errno value.
pub(crate) fn fallocate(fd: std::os::unix::io::RawFd, len: libc::off_t) -> i32 {
    // SAFETY: posix_fallocate takes no pointers; an invalid fd is reported as EBADF.
    unsafe { libc::posix_fallocate(fd, 0, len) }
}

/// The system's page size (`sysconf(_SC_PAGESIZE)`; 4096 if it cannot say).
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_memory_round_trips() {
        let mem = SegmentMemory::heap(vec![7u8; 4096]).unwrap();
        // SAFETY: single-threaded test, no overlapping references.
        unsafe { mem.range_mut(10, 2).copy_from_slice(&[1, 2]) };
        // SAFETY: the mutable borrow above has ended.
        assert_eq!(unsafe { mem.range(9, 4) }, &[7, 1, 2, 7]);
        assert!(SegmentMemory::heap(Vec::new()).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
    fn file_mapping_sees_file_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![3u8; 8192]).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        // SAFETY: the test owns the file; nobody else writes or truncates it.
        let mem = unsafe { SegmentMemory::map_file(&file, 8192) }.unwrap();
        assert!(mem.is_mapped());
        // SAFETY: single-threaded test.
        unsafe { mem.range_mut(0, 1)[0] = 9 };
        mem.sync_range(0, 1).unwrap();
        assert_eq!(std::fs::read(&path).unwrap()[0], 9);
        // SAFETY: as above.
        assert!(unsafe { SegmentMemory::map_file(&file, 0) }.is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
    fn residency_follows_the_pages_touched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        // Large enough that the read-around of a fault (the device's
        // readahead, up to 8 MiB here) leaves the far end alone; sparse.
        let len = 64 << 20;
        file.set_len(len as u64).unwrap();
        // SAFETY: the test owns the file; nobody else writes or truncates it.
        let mem = unsafe { SegmentMemory::map_file(&file, len) }.unwrap();
        assert!(!mem.is_resident(0, len).unwrap(), "a hole never touched is not in memory");
        // SAFETY: single-threaded test.
        unsafe { mem.range_mut(100, 1)[0] = 1 };
        assert!(mem.is_resident(0, 1).unwrap() && mem.is_resident(100, 4096 - 100).unwrap());
        assert!(!mem.is_resident(len - 10, 10).unwrap(), "the untouched far end");
        assert!(!mem.is_resident(0, len).unwrap(), "a range reaching untouched pages");
        assert!(mem.is_resident(5000, 0).unwrap(), "an empty range");
        assert!(mem.is_resident(len, 1).is_err() && mem.is_resident(1, usize::MAX).is_err());
        let heap = SegmentMemory::heap(vec![0u8; 10]).unwrap();
        assert!(heap.is_resident(0, 10).unwrap() && heap.is_resident(0, 11).is_err());
    }
}
