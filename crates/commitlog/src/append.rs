//! The append path: records placed under the put lock, which is also the shutdown
//! barrier, and their durability requests submitted before it is released.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use flush_service::{Answer, AnswerLeft, DurabilityHandle, Leading, Member, Turn};
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

/// The most records one write group appends.
const MOST_GROUP_MEMBERS: usize = 256;

/// The most bytes one write group appends beyond its first record (the
/// leader stages them in one buffer for one write).
const MOST_GROUP_BYTES: usize = 1 << 20;

/// The lead of the log's write groups.
type Lead<'a> = Leading<'a, Vec<u8>, AppendResult>;

impl CommitLog {
    /// Appends one record. Thread-safe; the put lock is held only to place and copy
    /// the record (its CRC is computed before).
    ///
    /// Concurrent appends share writes (`append_write_groups`, on by default):
    /// an append that arrives while another writes waits (its body copied),
    /// and the writing one then appends every waiting record in one write,
    /// in arrival order, each with its own durability request; a lone
    /// producer writes at once and allocates nothing.
    pub fn append(&self, body: &[u8]) -> Result<AppendResult, Error> {
        self.check_writeable()?;
        let max = self.inner.config.max_message_size;
        if body.len() > max {
            return Err(Error::RecordTooLarge { size: body.len(), max });
        }
        if !self.inner.config.append_write_groups {
            return self.append_alone(body);
        }
        if let Some(lead) = self.inner.groups.try_lead() {
            return self.lead_after(&lead, self.append_alone(body));
        }
        let member = Member::new(body.to_vec());
        match self.inner.groups.join(&member) {
            Turn::Lead(lead) => self.lead_after(&lead, self.append_alone(body)),
            Turn::LeadGroup(lead) => {
                self.append_members(&lead, Some(Arc::clone(&member)));
                drop(lead);
                match member.take_answer() {
                    Answer::Done(result) => Ok(result),
                    // The group's write failed: this one's own says why.
                    _ => self.append_alone(body),
                }
            }
            Turn::Answered(Answer::Done(result)) => Ok(result),
            Turn::Answered(_) => self.append_alone(body),
        }
    }

    /// What a leader does after its own append (`own`): appends, in one
    /// write, the records that queued while it wrote, then lets the lead
    /// go (to the first one queued since, if any).
    fn lead_after(&self, lead: &Lead<'_>, own: Result<AppendResult, Error>) -> Result<AppendResult, Error> {
        if self.inner.groups.waiting() > 0 {
            self.append_members(lead, None);
        }
        own
    }

    /// Appends the waiting members' records (`first` ahead of them) in one
    /// write, within a segment, and answers each with its own result; a
    /// member the write could not take is told to append alone (and so
    /// learns the error itself).
    fn append_members(&self, lead: &Lead<'_>, first: Option<Arc<Member<Vec<u8>, AppendResult>>>) {
        let leader_queued = first.is_some();
        // Within the room the writable segment has left (a record keeps a
        // blank's room after it): a group that did not fit would go whole
        // into the next segment, and records that fit here one by one would
        // move there (or be refused, on a disk with no room for a new
        // segment). The first is taken in any case: alone it would roll too.
        let room = self.inner.queue.last_mapped_file().map_or(usize::MAX, |file| {
            file.file_size().saturating_sub(file.wrote_position()).saturating_sub(HEADER_SIZE)
        });
        let segment = self.inner.config.mapped_file_size_commit_log.saturating_sub(HEADER_SIZE);
        let most_bytes = room.min(segment).min(MOST_GROUP_BYTES);
        let group = self
            .inner
            .groups
            .take(lead, first, MOST_GROUP_MEMBERS, most_bytes, |body| HEADER_SIZE.saturating_add(body.len()));
        let _left = AnswerLeft(&group);
        let bodies: Vec<&[u8]> = group.iter().map(|member| member.payload().as_slice()).collect();
        if let Ok(GroupAppendResult { offsets, store_timestamp_ms, durability: handles, .. }) =
            self.append_group(&bodies)
        {
            // A producer handed the lead with no one behind it wrote alone.
            if !leader_queued || group.len() > 1 {
                self.inner.groups.written(group.len());
            }
            for (((member, body), wrote_offset), durability) in group.iter().zip(&bodies).zip(offsets).zip(handles) {
                let wrote_bytes = HEADER_SIZE.saturating_add(body.len()) as u64;
                member.answer(Answer::Done(AppendResult { wrote_offset, wrote_bytes, store_timestamp_ms, durability }));
            }
        }
    }

    /// Appends one record under the put lock, on its own.
    fn append_alone(&self, body: &[u8]) -> Result<AppendResult, Error> {
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use mapped_file::SimStorage;

    use super::*;
    use crate::{CommitLogConfig, FlushDiskType};

    const PRODUCERS: u8 = 6;

    fn open(sim: &SimStorage, flush: FlushDiskType) -> CommitLog {
        let config = CommitLogConfig::builder()
            .mapped_file_size_commit_log(1 << 20)
            .max_message_size(4096)
            .flush_disk_type(flush)
            .build()
            .unwrap();
        CommitLog::open_with_storage(Path::new("/groups"), config, Arc::new(sim.clone())).unwrap()
    }

    /// Starts `PRODUCERS` appends while the test holds the lead, and waits
    /// until every one is queued behind it.
    fn queued(log: &CommitLog) -> Vec<std::thread::JoinHandle<Result<AppendResult, Error>>> {
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let log = log.clone();
                std::thread::spawn(move || log.append(&[p; 300]))
            })
            .collect();
        let started = std::time::Instant::now();
        while log.inner.groups.waiting() < usize::from(PRODUCERS) {
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "the producers never queued");
            std::thread::yield_now();
        }
        producers
    }

    #[test]
    fn appends_that_wait_for_the_lead_are_written_as_one_group_each_with_its_own_durability() {
        let sim = SimStorage::new();
        let log = open(&sim, FlushDiskType::SyncFlush);
        let lead = log.inner.groups.try_lead().unwrap();
        let producers = queued(&log);
        let end = log.max_offset();
        log.append_members(&lead, None);
        drop(lead);
        let mut results: Vec<AppendResult> = producers.into_iter().map(|p| p.join().unwrap().unwrap()).collect();
        assert_eq!(log.write_group_stats(), (1, u64::from(PRODUCERS)), "one group held them all");
        results.sort_by_key(|r| r.wrote_offset);
        let mut at = end;
        for result in results {
            assert_eq!(result.wrote_offset, at, "consecutive records, from the log's end");
            at = result.next_offset();
            result.durability.wait().unwrap();
            assert!(log.flushed_offset() >= at, "acknowledged once its own record is durable");
            assert_eq!(log.read(result.wrote_offset).unwrap().body.len(), 300);
        }
        log.shutdown().unwrap();
    }

    #[test]
    fn a_group_the_log_refuses_tells_each_member_why_and_leaves_none_waiting() {
        let sim = SimStorage::new();
        let log = open(&sim, FlushDiskType::AsyncFlush);
        let lead = log.inner.groups.try_lead().unwrap();
        let producers = queued(&log);
        log.inner.shut_down.store(true, Ordering::Release);
        log.append_members(&lead, None);
        drop(lead);
        for producer in producers {
            assert!(matches!(producer.join().unwrap(), Err(Error::Shutdown)));
        }
        assert_eq!(log.write_group_stats(), (0, 0));
        assert!(log.inner.groups.is_idle());
    }

    #[test]
    fn a_lone_producer_leads_and_writes_at_once() {
        let sim = SimStorage::new();
        let log = open(&sim, FlushDiskType::AsyncFlush);
        for i in 0..100u8 {
            log.append(&[i; 100]).unwrap();
        }
        assert_eq!(log.write_group_stats(), (0, 0), "no group without a collision");
        assert!(log.inner.groups.is_idle());
        log.shutdown().unwrap();
    }

    /// 64 KiB segments, no preallocation, a disk guard at 90 %.
    fn open_small(sim: &SimStorage, dir: &str) -> CommitLog {
        let config = CommitLogConfig {
            disk_space_warning_level_ratio: 90,
            disk_max_used_space_ratio: 100,
            clean_file_forcibly_enable: false,
            clean_resource_interval_ms: 3_600_000,
            ..CommitLogConfig::builder()
                .mapped_file_size_commit_log(64 << 10)
                .max_message_size(4096)
                .flush_disk_type(FlushDiskType::AsyncFlush)
                .preallocate_next_segment(false)
                .build()
                .unwrap()
        };
        CommitLog::open_with_storage(Path::new(dir), config, Arc::new(sim.clone())).unwrap()
    }

    /// Half a segment written; then a disk with room for the current
    /// segment's rest but not for a new segment (85 % used, 92 % with one more).
    fn half_full_on_a_tight_disk(sim: &SimStorage, dir: &str) -> CommitLog {
        let log = open_small(sim, dir);
        for i in 0..8u8 {
            log.append(&[i; 4000]).unwrap();
        }
        sim.set_disk_space(Some(mapped_file::DiskSpace { total: 1 << 20, free: 150 << 10, available: 150 << 10 }));
        log
    }

    #[test]
    fn records_that_fit_the_current_segment_are_not_refused_because_they_waited_in_a_group() {
        const QUEUED: usize = 12;
        // The same twelve appends one after another, then queued behind a
        // writer: as many fit the current segment's rest either way.
        let sim = SimStorage::new();
        let log = half_full_on_a_tight_disk(&sim, "/alone");
        let alone = (0..QUEUED).filter(|_| log.append(&[9; 4000]).is_ok()).count();
        assert_eq!(alone, 8, "eight fit the current segment's rest");
        let sim = SimStorage::new();
        let log = half_full_on_a_tight_disk(&sim, "/group");
        let lead = log.inner.groups.try_lead().unwrap();
        let producers: Vec<_> = (0..QUEUED)
            .map(|_| {
                let log = log.clone();
                std::thread::spawn(move || log.append(&[9; 4000]))
            })
            .collect();
        let started = std::time::Instant::now();
        while log.inner.groups.waiting() < QUEUED {
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "the producers never queued");
            std::thread::yield_now();
        }
        log.append_members(&lead, None);
        drop(lead);
        let grouped = producers.into_iter().map(|p| p.join().unwrap()).filter(Result::is_ok).count();
        assert_eq!(grouped, alone, "appends refused only because they were grouped");
    }

    #[test]
    fn a_producer_handed_the_lead_with_no_one_behind_it_wrote_alone_and_counts_in_no_group() {
        let sim = SimStorage::new();
        let log = open_small(&sim, "/stats");
        let lead = log.inner.groups.try_lead().unwrap();
        let producer = {
            let log = log.clone();
            std::thread::spawn(move || log.append(&[1; 100]))
        };
        let started = std::time::Instant::now();
        while log.inner.groups.waiting() < 1 {
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "the producer never queued");
            std::thread::yield_now();
        }
        drop(lead); // handed to the one producer queued: it writes its record, alone
        producer.join().unwrap().unwrap();
        assert_eq!(log.write_group_stats(), (0, 0), "a producer that wrote alone counts in neither");
    }
}
