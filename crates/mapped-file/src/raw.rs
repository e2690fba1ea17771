//! The only module of this crate with `unsafe` code: the memory a segment lives in.
//!
//! Invariants:
//! - `SegmentMemory::ptr` points to `len > 0` bytes that stay valid until the
//!   `SegmentMemory` is dropped: either a shared file mapping owned by `Backing::Mmap`
//!   (never remapped, never shrunk) or a heap allocation made by `Box<[u8]>` and
//!   released only in `Drop`.
//! - Concurrent access is partitioned by positions, which `MappedFile` maintains:
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

use transient_pool::WriteBuffer;

use crate::sync::{AtomicUsize, Mutex, Ordering, RwLock};

use crate::SegmentIo;

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

    /// A shared view of `[start, start + len)`.
    ///
    /// # Safety
    /// The range is in bounds, and no mutable reference to any of its bytes exists
    /// while the returned slice lives (it lies below a published position).
    pub(crate) unsafe fn range(&self, start: usize, len: usize) -> &[u8] {
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
    pub(crate) unsafe fn range_mut(&self, start: usize, len: usize) -> &mut [u8] {
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

/// `posix_fallocate(fd, 0, len)`; returns 0 or an errno value.
pub(crate) fn fallocate(fd: std::os::unix::io::RawFd, len: libc::off_t) -> i32 {
    // SAFETY: posix_fallocate takes no pointers; an invalid fd is reported as EBADF.
    unsafe { libc::posix_fallocate(fd, 0, len) }
}

/// The end of `len` bytes from `start` inside one segment. A segment's length is a
/// `usize` and both lie within it, so the sum fits; `expect` guards the invariant.
fn end_of(start: usize, len: usize) -> usize {
    start.checked_add(len).expect("a range inside a segment ends inside the address space")
}

/// How an append closure reports what it did with the free tail.
pub(crate) enum Filled<T> {
    /// It wrote `bytes` bytes at the start of the tail.
    Wrote { bytes: usize, value: T },
    /// Nothing written: the record does not fit.
    DoesNotFit,
}

impl<T> Filled<T> {
    /// Bytes the closure says it wrote (0 when it did not fit).
    fn bytes(&self) -> usize {
        match self {
            Filled::Wrote { bytes, .. } => *bytes,
            Filled::DoesNotFit => 0,
        }
    }
}

/// A write to a segment written through its file (`pwrite`) failed; nothing of
/// it was published.
#[derive(Debug)]
pub(crate) struct WriteFailed {
    /// File position of the write.
    pub(crate) pos: usize,
    /// Its length.
    pub(crate) len: usize,
    /// The OS error.
    pub(crate) source: io::Error,
}

/// Why [`Region::append`] wrote nothing.
pub(crate) enum AppendRefused {
    /// The closure claimed this many bytes, more than its tail.
    Overrun(usize),
    /// The bytes could not be written to the file.
    Write(WriteFailed),
}

/// Why [`Region`] refused to move positions down.
pub(crate) enum ResetRefused {
    /// Zero-copy views are still held; lowering positions would let the appender
    /// overwrite bytes they show.
    ViewsOutstanding(usize),
    /// Position beyond the segment.
    OutOfBounds,
    /// Committing buffered bytes or erasing the tail failed.
    Write(WriteFailed),
}

/// Staging for appends to a segment written through its file is kept between
/// appends up to this size; a larger append gets a buffer of its own.
const STAGING_KEEP: usize = 4 << 20;

/// Zeros for erasing and zero-filling through the file.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// The segment's memory together with the positions that partition it, the
/// optional write buffer, and the count of outstanding zero-copy views.
///
/// Protocol (this is what makes the `unsafe` accessors sound):
/// - `wrote` moves only under `append_lock`; the appender alone touches bytes at and
///   above `wrote`, in the write buffer when one is attached, else in the memory.
/// - `committed` is the read position. Without a buffer the appender publishes it
///   together with `wrote`. With a buffer only the committer (under `commit_lock`)
///   moves it, after copying buffer `[committed, wrote)` into the memory; the
///   appender never touches memory, and no-one but the committer touches memory at or
///   above `committed`.
/// - Readers (views) read memory strictly below the `committed` they loaded with
///   Acquire, which pairs with the Release store that published those bytes.
/// - Positions only move down in `reset`, under both locks and the `gate` write lock,
///   and only when no view exists; views are created under the `gate` read lock.
/// - A *retired* region (its file handed on for reuse, `retire`) gives no view ever
///   again, and was retired only with no view outstanding: the file's bytes may
///   then change (its next life writes them) with no reference to them left.
pub(crate) struct Region {
    memory: SegmentMemory,
    /// Told about every byte written into `memory`, by the one function that
    /// writes there ([`Region::write_memory`]), so no caller can forget it. When
    /// the segment writes without mmap, every write goes to it instead
    /// ([`SegmentIo::write_at`], from [`Region::store`]).
    io: Box<dyn SegmentIo>,
    /// Bytes reach the file through `io.write_at`, never through the memory.
    file_writes: bool,
    /// Where an append to a segment written through its file is encoded before
    /// its `pwrite`; used only under `append_lock`.
    staging: Mutex<Vec<u8>>,
    wrote: AtomicUsize,
    committed: AtomicUsize,
    write_buffer: RwLock<Option<WriteBuffer>>,
    append_lock: Mutex<()>,
    commit_lock: Mutex<()>,
    /// Held shared to make a view, exclusively to move positions down or retire;
    /// true once retired.
    gate: RwLock<bool>,
    views: AtomicUsize,
    /// Loom sees only its own locks and atomics, not the bytes: every write and
    /// every read of the memory touches this too, so the models interleave them
    /// with the positions (a reader between a wrongly early publication and the
    /// write it should have waited for, say).
    #[cfg(loom)]
    memory_ops: AtomicUsize,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("len", &self.len())
            .field("wrote", &self.wrote())
            .field("committed", &self.committed())
            .field("views", &self.views())
            .finish()
    }
}

impl Region {
    pub(crate) fn new(memory: SegmentMemory, io: Box<dyn SegmentIo>) -> Self {
        let file_writes = io.writes_through_file();
        Region {
            memory,
            io,
            file_writes,
            staging: Mutex::new(Vec::new()),
            wrote: AtomicUsize::new(0),
            committed: AtomicUsize::new(0),
            write_buffer: RwLock::new(None),
            append_lock: Mutex::new(()),
            commit_lock: Mutex::new(()),
            gate: RwLock::new(false),
            views: AtomicUsize::new(0),
            #[cfg(loom)]
            memory_ops: AtomicUsize::new(0),
        }
    }

    pub(crate) fn memory(&self) -> &SegmentMemory {
        &self.memory
    }

    pub(crate) fn io(&self) -> &dyn SegmentIo {
        &*self.io
    }

    /// The one way bytes get into the memory: `write` gets `[start, start + len)`
    /// and returns how many bytes from its start it wrote (and a value); the I/O
    /// layer is told about those bytes (`SegmentIo::note_written`).
    ///
    /// # Safety
    /// The range is in bounds and nobody else references any byte of it while this
    /// runs (the caller is the appender or committer for bytes above the published
    /// position, or holds every lock and the gate with no view outstanding).
    unsafe fn write_memory<R>(&self, start: usize, len: usize, write: impl FnOnce(&mut [u8]) -> (usize, R)) -> R {
        #[cfg(loom)]
        self.memory_ops.fetch_add(1, Ordering::Relaxed);
        // SAFETY: in bounds and exclusive, per this function's contract.
        let dst = unsafe { self.memory.range_mut(start, len) };
        let (wrote, value) = write(dst);
        self.io.note_written(start, &dst[..wrote.min(len)]);
        value
    }

    /// Writes `src` at `start`: into the memory, or with `pwrite` when the segment
    /// writes through its file. Heap memory standing in for a file (the simulated
    /// storage) gets a copy, as a shared mapping shows the page cache by itself.
    ///
    /// # Safety
    /// As for [`write_memory`](Self::write_memory).
    unsafe fn store(&self, start: usize, src: &[u8]) -> Result<(), WriteFailed> {
        if !self.file_writes {
            // SAFETY: the caller's contract is `write_memory`'s.
            unsafe {
                self.write_memory(start, src.len(), |dst| {
                    dst.copy_from_slice(src);
                    (src.len(), ())
                })
            };
            return Ok(());
        }
        #[cfg(loom)]
        self.memory_ops.fetch_add(1, Ordering::Relaxed);
        self.io.write_at(start, src).map_err(|source| WriteFailed { pos: start, len: src.len(), source })?;
        if self.memory.is_writable() {
            // SAFETY: in bounds (the write above succeeded on the same range) and
            // exclusive, per this function's contract.
            unsafe { self.memory.range_mut(start, src.len()).copy_from_slice(src) };
        }
        Ok(())
    }

    /// Writes `len` zeros at `start`, through the memory or the file.
    ///
    /// # Safety
    /// As for [`write_memory`](Self::write_memory).
    unsafe fn store_zeros(&self, start: usize, len: usize) -> Result<(), WriteFailed> {
        if !self.file_writes {
            // SAFETY: the caller's contract is `write_memory`'s.
            unsafe {
                self.write_memory(start, len, |dst| {
                    dst.fill(0);
                    (len, ())
                })
            };
            return Ok(());
        }
        let end = end_of(start, len);
        let mut pos = start;
        while pos < end {
            let n = ZEROS.len().min(end.saturating_sub(pos)); // `pos < end` in the loop
                                                              // SAFETY: `[pos, pos + n)` lies in the caller's range.
            unsafe { self.store(pos, &ZEROS[..n])? };
            pos = end_of(pos, n);
        }
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.memory.len
    }

    pub(crate) fn wrote(&self) -> usize {
        // Acquire pairs with the appender's Release: callers may act on bytes below.
        self.wrote.load(Ordering::Acquire)
    }

    pub(crate) fn committed(&self) -> usize {
        // Acquire pairs with the Release that published bytes below it.
        self.committed.load(Ordering::Acquire)
    }

    pub(crate) fn has_write_buffer(&self) -> bool {
        self.write_buffer.read().is_some()
    }

    pub(crate) fn views(&self) -> usize {
        self.views.load(Ordering::Acquire)
    }

    /// Attaches a write buffer; refused (buffer handed back) unless the buffer has
    /// the segment's size, none is attached, and everything written is committed.
    pub(crate) fn attach(&self, buffer: WriteBuffer) -> Result<(), WriteBuffer> {
        let _append = self.append_lock.lock();
        let _commit = self.commit_lock.lock();
        let mut slot = self.write_buffer.write();
        if slot.is_some()
            || buffer.len() != self.len()
            || self.wrote() != self.committed()
            || self.wrote() == self.len()
        {
            return Err(buffer);
        }
        let mut buffer = buffer;
        // The buffer mirrors the segment: appends continue at the same position.
        buffer.reset(self.wrote());
        *slot = Some(buffer);
        Ok(())
    }

    /// Runs `fill` on the free tail, cut to at most `want` bytes, and publishes
    /// what it wrote: into the write buffer when one is attached, else into the
    /// memory, or with one `pwrite` when the segment writes through its file (the
    /// tail is then a staging buffer).
    pub(crate) fn append<T>(
        &self,
        want: usize,
        fill: impl FnOnce(usize, &mut [u8]) -> Filled<T>,
    ) -> Result<(usize, Filled<T>), AppendRefused> {
        let _append = self.append_lock.lock();
        let wrote = self.wrote.load(Ordering::Relaxed); // only moved under this lock
        let tail_len = self.len().saturating_sub(wrote).min(want); // `wrote <= len` always
        let buffer = self.write_buffer.read();
        if let Some(buf) = buffer.as_ref() {
            // The buffer's own protocol keeps the appender and the committer apart;
            // its published position mirrors `wrote`.
            let mut claimed = 0;
            let appended = buf.append(|start, tail| {
                debug_assert_eq!(start, wrote, "write buffer out of line with the segment");
                let filled = fill(start, &mut tail[..tail_len]);
                claimed = filled.bytes();
                // More than the cut tail is an overrun too, however long the buffer.
                (if claimed > tail_len { usize::MAX } else { claimed }, filled)
            });
            let (_, filled) = appended.map_err(|_| AppendRefused::Overrun(claimed))?;
            if filled.bytes() > 0 {
                self.wrote.store(end_of(wrote, filled.bytes()), Ordering::Release);
            }
            return Ok((wrote, filled));
        }
        let filled = if self.file_writes {
            let mut staging = self.staging.lock();
            let mut own = Vec::new();
            let tail = if tail_len <= STAGING_KEEP {
                if staging.len() < tail_len {
                    staging.resize(tail_len, 0);
                }
                &mut staging[..tail_len]
            } else {
                own.resize(tail_len, 0);
                &mut own[..]
            };
            let filled = fill(wrote, tail);
            let bytes = filled.bytes();
            if bytes > tail_len {
                return Err(AppendRefused::Overrun(bytes));
            }
            if bytes > 0 {
                // SAFETY: the appender (we hold `append_lock`) alone writes at and
                // above `wrote == committed`; readers stay below `committed`.
                unsafe { self.store(wrote, &tail[..bytes]) }.map_err(AppendRefused::Write)?;
            }
            filled
        } else {
            // SAFETY: no buffer, so the appender (we hold `append_lock`) alone writes
            // memory at and above `wrote == committed`; readers stay below `committed`.
            unsafe {
                self.write_memory(wrote, tail_len, |tail| {
                    let filled = fill(wrote, tail);
                    // An overrun is refused below, so nothing of it counts as written.
                    let reported = if filled.bytes() > tail_len { 0 } else { filled.bytes() };
                    (reported, filled)
                })
            }
        };
        let bytes = filled.bytes();
        if bytes > tail_len {
            return Err(AppendRefused::Overrun(bytes));
        }
        if bytes > 0 {
            let end = end_of(wrote, bytes);
            // Release: bytes below `end` are visible to whoever acquires these.
            self.wrote.store(end, Ordering::Release);
            self.committed.store(end, Ordering::Release);
        }
        Ok((wrote, filled))
    }

    /// Copies the write buffer's `[committed, wrote)` into the memory and publishes
    /// it; gives the buffer back once the segment is full and fully committed.
    /// Returns `(from, to)` of the committed position.
    pub(crate) fn commit(&self) -> Result<(usize, usize), WriteFailed> {
        let _commit = self.commit_lock.lock();
        let from = self.committed.load(Ordering::Relaxed); // only moved under this lock
        let to = {
            let buffer = self.write_buffer.read();
            let Some(buf) = buffer.as_ref() else {
                return Ok((from, from));
            };
            let to = self.wrote(); // Acquire: the buffer bytes below `to` are complete
            if to > from {
                // SAFETY: we hold `commit_lock`, `from` is the committed position, and
                // `to` is the wrote position we just loaded.
                unsafe { self.copy_to_memory(buf, from, to)? };
                self.committed.store(to, Ordering::Release);
            }
            to
        };
        if to == self.len() {
            // Full and fully committed: the appender is done with this buffer.
            self.write_buffer.write().take();
        }
        Ok((from, to))
    }

    /// Copies write-buffer bytes `[from, to)` into the same range of the memory.
    ///
    /// # Safety
    /// The caller holds `commit_lock`, `from` is the current committed position and
    /// `to` is at most the wrote position: no-one but the committer touches memory
    /// at or above `committed`.
    unsafe fn copy_to_memory(&self, buf: &WriteBuffer, from: usize, to: usize) -> Result<(), WriteFailed> {
        let len = to.saturating_sub(from); // `from < to` (contract)
        let src = buf.published(from, len).expect("bytes below the wrote position are published in the buffer");
        // SAFETY: memory at and above `committed` is the committer's (contract).
        unsafe { self.store(from, src) }
    }

    /// A zero-copy view of `[start, start + len)`, if it lies below the read position.
    pub(crate) fn view(self: &Arc<Self>, start: usize, len: usize) -> Option<View> {
        let retired = self.gate.read();
        if *retired {
            return None;
        }
        let end = start.checked_add(len)?;
        if end > self.committed() {
            return None;
        }
        self.views.fetch_add(1, Ordering::AcqRel);
        Some(View { region: Arc::clone(self), start, len })
    }

    /// Moves both positions to `pos`, e.g. for recovery or truncation. With a write
    /// buffer, bytes appended below `pos` but not yet committed are committed first,
    /// so they survive the reset.
    ///
    /// With `erase`, every non-zero byte of the memory at and above `pos` is then
    /// overwritten with zeros, so nothing cut off can be read again once new bytes
    /// are appended there. Returns the length of the range zeroed: from `pos` to the
    /// last non-zero byte (0 without `erase`, or if the memory is zero there). The
    /// caller syncs it.
    pub(crate) fn reset(&self, pos: usize, erase: bool) -> Result<usize, ResetRefused> {
        if pos > self.len() {
            return Err(ResetRefused::OutOfBounds);
        }
        let _append = self.append_lock.lock();
        let _commit = self.commit_lock.lock();
        let _gate = self.gate.write();
        let views = self.views();
        let committed = self.committed();
        if views > 0 && pos < committed {
            return Err(ResetRefused::ViewsOutstanding(views));
        }
        if let Some(buf) = self.write_buffer.write().as_mut() {
            let end = pos.min(self.wrote());
            if end > committed {
                // SAFETY: we hold `commit_lock` (and `append_lock`), `committed` is the
                // committed position, and `end` is at most the wrote position.
                unsafe { self.copy_to_memory(buf, committed, end) }.map_err(ResetRefused::Write)?;
            }
            // Buffer bytes above `pos` are stale now: unpublished, the appender
            // overwrites them before any commit copies them.
            buf.reset(pos);
        }
        self.wrote.store(pos, Ordering::Release);
        self.committed.store(pos, Ordering::Release);
        if pos == self.len() {
            self.write_buffer.write().take();
            return Ok(0);
        }
        if !erase {
            return Ok(0);
        }
        #[cfg(loom)]
        self.memory_ops.load(Ordering::Relaxed);
        // SAFETY: we hold both locks and the gate write lock, and no view reaches
        // `pos` or above (checked above; views are only made under the gate read
        // lock): nobody else references memory at or above `pos`.
        let tail = unsafe { self.memory.range(pos, self.len().saturating_sub(pos)) };
        // `last < tail.len()`, so `last + 1` fits.
        let erased = tail.iter().rposition(|&b| b != 0).map_or(0, |last| last.saturating_add(1));
        if erased > 0 {
            // SAFETY: as above; the shared view of the tail is no longer used.
            unsafe { self.store_zeros(pos, erased) }.map_err(ResetRefused::Write)?;
        }
        Ok(erased)
    }

    /// Retires the region for good: no view is given out again. Refused, with the
    /// count, while views are outstanding (their bytes must not change).
    pub(crate) fn retire(&self) -> Result<(), usize> {
        let mut retired = self.gate.write();
        let views = self.views();
        if views > 0 {
            return Err(views);
        }
        *retired = true;
        Ok(())
    }

    /// Undoes [`retire`](Self::retire) when the hand-over failed.
    pub(crate) fn unretire(&self) {
        *self.gate.write() = false;
    }

    /// Writes zeros over the whole segment (through the memory, faulting every page
    /// in, or through the file); only while nothing has been appended. Returns
    /// false (and does nothing) otherwise.
    pub(crate) fn zero_fill(&self) -> Result<bool, WriteFailed> {
        let _append = self.append_lock.lock();
        let _commit = self.commit_lock.lock();
        if self.wrote() != 0 || self.committed() != 0 {
            return Ok(false);
        }
        // SAFETY: nothing is published (both positions are 0), so no view exists, and
        // we hold both locks, so no appender or committer runs.
        unsafe { self.store_zeros(0, self.len())? };
        Ok(true)
    }
}

/// A zero-copy view of published segment bytes; keeps the memory alive and blocks
/// position resets while held.
pub(crate) struct View {
    region: Arc<Region>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        #[cfg(loom)]
        self.region.memory_ops.load(Ordering::Relaxed);
        // SAFETY: the range lay below `committed` when the view was made, and
        // positions cannot be reset below it while `views > 0`; bytes below
        // `committed` are never written.
        unsafe { self.region.memory.range(self.start, self.len) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.region.views.fetch_sub(1, Ordering::AcqRel);
    }
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
}
