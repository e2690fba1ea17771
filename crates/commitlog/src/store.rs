//! The store-directory protocol: what lives beside the segments and what it means.
//!
//! ```text
//! <dir>/lock        held (flock) by the storage while the log is open
//! <dir>/abort       present while a process has the log open: found at open, the
//!                   last process died, and recovery is abnormal
//! <dir>/checkpoint  how far data was durable (see `checkpoint`)
//! <dir>/commitlog/  the segments
//! ```
//!
//! Every file here goes through the [`Storage`] seam, so a simulated power cut
//! covers the markers and the checkpoint as well as the segments.

use std::path::{Path, PathBuf};

use mapped_file::Storage;

use crate::checkpoint::Checkpoint;
use crate::Error;

/// Name of the segment directory inside the store directory.
pub const SEGMENT_DIR: &str = "commitlog";
/// Name of the lock file (held by `MmapStorage`).
pub const LOCK_FILE: &str = mapped_file::LOCK_FILE;
/// Name of the abort marker, present while a process has the log open.
pub const ABORT_FILE: &str = "abort";

/// What opening a store directory found.
#[derive(Debug)]
pub(crate) struct Opened {
    /// No abort marker: the last process shut down cleanly.
    pub(crate) clean_shutdown: bool,
    /// The checkpoint, if any.
    pub(crate) checkpoint: Option<Checkpoint>,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// The segment directory of a store directory.
pub(crate) fn segment_dir(dir: &Path) -> PathBuf {
    dir.join(SEGMENT_DIR)
}

/// Reads the abort marker and the checkpoint, then writes the abort marker (with
/// this process's id): from here until [`mark_clean_shutdown`], a crash makes the
/// next open recover abnormally.
pub(crate) fn open(storage: &dyn Storage, dir: &Path) -> Result<Opened, Error> {
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    let abort = dir.join(ABORT_FILE);
    let clean_shutdown = storage.read_small(&abort).map_err(io_err(&abort))?.is_none();
    let checkpoint = Checkpoint::load(storage, dir)?;
    storage.replace_small(&abort, std::process::id().to_string().as_bytes()).map_err(io_err(&abort))?;
    Ok(Opened { clean_shutdown, checkpoint })
}

/// Removes the abort marker (durably): the next open recovers normally. Called
/// last in a clean shutdown, after the final flush and checkpoint.
pub(crate) fn mark_clean_shutdown(storage: &dyn Storage, dir: &Path) -> Result<(), Error> {
    let abort = dir.join(ABORT_FILE);
    storage.remove(&abort).map_err(io_err(&abort))
}
