//! The adapter that lets the flush services flush the segment queue. It lives on
//! the storage side of the seam, so `flush-service` knows only its traits and
//! depends on no storage crate.

use std::sync::Arc;

use flush_service::{FlushTarget, TargetError, TargetState};
use segment_queue::SegmentQueue;

/// A segment queue as a [`FlushTarget`], so the flush services can flush it: the
/// log's own, or any other queue built on the same layers (a consume-queue index,
/// say). Its failure latch is the queue's: a failed sync anywhere (a service
/// round, `flush_all`, shutdown) is seen by all.
#[derive(Debug, Clone)]
pub struct QueueTarget {
    queue: Arc<SegmentQueue>,
    /// Record the commit log's flush and commit metrics (the log's own queue only).
    log_metrics: bool,
    /// Told the committed offset after each commit that moved it (the log's
    /// [`on_committed`](crate::CommitLog::on_committed) listeners).
    committed: Option<Arc<crate::log::Listeners>>,
}

impl QueueTarget {
    /// `queue` as a flush target, recording no metrics.
    pub fn new(queue: Arc<SegmentQueue>) -> Self {
        QueueTarget { queue, log_metrics: false, committed: None }
    }

    /// The commit log's queue: flushes and commits are recorded as its
    /// metrics, and commits that move data told to `committed`.
    pub(crate) fn for_log(queue: Arc<SegmentQueue>, committed: Arc<crate::log::Listeners>) -> Self {
        QueueTarget { queue, log_metrics: true, committed: Some(committed) }
    }
}

impl FlushTarget for QueueTarget {
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError> {
        let started = std::time::Instant::now();
        let progress = self.queue.flush(least_pages).map_err(|e| Arc::new(e) as TargetError)?;
        if self.log_metrics && progress.to > progress.from {
            crate::metrics::flushed(progress.to.saturating_sub(progress.from), started.elapsed());
        }
        Ok(progress.to)
    }
    fn commit(&self, least_pages: usize) -> Result<u64, TargetError> {
        let started = std::time::Instant::now();
        let progress = self.queue.commit(least_pages).map_err(|e| Arc::new(e) as TargetError)?;
        if self.log_metrics && progress.to > progress.from {
            crate::metrics::committed(started.elapsed());
        }
        if let Some(committed) = self.committed.as_ref().filter(|_| progress.to > progress.from) {
            committed.notify(progress.to);
        }
        Ok(progress.to)
    }
    fn state(&self) -> TargetState {
        TargetState {
            flushed_where: self.queue.flushed_where(),
            committed_where: self.queue.committed_where(),
            unflushed_bytes: self.queue.remain_how_many_data_to_flush(),
            uncommitted_bytes: self.queue.remain_how_many_data_to_commit(),
            store_timestamp: self.queue.store_timestamp(),
        }
    }
    fn failure(&self) -> Option<TargetError> {
        self.queue.failure().map(|first| first as TargetError)
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::cast_possible_truncation)] // small, known test values
mod tests {
    //! The flush services over the real queue on simulated storage.

    use std::path::Path;
    use std::time::Duration;

    use flush_service::{DurabilityHandle, FlushResult, GroupCommit, GroupCommitConfig, ManualClock};
    use mapped_file::{SimStorage, Storage};
    use segment_queue::QueueConfig;

    use super::*;

    fn settle(handle: DurabilityHandle) -> FlushResult {
        handle.wait_timeout(Duration::from_secs(30)).expect("request never answered")
    }

    /// A queue of 8 KiB segments on simulated storage, no preallocation thread.
    fn sim_queue(dir: &str) -> (SimStorage, Arc<SegmentQueue>) {
        let sim = SimStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let config = QueueConfig { preallocate_next_segment: false, ..QueueConfig::new(8192) };
        (sim, Arc::new(SegmentQueue::load(storage, Path::new(dir), config, None).unwrap()))
    }

    fn group_commit(queue: &Arc<SegmentQueue>) -> GroupCommit {
        let target = Arc::new(QueueTarget::for_log(Arc::clone(queue), Arc::default()));
        GroupCommit::new(target, Arc::new(ManualClock::new()), GroupCommitConfig::default(), None)
    }

    #[test]
    fn a_request_spanning_two_segments_is_acknowledged_by_one_round() {
        // RocketMQ #3408 (https://github.com/apache/rocketmq/issues/3408): with a
        // record that ends in the next segment, flushing only the segment holding
        // flushedWhere left the request unsatisfied.
        let (sim, queue) = sim_queue("/gc");
        let gc = group_commit(&queue);
        let first = queue.roll_to_writable_segment(0).unwrap();
        first.append_bytes(0, &[1; 5000]).unwrap();
        gc.put_request(5000);
        gc.swap();
        gc.flush_swapped();
        // Tail of segment 0 plus the head of segment 1 belong to one request.
        first.append_bytes(0, &[2; 3192]).unwrap();
        let second = queue.roll_to_writable_segment(0).unwrap();
        second.append_bytes(0, &[3; 100]).unwrap();
        let handle = gc.put_request(8192 + 100);
        gc.swap();
        assert_eq!(gc.flush_swapped(), 1);
        assert!(settle(handle).is_ok());
        assert_eq!(queue.flushed_where(), 8292);
        assert_eq!(sim.dirty_sectors(), 0, "acknowledged bytes really are durable");
    }

    #[test]
    fn in_sync_mode_nothing_is_acknowledged_before_its_bytes_are_durable() {
        // Through the real queue on simulated storage: after a power cut that loses
        // every unsynced byte, every acknowledged byte is still there.
        let (sim, queue) = sim_queue("/ack");
        let gc = group_commit(&queue);
        let mut model = Vec::new();
        let mut acked = 0u64;
        for i in 1..=30u8 {
            let file = queue.roll_to_writable_segment(0).unwrap();
            let end = match file.append_bytes(0, &[i; 1000]).unwrap() {
                mapped_file::Appended::Written { wrote_offset, bytes, .. } => wrote_offset + bytes as u64,
                mapped_file::Appended::DoesNotFit { remaining } => {
                    file.append_with(0, |_, t| {
                        t.fill(0xEE);
                        mapped_file::AppendStatus::Written { bytes: t.len(), value: () }
                    })
                    .unwrap();
                    model.extend(std::iter::repeat_n(0xEE, remaining));
                    continue;
                }
            };
            model.extend([i; 1000]);
            let handle = gc.put_request(end);
            if i.is_multiple_of(3) {
                gc.swap();
                gc.flush_swapped();
                assert!(settle(handle).is_ok());
                acked = end;
            }
        }
        assert!(acked > 8192, "the test spans segments");
        sim.crash_losing_unsynced();
        for file in queue.segments() {
            let from = file.file_from_offset() as usize;
            let durable = sim.file_bytes(file.path()).unwrap();
            let upto = (acked as usize).saturating_sub(from).min(durable.len());
            assert_eq!(
                &durable[..upto],
                &model[from..from + upto],
                "acknowledged bytes lost in {}",
                file.path().display()
            );
        }
    }

    #[test]
    fn a_failure_seen_outside_the_services_stops_them_too() {
        // One latch: a sync that fails in a manual flush (not a service round)
        // makes the group-commit core refuse every later request.
        let (sim, queue) = sim_queue("/latch");
        let gc = group_commit(&queue);
        queue.roll_to_writable_segment(0).unwrap().append_bytes(0, &[1; 100]).unwrap();
        sim.fail_nth_sync(1);
        assert!(queue.flush(0).is_err());
        assert!(gc.failure().is_some(), "the services see the queue's latch");
        assert!(matches!(settle(gc.put_request(100)), Err(flush_service::FlushError::Failed { .. })));
        assert!(queue.roll_to_writable_segment(0).unwrap().append_bytes(0, b"x").is_err(), "every segment refuses");
    }
}
