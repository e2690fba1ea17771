//! The failure latch: the one record of the first failed sync.
//!
//! After a sync fails, a later sync of the same range can report success without
//! the data being durable (fsyncgate: the kernel marks the pages clean and forgets
//! the error). So the first failure must stop everything that could acknowledge
//! data afterwards, and it must be kept in *one* place: if the flush services, a
//! manual flush and shutdown each kept their own copy, a failure seen by one would
//! leave the others accepting writes. A [`FailureLatch`] is shared by every segment
//! of a log (the segment queue hands its latch to each segment it opens or
//! creates); every reader of "is the log still writeable?" asks it.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The first failed sync: which file, which range, and the OS error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("sync of {} bytes [{from}, {to}) failed: {source}", path.display())]
pub struct SyncFailure {
    /// The segment file.
    pub path: PathBuf,
    /// Absolute start of the range that was being synced.
    pub from: u64,
    /// Absolute end of that range.
    pub to: u64,
    /// The OS error, shared by every error that reports this failure.
    #[source]
    pub source: Arc<io::Error>,
}

/// Set once, by the first failed sync; read by everyone. Cheap to read (one atomic
/// load while unset). Share it behind an `Arc`.
#[derive(Debug, Default)]
pub struct FailureLatch {
    first: OnceLock<Arc<SyncFailure>>,
}

impl FailureLatch {
    /// An unset latch.
    pub fn new() -> Arc<Self> {
        Arc::new(FailureLatch::default())
    }

    /// The first failure, if any sync failed.
    pub fn get(&self) -> Option<Arc<SyncFailure>> {
        self.first.get().cloned()
    }

    /// True once a sync failed.
    pub fn is_set(&self) -> bool {
        self.first.get().is_some()
    }

    /// Records `failure` unless an earlier one is recorded; returns the one kept.
    pub(crate) fn set(&self, failure: SyncFailure) -> Arc<SyncFailure> {
        let mut failure = Some(failure);
        let kept = self.first.get_or_init(|| Arc::new(failure.take().expect("initialised once")));
        Arc::clone(kept)
    }
}
