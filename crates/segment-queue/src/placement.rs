//! Placement: which directory a new segment goes to, and which are too full.

use std::path::Path;
use std::sync::atomic::Ordering;

use crate::{size_u64, SegmentDir, SegmentQueue};

impl SegmentQueue {
    /// Marks `dir` too full (or no longer too full) to take new segments; see
    /// [`load_dirs`](Self::load_dirs) for the placement rule. Segments already
    /// in it are appended to, read and deleted as before (they are preallocated:
    /// appending needs no space). False if `dir` is not one of the queue's.
    pub fn set_dir_full(&self, dir: &Path, full: bool) -> bool {
        match self.dirs.iter().position(|d| d.path == dir) {
            Some(index) => {
                self.full[index].store(full, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The directory the segment starting at `offset` is created in (the rule in
    /// [`load_dirs`](Self::load_dirs)).
    pub fn dir_for(&self, offset: u64) -> &Path {
        let writable = || self.dirs.iter().zip(&self.full).filter(|(d, _)| !d.read_only);
        let mut candidates: Vec<&SegmentDir> =
            writable().filter(|(_, full)| !full.load(Ordering::Relaxed)).map(|(d, _)| d).collect();
        if candidates.is_empty() {
            candidates = writable().map(|(d, _)| d).collect(); // at least one: checked at load
        }
        let len = u64::try_from(candidates.len()).ok().and_then(std::num::NonZeroU64::new);
        let index = len.map_or(0, |n| (offset / size_u64(self.config.mapped_file_size)) % n);
        let index = usize::try_from(index).unwrap_or(0); // below the candidate count
        candidates.get(index).map_or(&self.dirs[0].path, |d| &d.path)
    }

    /// The writable directories in the order a new segment at `offset` tries
    /// them: [`dir_for`](Self::dir_for)'s first, then the other writable
    /// directories not marked full, then those marked full, each in the order
    /// given.
    pub(crate) fn placement_order(&self, offset: u64) -> Vec<&Path> {
        let first = self.dir_for(offset);
        let writable = || self.dirs.iter().zip(&self.full).filter(|(d, _)| !d.read_only);
        let not_full = writable().filter(|(_, f)| !f.load(Ordering::Relaxed)).map(|(d, _)| d.path.as_path());
        let full = writable().filter(|(_, f)| f.load(Ordering::Relaxed)).map(|(d, _)| d.path.as_path());
        let mut order = vec![first];
        for dir in not_full.chain(full) {
            if !order.contains(&dir) {
                order.push(dir);
            }
        }
        order
    }
}
