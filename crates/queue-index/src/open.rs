//! Opening an index: its runs mapped and checked (a damaged run dropped with
//! every later one), the queue table or the kept ends read, every queue's
//! extent learned, and where dispatch goes on.

use std::path::Path;
use std::sync::Arc;

use mapped_file::Storage;
use parking_lot::RwLock;

use crate::active::Active;
use crate::config::IndexConfig;
use crate::ends::{encode_ends, ends_path, keep_end};
use crate::entry::{Extent, QueueMap};
use crate::error::IndexError;
use crate::index::{QueueIndex, State};
use crate::report::OpenReport;
use crate::run::Run;
use crate::table::{self, table_path};

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
}
