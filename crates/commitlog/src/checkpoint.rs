//! The checkpoint: how far the log is known durable, where it starts, written
//! crash-safely, and the service that rewrites it.
//!
//! ```text
//! 0          8                16                     24             32        36
//! +----------+----------------+----------------------+--------------+---------+
//! | CLCKPT02 | flushed offset | physic msg timestamp | front offset | crc32c  |
//! +----------+----------------+----------------------+--------------+---------+
//! ```
//!
//! (Format 1, `CLCKPT01`, had no front offset and ended with its CRC at byte 24;
//! it is still read, and rewritten as format 2 at the next write.)
//!
//! Written through [`Storage::replace_small`] (for `MmapStorage`: a temporary
//! file, fsync, rename, directory fsync): a crash leaves either the old or the new
//! checkpoint, never a mix.
//!
//! - The **flushed offset** only ever comes from a flush that succeeded, clamped
//!   to the queue's flushed offset read under the checkpoint's lock (one writer
//!   rule, [`CheckpointState::record`]), so it is never ahead of durable data,
//!   whatever a truncation does meanwhile; recovery treats damage below it as
//!   corruption, never as a torn tail.
//! - The **front offset** is the start of the log's first segment. It is written
//!   durably *before* segments are deleted from the front
//!   ([`CheckpointState::raise_front`]), so a log whose first segment starts
//!   above it lost segments it never deleted (a segment directory whose disk is
//!   not mounted, files removed by hand): the open refuses it, naming the
//!   directory, instead of finding a shorter log.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flush_service::{FlushedReport, ServiceThread};
use mapped_file::Storage;
use segment_queue::SegmentQueue;

use crate::error::io_err;
use crate::Error;

const MAGIC_V1: &[u8; 8] = b"CLCKPT01";
const LEN_V1: usize = 28;
const MAGIC: &[u8; 8] = b"CLCKPT02";
const LEN: usize = 36;

/// Name of the checkpoint file in the store directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";

/// The checkpoint's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// Offset below which every byte was durable when the checkpoint was written.
    pub flushed_offset: u64,
    /// Store timestamp (ms) of the newest durable record (RocketMQ's `physicMsgTimestamp`).
    pub physic_msg_timestamp: u64,
    /// Where the log's first segment starts: segments below it were deleted by
    /// the log itself. `None` in a checkpoint of format 1, which did not record it.
    pub front_offset: Option<u64>,
}

impl Checkpoint {
    /// The checkpoint file of a store directory.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CHECKPOINT_FILE)
    }

    /// The file's bytes (format 2; a missing front is written as 0).
    pub fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..16].copy_from_slice(&self.flushed_offset.to_le_bytes());
        out[16..24].copy_from_slice(&self.physic_msg_timestamp.to_le_bytes());
        out[24..32].copy_from_slice(&self.front_offset.unwrap_or(0).to_le_bytes());
        let crc = crc32c::crc32c(&out[..32]);
        out[32..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses a checkpoint file's bytes (format 1 or 2); `path` names it in the error.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Checkpoint, Error> {
        let damaged = |reason| Err(Error::Checkpoint { path: path.to_path_buf(), reason });
        let word = |range: std::ops::Range<usize>| u64::from_le_bytes(bytes[range].try_into().expect("8 bytes"));
        let (magic, len) = match bytes.get(..8) {
            Some(m) if m == MAGIC => (MAGIC, LEN),
            Some(m) if m == MAGIC_V1 => (MAGIC_V1, LEN_V1),
            Some(_) => return damaged("not a checkpoint file (bad magic)"),
            None => return damaged("wrong length"),
        };
        if bytes.len() != len {
            return damaged("wrong length");
        }
        let crc_at = len.saturating_sub(4); // both lengths are 28 or more
        let crc = u32::from_le_bytes(bytes[crc_at..].try_into().expect("4 bytes"));
        if crc != crc32c::crc32c(&bytes[..crc_at]) {
            return damaged("CRC mismatch");
        }
        Ok(Checkpoint {
            flushed_offset: word(8..16),
            physic_msg_timestamp: word(16..24),
            front_offset: (magic == MAGIC).then(|| word(24..32)),
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
/// the checkpoint service, before segments leave the front, and at shutdown.
///
/// One writer rule: every flushed offset recorded goes through
/// [`record`](Self::record), which clamps it to the queue's flushed offset
/// under the lock that a truncation holds while it lowers both, so no
/// interleaving of flushes, rounds and truncations can put an offset above the
/// log's data in the file.
pub(crate) struct CheckpointState {
    /// The log's segments: their flushed offset bounds every record.
    queue: Arc<SegmentQueue>,
    /// Where the checkpoint is written.
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    flushed: AtomicU64,
    timestamp: AtomicU64,
    front: AtomicU64,
    /// The flushed offset and front of the last write.
    stored: parking_lot::Mutex<(u64, u64)>,
    /// Held while a record or a write is made, and across a truncation of the
    /// log's tail, so neither can put an offset above the new end in the file.
    lock: parking_lot::Mutex<()>,
}

impl std::fmt::Debug for CheckpointState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointState")
            .field("flushed", &self.flushed.load(Ordering::Relaxed))
            .field("front", &self.front.load(Ordering::Relaxed))
            .finish()
    }
}

impl CheckpointState {
    /// The state of a log whose segments are `queue`, recovered to `flushed`
    /// (the newest record stored at `timestamp`), starting at the queue's first
    /// segment.
    pub(crate) fn new(
        queue: Arc<SegmentQueue>,
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        flushed: u64,
        timestamp: u64,
    ) -> Self {
        let front = queue.min_offset();
        CheckpointState {
            storage,
            dir,
            flushed: AtomicU64::new(flushed.min(queue.flushed_where())),
            timestamp: AtomicU64::new(timestamp),
            front: AtomicU64::new(front),
            stored: parking_lot::Mutex::new((u64::MAX, u64::MAX)),
            lock: parking_lot::Mutex::new(()),
            queue,
        }
    }

    /// Records a flush that reached `report.flushed_where`, but no higher than
    /// the queue's flushed offset read now, under the lock: a flush that
    /// returned before a truncation of the tail reports its old end, and that
    /// end must not come back after the truncation lowered the checkpoint.
    ///
    /// A flush that reached into a segment the last written checkpoint does not
    /// reach writes the checkpoint now, before the flush's records are
    /// acknowledged (group commit tells before it answers): so the checkpoint
    /// always covers every segment holding an acknowledged record, and an open
    /// that finds the last of them missing (its disk not mounted) refuses
    /// instead of opening a shorter log. One write per segment; a failed one is
    /// logged, and the service's next write retries.
    pub(crate) fn record(&self, report: FlushedReport) {
        let _one = self.lock.lock();
        let flushed_where = report.flushed_where.min(self.queue.flushed_where());
        #[cfg(planted_bugs)]
        let flushed_where = if crate::planted::is_active(crate::planted::Bug::CheckpointUnclamped) {
            report.flushed_where // the planted bug: trust the report
        } else {
            flushed_where
        };
        self.timestamp.fetch_max(report.store_timestamp, Ordering::AcqRel);
        let flushed = self.flushed.fetch_max(flushed_where, Ordering::AcqRel).max(flushed_where);
        let (stored, _) = *self.stored.lock();
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::NewSegmentUnrecorded) {
            return; // the planted bug: the checkpoint waits for its service
        }
        if stored != u64::MAX && self.segment_below(flushed) > self.segment_below(stored) {
            if let Err(err) = self.write(flushed, self.front.load(Ordering::Acquire)) {
                tracing::error!(%err, "writing the checkpoint for a new segment failed");
            }
        }
    }

    /// The index of the segment holding the byte just below `offset`.
    fn segment_below(&self, offset: u64) -> u64 {
        let size = u64::try_from(self.queue.mapped_file_size()).ok().and_then(std::num::NonZeroU64::new);
        size.map_or(0, |size| offset.saturating_sub(1) / size)
    }

    /// Records the end of written data, durable or not: only the planted bug
    /// that checkpoints data before it is durable, which the crash suite must
    /// catch.
    #[cfg(planted_bugs)]
    pub(crate) fn record_end_of_data(&self, report: FlushedReport) {
        let _one = self.lock.lock();
        self.timestamp.fetch_max(report.store_timestamp, Ordering::AcqRel);
        self.flushed.fetch_max(self.queue.max_offset(), Ordering::AcqRel);
    }

    /// Lowers the checkpoint to `offset` durably, then runs `cut` (the truncation
    /// of everything above it) with no checkpoint record or write in between. A
    /// crash after the write and before the cut leaves a checkpoint below data
    /// that is still there: recovery keeps it.
    pub(crate) fn lower_then<T>(&self, offset: u64, cut: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let _one = self.lock.lock();
        let flushed = self.flushed.load(Ordering::Acquire).min(offset);
        self.write(flushed, self.front.load(Ordering::Acquire))?;
        self.flushed.store(flushed, Ordering::Release);
        cut()
    }

    /// Records durably that the log starts at `front` from now on, before the
    /// segments below it are deleted: an open that finds the log starting above
    /// the recorded front knows segments are missing. Never lowered while the
    /// log is open: a deletion that stopped early leaves the recorded front above
    /// the first segment, which the next open accepts (below the front, segments
    /// may be gone), while a front written below a deletion in progress would
    /// read as segments missing after a crash.
    pub(crate) fn raise_front(&self, front: u64) -> Result<(), Error> {
        let _one = self.lock.lock();
        if front <= self.front.load(Ordering::Acquire) {
            return Ok(());
        }
        self.write(self.flushed.load(Ordering::Acquire), front)?;
        self.front.store(front, Ordering::Release);
        Ok(())
    }

    /// Writes the checkpoint if the flushed offset or the front moved since the
    /// last write (or always, with `force`).
    pub(crate) fn persist(&self, force: bool) -> Result<(), Error> {
        let _one = self.lock.lock();
        let flushed = self.flushed.load(Ordering::Acquire);
        let front = self.front.load(Ordering::Acquire);
        if !force && *self.stored.lock() == (flushed, front) {
            return Ok(());
        }
        self.write(flushed, front)
    }

    /// Writes `flushed` and `front`; the caller holds the lock.
    fn write(&self, flushed: u64, front: u64) -> Result<(), Error> {
        let checkpoint = Checkpoint {
            flushed_offset: flushed,
            physic_msg_timestamp: self.timestamp.load(Ordering::Acquire),
            front_offset: Some(front),
        };
        checkpoint.store(&*self.storage, &self.dir)?;
        *self.stored.lock() = (flushed, front);
        Ok(())
    }
}

/// RocketMQ's `StoreCheckpoint` flush: rewrites the checkpoint every `interval`
/// when the flushed offset moved. Errors are logged; the next round retries, and
/// shutdown's final write reports its own.
pub(crate) fn start_service(state: Arc<CheckpointState>, interval: Duration) -> std::io::Result<ServiceThread> {
    // Shutdown writes the final checkpoint itself, after stopping this.
    ServiceThread::spawn_every("CheckpointService", interval, move || {
        if let Err(err) = state.persist(false) {
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
        let cp = Checkpoint { flushed_offset: 123, physic_msg_timestamp: 456, front_offset: Some(64) };
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
    fn a_format_1_checkpoint_is_read_without_a_front() {
        let storage = SimStorage::new();
        let dir = Path::new("/store");
        let mut v1 = Vec::new();
        v1.extend_from_slice(b"CLCKPT01");
        v1.extend_from_slice(&4096u64.to_le_bytes());
        v1.extend_from_slice(&7u64.to_le_bytes());
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        storage.write_file(&Checkpoint::path(dir), &v1);
        let cp = Checkpoint::load(&storage, dir).unwrap().unwrap();
        assert_eq!(cp, Checkpoint { flushed_offset: 4096, physic_msg_timestamp: 7, front_offset: None });
        v1[9] ^= 1;
        storage.write_file(&Checkpoint::path(dir), &v1);
        assert!(Checkpoint::load(&storage, dir).is_err());
    }

    #[test]
    fn the_real_storage_replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let storage = mapped_file::MmapStorage::lock(dir.path()).unwrap();
        Checkpoint { flushed_offset: 1, physic_msg_timestamp: 2, front_offset: Some(0) }
            .store(&storage, dir.path())
            .unwrap();
        let cp = Checkpoint { flushed_offset: 3, physic_msg_timestamp: 4, front_offset: Some(0) };
        cp.store(&storage, dir.path()).unwrap();
        assert_eq!(Checkpoint::load(&storage, dir.path()).unwrap(), Some(cp));
        assert!(!dir.path().join("checkpoint.tmp").exists());
    }
}
