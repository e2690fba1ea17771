//! The real storage: files preallocated with `fallocate`, mapped shared, in
//! directory trees held with a lock file; small files replaced atomically.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::memory::{fallocate, statvfs};
use crate::{epoch_ms, DirEntry, DiskSpace, OpenedSegment, SegmentIo, SegmentMemory, Storage};

/// Name of the lock file [`MmapStorage`] holds in its directory.
pub const LOCK_FILE: &str = "lock";

/// Why [`MmapStorage::lock`] could not take a directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another storage (in this process or another) holds the directory.
    #[error("{} is locked by {} (lock file {})", dir.display(), if *by_this_process { "another storage of this process" } else { "another process" }, lock_file.display())]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// Its lock file.
        lock_file: PathBuf,
        /// The holder is a storage of this process (or a mapping one made,
        /// still alive), not another process.
        by_this_process: bool,
    },
    /// Two of the directories asked for lie one inside the other (or are the
    /// same): each would be locked twice, and paths under the inner one would
    /// have two owners.
    #[error("{} and {} overlap: the directories of one storage must be disjoint", first.display(), second.display())]
    Overlapping {
        /// One directory.
        first: PathBuf,
        /// The other, inside it or equal to it (or the reverse).
        second: PathBuf,
    },
    /// Creating the directory or the lock file, or locking it, failed.
    #[error("cannot lock {}: {source}", path.display())]
    Io {
        /// The directory or lock file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The held `flock` of a directory. Every mapping made under it keeps a reference,
/// so the lock outlives every byte a reader could still see.
#[derive(Debug)]
struct DirLock {
    _file: File,
    /// Its key in [`HELD_HERE`].
    key: PathBuf,
}

/// The lock files this process holds (canonical paths), so a refused lock can
/// say whether the holder is this process (an open store, or a record view
/// that outlived its store) or another one.
static HELD_HERE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

impl Drop for DirLock {
    fn drop(&mut self) {
        let mut held = HELD_HERE.lock();
        if let Some(at) = held.iter().position(|k| k == &self.key) {
            held.swap_remove(at);
        }
    }
}

/// The real storage: files preallocated with `fallocate` and mapped shared, in
/// one or more directory trees this storage holds an exclusive lock on.
///
/// Two write paths ([`write_without_mmap`](Self::write_without_mmap), RocketMQ's
/// `writeWithoutMmap`): appends copied into a read-write mapping and synced with
/// `msync`, or written with `pwrite` and synced with `fdatasync`, the mapping then
/// read-only and used only by readers. The second takes no page faults and no
/// write-protect faults after writeback on the append path, and its sync costs
/// about half an `msync` of the same bytes on ext4 (the repository's docs/benchmarks.md).
///
/// Mapping a file shared is sound only while nobody else writes or truncates it:
/// a change under a live `&[u8]` is undefined behaviour, a truncation a SIGBUS.
/// So the mapping is made only here, under the lock: [`lock`](Self::lock) takes an
/// exclusive `flock` on `<root>/lock` (the same lock in every process using this
/// crate), every path must lie under the root, and each mapping keeps the lock
/// alive until it is unmapped. A store spread over several disks locks each of
/// its directories the same way ([`lock_all`](Self::lock_all)). What the lock
/// cannot stop is a program that ignores it and writes the files directly, the
/// caveat of every memory-mapped store.
#[derive(Debug)]
pub struct MmapStorage {
    /// The locked directories, disjoint; the first is the primary one.
    roots: Vec<PathBuf>,
    /// One lock per root, in the same order; `None` once released.
    locks: Mutex<Option<Vec<Arc<DirLock>>>>,
    write_without_mmap: bool,
}

impl MmapStorage {
    /// Creates, preallocates and maps a new file; `durable`: its allocation
    /// and directory entry synced before it returns.
    fn create_file(&self, path: &Path, len: usize, durable: bool) -> io::Result<OpenedSegment> {
        let lock = self.held(path)?;
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        let setup = preallocate(&file, len)
            .and_then(|()| if durable { file.sync_all() } else { Ok(()) })
            // The new directory entry must survive a power cut, or recovery would
            // find a hole where this segment was.
            .and_then(|()| if durable { sync_dir(parent_of(path)) } else { Ok(()) })
            .and_then(|()| self.map(&file, len, lock));
        match setup {
            Ok(memory) => Ok(OpenedSegment { memory, io: self.segment_io(path, file) }),
            Err(err) => {
                // Leave no half-made file behind: the next start would see a wrong size.
                drop(file);
                let _ = fs::remove_file(path);
                Err(err)
            }
        }
    }

    /// Takes `root` for this storage: creates it if missing and takes an
    /// exclusive lock on `<root>/lock` ([`LOCK_FILE`]), held until the storage is
    /// [released](Storage::release) or dropped and every mapping made through it is
    /// gone. Another storage over the same root, in any process, gets
    /// [`LockError::Locked`].
    pub fn lock(root: &Path) -> Result<Self, LockError> {
        Self::lock_all([root])
    }

    /// Takes several directories for one storage (a store spread over disks),
    /// each as [`lock`](Self::lock) takes one: every path the storage is asked for
    /// must lie under one of them. The first is the [primary](Self::root). The
    /// directories must be disjoint ([`LockError::Overlapping`] otherwise); if
    /// any cannot be locked, none stays locked.
    pub fn lock_all<P: AsRef<Path>>(roots: impl IntoIterator<Item = P>) -> Result<Self, LockError> {
        let roots: Vec<PathBuf> = roots.into_iter().map(|r| r.as_ref().to_path_buf()).collect();
        if roots.is_empty() {
            return Err(LockError::Io {
                path: PathBuf::new(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "no directory to lock"),
            });
        }
        if let Some((first, second)) = first_overlap(&roots) {
            return Err(LockError::Overlapping { first: first.to_path_buf(), second: second.to_path_buf() });
        }
        let locks = roots.iter().map(|root| lock_dir(root)).collect::<Result<Vec<_>, _>>()?;
        Ok(MmapStorage { roots, locks: Mutex::new(Some(locks)), write_without_mmap: true })
    }

    /// Chooses how segments created or opened from now on are written: with
    /// `pwrite` + `fdatasync` through a read-only mapping (`true`, the default
    /// of a new storage, as the `commitlog` facade's), or through a read-write
    /// mapping with `msync` (`false`). The file format is the same either way.
    pub fn write_without_mmap(mut self, enable: bool) -> Self {
        self.write_without_mmap = enable;
        self
    }

    /// True when segments are written with `pwrite` rather than through the mapping.
    pub fn writes_without_mmap(&self) -> bool {
        self.write_without_mmap
    }

    /// The primary locked directory (the first given).
    pub fn root(&self) -> &Path {
        &self.roots[0]
    }

    /// Every locked directory, the primary first.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The lock, if still held, of the root a path must lie under.
    fn held(&self, path: &Path) -> io::Result<Arc<DirLock>> {
        let Some(index) = self.roots.iter().position(|root| path.starts_with(root)) else {
            let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is outside the locked directories ({})", path.display(), roots.join(", ")),
            ));
        };
        let locks = self.locks.lock();
        locks.as_ref().and_then(|locks| locks.get(index).cloned()).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, format!("storage for {} was released", self.root().display()))
        })
    }

    // The one `unsafe` outside `memory.rs`: the mapping is made here because the lock
    // that makes it sound is held here.
    #[allow(unsafe_code)]
    fn map(&self, file: &File, len: usize, lock: Arc<DirLock>) -> io::Result<SegmentMemory> {
        // The mapping keeps `lock` until unmapped, and this storage never truncates
        // a mapped file (segments keep their size for life).
        let memory = if self.write_without_mmap {
            // SAFETY: as below; the file is written only by the segment owning this
            // memory (`FileSegment::write_at`, called under its position protocol).
            unsafe { SegmentMemory::map_file_read_only(file, len)? }
        } else {
            // SAFETY: `lock` is this storage's exclusive lock on the directory
            // holding `file` (checked by `held`): no other storage maps, writes or
            // truncates it.
            unsafe { SegmentMemory::map_file(file, len)? }
        };
        Ok(memory.keeping_alive(lock))
    }

    fn segment_io(&self, path: &Path, file: File) -> Box<dyn SegmentIo> {
        Box::new(MmapSegment { path: path.to_path_buf(), file, write_without_mmap: self.write_without_mmap })
    }
}

/// Creates `root` if missing and takes the exclusive lock on `<root>/lock`.
fn lock_dir(root: &Path) -> Result<Arc<DirLock>, LockError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LockError::Io { path, source }
    };
    create_dir_all_durably(root).map_err(io_err(root))?;
    let lock_path = root.join(LOCK_FILE);
    let file =
        OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io_err(&lock_path))?;
    let key = fs::canonicalize(&lock_path).unwrap_or_else(|_| lock_path.clone());
    match file.try_lock() {
        Ok(()) => {
            HELD_HERE.lock().push(key.clone());
            Ok(Arc::new(DirLock { _file: file, key }))
        }
        Err(fs::TryLockError::WouldBlock) => {
            let by_this_process = HELD_HERE.lock().contains(&key);
            Err(LockError::Locked { dir: root.to_path_buf(), lock_file: lock_path, by_this_process })
        }
        Err(fs::TryLockError::Error(source)) => Err(LockError::Io { path: lock_path, source }),
    }
}

/// The regular files directly in `dir`.
pub(crate) fn list_files(dir: &Path) -> io::Result<Vec<DirEntry>> {
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

/// The first two of `dirs` (in order) of which one lies inside the other, or is
/// the same: directories a store spreads its files over must be disjoint, or
/// paths under the inner one would have two owners. The one rule the storage,
/// the segment queue and the log's config all check.
pub fn first_overlap<P: AsRef<Path>>(dirs: &[P]) -> Option<(&Path, &Path)> {
    dirs.iter().enumerate().find_map(|(i, first)| {
        let first = first.as_ref();
        dirs.iter()
            .skip(i.saturating_add(1))
            .map(AsRef::as_ref)
            .find(|d| d.starts_with(first) || first.starts_with(d))
            .map(|second| (first, second))
    })
}

/// Fsyncs a directory so that entries created or removed in it survive a power cut.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and its missing parents, then syncs the parent of each one
/// made, outermost first: a directory's entry lives in its parent, and a power
/// cut keeps it (and everything created inside, however durably) only once
/// that parent is synced (fjall does the same).
fn create_dir_all_durably(dir: &Path) -> io::Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.as_os_str().is_empty() && !d.exists()).collect();
    fs::create_dir_all(dir)?;
    for made in missing.iter().rev() {
        sync_dir(parent_of(made))?;
    }
    Ok(())
}

fn parent_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Allocates `[0, len)` of `file` on disk, so that writes through a mapping can
/// never hit ENOSPC (which would arrive as SIGBUS).
fn preallocate(file: &File, len: usize) -> io::Result<()> {
    let off_len =
        libc::off_t::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
    let rc = fallocate(file.as_raw_fd(), off_len);
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => {
            // The filesystem cannot fallocate: write zeros, which allocates as well.
            use std::os::unix::fs::FileExt;
            let zeros = vec![0u8; 1 << 20];
            let mut pos = 0usize;
            while pos < len {
                let n = zeros.len().min(len.saturating_sub(pos)); // `pos < len` in the loop
                file.write_all_at(&zeros[..n], pos as u64)?;
                pos = pos.saturating_add(n);
            }
            Ok(())
        }
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

impl Storage for MmapStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.held(dir)?;
        create_dir_all_durably(dir)
    }

    fn create_dir_all_deferred(&self, dir: &Path) -> io::Result<()> {
        self.held(dir)?;
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.held(dir)?;
        list_files(dir)
    }

    fn create(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        self.create_file(path, len, true)
    }

    fn create_deferred(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        self.create_file(path, len, false)
    }

    fn open(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        let lock = self.held(path)?;
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let actual = file.metadata()?.len();
        if actual < len as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("file has {actual} bytes, expected {len}")));
        }
        let memory = self.map(&file, len, lock)?;
        Ok(OpenedSegment { memory, io: self.segment_io(path, file) })
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.held(path)?;
        fs::remove_file(path)?;
        sync_dir(parent_of(path))
    }

    fn read_small(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.held(path)?;
        match fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn replace_small(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.held(path)?;
        // Write a temporary file, sync it, rename it over the old one, sync the
        // directory: a crash leaves the old content or the new, never a mix.
        let mut tmp_name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        tmp_name.push(".tmp");
        let tmp = path.with_file_name(tmp_name);
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        sync_dir(parent_of(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.held(from)?;
        self.held(to)?;
        rename_durably(from, to)
    }

    fn sync_all_under(&self, dir: &Path) -> io::Result<()> {
        self.held(dir)?;
        use std::os::unix::io::AsRawFd;
        crate::memory::syncfs(File::open(dir)?.as_raw_fd())
    }

    fn disk_space(&self, dir: &Path) -> io::Result<Option<DiskSpace>> {
        self.held(dir)?;
        let (total, free, available) = statvfs(dir)?;
        Ok(Some(DiskSpace { total, free, available }))
    }

    fn release(&self) {
        self.locks.lock().take();
    }
}

/// `rename(2)` refusing to replace an existing `to`, then an fsync of each
/// directory involved, so the move survives a power cut.
fn rename_durably(from: &Path, to: &Path) -> io::Result<()> {
    if to.exists() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} exists", to.display())));
    }
    fs::rename(from, to)?;
    sync_dir(parent_of(to))?;
    if parent_of(from) != parent_of(to) {
        sync_dir(parent_of(from))?;
    }
    Ok(())
}

/// One mapped file. The `File` stays open for the life of the mapping.
#[derive(Debug)]
struct MmapSegment {
    path: PathBuf,
    file: File,
    /// Written with `pwrite` and synced with `fdatasync`; the mapping is read-only.
    write_without_mmap: bool,
}

impl SegmentIo for MmapSegment {
    fn writes_through_file(&self) -> bool {
        self.write_without_mmap
    }

    fn write_at(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if !self.write_without_mmap {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "this segment is written through its mapping"));
        }
        self.file.write_all_at(bytes, offset as u64)
    }

    fn sync_range(&self, memory: &SegmentMemory, offset: usize, len: usize) -> io::Result<()> {
        if self.write_without_mmap {
            // Every byte of the file went through `pwrite`: one fdatasync covers the
            // range (and whatever else of the file is dirty).
            self.file.sync_data()
        } else {
            memory.sync_range(offset, len)
        }
    }

    fn remove(&self) -> io::Result<()> {
        fs::remove_file(&self.path)?;
        sync_dir(parent_of(&self.path))
    }

    fn rename(&self, to: &Path) -> io::Result<()> {
        rename_durably(&self.path, to)
    }
}
