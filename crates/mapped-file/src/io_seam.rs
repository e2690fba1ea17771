//! The I/O seam under a segment: [`Storage`] for the directory, [`SegmentIo`] for one
//! segment, and the real implementation, [`MmapStorage`].
//!
//! The simulated implementation, [`SimStorage`](crate::sim::SimStorage), runs the
//! same `MappedFile` logic over heap memory so tests can fail syncs and drop
//! unsynced bytes.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
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
    time.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A freshly created or opened segment: its memory and its I/O handle.
#[derive(Debug)]
pub struct OpenedSegment {
    /// Where the segment's bytes live (a mapping, or heap memory).
    pub memory: SegmentMemory,
    /// Durability operations for that memory.
    pub io: Box<dyn SegmentIo>,
}

/// Durability operations on one segment's memory.
///
/// Contract:
/// - [`note_written`](Self::note_written) is called with every byte range written
///   into the memory, before it is published to readers; implementations that do not
///   need it (a real mapping) leave the default no-op.
/// - [`sync_range`](Self::sync_range) returns `Ok` only if every byte of the range
///   is durable. After it returns an error, the caller must treat the segment as
///   failed: a later `Ok` proves nothing (fsyncgate), and `MappedFile` latches.
/// - Bytes never synced may be lost, in any subset, on a crash.
pub trait SegmentIo: Send + Sync + fmt::Debug {
    /// Bytes `[offset, offset + bytes.len())` were written into the memory.
    fn note_written(&self, offset: usize, bytes: &[u8]) {
        let _ = (offset, bytes);
    }

    /// Makes `[offset, offset + len)` of `memory` durable (`msync(MS_SYNC)`).
    fn sync_range(&self, memory: &SegmentMemory, offset: usize, len: usize) -> io::Result<()>;

    /// Advises the kernel the whole segment will be needed and, if `lock`, pins it.
    fn advise_and_lock(&self, memory: &SegmentMemory, lock: bool) -> io::Result<()> {
        memory.advise_and_lock(lock)
    }

    /// Deletes the backing file; the memory stays valid until dropped.
    fn remove(&self) -> io::Result<()>;
}

/// A directory of segment files.
///
/// Contract: [`create`](Self::create) returns only once the new file has its full
/// length allocated (a full disk is an error here, never a SIGBUS later) and its
/// directory entry is durable; new bytes read as zero.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Lists the regular files directly in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;
    /// Creates a new file of exactly `len` bytes (it must not exist) and maps it.
    fn create(&self, path: &Path, len: usize) -> io::Result<OpenedSegment>;
    /// Maps the first `len` bytes of an existing file.
    fn open(&self, path: &Path, len: usize) -> io::Result<OpenedSegment>;
    /// Deletes a file that is not open as a segment (e.g. a zero-length leftover).
    fn remove(&self, path: &Path) -> io::Result<()>;
}

/// The real storage: files preallocated with `fallocate` and mapped shared.
#[derive(Debug, Clone, Copy, Default)]
pub struct MmapStorage;

/// Fsyncs a directory so that entries created or removed in it survive a power cut.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn parent_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Allocates `[0, len)` of `file` on disk, so that writes through a mapping can
/// never hit ENOSPC (which would arrive as SIGBUS).
fn preallocate(file: &File, len: usize) -> io::Result<()> {
    let off_len =
        libc::off_t::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
    let rc = crate::raw::fallocate(file.as_raw_fd(), off_len);
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => {
            // The filesystem cannot fallocate: write zeros, which allocates as well.
            use std::os::unix::fs::FileExt;
            let zeros = vec![0u8; 1 << 20];
            let mut pos = 0usize;
            while pos < len {
                let n = zeros.len().min(len - pos);
                file.write_all_at(&zeros[..n], pos as u64)?;
                pos += n;
            }
            Ok(())
        }
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

impl Storage for MmapStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_file() {
                out.push(DirEntry {
                    name: entry.file_name().to_string_lossy().into_owned(),
                    len: meta.len(),
                    modified_ms: meta.modified().map(epoch_ms).unwrap_or(0),
                });
            }
        }
        Ok(out)
    }

    fn create(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        let setup = preallocate(&file, len)
            .and_then(|()| file.sync_all())
            // The new directory entry must survive a power cut, or recovery would
            // find a hole where this segment was.
            .and_then(|()| sync_dir(parent_of(path)))
            .and_then(|()| SegmentMemory::map_file(&file, len));
        match setup {
            Ok(memory) => {
                Ok(OpenedSegment { memory, io: Box::new(MmapSegment { path: path.to_path_buf(), _file: file }) })
            }
            Err(err) => {
                // Leave no half-made file behind: the next start would see a wrong size.
                drop(file);
                let _ = fs::remove_file(path);
                Err(err)
            }
        }
    }

    fn open(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let actual = file.metadata()?.len();
        if actual < len as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("file has {actual} bytes, expected {len}")));
        }
        let memory = SegmentMemory::map_file(&file, len)?;
        Ok(OpenedSegment { memory, io: Box::new(MmapSegment { path: path.to_path_buf(), _file: file }) })
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)?;
        sync_dir(parent_of(path))
    }
}

/// One mapped file. The `File` stays open for the life of the mapping.
#[derive(Debug)]
struct MmapSegment {
    path: PathBuf,
    _file: File,
}

impl SegmentIo for MmapSegment {
    fn sync_range(&self, memory: &SegmentMemory, offset: usize, len: usize) -> io::Result<()> {
        memory.sync_range(offset, len)
    }

    fn remove(&self) -> io::Result<()> {
        fs::remove_file(&self.path)?;
        sync_dir(parent_of(&self.path))
    }
}
