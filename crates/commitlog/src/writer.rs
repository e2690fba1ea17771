//! [`BatchWriter`]: single records collected by their caller and appended as
//! one batch, one write for many records, with what a crash may lose visible
//! in the API.

use crate::format::HEADER_SIZE;
use crate::{BatchAppendResult, CommitLog, Error};

/// Records a caller has one at a time, appended to the log as one batch
/// ([`CommitLog::append_batch`]: one write under the put lock, one durability
/// request) when the writer is full or [`flush`](Self::flush)ed.
///
/// Each [`CommitLog::append`] is a write of its own (a `pwrite` on the default
/// write path): right for a record whose offset the caller needs at once,
/// and costly for a stream of small ones. A `BatchWriter` is the stream's
/// path. What a crash may lose stays what the API says: a record
/// [`push`](Self::push)ed has no offset and is not in the log until a flush
/// returns (a process killed before that loses it, as a record never
/// appended); once a flush returns, its records are the log's like any
/// append's (in the page cache, durable when the batch's
/// [`durability`](BatchAppendResult::durability) resolves).
///
/// The writer appends on its own before a record would take it past
/// `max_records` records or `max_bytes` encoded bytes (headers included);
/// [`push`](Self::push) returns that append's result. Dropping a writer
/// appends what it holds, as `std::io::BufWriter` writes on drop, with an
/// error logged through `tracing` (none while a thread unwinds from a panic):
/// call [`flush`](Self::flush) to see the offsets, the durability handle and
/// any error.
///
/// ```
/// # fn main() -> Result<(), commitlog::Error> {
/// use commitlog::{BatchWriter, CommitLog, CommitLogConfig};
/// let dir = tempfile::tempdir().unwrap();
/// let log = CommitLog::open(dir.path(), CommitLogConfig::default())?;
/// let mut writer = BatchWriter::new(log.clone());
/// for i in 0..100u32 {
///     if let Some(appended) = writer.push(&i.to_le_bytes())? {
///         assert_eq!(appended.offsets.len(), 64); // full at 64 records
///     }
/// }
/// let rest = writer.flush()?.expect("36 records were held");
/// assert_eq!(rest.offsets.len(), 36);
/// assert_eq!(log.read(rest.offsets[0])?.body.as_ref(), &64u32.to_le_bytes());
/// # log.shutdown()
/// # }
/// ```
pub struct BatchWriter {
    log: CommitLog,
    /// The bodies held, back to back.
    bodies: Vec<u8>,
    /// Where each body held ends in `bodies`.
    ends: Vec<usize>,
    /// Encoded bytes held (headers included).
    encoded: usize,
    max_records: usize,
    max_bytes: usize,
}

impl BatchWriter {
    /// Records a writer holds at most by default.
    pub const DEFAULT_MAX_RECORDS: usize = 64;
    /// Encoded bytes a writer holds at most by default (its records' headers
    /// included).
    pub const DEFAULT_MAX_BYTES: usize = 256 << 10;

    /// A writer to `log` holding at most [`DEFAULT_MAX_RECORDS`](Self::DEFAULT_MAX_RECORDS)
    /// records and [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES) bytes.
    pub fn new(log: CommitLog) -> Self {
        Self::with_limits(log, Self::DEFAULT_MAX_RECORDS, Self::DEFAULT_MAX_BYTES)
    }

    /// A writer to `log` holding at most `max_records` records (at least 1)
    /// and `max_bytes` encoded bytes (at most half a segment: a batch stays
    /// in one segment). One record larger than `max_bytes` (and within the
    /// log's `max_message_size`) is held alone.
    pub fn with_limits(log: CommitLog, max_records: usize, max_bytes: usize) -> Self {
        let max_records = max_records.max(1);
        let max_bytes = max_bytes.min(log.config().mapped_file_size_commit_log / 2);
        BatchWriter {
            log,
            bodies: Vec::with_capacity(max_bytes.min(Self::DEFAULT_MAX_BYTES)),
            ends: Vec::with_capacity(max_records.min(Self::DEFAULT_MAX_RECORDS)),
            encoded: 0,
            max_records,
            max_bytes,
        }
    }

    /// Holds a copy of `body` for the next batch. When the writer is full (or
    /// `body` would take it past its byte limit) it first appends what it
    /// holds, and returns that append's result.
    ///
    /// # Errors
    /// [`Error::RecordTooLarge`] for a body over the log's `max_message_size`
    /// (the writer unchanged); any error of [`CommitLog::append_batch`] from
    /// the append it made room with: then the writer still holds what it
    /// held, and `body` was not taken.
    pub fn push(&mut self, body: &[u8]) -> Result<Option<BatchAppendResult>, Error> {
        let max = self.log.config().max_message_size;
        if body.len() > max {
            return Err(Error::RecordTooLarge { size: body.len(), max });
        }
        let size = HEADER_SIZE.saturating_add(body.len());
        let full = self.ends.len() >= self.max_records
            || (!self.ends.is_empty() && self.encoded.saturating_add(size) > self.max_bytes);
        let appended = if full { self.flush()? } else { None };
        self.bodies.extend_from_slice(body);
        self.ends.push(self.bodies.len());
        self.encoded = self.encoded.saturating_add(size);
        Ok(appended)
    }

    /// Appends what the writer holds as one batch; `None` when it holds
    /// nothing.
    ///
    /// # Errors
    /// Any error of [`CommitLog::append_batch`]; the writer then still holds
    /// its records (a later flush tries again).
    pub fn flush(&mut self) -> Result<Option<BatchAppendResult>, Error> {
        if self.ends.is_empty() {
            return Ok(None);
        }
        let mut start = 0;
        let batch: Vec<&[u8]> = self
            .ends
            .iter()
            .map(|&end| {
                let body = &self.bodies[start..end];
                start = end;
                body
            })
            .collect();
        let appended = self.log.append_batch(&batch)?;
        drop(batch);
        self.bodies.clear();
        self.ends.clear();
        self.encoded = 0;
        Ok(Some(appended))
    }

    /// Records held, not appended yet.
    pub fn held(&self) -> usize {
        self.ends.len()
    }

    /// The log the writer appends to.
    pub fn log(&self) -> &CommitLog {
        &self.log
    }
}

impl std::fmt::Debug for BatchWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchWriter")
            .field("held", &self.ends.len())
            .field("encoded", &self.encoded)
            .field("max_records", &self.max_records)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl Drop for BatchWriter {
    fn drop(&mut self) {
        if std::thread::panicking() || self.ends.is_empty() {
            return;
        }
        if let Err(err) = self.flush() {
            tracing::error!(%err, records = self.ends.len(), "a dropped batch writer could not append the records it held");
        }
    }
}
