//! Layer 2: simulated power loss through the real code. Producers append under
//! sync flush on `SimStorage`; after every write and every sync the storage sends a
//! snapshot; for each snapshot, crash images keep subsets of the dirty 512-byte
//! sectors (all subsets when there are few), and each image is recovered by
//! `CommitLog::open` and checked: every record acknowledged before that point is
//! there, and every record returned is one that was written, at its offset.
//!
//! The checkpoint is rewritten every millisecond, so crash points fall between its
//! writes and the data's syncs too: a checkpoint ahead of durable data makes
//! recovery call real damage a torn tail, or refuse to open, and is caught.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use std::path::Path;

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType, SegmentPreparation};
use mapped_file::sim::SimSnapshot;
use mapped_file::Storage;

use crate::common::*;

const SEGMENT: usize = 16 * 1024;

/// Tally of one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub states: u64,
    pub acked: u64,
    pub lost: u64,
    pub garbage: u64,
    pub open_errors: u64,
    /// Entries the raft engine rewrote forward (the raft layer only).
    pub rewritten: u64,
    /// Segments roll-over took from the preparation, whole or half-prepared
    /// (the prepared-segments layer only).
    pub prepared: u64,
}

impl Tally {
    pub fn violations(&self) -> u64 {
        self.lost + self.garbage + self.open_errors
    }

    pub fn add(&mut self, o: Tally) {
        self.states += o.states;
        self.acked += o.acked;
        self.lost += o.lost;
        self.garbage += o.garbage;
        self.open_errors += o.open_errors;
        self.rewritten += o.rewritten;
        self.prepared += o.prepared;
    }
}

/// One workload under one seed. `fail_a_sync` injects one sync failure.
/// `stop_at_first` ends as soon as a violation is seen (planted-bug runs).
pub fn run_seed(seed: u64, images_per_point: usize, fail_a_sync: bool, stop_at_first: bool) -> Tally {
    run_seed_with(seed, images_per_point, fail_a_sync, stop_at_first, false)
}

/// [`run_seed`] with the next segment prepared by the preallocation thread,
/// its blocks written with zeros and synced in steps of a page
/// ([`SegmentPreparation::Written`]): crash points fall in mid-preparation too,
/// and roll-overs take prepared and half-prepared segments.
pub fn run_prepared_seed(seed: u64, images_per_point: usize, stop_at_first: bool) -> Tally {
    run_seed_with(seed, images_per_point, false, stop_at_first, true)
}

fn run_seed_with(seed: u64, images_per_point: usize, fail_a_sync: bool, stop_at_first: bool, prepared: bool) -> Tally {
    let mut rng = Rng(seed);
    let path = write_without_mmap(seed);
    let sim = sim_storage(path);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let (tx, rx) = mpsc::sync_channel::<SimSnapshot>(256);
    // (offset, event count when the acknowledgement was seen).
    let acked: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    let dirs = segment_dirs(seed);
    let mut config = CommitLogConfig {
        checkpoint_interval_ms: 1,
        store_path_commit_log: dirs.clone(),
        ..config(SEGMENT, FlushDiskType::SyncFlush)
    };
    if prepared {
        config.preallocate_next_segment = true;
        config.segment_preparation = SegmentPreparation::Written;
        config.preparation_chunk_bytes = 4096;
        config.preparation_bytes_per_sec = 0;
    }
    let log = CommitLog::open_with_storage(SIM_STORE, config, storage).expect("open");
    if fail_a_sync {
        sim.fail_nth_sync(rng.range(3, 40));
    }
    sim.set_snapshot_sink(Some(tx));

    let checker = {
        let (acked, stop, dirs) = (Arc::clone(&acked), Arc::clone(&stop), dirs.clone());
        let mut rng = Rng(seed ^ 0xC0FFEE);
        std::thread::spawn(move || {
            let mut tally = Tally::default();
            for snapshot in rx {
                if stop.load(Ordering::Relaxed) {
                    continue; // drain so producers never block
                }
                let acked_then: Vec<u64> = acked
                    .lock()
                    .expect("acked")
                    .iter()
                    .filter(|(_, e)| *e <= snapshot.event)
                    .map(|(o, _)| *o)
                    .collect();
                let t = crash_states(&snapshot, &acked_then, images_per_point, &mut rng, path, &dirs);
                tally.add(t);
                if stop_at_first && tally.violations() > 0 {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            tally
        })
    };

    let producers: Vec<_> = (0..3u32)
        .map(|p| {
            let (log, sim, acked, stop) = (log.clone(), sim.clone(), Arc::clone(&acked), Arc::clone(&stop));
            let mut rng = Rng(seed.wrapping_mul(31).wrapping_add(p as u64));
            std::thread::spawn(move || {
                for seq in 0..40 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // Bodies describe themselves, so the checker needs no map of them.
                    let b = body(p, seq, rng.range(20, 1500) as usize);
                    let Ok(put) = log.append(&b) else { break };
                    if put.durability.wait().is_ok() {
                        // The event first: the storage's lock is never taken under this one.
                        let event = sim.event_count();
                        acked.lock().expect("acked").push((put.wrote_offset, event));
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().expect("producer");
    }
    sim.set_snapshot_sink(None);
    let preparation = log.preparation_stats();
    drop(log);
    let mut tally = checker.join().expect("checker");
    tally.acked = acked.lock().expect("acked").len() as u64;
    // Prepared (in full or in part) and then taken: the one waiting at the end
    // was prepared but never taken.
    tally.prepared = (preparation.prepared + preparation.handed_over_early).saturating_sub(1);
    tally
}

/// The segment directories of a run: every fourth run (on both write paths) spreads the log over two
/// (`store_path_commit_log`), the others keep it in the store directory.
fn segment_dirs(seed: u64) -> Vec<std::path::PathBuf> {
    if seed % 8 == 1 || seed % 8 == 4 {
        vec!["/sim-disk-a/commitlog".into(), "/sim-disk-b/commitlog".into()]
    } else {
        Vec::new()
    }
}

fn crash_states(
    snapshot: &SimSnapshot,
    acked: &[u64],
    images: usize,
    rng: &mut Rng,
    path: bool,
    dirs: &[std::path::PathBuf],
) -> Tally {
    let dirty = snapshot.dirty_sectors();
    let mut tally = Tally::default();
    let masks: Vec<u64> = if dirty <= 6 {
        (0..1u64 << dirty).collect()
    } else {
        let mut m = vec![0, u64::MAX];
        m.extend((0..images).map(|_| rng.next()));
        m
    };
    for mask in masks {
        // The image holds the abort marker and the checkpoint as they stood then.
        let image = crash_image(snapshot, mask, path);
        debug_assert!(image.file_bytes(&Path::new(SIM_STORE).join(commitlog::ABORT_FILE)).is_some());
        tally.states += 1;
        let storage: Arc<dyn Storage> = Arc::new(image);
        let config =
            CommitLogConfig { store_path_commit_log: dirs.to_vec(), ..config(SEGMENT, FlushDiskType::AsyncFlush) };
        match CommitLog::open_with_storage(SIM_STORE, config, storage) {
            Err(_) => tally.open_errors += 1,
            Ok(log) => {
                let outcome = check_with(&log, |_, b| is_self_consistent(b), acked);
                tally.lost += outcome.lost as u64;
                tally.garbage += outcome.garbage as u64;
                if outcome.iteration_error.is_some() {
                    tally.garbage += 1;
                }
            }
        }
    }
    tally
}
