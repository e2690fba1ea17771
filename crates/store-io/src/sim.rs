//! Simulated storage for tests: the real `MappedFile` logic over heap memory, with a
//! model of what a power cut keeps.
//!
//! Each file has a *cache* image (what the page cache holds: every byte written) and
//! a *durable* image (what survived the last successful sync of each range). A crash
//! keeps an arbitrary subset of the dirty 512-byte sectors (the model of arbitrary
//! writeback order and torn pages), then the cache becomes the durable image. Syncs
//! are counted, and the Nth one can be made to fail, in which case nothing of its
//! range becomes durable (the data is lost, as after fsyncgate).
//!
//! A failed sync models fsyncgate: the range's dirty sectors are marked clean
//! without reaching the durable image, so a later sync of the same range reports
//! success and still does not persist them (until they are written again).
//!
//! File creation and removal are durable as soon as they return, as `MmapStorage`
//! makes them with a directory fsync; so is `create_dir_all`. A directory made by
//! `create_dir_all_deferred` is not: until a `sync_all_under` covers it, a power
//! cut may lose it with every file and directory inside, however durably those
//! were made (a directory's entry lives in its parent). Small files (a checkpoint, markers) are
//! replaced atomically and durably, as `MmapStorage` does with write, fsync, rename
//! and a directory fsync: a crash keeps the last content they were given. Each
//! replacement and removal is an event, so crash states fall between them too.
//!
//! For crash-state enumeration, [`SimStorage::set_snapshot_sink`] sends a
//! [`SimSnapshot`] after every write and every sync: the durable image of each file
//! and its dirty sectors, from which any crash image can be built.

// Sector and byte arithmetic here indexes in-memory `Vec`s: every sum is bounded
// by a vector's length, and event and sync counters are u64s that a test cannot
// run up to overflow.
#![allow(clippy::arithmetic_side_effects)]

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::SegmentMemory;
use crate::{epoch_ms, DirEntry, OpenedSegment, SegmentIo, Storage};

/// Sector size of the torn-write model.
pub const SECTOR_SIZE: usize = 512;

struct SimFile {
    cache: Vec<u8>,
    durable: Vec<u8>,
    modified_ms: u64,
    /// Sectors a failed sync marked clean without persisting them (fsyncgate).
    poisoned: std::collections::BTreeSet<usize>,
    /// False for a file made by `create_deferred` until a `sync_all_under`
    /// over it: a power cut loses the whole file.
    entry_durable: bool,
}

impl SimFile {
    fn new(bytes: Vec<u8>) -> Self {
        SimFile {
            durable: bytes.clone(),
            cache: bytes,
            modified_ms: epoch_ms(std::time::SystemTime::now()),
            poisoned: Default::default(),
            entry_durable: true,
        }
    }
}

/// The state of one file at an event: what is durable, and what a crash may add.
#[derive(Debug, Clone)]
pub struct SimFileImage {
    /// The file.
    pub path: PathBuf,
    /// Its durable content.
    pub durable: Vec<u8>,
    /// Sectors written but not durable: (sector index, page-cache content).
    pub dirty: Vec<(usize, Vec<u8>)>,
    /// False while a power cut would lose the whole file (made by
    /// `create_deferred`, not yet covered by a `sync_all_under`).
    pub entry_durable: bool,
}

/// The storage at one event: enough to build every crash image.
#[derive(Debug, Clone)]
pub struct SimSnapshot {
    /// Event number (1-based count of writes and syncs).
    pub event: u64,
    /// Every file.
    pub files: Vec<SimFileImage>,
    /// Directories made by `create_dir_all_deferred` whose entries are not
    /// durable yet: a power cut may lose each, with everything under it.
    pub pending_dirs: Vec<PathBuf>,
}

impl SimSnapshot {
    /// What a crash decides: whether each directory whose entry is not durable
    /// survives, every dirty sector, and whether each file whose directory
    /// entry is not durable survives (one decision per such directory and file).
    pub fn dirty_sectors(&self) -> usize {
        self.pending_dirs.len()
            + self.files.iter().map(|f| f.dirty.len() + usize::from(!f.entry_durable)).sum::<usize>()
    }

    /// A crash image: each decision (numbered in order: the pending
    /// directories, then each file's entry if it is not durable and its dirty
    /// sectors) is taken if `keep(n)`; returns a storage holding exactly that
    /// image, every file (the segments and the small files beside them) at its
    /// own path. A directory not durable yet survives if `keep` says so, else
    /// it is lost with everything in it; so is a file whose directory entry was
    /// not durable yet (it survives, as a file system may write the entry on
    /// its own, if `keep` says so).
    pub fn crash_image(&self, mut keep: impl FnMut(usize) -> bool) -> SimStorage {
        let mut n = 0;
        self.crash_image_with(|_, _| {
            n += 1;
            keep(n - 1)
        })
    }

    /// [`crash_image`](Self::crash_image) deciding by path: a dirty sector is
    /// kept if `keep(path, sector)`, a directory or file whose entry is not
    /// durable yet survives if `keep(path, usize::MAX)` (asked in the same
    /// order as `crash_image` numbers its decisions). As [`SimStorage::crash`]
    /// decides, for a snapshot.
    pub fn crash_image_with(&self, mut keep: impl FnMut(&Path, usize) -> bool) -> SimStorage {
        let storage = SimStorage::new();
        let lost_dirs: Vec<&PathBuf> = self.pending_dirs.iter().filter(|dir| !keep(dir, usize::MAX)).collect();
        for file in &self.files {
            let survives = file.entry_durable || keep(&file.path, usize::MAX);
            let survives = survives && !lost_dirs.iter().any(|d| file.path.starts_with(d));
            let mut bytes = file.durable.clone();
            for (sector, content) in &file.dirty {
                if keep(&file.path, *sector) {
                    let start = sector * SECTOR_SIZE;
                    bytes[start..start + content.len()].copy_from_slice(content);
                }
            }
            if survives {
                storage.write_file(&file.path, &bytes);
            }
        }
        storage
    }
}

#[derive(Default)]
struct SimState {
    files: BTreeMap<PathBuf, SimFile>,
    /// Directories made by `create_dir_all` or `create_dir_all_deferred`
    /// (others exist implicitly, durably, while files are in them).
    dirs: std::collections::BTreeSet<PathBuf>,
    /// Those of `dirs` made by `create_dir_all_deferred` and not yet covered
    /// by a `sync_all_under`: a crash may lose each with everything under it.
    pending_dirs: std::collections::BTreeSet<PathBuf>,
    syncs: u64,
    events: u64,
    fail_sync_at: Option<u64>,
    fail_all_syncs: bool,
    fail_removes: bool,
    fail_writes: bool,
    create_delay: std::time::Duration,
    sync_delay: std::time::Duration,
    write_without_mmap: bool,
    disk_space: Option<crate::DiskSpace>,
    /// Space reported for paths under a directory, overriding `disk_space`.
    disk_space_of: Vec<(PathBuf, Option<crate::DiskSpace>)>,
    /// A simulated disk of this many bytes whose used space is the files'
    /// (`set_disk_size`), when no space is set for the path.
    disk_size: Option<u64>,
    /// Bytes of removed segment files whose segment is still open (mapped).
    unlinked_open: u64,
    sink: Option<std::sync::mpsc::SyncSender<SimSnapshot>>,
}

impl SimState {
    fn snapshot(&self) -> SimSnapshot {
        SimSnapshot {
            event: self.events,
            files: self
                .files
                .iter()
                .map(|(path, f)| SimFileImage {
                    path: path.clone(),
                    durable: f.durable.clone(),
                    dirty: dirty_sectors(f).map(|s| (s, f.cache[sector_range(s, f.cache.len())].to_vec())).collect(),
                    entry_durable: f.entry_durable,
                })
                .collect(),
            pending_dirs: self.pending_dirs.iter().cloned().collect(),
        }
    }

    /// True when `dir` exists: made, or holding a file.
    fn dir_exists(&self, dir: &Path) -> bool {
        self.dirs.contains(dir) || self.files.keys().any(|p| p.starts_with(dir))
    }

    /// Makes `dir` and its missing parents; `durable`: their entries synced.
    /// Directories that exist keep their durability (a real `create_dir_all`
    /// syncs only the parents of what it made).
    fn make_dirs(&mut self, dir: &Path, durable: bool) {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && d.parent().is_some() && !self.dir_exists(d))
            .map(Path::to_path_buf)
            .collect();
        if missing.is_empty() {
            return;
        }
        for made in missing {
            if !durable {
                self.pending_dirs.insert(made.clone());
            }
            self.dirs.insert(made);
        }
        self.event();
    }

    /// Decides each pending directory with `keep` (true: it survives) and drops
    /// what was under the lost ones; the survivors become durable.
    fn crash_dirs(&mut self, mut keep: impl FnMut(&Path) -> bool) {
        let lost: Vec<PathBuf> = self.pending_dirs.iter().filter(|d| !keep(d)).cloned().collect();
        self.pending_dirs.clear();
        if lost.is_empty() {
            return;
        }
        self.files.retain(|path, _| !lost.iter().any(|d| path.starts_with(d)));
        self.dirs.retain(|dir| !lost.iter().any(|d| dir.starts_with(d)));
    }

    /// Moves a file, durably at once (as `MmapStorage` makes it with directory
    /// fsyncs); an event.
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        if self.files.contains_key(to) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "target exists"));
        }
        let mut file = self.files.remove(from).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        file.entry_durable = true;
        self.files.insert(to.to_path_buf(), file);
        self.event();
        Ok(())
    }

    /// Counts an event and sends a snapshot to the sink, if any.
    fn event(&mut self) {
        self.events += 1;
        if let Some(sink) = &self.sink {
            if sink.send(self.snapshot()).is_err() {
                self.sink = None; // the receiver is gone
            }
        }
    }
}

/// The files of a directory taken out of a [`SimStorage`] by
/// [`unmount`](SimStorage::unmount).
pub struct SimMount {
    files: Vec<(PathBuf, SimFile)>,
}

impl fmt::Debug for SimMount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMount").field("files", &self.files.len()).finish()
    }
}

/// In-memory [`Storage`] with fault injection. Clones share the same state.
#[derive(Clone, Default)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
}

impl fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("SimStorage").field("files", &state.files.len()).field("syncs", &state.syncs).finish()
    }
}

impl SimStorage {
    /// A new file of `len` zeros, mapped; `durable`: its entry survives a power cut.
    fn create_file(&self, path: &Path, len: usize, durable: bool) -> io::Result<OpenedSegment> {
        let delay = self.state.lock().create_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut state = self.state.lock();
        if state.files.contains_key(path) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "file exists"));
        }
        if let Some(total) = state.disk_size {
            // A simulated disk of that size refuses what does not fit, as
            // `posix_fallocate` does on a real one.
            let used: u64 = state.files.values().map(|f| f.cache.len() as u64).sum::<u64>() + state.unlinked_open;
            if used.saturating_add(len as u64) > total {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        let memory = SegmentMemory::heap(vec![0; len])?;
        let mut file = SimFile::new(vec![0; len]);
        file.entry_durable = durable;
        state.files.insert(path.to_path_buf(), file);
        Ok(self.opened(path, memory, state.write_without_mmap))
    }

    /// The segment handle for the file at `path`, over `memory`.
    fn opened(&self, path: &Path, memory: SegmentMemory, file_writes: bool) -> OpenedSegment {
        OpenedSegment {
            memory,
            io: Box::new(SimSegment {
                path: path.to_path_buf(),
                state: Arc::clone(&self.state),
                file_writes,
                unlinked: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// An empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of events (writes and syncs) so far.
    pub fn event_count(&self) -> u64 {
        self.state.lock().events
    }

    /// Number of `sync_range` calls so far.
    pub fn sync_count(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Makes the `n`th sync from now (1-based) fail with `EIO`.
    pub fn fail_nth_sync(&self, n: u64) {
        let mut state = self.state.lock();
        state.fail_sync_at = Some(state.syncs + n);
    }

    /// Makes every sync fail (`true`) or succeed again (`false`).
    pub fn fail_all_syncs(&self, fail: bool) {
        self.state.lock().fail_all_syncs = fail;
    }

    /// Makes every file removal fail with `EIO` (`true`) or succeed again (`false`).
    pub fn fail_removes(&self, fail: bool) {
        self.state.lock().fail_removes = fail;
    }

    /// Chooses how segments created or opened from now on are written, as
    /// [`MmapStorage::write_without_mmap`](crate::MmapStorage::write_without_mmap)
    /// does: through [`SegmentIo::write_at`] (`true`), or into their memory
    /// (`false`, the default). The crash model is the same for both: every byte
    /// written is in the cache, durable once synced.
    pub fn set_write_without_mmap(&self, enable: bool) {
        self.state.lock().write_without_mmap = enable;
    }

    /// Makes [`Storage::disk_space`] report `space` (`None`: unknown, the default),
    /// for testing what a log does as its disk fills and empties.
    pub fn set_disk_space(&self, space: Option<crate::DiskSpace>) {
        self.state.lock().disk_space = space;
    }

    /// Makes [`Storage::disk_space`] report `space` for paths under `dir` (the
    /// longest matching directory wins over [`set_disk_space`](Self::set_disk_space)):
    /// a store spread over several simulated disks.
    pub fn set_disk_space_of(&self, dir: &Path, space: Option<crate::DiskSpace>) {
        let mut state = self.state.lock();
        state.disk_space_of.retain(|(d, _)| d != dir);
        state.disk_space_of.push((dir.to_path_buf(), space));
    }

    /// Makes [`Storage::disk_space`] report a disk of `size` bytes (`None`: none)
    /// for paths that [`set_disk_space`](Self::set_disk_space) and
    /// [`set_disk_space_of`](Self::set_disk_space_of) leave unknown: its used
    /// bytes are every file's length, and, as on a real file system, those of a
    /// removed segment whose mapping is still held (its blocks are freed when
    /// the segment is dropped, with the last view of its bytes).
    pub fn set_disk_size(&self, size: Option<u64>) {
        self.state.lock().disk_size = size;
    }

    /// True when segments are written through [`SegmentIo::write_at`].
    pub fn writes_without_mmap(&self) -> bool {
        self.state.lock().write_without_mmap
    }

    /// Makes every [`SegmentIo::write_at`] (the write path without mmap) fail with
    /// `EIO` (`true`) or succeed again (`false`). A failed write changes nothing.
    pub fn fail_writes(&self, fail: bool) {
        self.state.lock().fail_writes = fail;
    }

    /// Makes every file creation take at least `delay` (a slow `fallocate`), so
    /// tests can run into time limits.
    pub fn set_create_delay(&self, delay: std::time::Duration) {
        self.state.lock().create_delay = delay;
    }

    /// Makes every segment sync take `delay` before it persists anything (a
    /// slow disk): windows in which written data is visible but not durable
    /// grow, and code that shows such data early is caught more often.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.state.lock().sync_delay = delay;
    }

    /// After every write and every sync, send a snapshot to `sink` (blocking while
    /// it is full); `None` stops sending.
    pub fn set_snapshot_sink(&self, sink: Option<std::sync::mpsc::SyncSender<SimSnapshot>>) {
        self.state.lock().sink = sink;
    }

    /// The current state as a snapshot.
    pub fn snapshot(&self) -> SimSnapshot {
        self.state.lock().snapshot()
    }

    /// Number of 512-byte sectors written but not yet durable, over all files.
    pub fn dirty_sectors(&self) -> usize {
        let state = self.state.lock();
        state.files.values().map(|f| dirty_sectors(f).count()).sum()
    }

    /// Simulates a power cut: each dirty sector is kept if `keep(path, sector)` says
    /// so, else it reverts to its durable content; a file made by
    /// `create_deferred`, or a directory made by `create_dir_all_deferred`, and
    /// not synced since survives if `keep(path, usize::MAX)` (a lost directory
    /// takes everything under it). Segments opened before the crash must not be
    /// used afterwards; reopen them.
    pub fn crash(&self, mut keep: impl FnMut(&Path, usize) -> bool) {
        let mut state = self.state.lock();
        // A directory not durable yet survives if `keep(dir, usize::MAX)`.
        state.crash_dirs(|dir| keep(dir, usize::MAX));
        for (path, file) in state.files.iter_mut() {
            let dirty: Vec<usize> = dirty_sectors(file).collect();
            for sector in dirty {
                let range = sector_range(sector, file.cache.len());
                if keep(path, sector) {
                    let bytes = file.cache[range.clone()].to_vec();
                    file.durable[range].copy_from_slice(&bytes);
                }
            }
            file.cache = file.durable.clone();
            file.poisoned.clear();
        }
        // A file whose entry was not durable survives if `keep(path, usize::MAX)`.
        state.files.retain(|path, file| file.entry_durable || keep(path, usize::MAX));
        for file in state.files.values_mut() {
            file.entry_durable = true;
        }
    }

    /// A power cut that loses every unsynced byte.
    pub fn crash_losing_unsynced(&self) {
        self.crash(|_, _| false);
    }

    /// A power cut deciding each dirty sector with a deterministic generator.
    pub fn crash_with_seed(&self, seed: u64) {
        let mut rng = SplitMix64(seed);
        self.crash(|_, _| rng.next() & 1 == 1);
    }

    /// Takes every file under `dir` out of the storage, as if its disk were not
    /// mounted (its mount point empty): nothing lists, opens or reads them until
    /// [`mount`](Self::mount) puts them back. For a closed store: segments open
    /// on them keep their memory, but the storage no longer knows the files.
    pub fn unmount(&self, dir: &Path) -> SimMount {
        let mut state = self.state.lock();
        let under: Vec<PathBuf> = state.files.keys().filter(|p| p.starts_with(dir)).cloned().collect();
        let files = under.into_iter().filter_map(|p| state.files.remove(&p).map(|f| (p, f))).collect();
        SimMount { files }
    }

    /// Puts the files of an [`unmount`](Self::unmount) back (replacing any file
    /// made at their paths meanwhile, as mounting over a directory hides it).
    pub fn mount(&self, mount: SimMount) {
        let mut state = self.state.lock();
        state.files.extend(mount.files);
    }

    /// The cache image of a file (what a reader of the file sees now).
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        self.state.lock().files.get(path).map(|f| f.cache.clone())
    }

    /// Replaces a file's content, cache and durable alike (creates it if missing):
    /// for planting damage or foreign files in tests.
    pub fn write_file(&self, path: &Path, bytes: &[u8]) {
        let mut state = self.state.lock();
        state.files.insert(path.to_path_buf(), SimFile::new(bytes.to_vec()));
    }

    /// Sets a file's modification time (ms since the epoch) as `list` reports it.
    pub fn set_modified_ms(&self, path: &Path, modified_ms: u64) {
        if let Some(file) = self.state.lock().files.get_mut(path) {
            file.modified_ms = modified_ms;
        }
    }

    /// Overwrites `bytes` at `offset` of an existing file, cache and durable alike.
    /// Returns false if the file does not exist or is too short.
    pub fn patch_file(&self, path: &Path, offset: usize, bytes: &[u8]) -> bool {
        let mut state = self.state.lock();
        let Some(file) = state.files.get_mut(path) else {
            return false;
        };
        let Some(end) = offset.checked_add(bytes.len()).filter(|&e| e <= file.cache.len()) else {
            return false;
        };
        file.cache[offset..end].copy_from_slice(bytes);
        file.durable[offset..end].copy_from_slice(bytes);
        true
    }
}

fn sector_range(sector: usize, len: usize) -> std::ops::Range<usize> {
    let start = sector * SECTOR_SIZE;
    start..(start + SECTOR_SIZE).min(len)
}

fn sector_dirty(file: &SimFile, sector: usize) -> bool {
    let r = sector_range(sector, file.cache.len());
    file.cache[r.clone()] != file.durable[r]
}

/// Makes `[from, to)` of `file` durable, sector by sector, except the sectors a
/// failed sync poisoned (fsyncgate: later syncs do not write them).
fn persist(file: &mut SimFile, from: usize, to: usize) {
    if from >= to {
        return;
    }
    for s in from / SECTOR_SIZE..=(to - 1) / SECTOR_SIZE {
        if file.poisoned.contains(&s) {
            continue;
        }
        let r = sector_range(s, file.cache.len());
        let (a, b) = (r.start.max(from), r.end.min(to));
        let bytes = file.cache[a..b].to_vec();
        file.durable[a..b].copy_from_slice(&bytes);
    }
}

fn dirty_sectors(file: &SimFile) -> impl Iterator<Item = usize> + '_ {
    file.cache
        .chunks(SECTOR_SIZE)
        .zip(file.durable.chunks(SECTOR_SIZE))
        .enumerate()
        .filter(|(_, (c, d))| c != d)
        .map(|(i, _)| i)
}

/// A small deterministic generator (SplitMix64), so the simulation needs no
/// `rand` and a seed means the same crash everywhere. The state is public: a
/// seed is `SplitMix64(seed)`.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next value.
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform (near enough for tests) in `[lo, hi)`; `lo` when the range is empty.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo.saturating_add(self.next() % hi.saturating_sub(lo).max(1))
    }
}

impl Storage for SimStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.state.lock().make_dirs(dir, true);
        Ok(())
    }

    fn create_dir_all_deferred(&self, dir: &Path) -> io::Result<()> {
        self.state.lock().make_dirs(dir, false);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let state = self.state.lock();
        Ok(state
            .files
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, f)| DirEntry {
                name: p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                len: f.cache.len() as u64,
                modified_ms: f.modified_ms,
            })
            .collect())
    }

    fn create(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        self.create_file(path, len, true)
    }

    fn create_deferred(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        self.create_file(path, len, false)
    }

    fn open(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        let state = self.state.lock();
        let file = state.files.get(path).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if file.cache.len() < len {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "file shorter than the segment size"));
        }
        let memory = SegmentMemory::heap(file.cache[..len].to_vec())?;
        Ok(self.opened(path, memory, state.write_without_mmap))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.fail_removes {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        state.files.remove(path).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        state.event();
        Ok(())
    }

    fn read_small(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        Ok(self.state.lock().files.get(path).map(|f| f.cache.clone()))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.state.lock().rename(from, to)
    }

    fn sync_all_under(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        state.syncs += 1;
        if state.fail_all_syncs {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        for (path, file) in state.files.iter_mut() {
            if path.starts_with(dir) {
                let len = file.cache.len();
                persist(file, 0, len);
                file.entry_durable = true;
            }
        }
        // The directories under `dir`, and `dir` itself with its parents (a
        // real `syncfs` syncs the whole file system).
        state.pending_dirs.retain(|d| !d.starts_with(dir) && !dir.starts_with(d));
        state.event();
        Ok(())
    }

    fn disk_space(&self, dir: &Path) -> io::Result<Option<crate::DiskSpace>> {
        let state = self.state.lock();
        let of_dir =
            state.disk_space_of.iter().filter(|(d, _)| dir.starts_with(d)).max_by_key(|(d, _)| d.as_os_str().len());
        let space = of_dir.map_or(state.disk_space, |(_, space)| *space);
        Ok(space.or_else(|| {
            state.disk_size.map(|total| {
                let files: u64 = state.files.values().map(|f| f.cache.len() as u64).sum();
                let free = total.saturating_sub(files + state.unlinked_open);
                crate::DiskSpace { total, free, available: free }
            })
        }))
    }

    fn replace_small(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.fail_all_syncs {
            // The temporary file's fsync fails: the old content stays.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        state.files.insert(path.to_path_buf(), SimFile::new(bytes.to_vec()));
        state.event();
        Ok(())
    }
}

struct SimSegment {
    path: PathBuf,
    state: Arc<Mutex<SimState>>,
    /// Written through `write_at` (write without mmap), not the memory.
    file_writes: bool,
    /// The file's length once removed while this segment is open: counted as
    /// used disk space until the segment is dropped.
    unlinked: std::sync::atomic::AtomicU64,
}

impl Drop for SimSegment {
    fn drop(&mut self) {
        let unlinked = *self.unlinked.get_mut();
        if unlinked > 0 {
            let mut state = self.state.lock();
            state.unlinked_open = state.unlinked_open.saturating_sub(unlinked);
        }
    }
}

impl fmt::Debug for SimSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimSegment").field("path", &self.path).finish()
    }
}

impl SegmentIo for SimSegment {
    fn writes_through_file(&self) -> bool {
        self.file_writes
    }

    fn write_at(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        if !self.file_writes {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "this segment is written through its memory"));
        }
        if self.state.lock().fail_writes {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.note_written(offset, bytes);
        Ok(())
    }

    fn note_written(&self, offset: usize, bytes: &[u8]) {
        let mut state = self.state.lock();
        if let Some(file) = state.files.get_mut(&self.path) {
            file.cache[offset..offset + bytes.len()].copy_from_slice(bytes);
            file.modified_ms = epoch_ms(std::time::SystemTime::now());
            if !bytes.is_empty() && !file.poisoned.is_empty() {
                // Written again: dirty again, so a sync may persist it.
                let first = offset / SECTOR_SIZE;
                let last = (offset + bytes.len() - 1) / SECTOR_SIZE;
                file.poisoned.retain(|s| *s < first || *s > last);
            }
        }
        state.event();
    }

    fn sync_range(&self, _memory: &SegmentMemory, offset: usize, len: usize) -> io::Result<()> {
        let delay = self.state.lock().sync_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut state = self.state.lock();
        state.syncs += 1;
        let fail = state.fail_all_syncs || state.fail_sync_at == Some(state.syncs);
        let result = match state.files.get_mut(&self.path) {
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
            Some(file) if len == 0 => {
                let _ = file;
                Ok(())
            }
            Some(file) => {
                let sectors = offset / SECTOR_SIZE..=(offset + len - 1) / SECTOR_SIZE;
                if fail {
                    // fsyncgate: the dirty sectors are marked clean without being
                    // persisted; later syncs will not write them.
                    let dirty: Vec<usize> = sectors.filter(|s| sector_dirty(file, *s)).collect();
                    file.poisoned.extend(dirty);
                    Err(io::Error::from_raw_os_error(libc::EIO))
                } else {
                    persist(file, offset, offset + len);
                    Ok(())
                }
            }
        };
        state.event();
        result
    }

    fn advise_and_lock(&self, _memory: &SegmentMemory, _lock: bool) -> io::Result<()> {
        Ok(())
    }

    fn remove(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.fail_removes {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if let Some(file) = state.files.remove(&self.path) {
            let len = file.cache.len() as u64;
            state.unlinked_open += len;
            self.unlinked.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        }
        state.event();
        Ok(())
    }

    fn rename(&self, to: &Path) -> io::Result<()> {
        self.state.lock().rename(&self.path, to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn durable_file(sim: &SimStorage, path: &str) {
        let opened = sim.create(Path::new(path), 512).unwrap();
        drop(opened);
    }

    #[test]
    fn a_deferred_directory_is_lost_with_everything_in_it_until_synced() {
        let sim = SimStorage::new();
        sim.create_dir_all(Path::new("/s")).unwrap();
        sim.create_dir_all_deferred(Path::new("/s/q/t/0")).unwrap();
        durable_file(&sim, "/s/q/t/0/a");
        sim.replace_small(Path::new("/s/q/t/0/small"), b"x").unwrap();
        let snapshot = sim.snapshot();
        assert_eq!(
            snapshot.pending_dirs,
            vec![PathBuf::from("/s/q"), PathBuf::from("/s/q/t"), PathBuf::from("/s/q/t/0")]
        );
        // Losing the outermost new directory loses every file made inside it.
        let image = snapshot.crash_image(|n| n != 0);
        assert!(image.file_bytes(Path::new("/s/q/t/0/a")).is_none());
        assert!(image.file_bytes(Path::new("/s/q/t/0/small")).is_none());
        let image = snapshot.crash_image(|_| true);
        assert!(image.file_bytes(Path::new("/s/q/t/0/a")).is_some());
        // A power cut on the storage itself decides the same way.
        let lost = sim.clone();
        lost.crash(|path, sector| !(sector == usize::MAX && path == Path::new("/s/q/t")));
        assert!(lost.file_bytes(Path::new("/s/q/t/0/a")).is_none());
    }

    #[test]
    fn sync_all_under_makes_deferred_directories_durable_and_create_dir_all_is_durable() {
        let sim = SimStorage::new();
        sim.create_dir_all(Path::new("/s")).unwrap();
        sim.create_dir_all_deferred(Path::new("/s/q/t/0")).unwrap();
        durable_file(&sim, "/s/q/t/0/a");
        sim.create_dir_all(Path::new("/s/config")).unwrap();
        sim.replace_small(Path::new("/s/config/c"), b"x").unwrap();
        assert!(sim.snapshot().pending_dirs.iter().all(|d| d.starts_with("/s/q")));
        sim.sync_all_under(Path::new("/s/q")).unwrap();
        assert!(sim.snapshot().pending_dirs.is_empty());
        sim.crash(|_, _| false);
        assert!(sim.file_bytes(Path::new("/s/q/t/0/a")).is_some());
        assert!(sim.file_bytes(Path::new("/s/config/c")).is_some());
    }

    #[test]
    fn create_dir_all_keeps_an_existing_deferred_directory_pending() {
        let sim = SimStorage::new();
        sim.create_dir_all(Path::new("/s")).unwrap();
        sim.create_dir_all_deferred(Path::new("/s/q")).unwrap();
        // Only the directories it makes are synced into their parents.
        sim.create_dir_all(Path::new("/s/q/t")).unwrap();
        durable_file(&sim, "/s/q/t/a");
        sim.crash(|_, sector| sector != usize::MAX);
        assert!(sim.file_bytes(Path::new("/s/q/t/a")).is_none());
    }
}
