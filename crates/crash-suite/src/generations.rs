//! Layer 2b: crashes over several generations of one log. A crash state is
//! recovered, appended to, and then shut down cleanly or crashed again, and
//! recovered once more:
//!
//! ```text
//! gen 1 appends ──crash──► gen 2 recovers, appends ──shutdown or crash──► gen 3 recovers
//! ```
//!
//! Records have one fixed size per run, so new records end exactly where old ones
//! start: whatever gen 2's recovery cut and did not erase would be valid again at
//! its own offset. Checks on gen 3: below gen 2's recovered end, exactly the
//! records gen 2 recovered; above it, only gen 2's records, in append order and
//! gap-free; every record gen 2 had acknowledged is there; no garbage. Gen 2's
//! recovery itself must return a gap-free prefix of gen 1's appends.
//!
//! Half the runs start with spare segment files (`recycle_segments`) full of valid
//! records of an older life at other offsets: the segments made of them hold
//! those bytes past their data in every crash state, and none may ever be read.

use std::sync::mpsc;
use std::sync::Arc;

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
use mapped_file::sim::SimSnapshot;
use mapped_file::SimStorage;

use crate::common::*;

const SEGMENT: usize = 16 * 1024;
/// Producer ids in the bodies: which generation wrote a record.
const GEN1: u32 = 1;
const GEN2: u32 = 2;
/// The older life the spare files come from.
const OLD: u32 = 9;
/// Spare files planted in runs that recycle.
const SPARES: usize = 3;

/// The layer's config: small segments, and spares kept when `recycle`.
fn gen_config(flush: FlushDiskType, recycle: bool) -> CommitLogConfig {
    CommitLogConfig { recycle_segments: if recycle { SPARES } else { 0 }, ..config(SEGMENT, flush) }
}

/// Spare files as an older life of the log left them: full of valid records at
/// offsets far from any this run writes.
fn plant_spares(sim: &SimStorage, body_len: usize) {
    let spare_dir = std::path::Path::new(SIM_STORE).join(commitlog::SEGMENT_DIR).join(segment_queue::RECYCLE_DIR);
    let body_len = body_len.min(SEGMENT / 8);
    for spare in 0..SPARES {
        let base = (1u64 << 40) + (spare * SEGMENT) as u64;
        let mut bytes = vec![0u8; SEGMENT];
        let mut pos = 0;
        let mut seq = 0;
        while pos + commitlog::format::HEADER_SIZE + body_len <= SEGMENT {
            let b = body(OLD, seq, body_len);
            pos += commitlog::format::encode_record(
                &mut bytes[pos..],
                base + pos as u64,
                1,
                &b,
                commitlog::format::body_crc(&b),
            );
            seq += 1;
        }
        sim.write_file(&spare_dir.join(mapped_file::file_name(base)), &bytes);
    }
}

/// Tally of a run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Gen-3 recoveries checked.
    pub states: u64,
    /// Gen-2 states that ended in a second crash (the rest shut down cleanly).
    pub second_crashes: u64,
    /// Records gen 2's recoveries cut (bytes truncated > 0).
    pub cuts: u64,
    /// Records gen 2 acknowledged.
    pub acked: u64,
    /// Records that came back after a recovery had discarded them.
    pub resurrected: u64,
    /// Records out of append order, or a gap.
    pub misordered: u64,
    /// Acknowledged records missing.
    pub lost: u64,
    /// Records whose bytes were never written.
    pub garbage: u64,
    /// Opens that failed.
    pub open_errors: u64,
}

impl Tally {
    pub fn violations(&self) -> u64 {
        self.resurrected + self.misordered + self.lost + self.garbage + self.open_errors
    }

    pub fn add(&mut self, o: Tally) {
        self.states += o.states;
        self.second_crashes += o.second_crashes;
        self.cuts += o.cuts;
        self.acked += o.acked;
        self.resurrected += o.resurrected;
        self.misordered += o.misordered;
        self.lost += o.lost;
        self.garbage += o.garbage;
        self.open_errors += o.open_errors;
    }
}

/// Producer id and sequence number of a body made by [`body`].
fn who(bytes: &[u8]) -> (u32, u64) {
    let producer = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let seq = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
    (producer, seq)
}

/// Every record of a log, or `None` if iteration ended in an error.
fn records(log: &CommitLog) -> Option<Vec<(u64, Vec<u8>)>> {
    log.iter_from(log.min_offset()).map(|r| r.ok().map(|r| (r.offset, r.body.to_vec()))).collect()
}

/// Runs every write and sync of `work` against `sim`, returning the snapshots taken
/// after each event.
fn record_events(sim: &SimStorage, work: impl FnOnce()) -> Vec<SimSnapshot> {
    let (tx, rx) = mpsc::sync_channel(64);
    let collector = std::thread::spawn(move || rx.into_iter().collect::<Vec<_>>());
    sim.set_snapshot_sink(Some(tx));
    work();
    sim.set_snapshot_sink(None);
    collector.join().expect("collector")
}

/// One seed: a gen-1 workload, then `states` gen-2/gen-3 continuations of crash
/// states picked from it.
pub fn run_seed(seed: u64, states: usize) -> Tally {
    let mut rng = Rng(seed);
    let body_len = [68usize, 200, 480][rng.range(0, 3) as usize];
    let mut tally = Tally::default();

    // Gen 1: appends with a flush every few records, so crash states hold both
    // durable records and unsynced sectors after them.
    // Each generation writes the other way than the one before: a store may
    // switch write paths between restarts.
    let path = write_without_mmap(seed);
    let recycle = seed % 4 >= 2;
    let sim1 = sim_storage(path);
    if recycle {
        plant_spares(&sim1, body_len);
    }
    let log =
        CommitLog::open_with_storage(SIM_STORE, gen_config(FlushDiskType::AsyncFlush, recycle), Arc::new(sim1.clone()))
            .expect("open gen 1");
    let count = rng.range(40, 160);
    let flush_every = rng.range(3, 12);
    let snapshots = record_events(&sim1, || {
        for seq in 0..count {
            log.append(&body(GEN1, seq, body_len)).expect("append gen 1");
            if seq % flush_every == flush_every - 1 {
                log.flush_all().expect("flush gen 1");
            }
        }
    });
    drop(log);

    for _ in 0..states {
        let snapshot = &snapshots[rng.range(0, snapshots.len() as u64) as usize];
        let mask = rng.next();
        tally.add(continue_from(snapshot, mask, body_len, &mut rng, !path, recycle));
    }
    tally
}

fn continue_from(
    snapshot: &SimSnapshot,
    mask: u64,
    body_len: usize,
    rng: &mut Rng,
    path: bool,
    recycle: bool,
) -> Tally {
    let mut tally = Tally { states: 1, ..Tally::default() };

    // Gen 2: recover the crash image (its abort marker and checkpoint included).
    let sim2 = crash_image(snapshot, mask, path);
    let Ok(log) =
        CommitLog::open_with_storage(SIM_STORE, gen_config(FlushDiskType::SyncFlush, recycle), Arc::new(sim2.clone()))
    else {
        tally.open_errors += 1;
        return tally;
    };
    if log.recovery_report().bytes_truncated > 0 {
        tally.cuts += 1;
    }
    let Some(recovered) = records(&log) else {
        tally.garbage += 1;
        return tally;
    };
    // A gap-free prefix of gen 1's appends, nothing else.
    for (i, (_, b)) in recovered.iter().enumerate() {
        if !is_self_consistent(b) {
            tally.garbage += 1;
        } else if who(b) != (GEN1, i as u64) {
            tally.misordered += 1;
        }
    }
    let end2 = log.max_offset();

    // Gen 2 appends, each acknowledged durable; then a clean shutdown or a crash.
    let appends = rng.range(1, 12);
    let acked: std::sync::Mutex<Vec<(u64, u64)>> = Default::default();
    let events = record_events(&sim2, || {
        for seq in 0..appends {
            let Ok(put) = log.append(&body(GEN2, seq, body_len)) else { break };
            if put.durability.wait().is_ok() {
                // The event first: the storage's lock is never taken under this one.
                let event = sim2.event_count();
                acked.lock().expect("acked").push((put.wrote_offset, event));
            }
        }
    });
    let acked = acked.into_inner().expect("acked");
    tally.acked = acked.len() as u64;
    let crash = rng.next().is_multiple_of(2) && !events.is_empty();
    let (sim3, acked_then): (SimStorage, Vec<u64>) = if crash {
        tally.second_crashes += 1;
        let at = &events[rng.range(0, events.len() as u64) as usize];
        let sim3 = crash_image(at, rng.next(), !path);
        drop(log);
        (sim3, acked.iter().filter(|(_, e)| *e <= at.event).map(|(o, _)| *o).collect())
    } else {
        if log.shutdown().is_err() {
            tally.open_errors += 1;
            return tally;
        }
        drop(log);
        (sim2, acked.iter().map(|(o, _)| *o).collect())
    };

    // Gen 3.
    let Ok(log) =
        CommitLog::open_with_storage(SIM_STORE, gen_config(FlushDiskType::SyncFlush, recycle), Arc::new(sim3))
    else {
        tally.open_errors += 1;
        return tally;
    };
    let Some(now) = records(&log) else {
        tally.garbage += 1;
        return tally;
    };
    let mut next_gen2 = 0u64;
    let mut below = Vec::new();
    for (offset, b) in &now {
        if !is_self_consistent(b) {
            tally.garbage += 1;
        } else if *offset < end2 {
            below.push((*offset, b.clone()));
        } else if who(b).0 != GEN2 {
            tally.resurrected += 1;
        } else if who(b).1 != next_gen2 {
            tally.misordered += 1;
        } else {
            next_gen2 += 1;
        }
    }
    if below != recovered {
        tally.resurrected += 1;
    }
    tally.lost += acked_then.iter().filter(|o| !now.iter().any(|(offset, _)| offset == *o)).count() as u64;
    let _ = log.shutdown();
    tally
}
