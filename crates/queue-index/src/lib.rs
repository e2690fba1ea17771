//! The index of many queues over one commit log, without a file per queue.
//!
//! Each queue (named by a `u64` its owner assigns: a message store's topic and
//! queue, a raft group) is a dense sequence of [`Entry`]s at queue offsets 0,
//! 1, 2, … in log order. The owner dispatches the log's records in order and
//! [`append`](QueueIndex::append)s each one's entry; the entries of the log's
//! newest records stay in memory (the active run). When the log range they
//! cover is durable and dispatched, the owner [`seal`](QueueIndex::seal)s it:
//! the active run is written as one run file, its queues in ascending order
//! and each queue's entries together, and synced. When the log deletes its
//! front, [`expire`](QueueIndex::expire) deletes the runs wholly below it.
//!
//! What that buys, against a consume-queue directory and file per queue:
//! - a new queue is a row in a hash table (no file, mapping or system call);
//!   open files and mappings are one per run (per sealed log range), however
//!   many queues there are;
//! - each entry is written once, in one sequential file with the other
//!   queues' entries of the same log range; expiry is a file deletion;
//! - recovery reads the runs' headers and directories and re-dispatches only
//!   the log after the last run ([`OpenReport::replay_from`]): the unsealed
//!   tail, not the retention;
//! - a run found damaged (a CRC mismatch: torn by a crash before its sync
//!   returned, or damaged since), or missing between two others, is dropped
//!   with every later run, and the log is re-dispatched from its start: the
//!   index is derived data, rebuilt from the log, never cut.
//!
//! Reads find a queue's entries in the active run or by looking the queue up
//! in each run's directory (a binary search over mapped memory), newest run
//! first; a consumer near a queue's end reads the active run or the last run.
//!
//! A queue can also be cut back ([`truncate`](QueueIndex::truncate)): a raft
//! group's conflicting suffix, or entries written again at new log offsets.
//! The cut is made by a record of the log; it is sealed with the run holding
//! that record, and from then on each offset reads from the newest row that
//! holds it. Owners that index what they wrote as they write it, from many
//! threads, open the index with [`IndexConfig::concurrent_appends`]: each
//! queue's entries still follow one another, and the owner seals only below
//! the first record whose entry may still be coming.
//!
//! ```
//! use std::path::Path;
//! use queue_index::{Entry, QueueIndex};
//! use mapped_file::SimStorage;
//!
//! let storage = SimStorage::new();
//! let (index, report) = QueueIndex::open(&storage, Path::new("/store/queueindex")).unwrap();
//! assert_eq!(report.replay_from, 0);
//! // Queue 7 gets the records at log offsets 0 and 100; queue 9 the one at 50.
//! index.append(7, 0, Entry { log_offset: 0, size: 50, tag: 1 }).unwrap();
//! index.append(9, 0, Entry { log_offset: 50, size: 50, tag: 2 }).unwrap();
//! index.append(7, 1, Entry { log_offset: 100, size: 50, tag: 1 }).unwrap();
//! // Everything below log offset 150 is durable and dispatched: seal it.
//! index.seal(&storage, 150).unwrap();
//! assert_eq!(index.get(7, 1, 10)[0].log_offset, 100);
//! assert_eq!(index.extent(9), Some((0, 1)));
//! drop(index);
//! let (index, report) = QueueIndex::open(&storage, Path::new("/store/queueindex")).unwrap();
//! assert_eq!((report.runs, report.replay_from), (1, 150));
//! assert_eq!(index.extent(7), Some((0, 2)));
//! ```

#![forbid(unsafe_code)]

mod active;
mod read;
mod run;
mod table;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mapped_file::{MappedFileError, Storage};
use parking_lot::RwLock;

use active::{merge, seal_point, split_below, Active, Cut};

/// A table keyed by queue: `u64` keys under foldhash (fast and seeded per
/// table; std's SipHash took about twice as long per lookup here, and a
/// growing table rehashes every queue it holds on the path of an append).
pub(crate) type QueueMap<V> = HashMap<u64, V, foldhash::fast::RandomState>;
use read::Located;
use run::Run;

/// One record of a queue: where it is in the log and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The record's log offset.
    pub log_offset: u64,
    /// The record's size in the log.
    pub size: u32,
    /// A tag (a message's tags hash code), for filtering without reading the log.
    pub tag: u64,
}

/// Errors of a [`QueueIndex`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// An append that would leave a hole in its queue or put an entry before
    /// one already there: queue offsets are dense and follow the log.
    #[error("queue {queue}: entry at offset {offset} (log offset {log_offset}), but the queue's next offset is {expected} and its last log offset {last_log_offset}")]
    NotInOrder {
        /// The queue.
        queue: u64,
        /// The queue offset asked for.
        offset: u64,
        /// The offset the queue takes next.
        expected: u64,
        /// The entry's log offset.
        log_offset: u64,
        /// The log offset of the newest entry in the index.
        last_log_offset: u64,
    },
    /// A seal whose end does not cover the active run's entries, or lies below
    /// the last run's end.
    #[error("seal to log offset {log_to}: the active run covers [{from}, {last_end}), every entry must lie below the seal's end")]
    BadSeal {
        /// The end asked for.
        log_to: u64,
        /// Where the active run begins.
        from: u64,
        /// One past the newest entry's record.
        last_end: u64,
    },
    /// A cut ([`QueueIndex::truncate`]) made by a record below the active
    /// run's start: its range is sealed already.
    #[error("queue {queue}: cut to offset {from} by the record at log offset {at_log}, below the sealed range's end {sealed_to}")]
    CutInSealedRange {
        /// The queue.
        queue: u64,
        /// The offset asked to cut to.
        from: u64,
        /// The cutting record's log offset.
        at_log: u64,
        /// Where the active run starts.
        sealed_to: u64,
    },
    /// A run file that fails its checks (reported by [`QueueIndex::open`] in
    /// [`OpenReport::dropped`], never returned for a run found at open).
    #[error("{}: {reason}", path.display())]
    DamagedRun {
        /// The run file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A run file could not be written, read or deleted.
    #[error(transparent)]
    File(#[from] MappedFileError),
    /// Listing or creating the index's directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What [`QueueIndex::open`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// Runs kept.
    pub runs: usize,
    /// Where the owner must dispatch the log from again: the end of the last
    /// run kept (its own start when the index is empty: 0, or the first
    /// dropped run's start).
    pub replay_from: u64,
    /// Runs dropped (damaged, or after a damaged or missing one): their files
    /// are deleted and their log ranges are dispatched again from
    /// `replay_from`. Each with why.
    pub dropped: Vec<(PathBuf, String)>,
    /// Why the queue table was not used (missing is not a reason): damaged,
    /// or it covers a run that was dropped. Extents then come from the runs
    /// alone, and queues whose runs all expired are forgotten.
    pub table_unused: Option<String>,
    /// Each queue's end, `(queue, end)`, as the queue table not used held it,
    /// and as the ends kept by an open or a
    /// [`remove_keeping_ends`](QueueIndex::remove_keeping_ends) before a crash
    /// held them (empty when the table was used, missing or damaged and
    /// no ends were kept). An owner whose log no longer holds the records of
    /// the dropped runs gives these to [`seed_ends`](QueueIndex::seed_ends)
    /// after it dispatched again: a queue whose records all went with the
    /// log's front then keeps its end, and its offsets are not given twice.
    /// They stay on disk (the file `ends`) until that `seed_ends` has written
    /// them into the queue table: a crash before it loses none, and the next
    /// open reports them again.
    pub table_ends: Vec<(u64, u64)>,
}

/// A queue's extent: its first offset still indexed and its end (the offset
/// its next entry takes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) min: u64,
    pub(crate) end: u64,
}

#[derive(Debug, Default)]
struct State {
    extents: QueueMap<Extent>,
    active: Active,
    /// The run being written by a seal: read from here until it is mapped.
    sealing: Option<Arc<Active>>,
    /// Sealed runs in log order, contiguous.
    runs: Vec<Arc<Run>>,
    /// Runs expired (out of the extents and the table) whose files a
    /// deletion failed to remove, in log order: the next expiry deletes them
    /// before any later run, so the files on disk stay contiguous (a gap
    /// reads as a lost run at open) and none stays for good.
    undeleted: Vec<Arc<Run>>,
    /// Directory rows of the runs sealed since the queue table was written.
    rows_since_table: usize,
    /// The log offset the queue table on disk holds extents as of (0: none).
    table_point: u64,
    /// The ends kept in the file `ends` (reported in
    /// [`OpenReport::table_ends`]), while it exists: the next
    /// [`QueueIndex::seed_ends`] seeds them too, writes the table and deletes
    /// the file.
    kept_ends: Option<Vec<(u64, u64)>>,
}

/// How a [`QueueIndex`] keeps its files.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexConfig {
    /// The queue table is rewritten once the runs sealed since hold at least
    /// this many directory rows (queues with entries), or as many as the
    /// table has queues, whichever is more: an open then reads at most about
    /// twice the table. 4,096.
    pub table_every_rows: usize,
    /// Appends come in log order (`true`, the default: one dispatcher
    /// follows the log, and an entry before the newest one is refused).
    /// `false` lets appends of different queues come out of log order (each
    /// queue's entries still follow one another): writers that append to the
    /// log and then index what they wrote, concurrently. Such an owner must
    /// seal only below the first record whose entry may still be coming.
    pub appends_in_log_order: bool,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig { table_every_rows: 4096, appends_in_log_order: true }
    }
}

impl IndexConfig {
    /// The default configuration with appends of different queues allowed
    /// out of log order ([`appends_in_log_order`](Self::appends_in_log_order)
    /// `false`).
    pub fn concurrent_appends() -> IndexConfig {
        IndexConfig { appends_in_log_order: false, ..IndexConfig::default() }
    }
}

/// The most rows [`QueueIndex::reserve`] makes room for in the active run.
const ACTIVE_ROWS_RESERVED: usize = 65_536;

fn table_path(dir: &Path) -> PathBuf {
    dir.join("table")
}

/// The file of the ends kept for [`QueueIndex::seed_ends`]: the queue
/// table's format (`table.rs`), at point 0, each queue's first offset its end.
fn ends_path(dir: &Path) -> PathBuf {
    dir.join("ends")
}

/// The bytes of the file of kept `ends`.
fn encode_ends(ends: &QueueMap<u64>) -> Vec<u8> {
    let extents: QueueMap<Extent> = ends.iter().map(|(&queue, &end)| (queue, Extent { min: end, end })).collect();
    table::encode(0, &extents)
}

/// Adds `(queue, end)` to `ends`, keeping the higher end of a queue given twice.
fn keep_end(ends: &mut QueueMap<u64>, queue: u64, end: u64) {
    let kept = ends.entry(queue).or_insert(end);
    *kept = (*kept).max(end);
}

/// The index of many queues over one commit log (see the crate documentation).
#[derive(Debug)]
pub struct QueueIndex {
    dir: PathBuf,
    config: IndexConfig,
    /// One seal at a time.
    sealer: parking_lot::Mutex<()>,
    /// Queues read at old offsets: the runs holding each.
    locator: parking_lot::Mutex<QueueMap<Located>>,
    state: RwLock<State>,
}

impl QueueIndex {
    /// Opens (or creates) the index in `dir`: maps its runs, checks each, and
    /// learns every queue's extent from their directories. Runs that fail
    /// their checks, and every run after the first such one or after a gap,
    /// are deleted; the owner dispatches the log again from
    /// [`OpenReport::replay_from`].
    pub fn open(storage: &dyn Storage, dir: &Path) -> Result<(QueueIndex, OpenReport), IndexError> {
        Self::open_with(storage, dir, IndexConfig::default())
    }

    /// [`open`](Self::open) with `config`.
    pub fn open_with(
        storage: &dyn Storage,
        dir: &Path,
        config: IndexConfig,
    ) -> Result<(QueueIndex, OpenReport), IndexError> {
        Self::open_inner(storage, dir, config, false)
    }

    /// Opens the index in `dir` as [`open`](Self::open) would, changing
    /// nothing on disk: no directory is created, and runs or a table that
    /// `open` would delete are left there (reported the same way). For tools
    /// that inspect a store, open or not; appends and reads work in memory
    /// (a seal or an expiry would write: do not call them).
    pub fn open_read_only(storage: &dyn Storage, dir: &Path) -> Result<(QueueIndex, OpenReport), IndexError> {
        Self::open_inner(storage, dir, IndexConfig::default(), true)
    }

    fn open_inner(
        storage: &dyn Storage,
        dir: &Path,
        config: IndexConfig,
        read_only: bool,
    ) -> Result<(QueueIndex, OpenReport), IndexError> {
        let io = |source| IndexError::Io { path: dir.to_path_buf(), source };
        if !read_only {
            storage.create_dir_all(dir).map_err(io)?;
        }
        let listing = match storage.list(dir) {
            Err(err) if read_only && err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            listing => listing.map_err(io)?,
        };
        let mut listed: Vec<(u64, String, u64)> = Vec::with_capacity(listing.len());
        for entry in listing {
            if let Some(from) = mapped_file::parse_file_name(&entry.name) {
                listed.push((from, entry.name, entry.len));
            } else if entry.name.ends_with(mapped_file::TEMPORARY_SUFFIX) && !read_only {
                // A run a crash left before its rename (or a small file's
                // replacement before its own): never a run, deleted.
                let path = dir.join(&entry.name);
                tracing::info!(path = %path.display(), "temporary file of an unfinished write deleted");
                storage.remove(&path).map_err(|source| IndexError::Io { path: path.clone(), source })?;
            }
        }
        listed.sort_unstable();
        let mut report = OpenReport::default();
        let mut state = State::default();
        // Where the first run dropped starts: it and every run after go.
        let mut first_dropped = None;
        for (from, name, len) in listed {
            let path = dir.join(&name);
            if first_dropped.is_none() {
                let opened = match usize::try_from(len) {
                    Ok(len) => Run::open(storage, &path, len),
                    Err(_) => Err(IndexError::DamagedRun { path: path.clone(), reason: "too long".into() }),
                };
                match opened {
                    Ok(run) if state.runs.last().is_none_or(|last| last.log_to == run.log_from) => {
                        state.runs.push(Arc::new(run));
                        continue;
                    }
                    Ok(run) => {
                        let last = state.runs.last().map_or(0, |l| l.log_to);
                        report
                            .dropped
                            .push((path.clone(), format!("starts at {from}, but the run before ends at {last}")));
                        drop(run);
                    }
                    Err(IndexError::DamagedRun { reason, .. }) => report.dropped.push((path.clone(), reason)),
                    Err(err) => report.dropped.push((path.clone(), err.to_string())),
                }
                first_dropped = Some(from);
            } else {
                report.dropped.push((path.clone(), "after a dropped run".into()));
            }
            if !read_only {
                tracing::warn!(path = %path.display(), "queue-index run dropped: its log range is dispatched again");
                storage.remove(&path).map_err(|source| IndexError::Io { path: path.clone(), source })?;
            }
        }
        // Ends kept by an open or a removal that a crash cut short before the
        // seeding that writes them into the table.
        let mut kept_ends: QueueMap<u64> = QueueMap::default();
        let ends_file = ends_path(dir);
        let mut ends_on_disk = false;
        match storage.read_small(&ends_file).map_err(io)?.map(|bytes| table::decode(&bytes)) {
            Some(Ok((_, extents))) => {
                ends_on_disk = true;
                for (queue, extent) in extents {
                    keep_end(&mut kept_ends, queue, extent.end);
                }
            }
            Some(Err(reason)) => {
                tracing::warn!(%reason, path = %ends_file.display(), "queue-index kept ends damaged: not used");
                if !read_only {
                    storage.remove(&ends_file).map_err(|source| IndexError::Io { path: ends_file.clone(), source })?;
                }
            }
            None => {}
        }
        let table = storage.read_small(&table_path(dir)).map_err(io)?.map(|bytes| table::decode(&bytes));
        let mut covered = 0;
        // Runs kept end before the table's point: runs it covered are gone
        // (expiry deletes from the front only: none is left past it then).
        let runs_end = state.runs.last().map(|r| r.log_to);
        // The ends of a table not used: kept (unless the table was used).
        let mut unused_ends = QueueMap::default();
        match table {
            Some(Ok((point, extents))) if runs_end.is_some_and(|end| end < point) => {
                report.table_unused =
                    Some(format!("it covers the log up to {point}, past the runs kept (to {})", runs_end.unwrap_or(0)));
                unused_ends = extents;
            }
            Some(Ok((point, extents))) if first_dropped.is_none_or(|d| d >= point) => {
                state.extents = extents;
                state.table_point = point;
                covered = point;
            }
            Some(Ok((point, extents))) => {
                report.table_unused = Some(format!("it covers the log up to {point}, past the dropped runs"));
                unused_ends = extents;
            }
            Some(Err(reason)) => report.table_unused = Some(reason),
            None => {}
        }
        for (&queue, extent) in &unused_ends {
            keep_end(&mut kept_ends, queue, extent.end);
        }
        if let Some(reason) = report.table_unused.as_ref().filter(|_| !read_only) {
            // Deleted, so no later open trusts it past what is dispatched again.
            tracing::warn!(%reason, "queue-index table not used: extents from the runs alone");
            if !unused_ends.is_empty() {
                // The table is the only durable record of the end of a queue
                // whose records all went with the log's front: its ends are
                // written (durably) before it goes, and stay until the seeding
                // after the replay wrote them into a new table.
                storage
                    .replace_small(&ends_file, &encode_ends(&kept_ends))
                    .map_err(|source| IndexError::Io { path: ends_file.clone(), source })?;
                ends_on_disk = true;
            }
            let path = table_path(dir);
            storage.remove(&path).map_err(|source| IndexError::Io { path, source })?;
        }
        report.table_ends = kept_ends.iter().map(|(&queue, &end)| (queue, end)).collect();
        report.table_ends.sort_unstable();
        if ends_on_disk {
            state.kept_ends = Some(report.table_ends.clone());
        }
        // The runs with entries past the table's point (one may straddle it:
        // its entries below the point are in the table already), in log
        // order: each row ends its queue where it ends (a row that cuts its
        // queue starts below the end the rows before gave it).
        for run in state.runs.iter().filter(|r| r.log_to > covered) {
            state.rows_since_table += run.queue_count();
            for (queue, span) in run.spans() {
                let extent = state.extents.entry(queue).or_insert(Extent { min: span.first, end: span.first });
                if span.first > extent.end || span.restart || (run.cuts && span.first < extent.min) {
                    // Past its end (nothing live between), emptied by a cut,
                    // or cut below a first offset that expiry raised since
                    // (the row holds the queue from its start on).
                    extent.min = span.first;
                }
                extent.end = if run.cuts { span.end() } else { extent.end.max(span.end()) };
            }
        }
        // With no run left past it, the table's point is where dispatch goes
        // on: every run below it expired with the log's front.
        let end = state.runs.last().map_or(0, |r| r.log_to).max(covered);
        report.runs = state.runs.len();
        report.replay_from = end;
        state.active = Active::starting_at(end);
        let index = QueueIndex {
            dir: dir.to_path_buf(),
            config,
            sealer: parking_lot::Mutex::new(()),
            locator: parking_lot::Mutex::default(),
            state: RwLock::new(state),
        };
        Ok((index, report))
    }

    /// Appends `queue`'s entry at `offset`, which must be the queue's end, for
    /// a record after every entry in the index (dispatch follows the log;
    /// with [`IndexConfig::appends_in_log_order`] off, after the queue's own
    /// newest entry or cut and at or past the active run's start). A queue
    /// the index has not seen starts at `offset` (a queue whose earlier
    /// entries expired, or one a rebuild starts mid-log), and so does one
    /// with no live entry whose end lies below `offset` (the records between
    /// went with the log's front).
    pub fn append(&self, queue: u64, offset: u64, entry: Entry) -> Result<(), IndexError> {
        let mut state = self.state.write();
        let State { extents, active, .. } = &mut *state;
        let in_order = if self.config.appends_in_log_order {
            active.last_log_offset.is_none_or(|last| entry.log_offset > last)
        } else {
            let row_last = active.queues.get(&queue).and_then(|(_, e)| e.last()).map(|e| e.log_offset);
            let cut = active.cuts.get(&queue).map(|cut| cut.at);
            row_last.is_none_or(|last| entry.log_offset > last) && cut.is_none_or(|at| entry.log_offset >= at)
        };
        let extent = extents.get(&queue).copied();
        // A queue with nothing live indexed may go on past its end: the
        // records between went with the log's front (an index rebuilt after
        // the log deleted part of what a lost run covered).
        let fits = |e: Extent| e.end == offset || (e.min == e.end && offset > e.end);
        // u64::MAX is never an entry's offset: the queue's end would pass it.
        if !in_order || entry.log_offset < active.from || extent.is_some_and(|e| !fits(e)) || offset == u64::MAX {
            return Err(IndexError::NotInOrder {
                queue,
                offset,
                expected: extent.map_or(offset, |e| e.end),
                log_offset: entry.log_offset,
                last_log_offset: active.last_log_offset.unwrap_or(active.from),
            });
        }
        let extent = extents.entry(queue).or_insert(Extent { min: offset, end: offset });
        if extent.end < offset {
            *extent = Extent { min: offset, end: offset };
        }
        extent.end = offset + 1;
        // Room for one entry at first: most of many queues hold one or two
        // in a run (a vector's first growth reserves four: 80 bytes).
        let row = active.queues.entry(queue).or_insert_with(|| (offset, Vec::with_capacity(1)));
        if row.0 + row.1.len() as u64 != offset {
            // Past the end of a row with nothing live: the row starts again
            // (a cut that emptied the queue still starts it).
            active.entries -= row.1.len();
            *row = (offset, Vec::with_capacity(1));
        }
        row.1.push(entry);
        active.entries += 1;
        active.last_log_offset = active.last_log_offset.max(Some(entry.log_offset));
        active.last_end = active.last_end.max(entry.log_offset.saturating_add(u64::from(entry.size)));
        Ok(())
    }

    /// Makes room for `queues` more queues (a topic of that many made), so
    /// that the tables do not grow, rehashing every queue they hold, on the
    /// path of an append as the queues get their first entries: the table of
    /// extents for all of them, the active run's for up to 65,536 (at each
    /// seal it keeps room for as many rows as the last run held).
    pub fn reserve(&self, queues: usize) {
        let mut state = self.state.write();
        state.extents.reserve(queues);
        state.active.queues.reserve(queues.min(ACTIVE_ROWS_RESERVED));
    }

    /// Cuts `queue` back to `from`: its entries from `from` on are gone and
    /// its next entry takes `from` (a raft group's conflicting suffix, or
    /// entries written again at new log offsets). `at_log` is the log offset
    /// of the record that says so: the cut is sealed with the run that holds
    /// it, so an open that dispatches the log again from a later run finds
    /// it made, and one from an earlier run meets the record again. Cut at or
    /// below its first offset, the queue is left with no entry at `from`
    /// (and may go on from any offset past it). Returns whether anything
    /// changed: nothing does for a queue the index does not know or `from`
    /// at or past its end. Refused for a record below the active run's start
    /// (a sealed range).
    pub fn truncate(&self, queue: u64, from: u64, at_log: u64) -> Result<bool, IndexError> {
        let mut state = self.state.write();
        let State { extents, active, .. } = &mut *state;
        if at_log < active.from {
            return Err(IndexError::CutInSealedRange { queue, from, at_log, sealed_to: active.from });
        }
        let Some(extent) = extents.get_mut(&queue).filter(|e| from < e.end) else { return Ok(false) };
        let was = *extent;
        extent.end = from;
        extent.min = extent.min.min(from);
        let extent = was;
        let before = active.queues.get(&queue).map_or(0, |(_, e)| e.len());
        let keep = match active.queues.get(&queue) {
            Some((first, _)) if *first < from && from > extent.min => {
                usize::try_from(from - first).unwrap_or(usize::MAX)
            }
            _ => 0,
        };
        // What this cut drops of the active run: entries from `keep` on, and
        // a cut that started the row if the row is replaced (a seal between
        // either and this cut must stay below them).
        let dropped_entry = active.queues.get(&queue).and_then(|(_, e)| e.get(keep)).map(|e| e.log_offset);
        let dropped_cut = active.cuts.get(&queue).map(|cut| cut.at).filter(|_| keep == 0);
        if let Some(dropped) = dropped_entry.into_iter().chain(dropped_cut).min() {
            active.drops.push((dropped, at_log));
        }
        match active.queues.get_mut(&queue) {
            Some((first, entries)) if *first < from && from > extent.min => entries.truncate(keep),
            row => {
                // What the queue table says of it until the cut is sealed:
                // its extent at the active run's start.
                let before = match row {
                    Some((first, _)) if !active.cuts.contains_key(&queue) => {
                        Extent { min: extent.min.min(*first), end: *first }
                    }
                    _ => Extent { min: extent.min, end: extent.end },
                };
                active.before.entry(queue).or_insert(before);
                active.queues.insert(queue, (from, Vec::new()));
                active.cuts.insert(queue, Cut { at: at_log, restart: from <= extent.min });
            }
        }
        let after = active.queues.get(&queue).map_or(0, |(_, e)| e.len());
        active.entries = active.entries - before + after;
        Ok(true)
    }

    /// Seals the active run's entries of records below `log_to` as the run
    /// of `[its start, log_to)`: written, synced, and mapped for reads before
    /// this returns. Entries at or past `log_to` stay in the active run (the
    /// owner may go on dispatching while it seals what is durable). No entry
    /// below `log_to` may end past it (`log_to` lies between records). Nothing
    /// to seal (`log_to` at the active run's start) writes nothing. The owner
    /// seals only a durable, fully dispatched range; after it, dispatch goes
    /// on from `log_to` at the latest. The seal stops short of `log_to`, at
    /// the first entry a [`truncate`](Self::truncate) by a record at or past
    /// `log_to` dropped (the run must hold what its range held before that
    /// record): [`sealed_to`](Self::sealed_to) says where it ended.
    pub fn seal(&self, storage: &dyn Storage, log_to: u64) -> Result<(), IndexError> {
        let _one = self.sealer.lock();
        // The sealed entries are handed to the seal under the lock, and
        // written without it: appends go on into the active run, and reads
        // find the sealed entries where the seal keeps them until the run is
        // mapped.
        let (sealing, log_to) = {
            let mut state = self.state.write();
            let log_to = seal_point(&state.active, log_to);
            let sealing = split_below(&mut state.active, log_to)?;
            let Some(sealing) = sealing else { return Ok(()) };
            let sealing = Arc::new(sealing);
            state.sealing = Some(Arc::clone(&sealing));
            (sealing, log_to)
        };
        // A range without entries is written too (an empty run): the runs
        // stay contiguous (a gap reads as a lost run at open), and an open
        // after a power cut replays nothing a returned seal covered.
        let mut queues: Vec<run::Row<'_>> = sealing
            .queues
            .iter()
            .map(|(&queue, (first, entries))| run::Row {
                queue,
                first: *first,
                entries,
                restart: sealing.cuts.get(&queue).is_some_and(|cut| cut.restart),
            })
            .collect();
        queues.sort_unstable_by_key(|row| row.queue);
        let flags = if sealing.cuts.is_empty() { 0 } else { run::CUTS };
        let written = Run::write(storage, &self.dir, &run::encode(sealing.from, log_to, flags, &queues));
        drop(queues);
        let mut state = self.state.write();
        state.sealing = None;
        let run = match written {
            Ok(run) => Arc::new(run),
            Err(err) => {
                // Not sealed: the entries go back in front of what came since.
                let sealing = Arc::unwrap_or_clone(sealing);
                let later = std::mem::take(&mut state.active);
                state.active = merge(sealing, later);
                return Err(err);
            }
        };
        state.rows_since_table += run.queue_count();
        state.runs.push(run);
        if state.rows_since_table >= state.extents.len().max(self.config.table_every_rows) {
            self.write_table(storage, &mut state)?;
        }
        Ok(())
    }

    /// Writes every queue's extent as of the last run's end (without what
    /// the active run added: an open dispatches that again).
    fn write_table(&self, storage: &dyn Storage, state: &mut State) -> Result<(), IndexError> {
        let path = table_path(&self.dir);
        let bytes = if state.active.queues.is_empty() {
            table::encode(state.active.from, &state.extents)
        } else {
            // A queue's extent at the active run's start: its row starts at
            // its end then, unless a cut started it (saved when it was made).
            let mut extents = state.extents.clone();
            for (queue, (first, _)) in &state.active.queues {
                if let Some(extent) = extents.get_mut(queue) {
                    match state.active.before.get(queue) {
                        Some(before) => *extent = *before,
                        None => *extent = Extent { min: extent.min.min(*first), end: *first },
                    }
                }
            }
            table::encode(state.active.from, &extents)
        };
        storage.replace_small(&path, &bytes).map_err(|source| IndexError::Io { path, source })?;
        state.rows_since_table = 0;
        state.table_point = state.active.from;
        Ok(())
    }

    /// Up to `max` of `queue`'s entries from `offset` on (fewer at its end;
    /// none below its first indexed offset or for a queue it does not know).
    /// Each offset's entry comes from the newest row that holds it: after a
    /// [`truncate`](Self::truncate), the entries written since, never those
    /// cut.
    pub fn get(&self, queue: u64, offset: u64, max: usize) -> Vec<Entry> {
        let state = self.state.read();
        let Some(extent) = state.extents.get(&queue).copied() else { return Vec::new() };
        if offset < extent.min || offset >= extent.end || max == 0 {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(max.min(usize::try_from(extent.end - offset).unwrap_or(max)));
        // The rows in memory, newest first: the active run's, then the one a
        // seal is writing.
        let rows = [state.active.row(queue), state.sealing.as_deref().and_then(|s| s.row(queue))];
        let mut at = offset;
        while out.len() < max && at < extent.end {
            // A newer row starting past `at` holds the queue from there on.
            let mut limit = extent.end;
            let mut held = None;
            for (first, entries) in rows.iter().flatten() {
                let row_end = first + entries.len() as u64;
                if *first <= at && at < row_end {
                    held = Some((*first, *entries));
                    break;
                }
                if *first <= at {
                    // A newer row that ends at or before `at` cut the queue there.
                    return out;
                }
                limit = limit.min(*first);
            }
            let before = at;
            match held {
                Some((first, entries)) => {
                    let stop = limit.min(first + entries.len() as u64);
                    while at < stop && out.len() < max {
                        out.push(entries[usize::try_from(at - first).unwrap_or(usize::MAX)]);
                        at += 1;
                    }
                }
                None => at = self.read_runs(&state.runs, queue, at, limit, max, &mut out),
            }
            if at == before {
                break; // a hole: nothing holds `at`
            }
        }
        out
    }

    /// `queue`'s first indexed offset and its end (the offset its next entry
    /// takes); `None` for a queue with no entry indexed in this index's life.
    pub fn extent(&self, queue: u64) -> Option<(u64, u64)> {
        self.state.read().extents.get(&queue).map(|e| (e.min, e.end))
    }

    /// Deletes every run whose log range lies wholly below `log_min` (the
    /// log's first offset after its cleaning), raising the first offset of
    /// each queue it held past its entries there, and of each queue with
    /// entries below `log_min` in the run that holds it (a run that spans
    /// the log's new front stays, its entries there are no longer read);
    /// returns the runs deleted. Readers holding entries keep them. Call it
    /// after [`open`](Self::open) too: the runs do not know the log's front.
    /// A run whose file cannot be deleted (the error returned) is out of the
    /// index already; its file, and those of the later expired runs, are
    /// deleted by the next expiry, first.
    pub fn expire(&self, storage: &dyn Storage, log_min: u64) -> Result<usize, IndexError> {
        let _no_seal = self.sealer.lock();
        let mut state = self.state.write();
        let gone = state.runs.iter().take_while(|r| r.log_to <= log_min).count();
        let expired: Vec<Arc<Run>> = state.runs.drain(..gone).collect();
        let State { extents, runs, active, .. } = &mut *state;
        if expired.iter().chain(runs.iter()).any(|r| r.cuts) || !active.cuts.is_empty() {
            raise_firsts_with_cuts(extents, &expired, runs, active, log_min);
        } else {
            for run in &expired {
                for (queue, span) in run.spans() {
                    if let Some(extent) = extents.get_mut(&queue) {
                        extent.min = extent.min.max(span.end());
                    }
                }
            }
            if let Some(front) = runs.first().filter(|r| r.log_from < log_min) {
                for (queue, span) in front.spans() {
                    let live = front.first_at_or_after(span, log_min);
                    if let Some(extent) = extents.get_mut(&queue) {
                        extent.min = extent.min.max(live);
                    }
                }
            }
            if runs.is_empty() {
                for (queue, (first, entries)) in &active.queues {
                    let below = entries.partition_point(|e| e.log_offset < log_min) as u64;
                    if let Some(extent) = extents.get_mut(queue) {
                        extent.min = extent.min.max(first + below);
                    }
                }
            }
        }
        // A queue whose entries all lie below the log's front is known from
        // then on only by the runs that hold them (or the table): with the
        // table's point below the front, one of those runs may be the only
        // record of the queue's end, and losing it (a damaged file deleted)
        // would start the queue again at 0. So the table is written then too,
        // though no run expired, once per move of the front past its point.
        // Not with cuts about (an owner whose queues are cut, a raft engine,
        // keeps its queues' state itself): the table's point then stays at a
        // seal.
        let cuts = state.runs.iter().any(|r| r.cuts) || !state.active.cuts.is_empty();
        let stale_table =
            state.table_point < log_min && state.active.from > state.table_point && !state.extents.is_empty() && !cuts;
        if !expired.is_empty() || stale_table {
            // The table first, then the files: a crash in between leaves runs
            // the next expiry deletes, never extents that forget them.
            self.write_table(storage, &mut state)?;
        }
        // The runs an earlier expiry could not delete go first: deleting a
        // later run while an earlier one stays would leave a gap on disk.
        let mut doomed = std::mem::take(&mut state.undeleted);
        doomed.extend(expired);
        drop(state);
        for (i, run) in doomed.iter().enumerate() {
            if let Err(err) = run.destroy() {
                tracing::warn!(path = %run.path().display(), %err, "expired queue-index run not deleted: the next expiry tries again");
                // Seals wait for this expiry (`_no_seal`), so nothing came
                // between: the runs left are the oldest files on disk.
                self.state.write().undeleted = doomed.split_off(i);
                return Err(err);
            }
        }
        Ok(gone)
    }

    /// Gives each queue of `ends` — `(queue, end)` — the end `end` if the
    /// index holds no live entry of it and a lower end: a queue whose records
    /// all went with the log's front, whose end an owner rebuilding the index
    /// from the log knows from elsewhere (so that its offsets are not given
    /// again). The ends the index keeps on disk
    /// ([`OpenReport::table_ends`]) are seeded too, and their file deleted
    /// once the queue table holds them. Call it once the log is dispatched
    /// again from [`OpenReport::replay_from`]. The queue table is rewritten
    /// if any queue was seeded or ends were kept. Returns how many.
    pub fn seed_ends(
        &self,
        storage: &dyn Storage,
        ends: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<usize, IndexError> {
        let _no_seal = self.sealer.lock();
        let mut state = self.state.write();
        let mut seeded = 0;
        let kept = state.kept_ends.take();
        for (queue, end) in ends.into_iter().chain(kept.iter().flatten().copied()) {
            // Only the queues seeded change: a queue the index knows with
            // end 0 (cut back to 0) stays known, and an end of 0 makes
            // none known.
            match state.extents.get_mut(&queue) {
                Some(extent) if extent.min == extent.end && extent.end < end => *extent = Extent { min: end, end },
                Some(_) => continue,
                None if end > 0 => {
                    state.extents.insert(queue, Extent { min: end, end });
                }
                None => continue,
            }
            seeded += 1;
        }
        if seeded > 0 || kept.is_some() {
            if let Err(err) = self.write_table(storage, &mut state) {
                state.kept_ends = kept;
                return Err(err);
            }
        }
        if kept.is_some() {
            // The table holds every kept end now (seeded, or lower than the
            // end the queue has): their file goes.
            let path = ends_path(&self.dir);
            if let Err(source) = storage.remove(&path) {
                state.kept_ends = kept;
                return Err(IndexError::Io { path, source });
            }
        }
        Ok(seeded)
    }

    /// Deletes the index in `dir` (not open) for a rebuild from the log, all
    /// but `ends` — `(queue, end)`, the ends of queues whose records the log
    /// may no longer hold — which are written first, durably: the next open
    /// reports them in [`OpenReport::table_ends`], and they stay on disk
    /// until [`seed_ends`](Self::seed_ends) has written them into a new queue
    /// table, so that a crash in between loses none. With no ends, ends kept
    /// before go too. Returns the files deleted.
    pub fn remove_keeping_ends(
        storage: &dyn Storage,
        dir: &Path,
        ends: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<usize, IndexError> {
        let io = |source| IndexError::Io { path: dir.to_path_buf(), source };
        let mut kept = QueueMap::default();
        for (queue, end) in ends {
            keep_end(&mut kept, queue, end);
        }
        let ends_file = ends_path(dir);
        if !kept.is_empty() {
            storage.create_dir_all(dir).map_err(io)?;
            storage
                .replace_small(&ends_file, &encode_ends(&kept))
                .map_err(|source| IndexError::Io { path: ends_file.clone(), source })?;
        }
        let files = match storage.list(dir) {
            Ok(files) => files,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(source) => return Err(io(source)),
        };
        let mut removed = 0;
        for file in files {
            let path = dir.join(&file.name);
            if path != ends_file || kept.is_empty() {
                storage.remove(&path).map_err(|source| IndexError::Io { path, source })?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Every queue's end, `(queue, end)`, in no order: what an owner keeps
    /// before it rebuilds the index from the log, to give
    /// [`seed_ends`](Self::seed_ends) the ends of queues whose records the
    /// log no longer holds.
    pub fn ends(&self) -> Vec<(u64, u64)> {
        self.state.read().extents.iter().map(|(&queue, extent)| (queue, extent.end)).collect()
    }

    /// Forgets every queue `gone` picks (a deleted topic's): its extent and
    /// its active entries go at once, and the queue table is rewritten
    /// without it, so that an open does not learn it again; its entries in
    /// sealed runs stay there, unread, until the runs expire. The owner must
    /// never append to a forgotten queue again. Returns the queues forgotten.
    pub fn forget(&self, storage: &dyn Storage, gone: impl Fn(u64) -> bool) -> Result<usize, IndexError> {
        let _no_seal = self.sealer.lock();
        let mut state = self.state.write();
        let before = state.extents.len();
        state.extents.retain(|queue, _| !gone(*queue));
        let forgotten = before - state.extents.len();
        let active = &mut state.active;
        let dropped: usize = active.queues.iter().filter(|(q, _)| gone(**q)).map(|(_, (_, e))| e.len()).sum();
        active.queues.retain(|queue, _| !gone(*queue));
        active.cuts.retain(|queue, _| !gone(*queue));
        active.before.retain(|queue, _| !gone(*queue));
        active.entries -= dropped;
        self.locator.lock().retain(|queue, _| !gone(*queue));
        if forgotten > 0 {
            self.write_table(storage, &mut state)?;
        }
        Ok(forgotten)
    }

    /// Unmaps every run (their files stay): what a shutdown does, so that
    /// the storage's lock is released. Reads find only the active run after.
    pub fn close(&self) {
        let _no_seal = self.sealer.lock();
        let mut state = self.state.write();
        state.runs.clear();
        state.undeleted.clear();
        drop(state);
        self.locator.lock().clear();
    }

    /// Heap bytes the index's tables hold (the extents of every queue, the
    /// active run), from their capacities: what a queue costs in memory. The
    /// runs' mapped pages are the page cache's, not counted.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let state = self.state.read();
        // hashbrown: a control byte per bucket beside each (key, value).
        let extents = state.extents.capacity() * (size_of::<(u64, Extent)>() + 1);
        let active = state.active.queues.capacity() * (size_of::<(u64, (u64, Vec<Entry>))>() + 1)
            + state.active.queues.values().map(|(_, e)| e.capacity() * size_of::<Entry>()).sum::<usize>()
            + state.active.cuts.capacity() * (size_of::<(u64, Cut)>() + 1)
            + state.active.before.capacity() * (size_of::<(u64, Extent)>() + 1);
        extents + active + state.runs.capacity() * size_of::<Arc<Run>>()
    }

    /// Queues known (with at least one entry in this index's life).
    pub fn queue_count(&self) -> usize {
        self.state.read().extents.len()
    }

    /// Sealed runs (each one file and one mapping).
    pub fn run_count(&self) -> usize {
        self.state.read().runs.len()
    }

    /// Entries in the active run (in memory, not sealed yet).
    pub fn active_entries(&self) -> usize {
        self.state.read().active.entries
    }

    /// The log offset the index covers from: its first run's start (its
    /// active run's, with no run). An owner whose log holds records below it
    /// (at open: runs lost at the front) must rebuild the index: entries
    /// cannot be put before those of later runs.
    pub fn covers_from(&self) -> u64 {
        let state = self.state.read();
        state.runs.first().map_or(state.active.from, |r| r.log_from)
    }

    /// Where the active run starts: every entry of a record below it is in a
    /// sealed, synced run.
    pub fn sealed_to(&self) -> u64 {
        let state = self.state.read();
        state.sealing.as_ref().map_or(state.active.from, |s| s.from)
    }
}

/// Where a queue's raised first offset comes from, in
/// [`raise_firsts_with_cuts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raised {
    /// The end of its newest row in an expired run.
    Expired,
    /// Its first entry at or past the log's front in the run spanning it.
    Front,
    /// Its first entry at or past the log's front in the active run (no run left).
    Active,
}

/// [`QueueIndex::expire`]'s raising of first offsets when some queue was
/// cut: a queue's first offset goes up to where its newest expired row
/// ended (or to its first live entry in the run spanning the log's new
/// front, or in the active run when no run is left), but never past a newer
/// row that cut it lower (that row holds the queue from its start on: only
/// rows that cut can start below an older row's end), nor past its end.
fn raise_firsts_with_cuts(
    extents: &mut QueueMap<Extent>,
    expired: &[Arc<Run>],
    runs: &[Arc<Run>],
    active: &mut Active,
    log_min: u64,
) {
    let mut raise: QueueMap<(u64, Raised)> = QueueMap::default();
    for run in expired {
        for (queue, span) in run.spans() {
            raise.insert(queue, (span.end(), Raised::Expired));
        }
    }
    if let Some(front) = runs.first().filter(|r| r.log_from < log_min) {
        for (queue, span) in front.spans() {
            raise.insert(queue, (front.first_at_or_after(span, log_min), Raised::Front));
        }
    }
    // Newer rows that cut their queue lower: in runs that hold cuts (the
    // front run is newer only than the expired ones), and in the active run.
    for (i, run) in runs.iter().enumerate().filter(|(_, r)| r.cuts) {
        for (queue, span) in run.spans() {
            if let Some((to, from)) = raise.get_mut(&queue) {
                let newer = *from == Raised::Expired || (*from == Raised::Front && i > 0);
                if newer && span.first < *to {
                    *to = span.first;
                }
            }
        }
    }
    // What the queue table says of a queue cut in the active run is its
    // extent at the active run's start: raised as far as the runs say.
    for (queue, before) in &mut active.before {
        if let Some((to, _)) = raise.get(queue) {
            before.min = before.min.max(*to).min(before.end);
        }
    }
    if runs.is_empty() {
        for (queue, (first, entries)) in &active.queues {
            let below = entries.partition_point(|e| e.log_offset < log_min) as u64;
            raise.insert(*queue, (first + below, Raised::Active));
        }
    }
    for (queue, (first, _)) in &active.queues {
        if let Some((to, from)) = raise.get_mut(queue) {
            if *from != Raised::Active && *first < *to {
                *to = *first;
            }
        }
    }
    for (queue, (to, _)) in raise {
        if let Some(extent) = extents.get_mut(&queue) {
            extent.min = extent.min.max(to).min(extent.end);
        }
    }
}
