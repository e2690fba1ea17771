//! The consume-queue files of one queue, read directly (no mapping, no lock):
//! what the read-only views and the check share.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use consume_queue::{CqEntry, CQ_STORE_UNIT_SIZE};

use crate::error::{io_err, StoreError};

/// The segment files of a queue's directory, sorted, and the one read last.
#[derive(Debug)]
pub(crate) struct QueueFiles {
    /// (start byte, path, length) of each file named by 20 digits.
    pub(crate) files: Vec<(u64, PathBuf, u64)>,
    /// Names in the directory that are not segments.
    pub(crate) foreign: Vec<PathBuf>,
    /// The file read last, kept open for the entries after it.
    open: Option<(u64, std::fs::File)>,
}

impl QueueFiles {
    /// The files of `dir` (none if it does not exist).
    pub(crate) fn list(dir: &Path) -> Result<Self, StoreError> {
        let mut files = Vec::new();
        let mut foreign = Vec::new();
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                for entry in entries {
                    let entry = entry.map_err(io_err(dir))?;
                    let path = entry.path();
                    let name = entry.file_name().to_string_lossy().into_owned();
                    match (name.len() == 20).then(|| name.parse::<u64>().ok()).flatten() {
                        Some(start) => {
                            let len = entry.metadata().map_err(io_err(&path))?.len();
                            files.push((start, path, len));
                        }
                        None => foreign.push(path),
                    }
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_err(dir)(err)),
        }
        files.sort();
        Ok(QueueFiles { files, foreign, open: None })
    }

    /// Entry `index`, if a file holds one there (`None`: no file, past its
    /// end, or zeros).
    pub(crate) fn entry(&mut self, index: u64) -> Result<Option<CqEntry>, StoreError> {
        let at = index.saturating_mul(CQ_STORE_UNIT_SIZE as u64);
        let Some((start, path, len)) = self.files.iter().rev().find(|(start, ..)| *start <= at) else {
            return Ok(None);
        };
        if at.saturating_add(CQ_STORE_UNIT_SIZE as u64) > start.saturating_add(*len) {
            return Ok(None);
        }
        if self.open.as_ref().is_none_or(|(opened, _)| opened != start) {
            self.open = Some((*start, std::fs::File::open(path).map_err(io_err(path))?));
        }
        let Some((_, file)) = &self.open else { return Ok(None) };
        let mut bytes = [0u8; CQ_STORE_UNIT_SIZE];
        match file.read_exact_at(&mut bytes, at - start) {
            Ok(()) => Ok(CqEntry::decode(&bytes)),
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
            Err(err) => Err(io_err(path)(err)),
        }
    }

    /// The first index with an entry in the first file, and one past the last
    /// entry before the first empty slot of the last file (the first file's
    /// leading zeros are the queue's start): what the files show, unchecked.
    pub(crate) fn extent(&self) -> Result<(u64, u64), StoreError> {
        let unit = CQ_STORE_UNIT_SIZE as u64;
        let present = |path: &Path| -> Result<Vec<bool>, StoreError> {
            let bytes = std::fs::read(path).map_err(io_err(path))?;
            Ok(bytes.chunks_exact(CQ_STORE_UNIT_SIZE).map(|c| CqEntry::decode(c).is_some()).collect())
        };
        let mut min = 0;
        if let Some((start, path, _)) = self.files.first() {
            let first = present(path)?;
            min = start / unit + first.iter().position(|&e| e).unwrap_or(first.len()) as u64;
        }
        let mut max = 0;
        if let Some((start, path, _)) = self.files.last() {
            let last = present(path)?;
            // Leading holes of a queue's first file are its start, not its end.
            let skip = if self.files.len() == 1 { usize::try_from(min - start / unit).unwrap_or(0) } else { 0 };
            let n = last.iter().skip(skip).position(|&e| !e).map_or(last.len(), |p| p + skip) as u64;
            max = (start / unit + n).max(min);
        }
        Ok((min, max))
    }
}
