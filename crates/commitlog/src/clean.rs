//! RocketMQ's `CleanCommitLogService`: one service thread that, every
//! `clean_resource_interval_ms`, looks at the disk and deletes old segments.
//!
//! - **The disk-space guard** (the DISK_FULL running flag): once the file system's
//!   used share reaches `disk_space_warning_level_ratio` (over several segment
//!   directories: the least used share among the writable ones; a directory past
//!   `disk_space_clean_forcibly_ratio` gets no new segment) the log refuses appends
//!   with [`Error::DiskFull`](crate::Error::DiskFull) (one atomic load per append,
//!   no `statvfs`), and takes them again once it falls below. Reads, flushes and
//!   segment deletion go on, so acknowledged records stay readable and space can
//!   be freed.
//! - **Cleaning:** segments older than `file_reserved_time_ms` are deleted from the
//!   front at the `delete_when` hours, or at any time once the used share passes
//!   `disk_max_used_space_ratio`; past `disk_space_clean_forcibly_ratio` (with
//!   `clean_file_forcibly_enable`) the oldest are deleted even if not expired,
//!   only as many as bring the disk back to that ratio (RocketMQ deletes a whole
//!   batch, most of the log on a small disk). At most `delete_file_batch_max` per run; never the last segment, never one
//!   holding bytes not yet durable, never past one that is kept (no hole). A
//!   reader's zero-copy view of a deleted segment stays valid: the file is
//!   unlinked at once and its mapping goes with the last view (RocketMQ's
//!   `destroyMapedFileIntervalForcibly` wait is not needed). While space is short,
//!   expired segments are deleted, not kept as spares, and the spares go.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flush_service::ServiceThread;
use mapped_file::Storage;
use segment_queue::SegmentQueue;

use crate::config::parse_delete_when;
use crate::CommitLogConfig;

/// The guard's state, shared by the appenders and the service thread.
#[derive(Debug)]
pub(crate) struct DiskGuard {
    full: AtomicBool,
    /// The last used share seen, in percent, as `f64` bits (NaN: unknown).
    used_percent: AtomicU64,
    /// The directory that share was seen in.
    used_dir: parking_lot::Mutex<Option<PathBuf>>,
    /// Appends are refused at or above this share (`disk_space_warning_level_ratio`).
    limit_percent: u32,
    /// A segment directory above this share gets no new segment
    /// (`disk_space_clean_forcibly_ratio`).
    dir_full_percent: f64,
    /// A new segment was refused because it is larger than its disk allows
    /// even empty: (segment bytes, disk bytes), for the error appends get.
    too_large: parking_lot::Mutex<Option<(u64, u64)>>,
}

impl DiskGuard {
    pub(crate) fn new(config: &CommitLogConfig) -> Arc<Self> {
        Arc::new(DiskGuard {
            full: AtomicBool::new(false),
            used_percent: AtomicU64::new(f64::NAN.to_bits()),
            used_dir: parking_lot::Mutex::new(None),
            limit_percent: config.disk_space_warning_level_ratio,
            dir_full_percent: f64::from(config.disk_space_clean_forcibly_ratio),
            too_large: parking_lot::Mutex::new(None),
        })
    }

    /// True while appends are refused.
    pub(crate) fn is_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    /// The used share of the disk at the last look, in percent.
    pub(crate) fn used_percent(&self) -> Option<f64> {
        let used = f64::from_bits(self.used_percent.load(Ordering::Relaxed));
        (!used.is_nan()).then_some(used)
    }

    /// The error an append gets while the flag is set (`store` when no look at
    /// the disk named a directory yet).
    pub(crate) fn refusal(&self, store: &std::path::Path) -> crate::Error {
        let dir = self.used_dir.lock().clone().unwrap_or_else(|| store.to_path_buf());
        if let Some((segment_bytes, disk_bytes)) = *self.too_large.lock() {
            return crate::Error::SegmentLargerThanDisk {
                dir,
                segment_bytes,
                disk_bytes,
                limit_percent: self.limit_percent,
            };
        }
        crate::Error::DiskFull {
            dir,
            used_percent: self.used_percent().unwrap_or(100.0),
            limit_percent: self.limit_percent,
        }
    }

    /// Refuses appends until the next look finds room: no segment fits `dir`'s
    /// disk, even empty (a segment of `segment_bytes`, a disk of `disk_bytes`).
    pub(crate) fn refuse_too_large(&self, dir: &std::path::Path, segment_bytes: u64, disk_bytes: u64) -> crate::Error {
        *self.too_large.lock() = Some((segment_bytes, disk_bytes));
        self.refuse_until_next_look(dir, self.used_percent().unwrap_or(0.0));
        crate::Error::SegmentLargerThanDisk {
            dir: dir.to_path_buf(),
            segment_bytes,
            disk_bytes,
            limit_percent: self.limit_percent,
        }
    }

    /// Refuses appends from now until the next look finds room: a new segment
    /// was refused because `dir`'s disk would pass the limit with it
    /// (`used_percent`, the share it would leave). The producer outran the
    /// timer's look; the refusal is the guard's, so appends get
    /// [`Error::DiskFull`](crate::Error::DiskFull) at once until then.
    pub(crate) fn refuse_until_next_look(&self, dir: &std::path::Path, used_percent: f64) {
        self.used_percent.store(used_percent.to_bits(), Ordering::Relaxed);
        *self.used_dir.lock() = Some(dir.to_path_buf());
        if !self.full.swap(true, Ordering::AcqRel) {
            tracing::warn!(dir = %dir.display(), used_percent, limit_percent = self.limit_percent, "disk full for a new segment: appends are refused");
        }
    }

    /// The guard's error for a new segment its disk had no room for.
    pub(crate) fn refuse_segment(&self, dir: &std::path::Path, used_percent: f64) -> crate::Error {
        self.refuse_until_next_look(dir, used_percent);
        crate::Error::DiskFull { dir: dir.to_path_buf(), used_percent, limit_percent: self.limit_percent }
    }

    /// Looks once at the disk of every writable segment directory: one above
    /// `disk_space_clean_forcibly_ratio` is marked full in the queue (no new
    /// segment goes there), and the log's used share is the least of them (as
    /// RocketMQ's: while one disk has room, new segments go there). Sets the
    /// flag, full at or above the limit, and returns that look. A storage that
    /// cannot tell never makes the log full.
    pub(crate) fn check(&self, storage: &dyn Storage, queue: &SegmentQueue) -> Option<DiskLook> {
        let mut least: Option<DiskLook> = None;
        for dir in queue.dirs().iter().filter(|d| !d.read_only) {
            // Counted before the look: a view dropped in between then frees space
            // the look sees *and* still counts here, so the cleaning deletes too
            // little this run (the next run sees the truth), never a segment too
            // many, as when the count came after the look and missed space the
            // look still saw as used.
            let awaiting_release = queue.bytes_awaiting_release(&dir.path);
            let space = match storage.disk_space(&dir.path) {
                Ok(Some(space)) => space,
                Ok(None) => return None,
                Err(err) => {
                    tracing::warn!(dir = %dir.path.display(), %err, "cannot read the disk's free space");
                    return None;
                }
            };
            let used = space.used_percent();
            let dir_full = used > self.dir_full_percent;
            queue.set_dir_full(&dir.path, dir_full);
            if dir_full && queue.dirs().len() > 1 {
                tracing::debug!(dir = %dir.path.display(), used, "segment directory full: new segments go elsewhere");
            }
            if least.as_ref().is_none_or(|l| used < l.used_percent) {
                least = Some(DiskLook { used_percent: used, dir: dir.path.clone(), space, awaiting_release });
            }
        }
        let look = least?;
        let (used, dir) = (look.used_percent, &look.dir);
        self.used_percent.store(used.to_bits(), Ordering::Relaxed);
        *self.used_dir.lock() = Some(dir.clone());
        let limit_percent = self.limit_percent;
        let full = used >= f64::from(limit_percent);
        if !full {
            *self.too_large.lock() = None; // the next roll-over looks again
        }
        if self.full.swap(full, Ordering::AcqRel) != full {
            if full {
                tracing::warn!(dir = %dir.display(), used, limit_percent, "disk full: appends are refused");
            } else {
                tracing::info!(dir = %dir.display(), used, limit_percent, "disk space back: appends are accepted");
            }
        }
        Some(look)
    }
}

/// One look at the disk of a segment directory.
#[derive(Debug, Clone)]
pub(crate) struct DiskLook {
    /// The used share, in percent ([`DiskSpace::used_percent`](mapped_file::DiskSpace::used_percent)).
    pub(crate) used_percent: f64,
    /// The directory looked at.
    pub(crate) dir: PathBuf,
    /// What the storage said.
    pub(crate) space: mapped_file::DiskSpace,
    /// Bytes of deleted segments a view still maps in `dir`, counted just
    /// before the look ([`SegmentQueue::bytes_awaiting_release`]).
    pub(crate) awaiting_release: u64,
}

/// What the cleaning service deleted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Runs of the service.
    pub runs: u64,
    /// Expired segments deleted (older than `file_reserved_time_ms`).
    pub expired_deleted: u64,
    /// Segments deleted before they expired because space ran short.
    pub forcibly_deleted: u64,
}

/// The cleaning half of the service: its knobs and counters.
#[derive(Debug)]
pub(crate) struct Cleaner {
    /// Hours of the day (UTC) at which expired segments are deleted.
    delete_hours: [bool; 24],
    reserved_ms: u64,
    max_used: f64,
    forcibly: Option<f64>,
    batch: usize,
    runs: AtomicU64,
    expired: AtomicU64,
    forced: AtomicU64,
}

impl Cleaner {
    pub(crate) fn new(config: &CommitLogConfig) -> Arc<Self> {
        Arc::new(Cleaner {
            // Checked by `CommitLogConfig::validate`.
            delete_hours: parse_delete_when(&config.delete_when).unwrap_or([false; 24]),
            reserved_ms: config.file_reserved_time_ms,
            max_used: f64::from(config.disk_max_used_space_ratio),
            forcibly: config.clean_file_forcibly_enable.then(|| f64::from(config.disk_space_clean_forcibly_ratio)),
            batch: config.delete_file_batch_max,
            runs: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            forced: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> CleanStats {
        CleanStats {
            runs: self.runs.load(Ordering::Relaxed),
            expired_deleted: self.expired.load(Ordering::Relaxed),
            forcibly_deleted: self.forced.load(Ordering::Relaxed),
        }
    }

    /// One run at `now_ms` after a look at the disk (if the storage can tell).
    pub(crate) fn run(&self, queue: &SegmentQueue, look: Option<&DiskLook>, now_ms: u64) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        let used = look.map(|l| l.used_percent);
        let hour = usize::try_from(now_ms / 3_600_000 % 24).unwrap_or(0); // below 24
        let short = used.is_some_and(|u| u > self.max_used);
        // Space short: nothing kept as a spare, and the spares go.
        queue.set_keep_spares(!short);
        // Something deleted in this run frees space the look did not see: the
        // forcible step waits for the next run's look.
        let mut freed_some = short && queue.drop_spares() > 0;
        if self.delete_hours[hour] || short {
            match queue.delete_expired_file_by_time(self.reserved_ms, now_ms, self.batch) {
                Ok(0) => {}
                Ok(n) => {
                    freed_some = true;
                    self.expired.fetch_add(n as u64, Ordering::Relaxed);
                    crate::metrics::deleted(n, "expired");
                    tracing::info!(segments = n, used, "expired segments deleted");
                }
                Err(err) => tracing::warn!(%err, "deleting expired segments failed"),
            }
        }
        if let (Some(limit), Some(look), false) = (self.forcibly, look, freed_some) {
            // Oldest first, expired or not, only as many as bring the disk back to
            // the limit: space that deleted segments still hold through a
            // reader's view comes back when the view goes, and is not freed twice.
            let over = look.space.bytes_above(limit).saturating_sub(look.awaiting_release);
            if look.used_percent > limit && over > 0 {
                let used = look.used_percent;
                match queue.delete_oldest_to_free(&look.dir, over, self.batch) {
                    Ok(0) => {}
                    Ok(n) => {
                        self.forced.fetch_add(n as u64, Ordering::Relaxed);
                        crate::metrics::deleted(n, "space");
                        tracing::warn!(segments = n, used, limit, "space short: segments deleted before they expired");
                    }
                    Err(err) => tracing::warn!(%err, "deleting segments to free space failed"),
                }
            }
        }
    }
}

/// The service thread: the guard's look at the disk, then a cleaning run.
pub(crate) fn start_service(
    guard: Arc<DiskGuard>,
    cleaner: Arc<Cleaner>,
    queue: Arc<SegmentQueue>,
    storage: Arc<dyn Storage>,
    interval: Duration,
) -> std::io::Result<ServiceThread> {
    // No run once shutdown has begun: it would delete segments under the final flush.
    ServiceThread::spawn_every("CleanCommitLogService", interval, move || {
        let look = guard.check(&*storage, &queue);
        cleaner.run(&queue, look.as_ref(), mapped_file::epoch_ms(std::time::SystemTime::now()));
        crate::metrics::state(look.map(|l| l.used_percent), queue.pool_buffers_available(), queue.segment_count());
    })
}
