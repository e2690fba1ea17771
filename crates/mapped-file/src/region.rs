//! The only module of this crate with `unsafe` code: the position protocol over a
//! segment's memory ([`Region`]), the one place that reads and writes it through
//! [`SegmentMemory`]'s `unsafe` accessors, whose contracts the protocol keeps.

use std::io;
use std::sync::Arc;

use store_io::{SegmentIo, SegmentMemory};
use transient_pool::WriteBuffer;

use crate::sync::{AtomicUsize, Mutex, Ordering, RwLock};

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
        self.memory.len()
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

    /// Writes zeros over `[start, start + len)` of the segment (through the memory,
    /// faulting its pages in, or through the file); only while nothing has been
    /// appended. Returns false (and does nothing) otherwise, or when the range does
    /// not lie inside the segment.
    pub(crate) fn zero_fill(&self, start: usize, len: usize) -> Result<bool, WriteFailed> {
        let _append = self.append_lock.lock();
        let _commit = self.commit_lock.lock();
        if self.wrote() != 0 || self.committed() != 0 || start.checked_add(len).is_none_or(|end| end > self.len()) {
            return Ok(false);
        }
        // SAFETY: in bounds (checked above); nothing is published (both positions
        // are 0), so no view exists, and we hold both locks, so no appender or
        // committer runs.
        unsafe { self.store_zeros(start, len)? };
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
