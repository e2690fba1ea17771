//! The segment files of a directory (the key index's), listed directly (no
//! mapping, no lock): what the read-only views and the check share.

use std::path::{Path, PathBuf};

use crate::error::{io_err, StoreError};

/// The segment files of a directory, sorted.
#[derive(Debug)]
pub(crate) struct SegmentFiles {
    /// (start byte, path, length) of each file named by 20 digits.
    pub(crate) files: Vec<(u64, PathBuf, u64)>,
}

impl SegmentFiles {
    /// The files of `dir` (none if it does not exist).
    pub(crate) fn list(dir: &Path) -> Result<Self, StoreError> {
        let mut files = Vec::new();
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                for entry in entries {
                    let entry = entry.map_err(io_err(dir))?;
                    let path = entry.path();
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if let Some(start) = (name.len() == 20).then(|| name.parse::<u64>().ok()).flatten() {
                        let len = entry.metadata().map_err(io_err(&path))?.len();
                        files.push((start, path, len));
                    }
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_err(dir)(err)),
        }
        files.sort();
        Ok(SegmentFiles { files })
    }
}
