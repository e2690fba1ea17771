//! Dispatch (RocketMQ's `ReputMessageService`): the log's messages, in log
//! order, become entries of their queues' consume queues, and waiting consumers
//! hear of them. The dispatch point is where the next message to dispatch
//! starts; every message below it is in its consume queue.
//!
//! The dispatcher reads only as far as the [`DispatchLimit`] allows: under sync
//! flush, only what is durable, so a consumer never sees a message a crash can
//! take back. It is woken, never polls: by each put (written limit) or by each
//! flush of the log (durable limit). A record it cannot dispatch stops it there
//! with the error kept for [`MessageStore::dispatch_error`](crate::MessageStore):
//! it never skips what it cannot read.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use commitlog::{CommitLog, Record};
use consume_queue::CqEntry;
use parking_lot::Mutex;
use store_io::Storage;

use crate::config::DispatchLimit;
use crate::error::{io_err, StoreError};
use crate::index::Index;
use crate::message::{decode_header, Header};
use crate::queues::{Queue, QueueContext};

/// The dispatcher's state, shared by the store and its dispatch thread.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    pub(crate) log: CommitLog,
    /// The queues (`context.queues`) and what opening their consume queues takes.
    pub(crate) context: QueueContext,
    limit: DispatchLimit,
    /// The key index, if built.
    pub(crate) index: Option<Arc<Index>>,
    /// Where the next message to dispatch starts.
    point: AtomicU64,
    /// One dispatch at a time (the thread, and recovery before it starts).
    running: Mutex<()>,
    /// Why dispatch stopped, while it is stopped.
    error: Mutex<Option<String>>,
    /// Records of the log that are not messages of a known queue (skipped).
    pub(crate) skipped: AtomicU64,
    /// Queues rebuilt from the log because entries were missing.
    pub(crate) rebuilt: AtomicU64,
}

impl Dispatcher {
    pub(crate) fn new(
        log: CommitLog,
        context: QueueContext,
        limit: DispatchLimit,
        point: u64,
        index: Option<Arc<Index>>,
    ) -> Self {
        Dispatcher {
            log,
            context,
            limit,
            index,
            point: AtomicU64::new(point),
            running: Mutex::new(()),
            error: Mutex::new(None),
            skipped: AtomicU64::new(0),
            rebuilt: AtomicU64::new(0),
        }
    }

    /// Where the next message to dispatch starts.
    pub(crate) fn point(&self) -> u64 {
        self.point.load(Ordering::Acquire)
    }

    /// The log offset dispatch may read up to now.
    pub(crate) fn limit(&self) -> u64 {
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::DispatchBeforeDurable) {
            return self.log.max_offset();
        }
        match self.limit {
            DispatchLimit::Durable => self.log.flushed_offset(),
            DispatchLimit::Written => self.log.max_offset(),
        }
    }

    /// Why dispatch is stopped, if it is.
    pub(crate) fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }

    /// Dispatches every message up to the limit; returns how many. On an error
    /// the point stays at the message that failed (the next call tries it again).
    pub(crate) fn dispatch_available(&self) -> Result<u64, StoreError> {
        self.dispatch_up_to(self.limit())
    }

    /// Dispatches every message that ends at or below `limit`.
    pub(crate) fn dispatch_up_to(&self, limit: u64) -> Result<u64, StoreError> {
        let _running = self.running.lock();
        let mut point = self.point().max(self.log.min_offset());
        let mut count = 0u64;
        let result = (|| {
            for record in self.log.iter_from(point) {
                let record = match record {
                    Ok(record) => record,
                    // Not durable yet (the log's read limit): later.
                    Err(commitlog::Error::NotYetDurable { .. }) => break,
                    Err(err) => return Err(StoreError::from(err)),
                };
                if record.next_offset() > limit {
                    break;
                }
                self.dispatch(&record)?;
                point = record.next_offset();
                self.point.store(point, Ordering::Release);
                count = count.saturating_add(1);
            }
            Ok(())
        })();
        self.point.store(point, Ordering::Release);
        match &result {
            Ok(()) => *self.error.lock() = None,
            Err(err) => {
                let mut error = self.error.lock();
                if error.is_none() {
                    tracing::error!(point, %err, "dispatch stopped at this record; retrying");
                }
                *error = Some(format!("at log offset {point}: {err}"));
            }
        }
        result.map(|()| count)
    }

    /// Puts one record's entry into its queue's consume queue.
    fn dispatch(&self, record: &Record) -> Result<(), StoreError> {
        let header = match decode_header(&record.body) {
            Ok(header) => header,
            Err(err) => {
                tracing::warn!(offset = record.offset, %err, "dispatch: a record that is not a message skipped");
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        };
        let Some(queue) = self.context.queues.get(&header.topic, header.queue_id) else {
            tracing::warn!(offset = record.offset, topic = %header.topic, queue = header.queue_id, "dispatch: a message of an unknown queue skipped");
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let cq = queue.consume_queue(&self.context, &self.log)?;
        let entry = entry_of(record, header.tags_code);
        if header.queue_offset < cq.min_index() {
            // Below the queue's first entry, yet the log holds it: the consume
            // queue lost its front (a crash kept later sectors of a file but not
            // its first). Rebuilt from the log.
            self.rebuild(&queue, record.offset)?;
        }
        let next = cq.next_index();
        if header.queue_offset < next {
            // The queue has this offset already: fine if it names this record
            // (dispatched before), else the log and the index disagree.
            if cq.get(header.queue_offset)?.is_some_and(|e| e.offset == record.offset) {
                // Its entry is there; its keys may not be (a retry after the
                // index failed): the index skips what it holds.
                return self.index_keys(&header, record);
            }
            return Err(StoreError::IndexMismatch {
                topic: header.topic,
                queue_id: header.queue_id,
                queue_offset: header.queue_offset,
                log_offset: record.offset,
            });
        }
        if header.queue_offset > next {
            // Entries before this one are missing (the consume queue lost
            // files): rebuilt from the log, as far as it still holds them.
            self.rebuild(&queue, record.offset)?;
        }
        cq.put(header.queue_offset, entry)?;
        self.index_keys(&header, record)?;
        queue.signal.arrive(header.queue_offset.saturating_add(1));
        Ok(())
    }

    /// Adds the message's keys to the index, if there is one.
    fn index_keys(&self, header: &Header, record: &Record) -> Result<(), StoreError> {
        match &self.index {
            Some(index) => index.put(&header.topic, &header.keys, record.offset, record.store_timestamp_ms),
            None => Ok(()),
        }
    }

    /// Rebuilds `queue`'s consume queue from the log's records below `upto`.
    fn rebuild(&self, queue: &Queue, upto: u64) -> Result<(), StoreError> {
        tracing::warn!(topic = %queue.topic, queue = queue.queue_id, "consume queue misses entries; rebuilding it from the log");
        self.rebuilt.fetch_add(1, Ordering::Relaxed);
        let cq = queue.consume_queue(&self.context, &self.log)?;
        cq.clear()?;
        for record in self.log.iter_from(self.log.min_offset()) {
            let record = record?;
            if record.offset >= upto {
                break;
            }
            let Ok(header) = decode_header(&record.body) else { continue };
            if header.topic == queue.topic && header.queue_id == queue.queue_id {
                cq.put(header.queue_offset, entry_of(&record, header.tags_code))?;
            }
        }
        Ok(())
    }
}

/// The consume-queue entry of `record`.
fn entry_of(record: &Record, tags_code: u64) -> CqEntry {
    // A record lies within one segment, whose size is a u32 at most... or the
    // entry says u32::MAX and its check against the log fails loudly.
    CqEntry { offset: record.offset, size: u32::try_from(record.size).unwrap_or(u32::MAX), tag: tags_code }
}

/// The dispatch checkpoint, `config/dispatch`: a dispatch point below which every
/// consume-queue entry was flushed before the file was written.
#[derive(Debug)]
pub(crate) struct DispatchCheckpoint {
    path: PathBuf,
}

/// Parses the dispatch checkpoint at `path`.
pub(crate) fn parse_point(path: &Path, bytes: &[u8]) -> Result<u64, StoreError> {
    let bad = |reason: &str| StoreError::BadFile { path: path.to_path_buf(), reason: reason.to_string() };
    if bytes.len() != 20 || &bytes[..8] != CHECKPOINT_MAGIC {
        return Err(bad("not a dispatch checkpoint of this version"));
    }
    let crc = u32::from_le_bytes(bytes[16..20].try_into().unwrap_or_default());
    if crc32c::crc32c(&bytes[..16]) != crc {
        return Err(bad("checksum mismatch"));
    }
    Ok(u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default()))
}

/// Where the dispatch checkpoint of the store in `root` is.
pub(crate) fn checkpoint_path(root: &Path) -> PathBuf {
    root.join("config").join("dispatch")
}

/// The checkpoint file's first bytes.
const CHECKPOINT_MAGIC: &[u8; 8] = b"MSDISP01";

impl DispatchCheckpoint {
    pub(crate) fn new(root: &Path) -> Self {
        DispatchCheckpoint { path: checkpoint_path(root) }
    }

    /// The point recorded, or `None` if none was.
    pub(crate) fn load(&self, storage: &dyn Storage) -> Result<Option<u64>, StoreError> {
        match storage.read_small(&self.path).map_err(io_err(&self.path))? {
            Some(bytes) => parse_point(&self.path, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Records `point` (atomically: a crash leaves the old point or this one).
    pub(crate) fn store(&self, storage: &dyn Storage, point: u64) -> Result<(), StoreError> {
        let mut bytes = Vec::with_capacity(20);
        bytes.extend_from_slice(CHECKPOINT_MAGIC);
        bytes.extend_from_slice(&point.to_le_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        let dir = self.path.parent().unwrap_or(&self.path);
        storage.create_dir_all(dir).map_err(io_err(dir))?;
        storage.replace_small(&self.path, &bytes).map_err(io_err(&self.path))
    }
}
