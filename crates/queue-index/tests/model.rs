//! The index against a model (the log itself: every record's queue, queue
//! offset and entry): random appends over many queues, seals (empty ones
//! too), expiry at run boundaries, reopens, power cuts in the middle of a
//! seal, and damaged run files; after each step every queue reads back as the
//! live records of the log say, at its offsets. A reopen re-dispatches the log
//! from `replay_from`, as an owner does.

use std::collections::BTreeMap;
use std::path::Path;

use mapped_file::sim::{SimSnapshot, SimStorage};
use mapped_file::Storage;
use proptest::prelude::*;
use queue_index::{Entry, IndexConfig, QueueIndex};

const DIR: &str = "/s/queueindex";
const QUEUES: u64 = 12;

#[derive(Debug, Clone)]
enum Op {
    /// Records for these queues, in order.
    Append(Vec<u64>),
    /// Records of no queue (the log moves on), then a seal.
    Skip(u64),
    Seal,
    /// Expire the runs up to the n-th boundary from the front (mod the count).
    Expire(usize),
    Reopen,
    /// A power cut after the last seal returned (what it sealed must survive).
    Crash(u64),
    /// A power cut at one of the storage states a seal went through.
    CrashInSeal(usize),
    /// A byte flipped in one run (mod the count), then a reopen.
    Damage(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec(0..QUEUES, 1..20).prop_map(Op::Append),
        1 => (1..5u64).prop_map(Op::Skip),
        3 => Just(Op::Seal),
        1 => (0..4usize).prop_map(Op::Expire),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(Op::Crash),
        1 => (0..64usize).prop_map(Op::CrashInSeal),
        1 => (0..8usize, 0..4096usize).prop_map(|(r, b)| Op::Damage(r, b)),
    ]
}

/// The log: every record of a queue, in order.
#[derive(Debug, Default)]
struct Log {
    records: Vec<(u64, u64, Entry)>,
    end: u64,
    /// Records below this offset are gone (the log's cleaning).
    min: u64,
    /// Queue ends as the log knows them (the next offset each takes).
    ends: BTreeMap<u64, u64>,
    /// Run boundaries the index sealed (candidates for expiry).
    sealed: Vec<u64>,
}

impl Log {
    fn put(&mut self, queue: u64) -> (u64, u64, Entry) {
        let offset = *self.ends.get(&queue).unwrap_or(&0);
        self.ends.insert(queue, offset + 1);
        let entry = Entry { log_offset: self.end, size: 100, tag: queue * 7 };
        self.end += 100;
        self.records.push((queue, offset, entry));
        (queue, offset, entry)
    }
}

fn open(storage: &dyn Storage, log: &Log) -> QueueIndex {
    open_reporting(storage, log).0
}

fn open_reporting(storage: &dyn Storage, log: &Log) -> (QueueIndex, queue_index::OpenReport) {
    // A table every few runs, so opens read tables and runs after them.
    let mut config = IndexConfig::default();
    config.table_every_rows = 16;
    let (index, report) = QueueIndex::open_with(storage, Path::new(DIR), config).unwrap();
    index.expire(storage, log.min).unwrap();
    // Dispatch again from where the index asks (not below the log's front).
    let from = report.replay_from.max(log.min);
    for &(queue, offset, entry) in log.records.iter().filter(|r| r.2.log_offset >= from) {
        index.append(queue, offset, entry).unwrap();
    }
    (index, report)
}

fn check(index: &QueueIndex, log: &Log, step: usize) {
    for queue in 0..QUEUES {
        let live: Vec<(u64, Entry)> =
            log.records.iter().filter(|r| r.0 == queue && r.2.log_offset >= log.min).map(|r| (r.1, r.2)).collect();
        let end = log.ends.get(&queue).copied();
        match (live.first(), index.extent(queue)) {
            (Some(&(first, _)), got) => {
                assert!(
                    got.is_some_and(|(min, e)| min <= first && Some(e) == end),
                    "step {step}: queue {queue} extent {got:?}, live from {first} to {end:?}"
                );
                let (min, _) = got.unwrap_or_default();
                // Entries below the first live record belong to runs not yet expired.
                let read = index.get(queue, first, usize::MAX);
                let want: Vec<Entry> = live.iter().map(|(_, e)| *e).collect();
                assert_eq!(read, want, "step {step}: queue {queue} from {first} (index min {min})");
                let mid = first + (live.len() as u64) / 2;
                assert_eq!(
                    index.get(queue, mid, 3),
                    want[(mid - first) as usize..].iter().take(3).copied().collect::<Vec<_>>()
                );
            }
            // Nothing of the queue left in the log: its end is known, unless
            // a run was lost whose records the log no longer holds (then it
            // may be lower, or the queue forgotten; no offset the log holds
            // can be given again, as the log holds none of it).
            (None, got) => assert!(
                got.is_none() || got.is_some_and(|(min, e)| min == e && end.is_some_and(|end| e <= end)),
                "step {step}: queue {queue} has no live record, extent {got:?}, end {end:?}"
            ),
        }
        if let Some(end) = end {
            assert!(index.get(queue, end, 10).is_empty());
        }
    }
}

fn run_files(sim: &SimStorage) -> Vec<String> {
    let mut names: Vec<String> = sim
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| mapped_file::parse_file_name(n).is_some())
        .collect();
    names.sort();
    names
}

fn run(ops: Vec<Op>) {
    let mut sim = SimStorage::new();
    let mut log = Log::default();
    let mut index = open(&sim, &log);
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append(queues) => {
                for queue in queues {
                    let (q, offset, entry) = log.put(queue);
                    index.append(q, offset, entry).unwrap();
                }
            }
            Op::Skip(records) => {
                log.end += records * 100;
                index.seal(&sim, log.end).unwrap();
                log.sealed.push(log.end);
            }
            Op::Seal => {
                index.seal(&sim, log.end).unwrap();
                log.sealed.push(log.end);
            }
            Op::Expire(n) => {
                let bounds: Vec<u64> =
                    log.sealed.iter().copied().filter(|&b| b > log.min && b <= index.sealed_to()).collect();
                if let Some(&to) = bounds.get(n % bounds.len().max(1)) {
                    index.expire(&sim, to).unwrap();
                    log.min = to;
                }
            }
            Op::Reopen => {
                drop(index);
                index = open(&sim, &log);
            }
            Op::Crash(seed) => {
                let sealed = index.sealed_to();
                drop(index);
                sim.crash_with_seed(seed);
                let (reopened, report) = open_reporting(&sim, &log);
                // Every run a returned seal wrote survives (those expired
                // since are gone with the log's front).
                assert!(
                    report.dropped.is_empty() && (report.replay_from >= sealed || sealed <= log.min),
                    "step {step}: a power cut after seals to {sealed} returned: {report:?}"
                );
                index = reopened;
            }
            Op::CrashInSeal(pick) => {
                let (tx, rx) = std::sync::mpsc::sync_channel::<SimSnapshot>(1024);
                sim.set_snapshot_sink(Some(tx));
                index.seal(&sim, log.end).unwrap();
                sim.set_snapshot_sink(None);
                log.sealed.push(log.end);
                let states: Vec<SimSnapshot> = rx.try_iter().collect();
                if let Some(state) = states.get(pick % states.len().max(1)) {
                    let mut bit = pick as u64;
                    let image = state.crash_image(|_| {
                        bit = bit.rotate_left(7) ^ 0x9e37;
                        bit & 1 == 1
                    });
                    drop(index);
                    sim = image;
                    index = open(&sim, &log);
                }
            }
            Op::Damage(which, at) => {
                let files = run_files(&sim);
                if !files.is_empty() {
                    let path = Path::new(DIR).join(&files[which % files.len()]);
                    let bytes = sim.file_bytes(&path).unwrap();
                    let at = at % bytes.len();
                    assert!(sim.patch_file(&path, at, &[bytes[at] ^ 0x5a]));
                    drop(index);
                    index = open(&sim, &log);
                }
            }
        }
        check(&index, &log, step);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_index_reads_back_as_the_log_says(ops in prop::collection::vec(op(), 1..60)) {
        run(ops);
    }
}

#[test]
fn a_new_queue_costs_no_file_and_runs_are_one_per_seal() {
    let sim = SimStorage::new();
    let log = Log::default();
    let index = open(&sim, &log);
    for queue in 0..10_000u64 {
        index.append(queue, 0, Entry { log_offset: queue * 100, size: 100, tag: 0 }).unwrap();
    }
    assert_eq!(run_files(&sim).len(), 0, "no file before a seal, however many queues");
    index.seal(&sim, 10_000 * 100).unwrap();
    assert_eq!(run_files(&sim).len(), 1);
    assert_eq!(index.queue_count(), 10_000);
    assert_eq!(index.get(4_321, 0, 5), vec![Entry { log_offset: 432_100, size: 100, tag: 0 }]);
}

#[test]
fn out_of_order_appends_and_seals_are_refused() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    index.append(1, 0, Entry { log_offset: 0, size: 100, tag: 0 }).unwrap();
    let gap = index.append(1, 2, Entry { log_offset: 100, size: 100, tag: 0 }).unwrap_err();
    assert!(gap.to_string().contains("next offset is 1"), "{gap}");
    assert!(index.append(2, 0, Entry { log_offset: 0, size: 100, tag: 0 }).is_err(), "before the last entry");
    assert!(index.seal(&sim, 50).is_err(), "a seal below the last record's end");
    index.seal(&sim, 100).unwrap();
    assert!(index.append(1, 1, Entry { log_offset: 50, size: 100, tag: 0 }).is_err(), "below the sealed range");
    index.append(1, 1, Entry { log_offset: 100, size: 100, tag: 0 }).unwrap();
}

#[test]
fn a_seal_below_the_newest_entries_keeps_them_active() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    // Queues 1 and 2 interleave over records of 100 bytes at 0, 100, ..., 500.
    for (k, queue) in [1u64, 2, 1, 2, 1, 2].into_iter().enumerate() {
        let offset = k as u64 / 2;
        index.append(queue, offset, Entry { log_offset: k as u64 * 100, size: 100, tag: queue }).unwrap();
    }
    assert!(index.seal(&sim, 250).is_err(), "through a record");
    assert_eq!(index.active_entries(), 6, "a refused seal changes nothing");
    index.seal(&sim, 300).unwrap();
    assert_eq!((index.sealed_to(), index.run_count(), index.active_entries()), (300, 1, 3));
    for queue in [1, 2] {
        let got: Vec<u64> = index.get(queue, 0, 10).iter().map(|e| e.log_offset).collect();
        let first = if queue == 1 { 0 } else { 100 };
        assert_eq!(got, vec![first, first + 200, first + 400], "queue {queue} reads across the run and the active one");
        assert_eq!(index.get(queue, 2, 10).len(), 1);
    }
    index.append(1, 3, Entry { log_offset: 600, size: 100, tag: 1 }).unwrap();
    drop(index);
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!(report.replay_from, 300, "what stayed active is dispatched again");
    assert_eq!(index.extent(1), Some((0, 2)));
    assert_eq!(index.extent(2), Some((0, 1)));
}

#[test]
fn a_forgotten_queue_stays_forgotten_after_an_open() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    for (k, queue) in [1u64, 2, 1, 2].into_iter().enumerate() {
        index.append(queue, k as u64 / 2, Entry { log_offset: k as u64 * 100, size: 100, tag: 0 }).unwrap();
    }
    index.seal(&sim, 200).unwrap();
    assert_eq!(index.forget(&sim, |q| q == 2).unwrap(), 1);
    assert_eq!((index.extent(2), index.get(2, 0, 10).len()), (None, 0));
    assert_eq!(index.active_entries(), 1, "queue 2's active entry went, queue 1's stayed");
    index.seal(&sim, 400).unwrap();
    drop(index);
    let (index, _) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!(index.extent(2), None, "not learnt again from the runs");
    assert_eq!(index.extent(1), Some((0, 2)));
}

#[test]
fn a_table_past_the_runs_kept_is_not_trusted() {
    let sim = SimStorage::new();
    let mut config = IndexConfig::default();
    config.table_every_rows = 1;
    let (index, _) = QueueIndex::open_with(&sim, Path::new(DIR), config).unwrap();
    index.append(1, 0, Entry { log_offset: 0, size: 100, tag: 0 }).unwrap();
    index.seal(&sim, 100).unwrap();
    index.append(1, 1, Entry { log_offset: 100, size: 100, tag: 0 }).unwrap();
    index.seal(&sim, 200).unwrap(); // the table now covers the log to 200
    drop(index);
    sim.remove(&Path::new(DIR).join(format!("{:020}", 100))).unwrap();
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert!(report.table_unused.is_some(), "{report:?}");
    assert_eq!(report.replay_from, 100, "the lost run's range is dispatched again");
    assert_eq!(index.extent(1), Some((0, 1)), "not the table's end: entry 1 is gone with its run");
}

#[test]
fn a_seal_that_fails_keeps_its_entries_readable_and_the_next_one_seals_them() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    for i in 0..10u64 {
        index.append(i % 3, i / 3, Entry { log_offset: i * 100, size: 100, tag: 0 }).unwrap();
    }
    sim.fail_all_syncs(true);
    assert!(index.seal(&sim, 1000).is_err());
    sim.fail_all_syncs(false);
    assert_eq!(index.sealed_to(), 0, "nothing sealed");
    assert!(run_files(&sim).is_empty(), "the half-written run is gone");
    index.append(1, 3, Entry { log_offset: 1000, size: 100, tag: 0 }).unwrap();
    assert_eq!(index.get(1, 0, 10).len(), 4, "the failed seal's entries, then the one after");
    index.seal(&sim, 1100).unwrap();
    drop(index);
    sim.crash_losing_unsynced();
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!((report.runs, report.replay_from), (1, 1100));
    assert_eq!(index.get(1, 0, 10).iter().map(|e| e.log_offset).collect::<Vec<_>>(), vec![100, 400, 700, 1000]);
}

#[test]
fn reads_during_a_seal_see_every_entry_and_appends_go_on() {
    // Syncs slowed so each seal's write is a wide window; a reader checks,
    // all along, that every queue reads back densely up to its end.
    let sim = SimStorage::new();
    sim.set_sync_delay(std::time::Duration::from_millis(2));
    let index = std::sync::Arc::new(open(&sim, &Log::default()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (index, stop) = (std::sync::Arc::clone(&index), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for queue in 0..4u64 {
                    let Some((min, end)) = index.extent(queue) else { continue };
                    let got = index.get(queue, min, usize::MAX);
                    assert!(got.len() as u64 >= end - min, "queue {queue}: {} of [{min}, {end})", got.len());
                    assert!(got.windows(2).all(|w| w[0].log_offset < w[1].log_offset));
                    assert!(got.iter().all(|e| e.tag == queue), "queue {queue} holds another's entry");
                    reads += 1;
                }
            }
            reads
        })
    };
    let mut ends = [0u64; 4];
    let mut log = 0u64;
    for i in 0..2_000u64 {
        let q = (i * 7 % 4) as usize;
        index.append(q as u64, ends[q], Entry { log_offset: log, size: 100, tag: q as u64 }).unwrap();
        ends[q] += 1;
        log += 100;
        if i % 100 == 99 {
            index.seal(&sim, log).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    assert_eq!(index.run_count(), 20);
}
