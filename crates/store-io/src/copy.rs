//! [`CopyStorage`]: a directory read without its lock and changed in no way.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::{DirEntry, OpenedSegment, SegmentIo, SegmentMemory, Storage};

/// A store's directory seen by a tool that must not disturb it, open or not
/// (`verify`, `inspect`): every segment opened is copied into heap memory, so
/// the owner's later writes do not show and the copy can be written freely;
/// nothing on disk is created, changed or removed (those calls fail with
/// `PermissionDenied`). It takes no lock: what it reads is the files as they
/// are at each call, which an owner writing meanwhile may leave torn at their
/// ends, as a crash would.
///
/// ```
/// use store_io::{CopyStorage, Storage};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("seg"), b"abcd")?;
/// let copy = CopyStorage;
/// let opened = copy.open(&dir.path().join("seg"), 4)?;
/// assert_eq!(opened.memory.len(), 4);
/// assert!(copy.remove(&dir.path().join("seg")).is_err());
/// assert!(dir.path().join("seg").exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct CopyStorage;

fn refused(what: &str, path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, format!("{what} {}: a read-only copy", path.display()))
}

/// A copied segment's I/O: its bytes live only in memory, so nothing is ever
/// durable and a sync says so.
#[derive(Debug)]
struct CopiedSegment;

impl SegmentIo for CopiedSegment {
    fn sync_range(&self, _memory: &SegmentMemory, _offset: usize, _len: usize) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "a copied segment cannot be made durable"))
    }

    fn advise_and_lock(&self, _memory: &SegmentMemory, _lock: bool) -> io::Result<()> {
        Ok(())
    }

    fn remove(&self) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::PermissionDenied, "a copied segment's file is not removed"))
    }
}

impl Storage for CopyStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        Err(refused("cannot create", dir))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        crate::mmap::list_files(dir)
    }

    fn create(&self, path: &Path, _len: usize) -> io::Result<OpenedSegment> {
        Err(refused("cannot create", path))
    }

    /// Copies the first `len` bytes of the file; a shorter file reads as zeros
    /// past its end.
    fn open(&self, path: &Path, len: usize) -> io::Result<OpenedSegment> {
        let mut bytes = Vec::with_capacity(len);
        File::open(path)?.take(len as u64).read_to_end(&mut bytes)?;
        bytes.resize(len, 0);
        Ok(OpenedSegment { memory: SegmentMemory::heap(bytes)?, io: Box::new(CopiedSegment) })
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        Err(refused("cannot remove", path))
    }

    fn read_small(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn replace_small(&self, path: &Path, _bytes: &[u8]) -> io::Result<()> {
        Err(refused("cannot write", path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn a_copy_is_written_in_memory_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        std::fs::write(&path, b"abcdef").unwrap();
        let opened = CopyStorage.open(&path, 8).unwrap();
        // SAFETY: nothing else holds this heap memory; 8 bytes were allocated.
        let bytes = unsafe { opened.memory.range_mut(0, 8) };
        assert_eq!(bytes, b"abcdef\0\0");
        bytes[0] = b'X';
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        assert!(opened.io.sync_range(&opened.memory, 0, 8).is_err());
        assert!(CopyStorage.replace_small(&path, b"x").is_err());
        assert!(CopyStorage.create(&dir.path().join("new"), 8).is_err());
        assert_eq!(CopyStorage.read_small(&path).unwrap().unwrap(), b"abcdef");
        assert_eq!(CopyStorage.read_small(&dir.path().join("none")).unwrap(), None);
        assert_eq!(CopyStorage.list(dir.path()).unwrap().len(), 1);
    }
}
