//! Layer 2e: truncations racing a flush and a group-commit round, each forced into
//! its window deterministically, over many record sizes and cut points.
//!
//! - **truncate ∥ flush:** `truncate_from(T)` runs inside `flush_all`'s window
//!   (a fail point after its flush returned E > T, before the checkpoint hears of
//!   it). The checkpoint must stay at or below T, and the store must reopen at T
//!   with every record below it.
//! - **truncate ∥ round:** over the real segment queue, a group-commit round's
//!   flush returns E; before it answers, the tail is cut to T < E and a record
//!   T..T+n is appended with a request for T+n ≤ E. The round must neither die
//!   nor acknowledge those unsynced bytes, and the next round must.

use std::path::Path;
use std::sync::{Arc, Mutex};

use commitlog::{Checkpoint, CommitLog, FlushDiskType, QueueTarget};
use flush_service::testing::HookAfterFlush;
use flush_service::{GroupCommit, GroupCommitConfig, ManualClock};
use mapped_file::Storage;
use segment_queue::{QueueConfig, SegmentQueue};

use crate::common::*;

const SEGMENT: usize = 16 * 1024;

/// What the cases found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub cases: u64,
    /// Checkpoints written above the data after a truncate ∥ flush.
    pub checkpoint_above: u64,
    /// Stores that did not reopen (or reopened at the wrong end).
    pub unopenable: u64,
    /// Requests acknowledged before a sync covered their bytes.
    pub acked_unsynced: u64,
    /// Rounds that panicked, or never answered a covered request.
    pub dead_rounds: u64,
}

impl Tally {
    pub fn violations(&self) -> u64 {
        self.checkpoint_above + self.unopenable + self.acked_unsynced + self.dead_rounds
    }
}

/// `cases` of each race, seeded.
pub fn run(seed: u64, cases: u64) -> Tally {
    let mut tally = Tally::default();
    for case in 0..cases {
        let mut rng = Rng(seed.wrapping_add(0xACE).wrapping_add(case));
        truncate_in_flush(&mut rng, case, &mut tally);
        truncate_in_round(&mut rng, &mut tally);
        tally.cases += 2;
    }
    tally
}

fn truncate_in_flush(rng: &mut Rng, case: u64, tally: &mut Tally) {
    let sim = sim_storage(write_without_mmap(case));
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let dir = Path::new(SIM_STORE);
    let config = config(SEGMENT, FlushDiskType::AsyncFlush);
    let log = CommitLog::open_with_storage(dir, config.clone(), Arc::clone(&storage)).expect("open");
    let offsets: Vec<u64> = (0..rng.range(20, 120))
        .map(|seq| log.append(&body(0, seq, rng.range(20, 1500) as usize)).expect("append").wrote_offset)
        .collect();
    let cut = offsets[rng.range(0, offsets.len() as u64) as usize];
    let other = log.clone();
    commitlog::failpoints::arm("flush_all.after_flush", dir, move || {
        let truncated = std::thread::spawn(move || other.truncate_from(cut).map(drop)).join();
        assert!(matches!(truncated, Ok(Ok(()))), "the truncation failed");
    });
    log.flush_all().expect("flush_all");
    log.shutdown().expect("shutdown");
    drop(log);
    let written = Checkpoint::load(&sim, dir).ok().flatten().map_or(0, |c| c.flushed_offset);
    if written > cut {
        tally.checkpoint_above += 1;
    }
    match CommitLog::open_with_storage(dir, config, storage) {
        Ok(log) if log.max_offset() == cut => {
            let outcome =
                check_with(&log, |_, b| is_self_consistent(b), &offsets[..offsets.partition_point(|&o| o < cut)]);
            if outcome.lost + outcome.garbage > 0 || outcome.iteration_error.is_some() {
                tally.unopenable += 1;
            }
        }
        _ => tally.unopenable += 1,
    }
}

fn append(queue: &SegmentQueue, bytes: usize) -> u64 {
    let file = queue.roll_to_writable_segment(0).expect("roll");
    // Bytes that fit: the queue knows no records, only its segment's room.
    let room = queue.mapped_file_size() - file.wrote_position();
    file.append_bytes(0, &vec![0x5A; bytes.min(room).max(1)]).expect("append");
    queue.max_wrote_position()
}

fn truncate_in_round(rng: &mut Rng, tally: &mut Tally) {
    let storage: Arc<dyn Storage> = Arc::new(sim_storage(rng.next().is_multiple_of(2)));
    let config = QueueConfig { preallocate_next_segment: false, ..QueueConfig::new(SEGMENT) };
    let queue = Arc::new(SegmentQueue::load(storage, "/race-q".as_ref(), config, None).expect("load"));
    let mut end = 0;
    for _ in 0..rng.range(1, 20) {
        end = append(&queue, rng.range(100, 3000) as usize);
    }
    let cut = rng.range(0, end);
    let target = HookAfterFlush::new(QueueTarget::new(Arc::clone(&queue)));
    let gc =
        Arc::new(GroupCommit::new(target.clone(), Arc::new(ManualClock::new()), GroupCommitConfig::default(), None));
    let early = gc.put_request(end);
    let late = Arc::new(Mutex::new(None));
    let new_bytes = rng.range(1, (end - cut).max(2)) as usize;
    {
        let (gc, queue, late) = (Arc::clone(&gc), Arc::clone(&queue), Arc::clone(&late));
        target.arm(move || {
            queue.truncate_dirty_files(cut).expect("truncate");
            let next = append(&queue, new_bytes);
            *late.lock().expect("late") = Some((next, gc.put_request(next)));
        });
    }
    gc.swap();
    let round = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gc.flush_swapped()));
    let Some((next, late)) = late.lock().expect("late").take() else {
        tally.dead_rounds += 1;
        return;
    };
    if round.is_err() {
        tally.dead_rounds += 1;
        return;
    }
    if late.is_done() && queue.flushed_where() < next {
        tally.acked_unsynced += 1;
    }
    // The next round covers it.
    gc.run_round();
    if !matches!(late.wait_timeout(std::time::Duration::from_secs(10)), Some(Ok(()))) || queue.flushed_where() < next {
        tally.dead_rounds += 1;
    }
    drop(early);
}
