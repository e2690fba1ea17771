//! The ends kept for a rebuild: queues whose records all went with the log's
//! front keep their ends through a removal of the index (`remove_keeping_ends`),
//! a table not used, and a crash, until `seed_ends` writes them into a new
//! queue table. The file `ends` has the queue table's format (`table.rs`).

use std::path::{Path, PathBuf};

use mapped_file::Storage;

use crate::entry::{Extent, QueueMap};
use crate::error::IndexError;
use crate::index::QueueIndex;
#[cfg(doc)]
use crate::report::OpenReport;
use crate::table;

/// The file of the ends kept for [`QueueIndex::seed_ends`]: the queue
/// table's format (`table.rs`), at point 0, each queue's first offset its end.
pub(crate) fn ends_path(dir: &Path) -> PathBuf {
    dir.join("ends")
}

/// The bytes of the file of kept `ends`.
pub(crate) fn encode_ends(ends: &QueueMap<u64>) -> Vec<u8> {
    let extents: QueueMap<Extent> = ends.iter().map(|(&queue, &end)| (queue, Extent { min: end, end })).collect();
    table::encode(0, &extents)
}

/// Adds `(queue, end)` to `ends`, keeping the higher end of a queue given twice.
pub(crate) fn keep_end(ends: &mut QueueMap<u64>, queue: u64, end: u64) {
    let kept = ends.entry(queue).or_insert(end);
    *kept = (*kept).max(end);
}

impl QueueIndex {
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
}
