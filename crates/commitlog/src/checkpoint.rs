//! The checkpoint: how far the log is known durable, written crash-safely, and the
//! service that rewrites it.
//!
//! ```text
//! 0          8                16                     24        28
//! +----------+----------------+----------------------+---------+
//! | CLCKPT01 | flushed offset | physic msg timestamp | crc32c  |
//! +----------+----------------+----------------------+---------+
//! ```
//!
//! Written through [`Storage::replace_small`] (for `MmapStorage`: a temporary
//! file, fsync, rename, directory fsync): a crash leaves either the old or the new
//! checkpoint, never a mix. The flushed offset only ever comes from a flush that
//! succeeded, so it is never ahead of durable data; recovery treats damage below it
//! as corruption, never as a torn tail.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flush_service::{FlushedReport, ServiceThread};
use mapped_file::Storage;

use crate::store::io_err;
use crate::Error;

const MAGIC: &[u8; 8] = b"CLCKPT01";
const LEN: usize = 28;

/// Name of the checkpoint file in the store directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";

/// The checkpoint's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// Offset below which every byte was durable when the checkpoint was written.
    pub flushed_offset: u64,
    /// Store timestamp (ms) of the newest durable record (RocketMQ's `physicMsgTimestamp`).
    pub physic_msg_timestamp: u64,
}

impl Checkpoint {
    /// The checkpoint file of a store directory.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CHECKPOINT_FILE)
    }

    /// The file's bytes.
    pub fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..16].copy_from_slice(&self.flushed_offset.to_le_bytes());
        out[16..24].copy_from_slice(&self.physic_msg_timestamp.to_le_bytes());
        let crc = crc32c::crc32c(&out[..24]);
        out[24..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses a checkpoint file's bytes; `path` names it in the error.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Checkpoint, Error> {
        let damaged = |reason| Err(Error::Checkpoint { path: path.to_path_buf(), reason });
        let Ok(bytes) = <&[u8; LEN]>::try_from(bytes) else {
            return damaged("wrong length");
        };
        if &bytes[..8] != MAGIC {
            return damaged("not a checkpoint file (bad magic)");
        }
        let crc = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
        if crc != crc32c::crc32c(&bytes[..24]) {
            return damaged("CRC mismatch");
        }
        Ok(Checkpoint {
            flushed_offset: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
            physic_msg_timestamp: u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")),
        })
    }

    /// Reads the checkpoint of `dir`: `None` if there is none; an error naming the
    /// file if it is damaged.
    pub fn load(storage: &dyn Storage, dir: &Path) -> Result<Option<Checkpoint>, Error> {
        let path = Self::path(dir);
        match storage.read_small(&path).map_err(io_err(&path))? {
            None => Ok(None),
            Some(bytes) => Self::decode(&bytes, &path).map(Some),
        }
    }

    /// Writes the checkpoint of `dir` crash-safely.
    pub fn store(&self, storage: &dyn Storage, dir: &Path) -> Result<(), Error> {
        let path = Self::path(dir);
        storage.replace_small(&path, &self.encode()).map_err(io_err(&path))
    }
}

/// What the next checkpoint will say: fed by every successful flush, written by
/// the checkpoint service and at shutdown.
#[derive(Debug, Default)]
pub(crate) struct CheckpointState {
    flushed: AtomicU64,
    timestamp: AtomicU64,
    stored: AtomicU64,
    /// Held while a record or a write is made, and across a truncation of the
    /// log's tail, so neither can put an offset above the new end in the file.
    lock: parking_lot::Mutex<()>,
}

impl CheckpointState {
    /// Records a flush that reached `report.flushed_where`, but no higher than
    /// `durable_now` (the queue's flushed offset, read under the lock): a flush
    /// that finished before a truncation of the tail reports its old end.
    pub(crate) fn record_at_most(&self, report: FlushedReport, durable_now: impl FnOnce() -> u64) {
        let _one = self.lock.lock();
        let flushed_where = report.flushed_where.min(durable_now());
        self.record(FlushedReport { flushed_where, ..report });
    }

    /// Lowers the checkpoint to `offset` durably, then runs `cut` (the truncation
    /// of everything above it) with no checkpoint record or write in between. A
    /// crash after the write and before the cut leaves a checkpoint below data
    /// that is still there: recovery keeps it.
    pub(crate) fn lower_then<T>(
        &self,
        storage: &dyn Storage,
        dir: &Path,
        offset: u64,
        cut: impl FnOnce() -> Result<T, Error>,
    ) -> Result<T, Error> {
        let _one = self.lock.lock();
        let flushed = self.flushed.load(Ordering::Acquire).min(offset);
        let checkpoint =
            Checkpoint { flushed_offset: flushed, physic_msg_timestamp: self.timestamp.load(Ordering::Acquire) };
        checkpoint.store(storage, dir)?;
        self.flushed.store(flushed, Ordering::Release);
        self.stored.store(flushed, Ordering::Release);
        cut()
    }

    /// A flush succeeded up to `report.flushed_where`.
    pub(crate) fn record(&self, report: FlushedReport) {
        self.timestamp.fetch_max(report.store_timestamp, Ordering::AcqRel);
        self.flushed.fetch_max(report.flushed_where, Ordering::AcqRel);
    }

    /// Writes the checkpoint if the flushed offset moved since the last write (or
    /// always, with `force`).
    pub(crate) fn persist(&self, storage: &dyn Storage, dir: &Path, force: bool) -> Result<(), Error> {
        let _one = self.lock.lock();
        let flushed = self.flushed.load(Ordering::Acquire);
        if !force && flushed == self.stored.load(Ordering::Acquire) {
            return Ok(());
        }
        let checkpoint =
            Checkpoint { flushed_offset: flushed, physic_msg_timestamp: self.timestamp.load(Ordering::Acquire) };
        checkpoint.store(storage, dir)?;
        self.stored.store(flushed, Ordering::Release);
        Ok(())
    }
}

/// RocketMQ's `StoreCheckpoint` flush: rewrites the checkpoint every `interval`
/// when the flushed offset moved. Errors are logged; the next round retries, and
/// shutdown's final write reports its own.
pub(crate) fn start_service(
    state: Arc<CheckpointState>,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    interval: Duration,
) -> std::io::Result<ServiceThread> {
    // Shutdown writes the final checkpoint itself, after stopping this.
    ServiceThread::spawn_every("CheckpointService", interval, move || {
        if let Err(err) = state.persist(&*storage, &dir, false) {
            tracing::error!(%err, "writing the checkpoint failed");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mapped_file::SimStorage;

    #[test]
    fn round_trips_and_detects_damage() {
        let storage = SimStorage::new();
        let dir = Path::new("/store");
        assert_eq!(Checkpoint::load(&storage, dir).unwrap(), None);
        let cp = Checkpoint { flushed_offset: 123, physic_msg_timestamp: 456 };
        cp.store(&storage, dir).unwrap();
        assert_eq!(Checkpoint::load(&storage, dir).unwrap(), Some(cp));
        let mut bytes = storage.file_bytes(&Checkpoint::path(dir)).unwrap();
        bytes[9] ^= 1;
        storage.write_file(&Checkpoint::path(dir), &bytes);
        let err = Checkpoint::load(&storage, dir).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
        storage.write_file(&Checkpoint::path(dir), b"short");
        assert!(Checkpoint::load(&storage, dir).is_err());
    }

    #[test]
    fn the_real_storage_replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let storage = mapped_file::MmapStorage::lock(dir.path()).unwrap();
        Checkpoint { flushed_offset: 1, physic_msg_timestamp: 2 }.store(&storage, dir.path()).unwrap();
        let cp = Checkpoint { flushed_offset: 3, physic_msg_timestamp: 4 };
        cp.store(&storage, dir.path()).unwrap();
        assert_eq!(Checkpoint::load(&storage, dir.path()).unwrap(), Some(cp));
        assert!(!dir.path().join("checkpoint.tmp").exists());
    }
}
