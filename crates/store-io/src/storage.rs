//! The seam under a log: [`Storage`] for a store's directory (segments and the
//! small files beside them), [`SegmentIo`] for one segment, and what they exchange
//! ([`OpenedSegment`], [`DirEntry`], [`DiskSpace`]). Their contracts are written
//! on the traits; [`MmapStorage`](crate::MmapStorage) is the real implementation.
//! [`remove_files`] empties a directory through any storage.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::SegmentMemory;

/// One file in a storage directory, as [`Storage::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The file name (lossily converted if it is not UTF-8).
    pub name: String,
    /// The file length in bytes.
    pub len: u64,
    /// Last modification time, milliseconds since the Unix epoch (0 if unknown).
    pub modified_ms: u64,
}

/// Milliseconds since the Unix epoch of a `SystemTime` (0 if before the epoch).
pub fn epoch_ms(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How full the file system under a storage directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    /// Size of the file system, in bytes.
    pub total: u64,
    /// Bytes not in use, the space reserved for root included.
    pub free: u64,
    /// Bytes available to unprivileged processes (`free` less the reserve).
    pub available: u64,
}

impl DiskSpace {
    /// The used share, in percent (0 to 100), as `df` shows it: used bytes over
    /// used plus available ones, so space reserved for root counts neither as used
    /// nor as room (on some systems the reserve is most of the disk). 100 when
    /// nothing is used nor available.
    pub fn used_percent(&self) -> f64 {
        let (used, room) = self.used_and_room();
        if room == 0 {
            return 100.0;
        }
        100.0 * used as f64 / room as f64
    }

    /// The used share, in percent, once `bytes` more are taken (a new file's
    /// preallocation), counted as [`used_percent`](Self::used_percent) counts it.
    pub fn used_percent_after(&self, bytes: u64) -> f64 {
        let (used, room) = self.used_and_room();
        if room == 0 {
            return 100.0;
        }
        100.0 * used.saturating_add(bytes) as f64 / room as f64
    }

    /// Bytes to free to bring the used share, counted as
    /// [`used_percent`](Self::used_percent) counts it, down to `percent`
    /// (rounded up to whole bytes; 0 when it is there already).
    pub fn bytes_above(&self, percent: f64) -> u64 {
        let (used, room) = self.used_and_room();
        let allowed = (room as f64 * percent / 100.0).floor();
        let over = (used as f64 - allowed).max(0.0).ceil();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // in 0..=used
        let over = over as u64;
        over.min(used)
    }

    /// Used bytes, and used plus available ones.
    fn used_and_room(&self) -> (u64, u64) {
        let used = self.total.saturating_sub(self.free);
        (used, used.saturating_add(self.available))
    }
}

/// A freshly created or opened segment: its memory and its I/O handle.
#[derive(Debug)]
pub struct OpenedSegment {
    /// Where the segment's bytes live (a mapping, or heap memory).
    pub memory: SegmentMemory,
    /// Durability operations for that memory.
    pub io: Box<dyn SegmentIo>,
}

/// Durability operations on one segment's memory, and its writes when the segment
/// is written without mmap.
///
/// Contract:
/// - A segment is written one of two ways, fixed for its life. Through the memory
///   ([`writes_through_file`](Self::writes_through_file) false, the default):
///   [`note_written`](Self::note_written) is called with every byte range written
///   into the memory, before it is published to readers. No caller has to remember
///   it: the segment's memory is written in exactly one place, which calls it.
///   Implementations that do not need it (a real mapping) leave the default no-op.
///   Through the file (true): every byte goes through
///   [`write_at`](Self::write_at), before it is published, and the memory is only
///   read (a read-only mapping shows what the writes put in the page cache).
/// - [`sync_range`](Self::sync_range) returns `Ok` only if every byte of the range
///   is durable. After it returns an error, the caller must treat the segment as
///   failed: a later `Ok` proves nothing (fsyncgate), and `MappedFile` latches.
/// - Bytes never synced may be lost, in any subset, on a crash.
pub trait SegmentIo: Send + Sync + fmt::Debug {
    /// Bytes `[offset, offset + bytes.len())` were written into the memory.
    fn note_written(&self, offset: usize, bytes: &[u8]) {
        let _ = (offset, bytes);
    }

    /// True when bytes reach this segment through [`write_at`](Self::write_at)
    /// (write without mmap), false when they are written into its memory.
    fn writes_through_file(&self) -> bool {
        false
    }

    /// Writes `bytes` at file position `offset` (`pwrite`), for a segment that
    /// [writes through its file](Self::writes_through_file). The default refuses.
    fn write_at(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        let _ = (offset, bytes);
        Err(io::Error::new(io::ErrorKind::Unsupported, "this segment is written through its memory"))
    }

    /// Makes `[offset, offset + len)` of `memory` durable (`msync(MS_SYNC)` of a
    /// mapping written through, `fdatasync` of a file written with `pwrite`).
    fn sync_range(&self, memory: &SegmentMemory, offset: usize, len: usize) -> io::Result<()>;

    /// Advises the kernel the whole segment will be needed and, if `lock`, pins it.
    fn advise_and_lock(&self, memory: &SegmentMemory, lock: bool) -> io::Result<()> {
        memory.advise_and_lock(lock)
    }

    /// Deletes the backing file; the memory stays valid until dropped.
    fn remove(&self) -> io::Result<()>;

    /// Moves the backing file to `to` (in a directory of the same storage),
    /// durably: once this returns, a crash finds it at `to`. For handing a
    /// retired segment's file on for reuse. The default refuses.
    fn rename(&self, to: &Path) -> io::Result<()> {
        let _ = to;
        Err(io::Error::new(io::ErrorKind::Unsupported, "this storage cannot rename segments"))
    }
}

/// A directory of segment files, and the small files beside them (a checkpoint,
/// markers).
///
/// Contract:
/// - [`create`](Self::create) returns only once the new file has its full length
///   allocated (a full disk is an error here, never a SIGBUS later) and its
///   directory entry is durable; new bytes read as zero.
/// - [`create_dir_all`](Self::create_dir_all) returns only once every directory
///   it made is durable (its entry synced in its parent), so a file created
///   durably in it survives a power cut with its path;
///   [`create_dir_all_deferred`](Self::create_dir_all_deferred) leaves that to a
///   later [`sync_all_under`](Self::sync_all_under).
/// - [`replace_small`](Self::replace_small) is atomic and durable: after a crash
///   the file holds the old content or the new one, never a mix; once it returns,
///   the new one. [`remove`](Self::remove) is durable once it returns.
/// - The storage owns its files for as long as anything it mapped is alive: no
///   other storage, in this process or another, maps or writes them meanwhile.
///   [`MmapStorage`](crate::MmapStorage) enforces this with a lock file; the segment memory's
///   soundness rests on it.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `dir` and its parents if missing, durably: each directory made
    /// has its entry synced in its parent before this returns.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// [`create_dir_all`](Self::create_dir_all) without the syncs: the new
    /// directories' entries become durable with a later
    /// [`sync_all_under`](Self::sync_all_under) over them, and until that
    /// returns a power cut may lose them with everything in them. For the many
    /// small directories of an owner that can afford to lose them (derived data
    /// rebuilt from a log). By default the same as
    /// `create_dir_all` (durable).
    fn create_dir_all_deferred(&self, dir: &Path) -> io::Result<()> {
        self.create_dir_all(dir)
    }
    /// Lists the regular files directly in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;
    /// Creates a new file of exactly `len` bytes (it must not exist) and maps it.
    fn create(&self, path: &Path, len: usize) -> io::Result<OpenedSegment>;
    /// [`create`](Self::create) without making the new file durable: its
    /// allocation and directory entry are synced by a later
    /// [`sync_all_under`](Self::sync_all_under) over its directory, and until
    /// that returns a power cut may lose the whole file (syncing its data does
    /// not keep it). For many small files whose owner can afford to lose them
    /// (derived data rebuilt from a log). By default
    /// the same as `create` (durable).
    fn create_deferred(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        self.create(path, len)
    }
    /// Maps the first `len` bytes of an existing file.
    fn open(&self, path: &Path, len: usize) -> io::Result<OpenedSegment>;
    /// Deletes a file that is not open as a segment (a zero-length leftover, a
    /// marker), durably.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// The whole content of a small file; `Ok(None)` if it does not exist.
    fn read_small(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Replaces (or creates) a small file with `bytes`, atomically and durably.
    fn replace_small(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Moves a file that is not open as a segment from `from` to `to` (which must
    /// not exist), durably: a crash finds it at one name or the other, and at `to`
    /// once this returns. The default refuses.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let _ = (from, to);
        Err(io::Error::new(io::ErrorKind::Unsupported, "this storage cannot rename files"))
    }
    /// How full the file system holding `dir` is; `Ok(None)` if this storage cannot
    /// tell (the default).
    fn disk_space(&self, dir: &Path) -> io::Result<Option<DiskSpace>> {
        let _ = dir;
        Ok(None)
    }
    /// Makes everything written so far to the files under `dir` durable, also
    /// files no longer open (closed with their data only in the page cache): one
    /// call instead of a sync per file. The real storage syncs the whole file
    /// system (`syncfs`). `Unsupported` by default: sync each file instead.
    fn sync_all_under(&self, dir: &Path) -> io::Result<()> {
        let _ = dir;
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    /// Gives the directory up: nothing is created, opened or written through this
    /// storage afterwards (such calls fail). What is still mapped stays valid, and
    /// the directory stays owned until the last mapping is gone. Idempotent.
    fn release(&self) {}
}

/// Removes every file [`Storage::list`] reports in `dir`, each with
/// [`Storage::remove`] (durable once it returns): what an owner of derived
/// data does before it rebuilds it whole. A missing directory has none; the
/// directory itself stays. Returns how many files were removed.
///
/// `err` makes the caller's own error of a failure: the path it concerns (`dir`
/// for the listing, the file for a removal) and the OS error. The files
/// removed before a failure stay removed.
///
/// ```
/// use store_io::{remove_files, MmapStorage, Storage};
///
/// let dir = tempfile::tempdir()?;
/// let storage = MmapStorage::lock(dir.path())?;
/// let index = dir.path().join("index");
/// storage.create_dir_all(&index)?;
/// storage.replace_small(&index.join("a"), b"1")?;
/// storage.replace_small(&index.join("b"), b"2")?;
/// assert_eq!(remove_files(&storage, &index, |_, source| source)?, 2);
/// assert!(storage.list(&index)?.is_empty());
/// assert_eq!(remove_files(&storage, &dir.path().join("missing"), |_, source| source)?, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn remove_files<E>(storage: &dyn Storage, dir: &Path, err: impl Fn(PathBuf, io::Error) -> E) -> Result<usize, E> {
    let files = match storage.list(dir) {
        Ok(files) => files,
        Err(source) if source.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(err(dir.to_path_buf(), source)),
    };
    for file in &files {
        let path = dir.join(&file.name);
        if let Err(source) = storage.remove(&path) {
            return Err(err(path, source));
        }
    }
    Ok(files.len())
}
