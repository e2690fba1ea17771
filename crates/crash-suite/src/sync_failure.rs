//! Layer 4: an injected sync error. Nothing is acknowledged after it, the log
//! refuses writes with a clear error, and a restart recovers the durable prefix.

use std::sync::Arc;

use commitlog::{CommitLog, Error, FlushDiskType};
use mapped_file::Storage;

use crate::common::*;

const SEGMENT: usize = 16 * 1024;

#[derive(Default)]
pub struct Tally {
    pub failures_injected: usize,
    pub acked_before: usize,
    pub acked_after: usize,
    pub lost: usize,
    pub refused_clearly: usize,
}

pub fn run(seed: u64, cases: usize) -> Tally {
    let mut tally = Tally::default();
    let mut rng = Rng(seed);
    for case in 0..cases {
        let dir = scratch();
        let sim = sim_storage(write_without_mmap(case as u64));
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let log = CommitLog::open_with_storage(dir.path(), config(SEGMENT, FlushDiskType::SyncFlush), storage.clone())
            .expect("open");
        sim.fail_nth_sync(rng.range(1, 30));
        tally.failures_injected += 1;
        let mut acked = Vec::new();
        let mut failed_seen = false;
        for seq in 0..200 {
            match log.append(&body(0, seq, rng.range(20, 900) as usize)) {
                Ok(put) => match put.durability.wait() {
                    Ok(()) if failed_seen => tally.acked_after += 1,
                    Ok(()) => acked.push(put.wrote_offset),
                    Err(_) => failed_seen = true,
                },
                Err(Error::NotWriteable { cause }) if cause.source.raw_os_error().is_some() => {
                    tally.refused_clearly += 1;
                    break;
                }
                Err(other) => panic!("unexpected error after a sync failure: {other}"),
            }
        }
        tally.acked_before += acked.len();
        let _ = log.shutdown(); // fails: the log is latched; the abort marker stays
        drop(log);
        sim.crash_losing_unsynced();
        let log = CommitLog::open_with_storage(dir.path(), config(SEGMENT, FlushDiskType::SyncFlush), storage)
            .expect("restart");
        let outcome = check_with(&log, |_, b| is_self_consistent(b), &acked);
        tally.lost += outcome.lost + outcome.garbage;
    }
    tally
}
