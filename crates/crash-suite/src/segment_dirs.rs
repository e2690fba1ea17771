//! Layer 2d: segment directories that go missing, under power loss. A store's
//! oldest segments live on disk `a`, retired to read-only; newer ones on `b` (and
//! `c`, in every other run). Under sync flush a producer appends while retention
//! deletes from the front. For crash images of every point:
//!
//! - the whole image must open, with every acknowledged record that no deletion
//!   requested by then may have taken (a front written after its deletion, or
//!   a check that trusts a stale front, refuses a complete store);
//! - the image with one segment directory unmounted (its files gone, its mount
//!   point empty) must either refuse to open or open with all of those records:
//!   never a shorter log, silently;
//! - once mounted again, the refused store must open whole: the refusal
//!   changed nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
use mapped_file::sim::SimSnapshot;
use mapped_file::{SimStorage, Storage};

use crate::common::*;

const SEGMENT: usize = 16 * 1024;

/// Tally of one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Crash images opened (whole, unmounted, remounted).
    pub states: u64,
    pub acked: u64,
    pub deletions: u64,
    /// Opens with a directory unmounted that refused.
    pub refused: u64,
    /// Opens with a directory unmounted that had nothing needed on it.
    pub whole_without: u64,
    /// Opens with a directory unmounted that returned a shorter log.
    pub silent_losses: u64,
    /// Complete images (or remounted ones) that did not open.
    pub false_refusals: u64,
    pub lost: u64,
    pub garbage: u64,
}

impl Tally {
    pub fn violations(&self) -> u64 {
        self.silent_losses + self.false_refusals + self.lost + self.garbage
    }

    pub fn add(&mut self, o: Tally) {
        self.states += o.states;
        self.acked += o.acked;
        self.deletions += o.deletions;
        self.refused += o.refused;
        self.whole_without += o.whole_without;
        self.silent_losses += o.silent_losses;
        self.false_refusals += o.false_refusals;
        self.lost += o.lost;
        self.garbage += o.garbage;
    }
}

fn disk(name: &str) -> PathBuf {
    PathBuf::from(format!("/sim-disk-{name}/commitlog"))
}

/// The configuration once `a` is retired: `b` (and `c`) writable, `a` read-only.
fn retired(three: bool) -> CommitLogConfig {
    let mut writable = vec![disk("b")];
    if three {
        writable.push(disk("c"));
    }
    CommitLogConfig {
        store_path_commit_log: writable,
        read_only_commit_log_store_paths: vec![disk("a")],
        ..config(SEGMENT, FlushDiskType::AsyncFlush)
    }
}

/// One workload under one seed. `stop_at_first` ends at the first violation
/// (planted-bug runs).
pub fn run_seed(seed: u64, images_per_point: usize, stop_at_first: bool) -> Tally {
    let mut rng = Rng(seed);
    let path = write_without_mmap(seed);
    let three = seed % 2 == 1;
    let sim = sim_storage(path);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    // Phase 1: everything on `a`.
    let first = CommitLogConfig { store_path_commit_log: vec![disk("a")], ..config(SEGMENT, FlushDiskType::SyncFlush) };
    let log = CommitLog::open_with_storage(SIM_STORE, first, Arc::clone(&storage)).expect("open on a");
    let mut acked: Vec<(u64, u64)> = Vec::new();
    for seq in 0..rng.range(30, 60) {
        let put = log.append(&body(0, seq, rng.range(200, 1500) as usize)).expect("append");
        put.durability.wait().expect("durable");
        acked.push((put.wrote_offset, 0));
    }
    log.shutdown().expect("shutdown");
    drop(log);

    // Phase 2: `a` retired; appends and front deletions, with crash points.
    let config = CommitLogConfig { checkpoint_interval_ms: 1, ..retired(three) };
    let config = CommitLogConfig { flush_disk_type: FlushDiskType::SyncFlush, ..config };
    let log = CommitLog::open_with_storage(SIM_STORE, config, storage).expect("open retired");
    let acked = Arc::new(Mutex::new(acked));
    // (threshold, event count when the deletion was asked for).
    let deletions: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::sync_channel::<SimSnapshot>(256);
    sim.set_snapshot_sink(Some(tx));
    let checker = {
        let (acked, deletions, stop) = (Arc::clone(&acked), Arc::clone(&deletions), Arc::clone(&stop));
        let mut rng = Rng(seed ^ 0xD15C);
        std::thread::spawn(move || {
            let mut tally = Tally::default();
            for snapshot in rx {
                if stop.load(Ordering::Relaxed) {
                    continue; // drain so the producer never blocks
                }
                let gone_below = deletions
                    .lock()
                    .expect("deletions")
                    .iter()
                    .filter(|(_, e)| *e <= snapshot.event)
                    .map(|(t, _)| *t)
                    .max()
                    .unwrap_or(0);
                let expected: Vec<u64> = acked
                    .lock()
                    .expect("acked")
                    .iter()
                    .filter(|(o, e)| *e <= snapshot.event && *o >= gone_below)
                    .map(|(o, _)| *o)
                    .collect();
                tally.add(crash_states(&snapshot, &expected, images_per_point, &mut rng, path, three));
                if stop_at_first && tally.violations() > 0 {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            tally
        })
    };
    let mut deleted = 0u64;
    for seq in 1000..1000 + rng.range(40, 70) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Ok(put) = log.append(&body(0, seq, rng.range(200, 1500) as usize)) else { break };
        if put.durability.wait().is_ok() {
            // The event first: the storage's lock is never taken under this one.
            let event = sim.event_count();
            acked.lock().expect("acked").push((put.wrote_offset, event));
        }
        if seq % 9 == 0 {
            // Retention: the segments wholly below a record some way back.
            let offsets: Vec<u64> = acked.lock().expect("acked").iter().map(|(o, _)| *o).collect();
            let threshold = offsets[offsets.len() * 2 / 3];
            // The event first: the storage's lock is never taken under this one.
            let event = sim.event_count();
            deletions.lock().expect("deletions").push((threshold, event));
            deleted += log.delete_segments_before(threshold, 2).unwrap_or(0) as u64;
        }
    }
    sim.set_snapshot_sink(None);
    drop(log);
    let mut tally = checker.join().expect("checker");
    tally.acked = acked.lock().expect("acked").len() as u64;
    tally.deletions = deleted;
    tally
}

/// Opens `image` with the retired configuration and checks `expected` is there.
fn open_whole(image: SimStorage, expected: &[u64], three: bool, tally: &mut Tally) {
    tally.states += 1;
    match CommitLog::open_with_storage(SIM_STORE, retired(three), Arc::new(image)) {
        Err(_) => tally.false_refusals += 1,
        Ok(log) => {
            let outcome = check_with(&log, |_, b| is_self_consistent(b), expected);
            tally.lost += outcome.lost as u64;
            tally.garbage += outcome.garbage as u64 + u64::from(outcome.iteration_error.is_some());
        }
    }
}

fn crash_states(
    snapshot: &SimSnapshot,
    expected: &[u64],
    images: usize,
    rng: &mut Rng,
    path: bool,
    three: bool,
) -> Tally {
    let mut tally = Tally::default();
    let masks: Vec<u64> = {
        let mut m = vec![0, u64::MAX];
        m.extend((0..images).map(|_| rng.next()));
        m
    };
    for mask in masks {
        open_whole(crash_image(snapshot, mask, path), expected, three, &mut tally);
        // One directory's disk not mounted.
        let names: &[&str] = if three { &["a", "b", "c"] } else { &["a", "b"] };
        let name = names[rng.range(0, names.len() as u64) as usize];
        let image = crash_image(snapshot, mask, path);
        let unmounted = image.unmount(Path::new(&format!("/sim-disk-{name}")));
        tally.states += 1;
        let refused = match CommitLog::open_with_storage(SIM_STORE, retired(three), Arc::new(image.clone())) {
            Err(_) => true,
            Ok(log) => {
                let outcome = check_with(&log, |_, b| is_self_consistent(b), expected);
                if outcome.lost > 0 || outcome.iteration_error.is_some() {
                    tally.silent_losses += 1;
                } else {
                    tally.whole_without += 1;
                }
                tally.garbage += outcome.garbage as u64;
                false
            }
        };
        if refused {
            tally.refused += 1;
            // Mounted again: the refusal changed nothing.
            image.mount(unmounted);
            open_whole(image, expected, three, &mut tally);
        }
    }
    tally
}
