//! Loading a queue: listing its directories, checking the union's layout, opening
//! every segment, trimming spares, starting the preallocation thread.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use mapped_file::{parse_file_name, FailureLatch, MappedFile, Storage};
use parking_lot::{Mutex, RwLock};
use transient_pool::TransientStorePool;

use crate::allocate::Allocator;
use crate::prepare::{Counters, Preparer, SyncActivity};
use crate::recycle::Spares;
use crate::{check_layout, ListedSegment, LoadReport, QueueConfig, QueueError, SegmentDir, SegmentQueue};

impl SegmentQueue {
    /// As [`load`](Self::load), over several directories (RocketMQ's
    /// `MultiPathMappedFileQueue`, for a log spread over disks). The segments of
    /// all of them form one sequence: names stay global start offsets, the layout
    /// rules hold for the union (two directories holding the same offset are
    /// [`QueueError::Duplicate`]), and a segment may live in any directory.
    ///
    /// **Placement:** the segment starting at offset `o` is created in directory
    /// `(o / mapped_file_size) % n` of the candidates, in the order given: the
    /// writable directories not [marked full](Self::set_dir_full), or every
    /// writable directory when all are full. So consecutive segments alternate
    /// between disks, and a full or read-only disk gets none. Spares stay in the
    /// directory they were kept in.
    ///
    /// The directories must be disjoint (none inside another) and at least one
    /// must be writable ([`QueueError::InvalidConfig`] otherwise).
    pub fn load_dirs(
        storage: Arc<dyn Storage>,
        dirs: Vec<SegmentDir>,
        config: QueueConfig,
        pool: Option<TransientStorePool>,
    ) -> Result<Self, QueueError> {
        let size = config.mapped_file_size;
        if size == 0 || !size.is_multiple_of(mapped_file::OS_PAGE_SIZE) {
            return Err(QueueError::InvalidConfig {
                reason: format!("mapped_file_size {size} must be a positive multiple of 4096"),
            });
        }
        let chunk = config.preparation_chunk_bytes;
        config.segment_preparation.check_chunk(chunk, size).map_err(|reason| QueueError::InvalidConfig { reason })?;
        if let Some(pool) = &pool {
            if pool.buffer_size_bytes() != size {
                return Err(QueueError::InvalidConfig {
                    reason: format!("write buffers have {} bytes but segments have {size}", pool.buffer_size_bytes()),
                });
            }
        }
        check_dirs(&dirs)?;
        let mut entries = Vec::new();
        for dir in &dirs {
            let dir = &dir.path;
            let dir_err = |source| QueueError::Dir { path: dir.clone(), source };
            storage.create_dir_all(dir).map_err(dir_err)?;
            for entry in storage.list(dir).map_err(dir_err)? {
                if entry.name == mapped_file::LOCK_FILE {
                    continue; // the storage's own lock, when the segments sit in its root
                }
                let path = dir.join(&entry.name);
                let start_offset =
                    parse_file_name(&entry.name).ok_or_else(|| QueueError::MalformedName { path: path.clone() })?;
                entries.push((ListedSegment { start_offset, path, len: entry.len }, entry.modified_ms));
            }
        }
        // Stable: of two files with one offset, the first directory's comes first.
        entries.sort_by_key(|(listed, _)| listed.start_offset);

        let mut report = LoadReport::default();
        if entries.last().is_some_and(|(listed, _)| listed.len == 0) {
            let (listed, _) = entries.pop().expect("checked non-empty");
            tracing::warn!(path = %listed.path.display(), "deleting zero-length last segment");
            storage.remove(&listed.path).map_err(|source| QueueError::Dir { path: listed.path.clone(), source })?;
            report.removed_empty_tail = Some(listed.path);
        }
        let listed: Vec<ListedSegment> = entries.iter().map(|(listed, _)| listed.clone()).collect();
        if let Some(problem) = check_layout(&listed, size as u64).into_iter().next() {
            return Err(problem);
        }
        let latch = FailureLatch::new();
        let mut files = Vec::with_capacity(entries.len());
        for (listed, modified_ms) in entries {
            let file = MappedFile::open(&*storage, &listed.path, size)?.with_latch(Arc::clone(&latch));
            file.set_positions(size)?;
            file.set_store_timestamp(modified_ms);
            files.push(Arc::new(file));
        }
        report.segments = files.len();
        let end = files.last().map_or(0, |f| f.file_end());
        tracing::info!(dirs = dirs.len(), dir = %dirs[0].path.display(), segments = files.len(), end, "segment queue loaded");
        let writable = dirs.iter().filter(|d| !d.read_only).map(|d| d.path.clone()).collect();
        let spares = Arc::new(Spares::new(Arc::clone(&storage), writable, config.recycle_segments, size));
        let trimmed = spares.trim();
        if trimmed > 0 {
            tracing::info!(
                trimmed,
                keep = config.recycle_segments,
                "spare segment files beyond recycle_segments deleted"
            );
        }
        let activity = Arc::new(SyncActivity::default());
        let preparation = Arc::new(Counters::default());
        let allocator = if config.preallocate_next_segment {
            let warm = config.warm_mapped_file_enable.then_some(config.lock_warmed_mapped_file);
            let wait = std::time::Duration::from_millis(config.preallocation_wait_ms);
            let spares = Arc::clone(&spares);
            // A warm-up (RocketMQ's) takes precedence over a preparation.
            let prepares = config.segment_preparation.writes_blocks() && warm.is_none();
            let preparer = prepares.then(|| Preparer {
                mode: config.segment_preparation,
                chunk,
                rate: config.preparation_bytes_per_sec,
                activity: Arc::clone(&activity),
                counters: Arc::clone(&preparation),
            });
            Some(
                Allocator::start(
                    Arc::clone(&storage),
                    size,
                    warm,
                    wait,
                    spares,
                    config.disk_space_limit_percent,
                    preparer,
                )
                .map_err(|source| QueueError::Dir { path: dirs[0].path.clone(), source })?,
            )
        } else {
            None
        };
        Ok(SegmentQueue {
            full: dirs.iter().map(|_| AtomicBool::new(false)).collect(),
            dirs,
            config,
            storage,
            files: RwLock::new(files),
            latch,
            flushed_where: AtomicU64::new(end),
            committed_where: AtomicU64::new(end),
            store_timestamp: AtomicU64::new(0),
            pool,
            spares,
            deleted_mapped: Mutex::new(Vec::new()),
            allocator: Mutex::new(allocator),
            front_guard: RwLock::new(None),
            front_hold: RwLock::new(None),
            roll_lock: Mutex::new(()),
            flush_lock: Mutex::new(()),
            commit_lock: Mutex::new(()),
            load_report: report,
            activity,
            preparation,
        })
    }
}

/// The directories of one queue: some, disjoint, at least one writable.
fn check_dirs(dirs: &[SegmentDir]) -> Result<(), QueueError> {
    let invalid = |reason: String| Err(QueueError::InvalidConfig { reason });
    if !dirs.iter().any(|d| !d.read_only) {
        return invalid(format!("no writable segment directory among {} given", dirs.len()));
    }
    let paths: Vec<&std::path::Path> = dirs.iter().map(|d| d.path.as_path()).collect();
    if let Some((first, second)) = mapped_file::first_overlap(&paths) {
        return invalid(format!(
            "segment directories {} and {} overlap: each must be outside the others",
            first.display(),
            second.display()
        ));
    }
    Ok(())
}
