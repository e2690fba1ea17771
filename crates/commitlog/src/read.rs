//! The read path: zero-copy records out of the mapping, CRC-checked, limited to
//! durable data when the configuration says so.

use crate::config::FlushDiskType;
use crate::format::{advance, parse, Invalid, Parsed, HEADER_SIZE};
use crate::record::{Record, Slot};
use crate::{CommitLog, Error};

impl CommitLog {
    /// Reads the record at `offset`: a zero-copy view whose CRC was checked.
    pub fn read(&self, offset: u64) -> Result<Record, Error> {
        match self.slot(offset)? {
            Slot::Record(record) => Ok(record),
            Slot::Blank | Slot::End => Err(self.no_record(offset)),
        }
    }

    /// Whether the `len` bytes of the log from `offset` are in memory now
    /// (the page cache), so reading them takes no disk I/O: RocketMQ's
    /// `checkInMemByCommitOffset`. False where the range is not in the log
    /// (expired, past the end, across a segment's end) or the kernel cannot
    /// say. A snapshot, for choosing where to read from, not a promise.
    pub fn is_resident(&self, offset: u64, len: u64) -> bool {
        let Some(file) = self.inner.queue.find_mapped_file_by_offset(offset, false) else { return false };
        let (Some(pos), Ok(len)) = (file.position_of(offset), usize::try_from(len)) else { return false };
        pos.checked_add(len).is_some_and(|end| end <= file.read_position()) && file.is_resident(pos, len)
    }

    pub(crate) fn no_record(&self, offset: u64) -> Error {
        Error::NoRecord { offset, min: self.min_offset(), max: self.max_offset() }
    }

    pub(crate) fn read_limit(&self) -> u64 {
        if self.inner.config.flush_disk_type == FlushDiskType::SyncFlush && self.inner.config.read_limit_to_flushed {
            self.flushed_offset()
        } else {
            self.max_offset()
        }
    }

    pub(crate) fn slot(&self, offset: u64) -> Result<Slot, Error> {
        self.slot_within(offset, self.read_limit())
    }

    /// As [`slot`](Self::slot), ignoring the durable-read limit.
    pub(crate) fn slot_unlimited(&self, offset: u64) -> Result<Slot, Error> {
        self.slot_within(offset, u64::MAX)
    }

    pub(crate) fn slot_within(&self, offset: u64, limit: u64) -> Result<Slot, Error> {
        // After shutdown the segments are unmapped (views already handed out stay
        // valid); say so rather than report an empty log.
        if self.inner.shut_down.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        let queue = &self.inner.queue;
        let Some(file) = queue.find_mapped_file_by_offset(offset, false) else {
            return if offset == self.max_offset() { Ok(Slot::End) } else { Err(self.no_record(offset)) };
        };
        let pos = file.position_of(offset).expect("the segment found holds the offset");
        if pos >= file.read_position() {
            return Ok(Slot::End);
        }
        let view = file.read_from(pos)?;
        match parse(&view, offset, true) {
            Parsed::Record { total, timestamp_ms } => {
                if advance(offset, total) > limit {
                    return Err(Error::NotYetDurable { offset, flushed: limit });
                }
                Ok(Slot::Record(Record {
                    offset,
                    size: total as u64,
                    store_timestamp_ms: timestamp_ms,
                    body: view.slice(HEADER_SIZE..total),
                }))
            }
            Parsed::Blank => Ok(Slot::Blank),
            // Zeros are the end of data only at the end: below it they are damage
            // (a zeroed sector in an old segment), never a quiet end of iteration.
            Parsed::End if offset < self.max_offset() => {
                Err(Error::BadRecord { offset, reason: Invalid::UnexpectedEnd })
            }
            Parsed::End => Ok(Slot::End),
            // Not damage if the offset lies inside a record: a wrong offset, not a
            // corrupt log. Told apart by walking the segment's records from its
            // start (only on this error path).
            Parsed::Invalid(reason) => match record_holding(&file.read_from(0)?, file.file_from_offset(), pos) {
                Some(start) if start != pos => Err(Error::InsideRecord { offset, record: file.offset_at(start) }),
                _ => Err(Error::BadRecord { offset, reason }),
            },
        }
    }

    /// Where the log goes on after the blank at `offset`: the start of the next
    /// segment (`None` past the end of the offset space, or if the segment is gone).
    pub(crate) fn after_blank(&self, offset: u64) -> Option<u64> {
        self.inner.queue.find_mapped_file_by_offset(offset, false).map(|file| file.file_end())
    }

    /// Iterates over records from `offset` (a record start, or the start of the
    /// log with [`min_offset`](Self::min_offset)), skipping blanks, up to the end of
    /// readable data (durable data under sync flush with the read limit on).
    pub fn iter_from(&self, offset: u64) -> Records {
        Records { log: self.clone(), next: offset, done: false }
    }
}

/// Iterator over records, from [`CommitLog::iter_from`].
#[derive(Debug)]
pub struct Records {
    log: CommitLog,
    next: u64,
    done: bool,
}

impl Iterator for Records {
    type Item = Result<Record, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            if self.next >= self.log.read_limit() {
                return None;
            }
            match self.log.slot(self.next) {
                Ok(Slot::Record(record)) => {
                    self.next = record.next_offset();
                    return Some(Ok(record));
                }
                Ok(Slot::Blank) => match self.log.after_blank(self.next) {
                    Some(next) => self.next = next,
                    None => self.done = true,
                },
                Ok(Slot::End) => self.done = true,
                Err(err) => {
                    self.done = true;
                    return Some(Err(err));
                }
            }
        }
        None
    }
}

/// The start of the record that holds byte `pos` of a segment's bytes (the
/// segment starting at log offset `base`), walking the record lengths from its
/// start (no CRC check: only the boundaries matter); `None` if the walk meets a
/// blank, the end of data or an unparsable header first.
fn record_holding(segment: &[u8], base: u64, pos: usize) -> Option<usize> {
    let mut at = 0usize;
    while at <= pos {
        let Parsed::Record { total, .. } = parse(segment.get(at..)?, advance(base, at), false) else {
            return None;
        };
        let end = at.checked_add(total)?;
        if pos < end {
            return Some(at);
        }
        at = end;
    }
    None
}
