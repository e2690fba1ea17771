//! The storage the consume queues use when the store defers their syncs:
//! every call goes to the store's storage, except that a new consume-queue
//! file, and a new queue's directories, are created without syncing their
//! allocation and directory entries ([`Storage::create_deferred`],
//! [`Storage::create_dir_all_deferred`]). A store of many queues creates one file
//! per queue; those syncs (two cache flushes each, competing with the log's)
//! are left to the thorough flush's one `sync_all_under`, which runs before it
//! records a dispatch point whenever a file was created (or closed) unsynced
//! since the last. A power cut before then can lose such a file with its
//! entries; they all lie past the recorded point, so recovery dispatches them
//! again.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use store_io::{DirEntry, DiskSpace, OpenedSegment, Storage};

#[derive(Debug)]
pub(crate) struct DeferredCreates {
    pub(crate) inner: Arc<dyn Storage>,
    /// Set once a file is made (never before it is: a sync that saw the flag
    /// must cover the file).
    pub(crate) unsynced: Arc<AtomicBool>,
}

impl Storage for DeferredCreates {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all_deferred(dir)?;
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::CreateNotSynced) {
            return Ok(());
        }
        self.unsynced.store(true, Ordering::Release);
        Ok(())
    }
    fn create_dir_all_deferred(&self, dir: &Path) -> io::Result<()> {
        self.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.list(dir)
    }
    fn create(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        let opened = self.inner.create_deferred(path, len)?;
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::CreateNotSynced) {
            return Ok(opened);
        }
        self.unsynced.store(true, Ordering::Release);
        Ok(opened)
    }
    fn create_deferred(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        self.create(path, len)
    }
    fn open(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        self.inner.open(path, len)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn read_small(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.inner.read_small(path)
    }
    fn replace_small(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.inner.replace_small(path, bytes)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn disk_space(&self, dir: &Path) -> io::Result<Option<DiskSpace>> {
        self.inner.disk_space(dir)
    }
    fn sync_all_under(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_all_under(dir)
    }
    fn release(&self) {
        self.inner.release();
    }
}
