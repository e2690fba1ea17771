//! The append path: records placed under the put lock, which is also the shutdown
//! barrier, and their durability requests submitted before it is released.

use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use flush_service::DurabilityHandle;
use mapped_file::Placed;

use crate::format::{advance, body_crc, encode_blank, encode_record, parse, Parsed, HEADER_SIZE};
use crate::{CommitLog, Error, PutMessageStatus};

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The result of an append.
#[derive(Debug)]
pub struct AppendResult {
    /// Absolute offset of the record (`wroteOffset`).
    pub wrote_offset: u64,
    /// Encoded size in bytes, header included (`wroteBytes`).
    pub wrote_bytes: u64,
    /// Store timestamp given to the record (ms since the Unix epoch).
    pub store_timestamp_ms: u64,
    /// Resolves when the record is durable (sync flush), or is already resolved
    /// (async flush, or `wait_store_msg_ok = false`).
    pub durability: DurabilityHandle,
}

impl AppendResult {
    /// Offset right after the record.
    pub fn next_offset(&self) -> u64 {
        // A record lies inside one segment, inside the offset space.
        self.wrote_offset.saturating_add(self.wrote_bytes)
    }

    /// Blocks until the durability handle resolves; returns RocketMQ's status.
    pub fn wait_status(self) -> PutMessageStatus {
        PutMessageStatus::from_flush(&self.durability.wait())
    }
}

/// The result of a batch append.
#[derive(Debug)]
pub struct BatchAppendResult {
    /// Offset of each record, in order.
    pub offsets: Vec<u64>,
    /// Encoded size of the whole batch.
    pub wrote_bytes: u64,
    /// Store timestamp shared by the batch.
    pub store_timestamp_ms: u64,
    /// Resolves when the whole batch is durable (sync flush).
    pub durability: DurabilityHandle,
}

/// The result of a group append ([`CommitLog::append_group`]).
#[derive(Debug)]
pub struct GroupAppendResult {
    /// Offset of each record, in order.
    pub offsets: Vec<u64>,
    /// Encoded size of the whole group.
    pub wrote_bytes: u64,
    /// Store timestamp shared by the group.
    pub store_timestamp_ms: u64,
    /// Each record's own durability handle, in order: the `k`-th resolves
    /// when the `k`-th record is durable (sync flush), or is resolved.
    pub durability: Vec<DurabilityHandle>,
}

impl CommitLog {
    /// Appends one record. Thread-safe; the put lock is held only to place and copy
    /// the record (its CRC is computed before).
    pub fn append(&self, body: &[u8]) -> Result<AppendResult, Error> {
        self.check_writeable()?;
        let max = self.inner.config.max_message_size;
        if body.len() > max {
            return Err(Error::RecordTooLarge { size: body.len(), max });
        }
        let body_crc = body_crc(body);
        let size = HEADER_SIZE.saturating_add(body.len()); // `body.len() <= max_message_size`, validated to fit a segment
        let (wrote_offset, store_timestamp_ms, durability) = self.put(
            size,
            1,
            |out, offset, ts| {
                encode_record(out, offset, ts, body, body_crc);
            },
            |first| self.durability(advance(first, size)),
        )?;
        Ok(AppendResult { wrote_offset, wrote_bytes: size as u64, store_timestamp_ms, durability })
    }

    /// Appends several records under one lock, contiguously in one segment; one
    /// durability handle covers them all.
    pub fn append_batch<B: AsRef<[u8]>>(&self, bodies: &[B]) -> Result<BatchAppendResult, Error> {
        let (offsets, wrote_bytes, store_timestamp_ms, durability) =
            self.put_records(bodies, |first, total, _| self.durability(advance(first, total)))?;
        Ok(BatchAppendResult { offsets, wrote_bytes, store_timestamp_ms, durability })
    }

    /// Appends several producers' records under one lock, contiguously in
    /// one segment, in one write, as [`append_batch`](Self::append_batch)
    /// does, but with a durability request per record, submitted before the
    /// lock is released: each handle resolves when its own record is durable,
    /// and group commit sees every producer that waits (a write group: one
    /// write for producers that each wait for their own record).
    pub fn append_group<B: AsRef<[u8]>>(&self, bodies: &[B]) -> Result<GroupAppendResult, Error> {
        let (offsets, wrote_bytes, store_timestamp_ms, durability) = self.put_records(bodies, |first, _, bodies| {
            record_ends(first, bodies).map(|end| self.durability(end)).collect::<Vec<_>>()
        })?;
        Ok(GroupAppendResult { offsets, wrote_bytes, store_timestamp_ms, durability })
    }

    /// Checks `bodies` (none too large, the whole within a segment) and
    /// appends them as consecutive records; `durability` makes the handles
    /// from the first record's offset and the encoded size, under the put
    /// lock. Returns each record's offset, the size, the timestamp and the
    /// handles.
    fn put_records<B: AsRef<[u8]>, D>(
        &self,
        bodies: &[B],
        durability: impl FnOnce(u64, usize, &[B]) -> D,
    ) -> Result<(Vec<u64>, u64, u64, D), Error> {
        self.check_writeable()?;
        if bodies.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let max = self.inner.config.max_message_size;
        let mut crcs = Vec::with_capacity(bodies.len());
        let mut total = 0usize;
        for body in bodies {
            let body = body.as_ref();
            if body.len() > max {
                return Err(Error::RecordTooLarge { size: body.len(), max });
            }
            crcs.push(body_crc(body));
            total = total.saturating_add(HEADER_SIZE.saturating_add(body.len()));
            // each `body.len() <= max`, as above
        }
        let segment_size = self.inner.config.mapped_file_size_commit_log;
        if total.saturating_add(HEADER_SIZE) > segment_size {
            return Err(Error::BatchTooLarge { records: bodies.len(), bytes: total, segment_size });
        }
        let (first, store_timestamp_ms, handles) = self.put(
            total,
            bodies.len(),
            |out, offset, ts| {
                let mut pos = 0usize;
                for (body, crc) in bodies.iter().zip(&crcs) {
                    pos = pos.saturating_add(encode_record(
                        &mut out[pos..],
                        advance(offset, pos),
                        ts,
                        body.as_ref(),
                        *crc,
                    ));
                }
            },
            |first| durability(first, total, bodies),
        )?;
        let mut offsets = Vec::with_capacity(bodies.len());
        offsets.extend(std::iter::once(first).chain(record_ends(first, bodies)).take(bodies.len()));
        Ok((offsets, total as u64, store_timestamp_ms, handles))
    }

    /// Places `size` bytes (`records` records) at the log's end under the put lock, rolling to a new
    /// segment (after a blank record) when they do not fit with room for a blank,
    /// and submits the durability requests (`durability`, given the first
    /// record's offset) before the lock is released.
    ///
    /// The put lock is the shutdown barrier: `close` sets `shut_down`, then takes
    /// the lock for the rest of shutdown. An append that holds the lock before that
    /// has written and queued its request, so the final drain, flush and checkpoint
    /// cover it; one that takes the lock after sees `shut_down` here and writes
    /// nothing. No byte is written after the final flush or the lock file's release.
    fn put<D>(
        &self,
        size: usize,
        records: usize,
        write: impl Fn(&mut [u8], u64, u64),
        durability: impl FnOnce(u64) -> D,
    ) -> Result<(u64, u64, D), Error> {
        let started = std::time::Instant::now();
        let _put = self.inner.put_lock.lock();
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        if self.inner.disk.is_full() {
            return Err(self.inner.disk.refusal(self.dir()));
        }
        let ts = now_ms();
        // At most two tries: the current segment, then a fresh one.
        for _ in 0..2 {
            let file = self.inner.queue.roll_to_writable_segment(0).map_err(|err| match err {
                // The look before the segment took its space: refused before the
                // file system would, and appends are refused until space is back.
                segment_queue::QueueError::DiskFull { dir, used_percent, .. } => {
                    self.inner.disk.refuse_segment(&dir, used_percent)
                }
                segment_queue::QueueError::SegmentLargerThanDisk { dir, segment_bytes, disk_bytes, .. } => {
                    self.inner.disk.refuse_too_large(&dir, segment_bytes, disk_bytes)
                }
                other => other.into(),
            })?;
            // Room for a blank is kept after every record, so a segment's rest
            // is either empty (a full segment) or at least a header long.
            let placed = file
                .place(
                    ts,
                    size,
                    HEADER_SIZE,
                    |offset, out| {
                        write(out, offset, ts);
                        // Pair assertion: what we placed parses as records of `size`.
                        assert!(
                            matches!(parse(out, offset, false), Parsed::Record { .. }),
                            "encoded record does not parse"
                        );
                    },
                    |offset, rest| {
                        if !rest.is_empty() {
                            encode_blank(rest, offset, ts);
                            // The rest's bytes are unspecified (a staging buffer,
                            // or older bytes): the padding reads as zeros anyway.
                            rest[HEADER_SIZE..].fill(0);
                        }
                    },
                )
                .map_err(|e| self.writeable_or(e.into()))?;
            if let Placed::Appended { offset: wrote_offset } = placed {
                let durability = durability(wrote_offset);
                self.inner.tails.bump(); // written: tails that read written records go on
                crate::metrics::appended(records, size, started.elapsed());
                return Ok((wrote_offset, ts, durability));
            }
        }
        unreachable!("a fresh segment always holds a record that passed the size checks")
    }

    fn durability(&self, next_offset: u64) -> DurabilityHandle {
        if self.inner.config.acknowledges_after_flush() {
            self.inner.strategy.submit(next_offset)
        } else {
            self.inner.strategy.wake_on_put();
            DurabilityHandle::resolved(Ok(()))
        }
    }
}

/// The end of each of `bodies`' records, appended back to back from `first`.
fn record_ends<B: AsRef<[u8]>>(first: u64, bodies: &[B]) -> impl Iterator<Item = u64> + '_ {
    bodies.iter().scan(first, |at, body| {
        *at = advance(*at, HEADER_SIZE.saturating_add(body.as_ref().len()));
        Some(*at)
    })
}
