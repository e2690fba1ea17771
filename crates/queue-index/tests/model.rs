//! The index against a model (the log itself: every record's queue, queue
//! offset and entry, and the cuts): random appends over many queues, seals
//! (empty ones too), expiry at run boundaries, reopens, power cuts in the
//! middle of a seal, damaged run files, and — on half the queues, as raft
//! groups do — truncations and entries written again at new records, with
//! appends of different queues out of log order in half the runs; after each
//! step every queue reads back as the live records of the log say, at its
//! offsets. A reopen re-dispatches the log from `replay_from`, as an owner
//! does (an entry of a queue that is cut replacing what the queue holds from
//! its offset on, as a raft group's entry does).

use std::collections::BTreeMap;
use std::path::Path;

use mapped_file::sim::{SimSnapshot, SimStorage};
use mapped_file::Storage;
use proptest::prelude::*;
use queue_index::{Entry, IndexConfig, QueueIndex};

const DIR: &str = "/s/queueindex";
const QUEUES: u64 = 12;
/// Queues below this one are cut and written again (raft groups); the others
/// only grow (a message store's queues).
const CUT_QUEUES: u64 = 6;

#[derive(Debug, Clone)]
enum Op {
    /// Records for these queues, in order (indexed in an order shuffled by
    /// the seed, each queue's in order, when appends may come out of order).
    Append(Vec<u64>, u64),
    /// Records of no queue (the log moves on), then a seal.
    Skip(u64),
    Seal,
    /// A seal n records behind the log's end (what an owner whose appends
    /// are still coming seals: the entries and cuts past it stay active).
    SealBehind(u64),
    /// The log's front moved to the n-th run boundary from it (n even), or
    /// to the n-th record boundary past it (n odd: inside a run, as a log
    /// deleting segments moves it), mod the count; the runs below expire.
    Expire(usize),
    Reopen,
    /// A power cut after the last seal returned (what it sealed must survive).
    Crash(u64),
    /// A power cut at one of the storage states a seal went through.
    CrashInSeal(usize),
    /// A byte flipped in one run (mod the count), then a reopen.
    Damage(usize, usize),
    /// Queue q (mod CUT_QUEUES) cut back by n entries (mod its length + 1):
    /// a truncation record.
    Cut(u64, u64),
    /// Queue q's (mod CUT_QUEUES) last n entries (mod its length + 1)
    /// written again at new records (a raft group's rewrite).
    Rewrite(u64, u64),
    /// Queue q (mod CUT_QUEUES) emptied, its next entry n past its end (a
    /// raft group's purge past its last entry: a snapshot installed).
    Restart(u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop::collection::vec(0..QUEUES, 1..20), any::<u64>()).prop_map(|(q, s)| Op::Append(q, s)),
        1 => (1..5u64).prop_map(Op::Skip),
        3 => Just(Op::Seal),
        2 => (1..6u64).prop_map(Op::SealBehind),
        1 => (0..16usize).prop_map(Op::Expire),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(Op::Crash),
        1 => (0..64usize).prop_map(Op::CrashInSeal),
        1 => (0..8usize, 0..4096usize).prop_map(|(r, b)| Op::Damage(r, b)),
        2 => (0..CUT_QUEUES, 0..8u64).prop_map(|(q, n)| Op::Cut(q, n)),
        1 => (0..CUT_QUEUES, 0..8u64).prop_map(|(q, n)| Op::Rewrite(q, n)),
        1 => (0..CUT_QUEUES, 1..4u64).prop_map(|(q, n)| Op::Restart(q, n)),
    ]
}

/// A record of the log.
#[derive(Debug, Clone, Copy)]
enum Record {
    /// An entry of a queue at an offset.
    Put(u64, u64, Entry),
    /// Queue q's entries from `from` on are gone; at this log offset.
    Cut(u64, u64, u64),
}

impl Record {
    fn log_offset(&self) -> u64 {
        match *self {
            Record::Put(_, _, e) => e.log_offset,
            Record::Cut(_, _, at) => at,
        }
    }
}

/// The log: every record, in order.
#[derive(Debug, Default)]
struct Log {
    records: Vec<Record>,
    end: u64,
    /// Records below this offset are gone (the log's cleaning).
    min: u64,
    /// Queue ends as the log knows them (the next offset each takes).
    ends: BTreeMap<u64, u64>,
    /// Each queue's entries as the log says: the newest record of each offset.
    held: BTreeMap<(u64, u64), Entry>,
    /// Run boundaries the index sealed (candidates for expiry).
    sealed: Vec<u64>,
    /// Appends of different queues may reach the index out of log order.
    unordered: bool,
    /// A queue was cut (a truncation, rewrite or restart) at some point.
    cut_any: bool,
}

impl Log {
    fn put(&mut self, queue: u64) -> (u64, u64, Entry) {
        let offset = *self.ends.get(&queue).unwrap_or(&0);
        self.put_at(queue, offset)
    }

    fn put_at(&mut self, queue: u64, offset: u64) -> (u64, u64, Entry) {
        self.ends.insert(queue, offset + 1);
        let entry = Entry { log_offset: self.end, size: 100, tag: queue * 7 };
        self.end += 100;
        self.records.push(Record::Put(queue, offset, entry));
        self.held.insert((queue, offset), entry);
        (queue, offset, entry)
    }

    /// A truncation record cutting `queue` to `from`; returns its offset.
    fn cut(&mut self, queue: u64, from: u64) -> u64 {
        self.cut_any = true;
        let at = self.end;
        self.end += 100;
        self.records.push(Record::Cut(queue, from, at));
        self.ends.insert(queue, from);
        self.held.retain(|&(q, o), _| q != queue || o < from);
        at
    }
}

/// What an owner does with one record it dispatches (again).
fn dispatch(index: &QueueIndex, record: Record) {
    match record {
        Record::Put(queue, offset, entry) => {
            if queue < CUT_QUEUES {
                // An entry of a raft group replaces what it holds from its index on.
                index.truncate(queue, offset, entry.log_offset).unwrap();
            }
            index.append(queue, offset, entry).unwrap();
        }
        Record::Cut(queue, from, at) => {
            index.truncate(queue, from, at).unwrap();
        }
    }
}

fn open(storage: &dyn Storage, log: &Log) -> QueueIndex {
    open_reporting(storage, log).0
}

fn open_reporting(storage: &dyn Storage, log: &Log) -> (QueueIndex, queue_index::OpenReport) {
    // A table every few runs, so opens read tables and runs after them.
    let mut config = if log.unordered { IndexConfig::concurrent_appends() } else { IndexConfig::default() };
    config.table_every_rows = 16;
    let (index, report) = QueueIndex::open_with(storage, Path::new(DIR), config).unwrap();
    index.expire(storage, log.min).unwrap();
    if log.cut_any && !report.dropped.is_empty() && report.replay_from < log.min {
        // Records the index lost went with the log's front: cuts among them
        // are lost too, so an owner whose queues are cut indexes those
        // queues again from the log alone (their entries below its front
        // are gone either way).
        index.forget(storage, |q| q < CUT_QUEUES).unwrap();
    }
    // Dispatch again from where the index asks (not below the log's front).
    let from = report.replay_from.max(log.min);
    for &record in log.records.iter().filter(|r| r.log_offset() >= from) {
        dispatch(&index, record);
    }
    // Queues whose records all went with the log's front keep the ends the
    // table the index did not use held (what a message store does: no queue
    // offset given twice). Not where queues are cut: a cut's record may have
    // gone too, and a raft engine keeps its groups' state itself.
    if !log.cut_any {
        index.seed_ends(storage, report.table_ends.iter().copied()).unwrap();
    }
    (index, report)
}

fn check(index: &QueueIndex, log: &Log, step: usize) {
    for queue in 0..QUEUES {
        let live: Vec<(u64, Entry)> = log
            .held
            .range((queue, 0)..(queue + 1, 0))
            .filter(|(_, e)| e.log_offset >= log.min)
            .map(|(&(_, offset), &e)| (offset, e))
            .collect();
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
            // Nothing of the queue left in the log. A queue that was cut
            // (a raft group's) may be forgotten, or end elsewhere, once a run
            // was lost whose records the log no longer holds (the cut's
            // record went too): the raft engine keeps its groups' state
            // itself. Either way nothing is read.
            // In an index whose queues are never cut (a message store's), a
            // queue keeps its end exactly, whatever runs were lost: its
            // offsets are never given twice.
            (None, got) => assert!(
                if !log.cut_any {
                    got == end.map(|e| (e, e))
                } else {
                    got.is_none() || got.is_some_and(|(min, e)| min == e)
                },
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

fn run(ops: Vec<Op>, unordered: bool) {
    let mut sim = SimStorage::new();
    let mut log = Log { unordered, ..Log::default() };
    let mut index = open(&sim, &log);
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append(queues, seed) => {
                let mut put: Vec<(u64, u64, Entry)> = queues.into_iter().map(|q| log.put(q)).collect();
                if log.unordered {
                    // Each queue's entries in order, the queues interleaved
                    // another way than in the log.
                    let mut rng = seed | 1;
                    let mut key = |q: u64| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        (q.wrapping_mul(rng) >> 60, q)
                    };
                    let keys: BTreeMap<u64, (u64, u64)> = (0..QUEUES).map(|q| (q, key(q))).collect();
                    put.sort_by_key(|&(q, offset, _)| (keys[&q], offset));
                }
                for (q, offset, entry) in put {
                    index.append(q, offset, entry).unwrap();
                }
            }
            Op::Cut(queue, back) => {
                let end = log.ends.get(&queue).copied().unwrap_or(0);
                let from = end - back % (end + 1);
                if from < end {
                    let at = log.cut(queue, from);
                    index.truncate(queue, from, at).unwrap();
                }
            }
            Op::Restart(queue, ahead) => {
                let end = log.ends.get(&queue).copied().unwrap_or(0);
                if end > 0 {
                    let at = log.cut(queue, 0);
                    index.truncate(queue, 0, at).unwrap();
                    log.ends.insert(queue, end + ahead);
                }
            }
            Op::Rewrite(queue, back) => {
                let end = log.ends.get(&queue).copied().unwrap_or(0);
                let from = end - back % (end + 1);
                if from < end {
                    log.cut_any = true;
                    let copies: Vec<(u64, u64, Entry)> = (from..end).map(|o| log.put_at(queue, o)).collect();
                    index.truncate(queue, from, copies[0].2.log_offset).unwrap();
                    for (q, offset, entry) in copies {
                        index.append(q, offset, entry).unwrap();
                    }
                }
            }
            Op::Skip(records) => {
                log.end += records * 100;
                index.seal(&sim, log.end).unwrap();
                log.sealed.push(log.end);
            }
            Op::SealBehind(records) => {
                let to = log.end.saturating_sub(records * 100).max(index.sealed_to());
                index.seal(&sim, to).unwrap();
                log.sealed.push(to);
            }
            Op::Seal => {
                index.seal(&sim, log.end).unwrap();
                log.sealed.push(log.end);
            }
            Op::Expire(n) => {
                let bounds: Vec<u64> = if n % 2 == 0 {
                    log.sealed.iter().copied().filter(|&b| b > log.min && b <= index.sealed_to()).collect()
                } else {
                    (log.min / 100 + 1..=index.sealed_to() / 100).map(|k| k * 100).collect()
                };
                if let Some(&to) = bounds.get(n / 2 % bounds.len().max(1)) {
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
    // 64 cases in the test command; `cargo xtask proptest --cases N` asks for more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn prop_the_index_reads_back_as_the_log_says(
        ops in prop::collection::vec(op(), 1..60),
        unordered in any::<bool>(),
        cuts in any::<bool>(),
    ) {
        // Half the runs without cuts: a message store's index.
        let ops = ops.into_iter().filter(|op| cuts || !matches!(op, Op::Cut(..) | Op::Rewrite(..) | Op::Restart(..)));
        run(ops.collect(), unordered);
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

#[test]
fn a_cut_queue_reads_what_was_written_since_across_seals_and_reopens() {
    let sim = SimStorage::new();
    let (index, _) = QueueIndex::open_with(&sim, Path::new(DIR), IndexConfig::concurrent_appends()).unwrap();
    let entry = |at: u64| Entry { log_offset: at, size: 100, tag: 0 };
    for i in 0..5u64 {
        index.append(1, i, entry(i * 100)).unwrap();
    }
    index.seal(&sim, 500).unwrap();
    // A truncation record at 500 cuts offsets 3 and 4; new ones at 600, 700.
    assert!(index.truncate(1, 3, 500).unwrap());
    assert_eq!(index.extent(1), Some((0, 3)));
    assert!(index.get(1, 3, 10).is_empty(), "cut entries are not read");
    index.append(1, 3, entry(600)).unwrap();
    index.append(1, 4, entry(700)).unwrap();
    let offsets = |index: &QueueIndex| index.get(1, 0, 10).iter().map(|e| e.log_offset).collect::<Vec<_>>();
    assert_eq!(offsets(&index), vec![0, 100, 200, 600, 700]);
    index.seal(&sim, 800).unwrap();
    assert_eq!(offsets(&index), vec![0, 100, 200, 600, 700], "the newer run's entries, not the older run's");
    drop(index);
    let (index, report) = QueueIndex::open_with(&sim, Path::new(DIR), IndexConfig::concurrent_appends()).unwrap();
    assert_eq!(report.replay_from, 800);
    assert_eq!((index.extent(1), offsets(&index)), (Some((0, 5)), vec![0, 100, 200, 600, 700]));
    // Emptied, then going on past the end (a raft group's purge past its
    // last entry): nothing below the new start is the queue's any more.
    assert!(index.truncate(1, 0, 800).unwrap());
    index.append(1, 9, entry(900)).unwrap();
    index.seal(&sim, 1000).unwrap();
    drop(index);
    let (index, _) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!(index.extent(1), Some((9, 10)));
    assert_eq!(index.get(1, 9, 10), vec![entry(900)]);
    // A cut by a record in a sealed range is refused.
    let err = index.truncate(1, 9, 999).unwrap_err();
    assert!(err.to_string().contains("below the sealed range's end 1000"), "{err}");
}

#[test]
fn appends_out_of_log_order_need_the_concurrent_configuration() {
    let sim = SimStorage::new();
    let entry = |at: u64| Entry { log_offset: at, size: 100, tag: 0 };
    let index = open(&sim, &Log::default());
    index.append(1, 0, entry(100)).unwrap();
    assert!(index.append(2, 0, entry(0)).is_err(), "in log order by default");
    drop(index);
    let (index, _) = QueueIndex::open_with(&sim, Path::new("/s/other"), IndexConfig::concurrent_appends()).unwrap();
    index.append(1, 0, entry(100)).unwrap();
    index.append(2, 0, entry(0)).unwrap(); // another writer's record, indexed later
    assert!(index.append(1, 1, entry(50)).is_err(), "a queue's own entries stay in order");
    index.seal(&sim, 200).unwrap();
    assert_eq!((index.get(1, 0, 5), index.get(2, 0, 5)), (vec![entry(100)], vec![entry(0)]));
}

#[test]
fn a_seal_stops_below_entries_a_later_record_cut() {
    let sim = SimStorage::new();
    let (index, _) = QueueIndex::open_with(&sim, Path::new(DIR), IndexConfig::concurrent_appends()).unwrap();
    let entry = |at: u64| Entry { log_offset: at, size: 100, tag: 0 };
    for i in 0..4u64 {
        index.append(1, i, entry(i * 100)).unwrap();
    }
    // The record at 400 cuts offsets 2 and 3 (at 200 and 300). A seal to
    // 300 would write offset 2 without the cut that removed it, while
    // dispatching from 300 meets offset 3 after it: it stops at 200.
    index.truncate(1, 2, 400).unwrap();
    index.seal(&sim, 300).unwrap();
    assert_eq!(index.sealed_to(), 200);
    index.seal(&sim, 500).unwrap();
    assert_eq!(index.sealed_to(), 500, "past the cut, it seals all");
}

#[test]
fn room_reserved_for_new_queues_takes_them_without_growing_a_table() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    index.reserve(10_000);
    let before = index.heap_bytes();
    for queue in 0..10_000u64 {
        index.append(queue, 0, Entry { log_offset: queue * 100, size: 100, tag: 0 }).unwrap();
    }
    // Each queue's entry vector is new (room for one entry); the tables of
    // extents and of the active run's rows are as they were.
    let vectors = 10_000 * std::mem::size_of::<Entry>();
    assert_eq!(index.heap_bytes(), before + vectors, "a table grew (rehashing every queue on an append)");
    // A seal keeps room for as many rows as the run had.
    index.seal(&sim, 10_000 * 100).unwrap();
    let sealed = index.heap_bytes();
    for queue in 0..10_000u64 {
        index.append(queue, 1, Entry { log_offset: 1_000_000 + queue * 100, size: 100, tag: 0 }).unwrap();
    }
    assert_eq!(index.heap_bytes(), sealed + vectors, "the next run's table grew");
}

/// The log's front moves past every entry of queue 1 while one run, which
/// also holds later entries of queue 2, spans it (so no run expires): the
/// queue table is written then, so that losing that run later (a damaged
/// file deleted) still leaves queue 1's end known, not a queue that starts
/// again at 0 and gives acknowledged offsets twice.
#[test]
fn a_front_past_a_queues_entries_writes_the_table_though_no_run_expires() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    for k in 0..4u64 {
        index.append(1, k, Entry { log_offset: k * 100, size: 100, tag: 0 }).unwrap();
    }
    index.append(2, 0, Entry { log_offset: 400, size: 100, tag: 0 }).unwrap();
    index.seal(&sim, 500).unwrap(); // one run, [0, 500); too few rows for a table
    assert_eq!(index.expire(&sim, 400).unwrap(), 0, "the run holds queue 2's entry: it stays");
    assert_eq!(index.extent(1), Some((4, 4)), "queue 1 has nothing live, and ends at 4");
    drop(index);
    for run in run_files(&sim) {
        sim.remove(&Path::new(DIR).join(run)).unwrap();
    }
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!(index.extent(1), Some((4, 4)), "its end from the table ({report:?})");
    assert!(index.covers_from() > 400, "the lost run's range is not covered: an owner rebuilds");
}

#[test]
fn the_last_offset_is_refused_as_an_entry_never_an_overflow() {
    // A queue's end would pass u64::MAX: an error, whether the queue is new
    // or holds entries, and the index unchanged.
    let sim = SimStorage::new();
    let index = QueueIndex::open_with(&sim, Path::new(DIR), IndexConfig::default()).unwrap().0;
    let entry = |log_offset| Entry { log_offset, size: 16, tag: 0 };
    assert!(index.append(0, u64::MAX, entry(0)).is_err(), "a new queue");
    index.append(1, 0, entry(16)).unwrap();
    assert!(index.append(1, u64::MAX, entry(32)).is_err(), "after an entry");
    assert_eq!((index.extent(0), index.extent(1)), (None, Some((0, 1))));
}

/// Every file name in the index's directory, sorted.
fn all_files(storage: &dyn Storage) -> Vec<String> {
    let mut names: Vec<String> = storage.list(Path::new(DIR)).unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    names
}

/// A run appears under its name only whole and synced: a reader beside the
/// index (a tool copying the files) at any step of a seal, and an open after
/// a power cut at any step, finds each run whole or not at all, never a
/// file created and not yet written (dropped as damaged). The temporary
/// file a power cut leaves is deleted by the open, not taken for a run.
#[test]
fn a_run_appears_under_its_name_only_whole() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    for i in 0..30u64 {
        index.append(i % 3, i / 3, Entry { log_offset: i * 100, size: 100, tag: 0 }).unwrap();
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<SimSnapshot>(1024);
    sim.set_snapshot_sink(Some(tx));
    index.seal(&sim, 3000).unwrap();
    sim.set_snapshot_sink(None);
    let states: Vec<SimSnapshot> = rx.try_iter().collect();
    assert!(!states.is_empty());
    for state in &states {
        // What a reader sees now: every byte written so far.
        let seen = state.crash_image(|_| true);
        let (_, report) = QueueIndex::open_read_only(&seen, Path::new(DIR)).unwrap();
        assert!(report.dropped.is_empty(), "event {}: a reader sees {:?}", state.event, report.dropped);
        // A power cut: only what was synced.
        let cut = state.crash_image(|_| false);
        let (index, report) = QueueIndex::open(&cut, Path::new(DIR)).unwrap();
        assert!(
            report.dropped.is_empty(),
            "event {}: an open after a power cut drops {:?}",
            state.event,
            report.dropped
        );
        assert!(report.runs <= 1 && index.run_count() == report.runs);
        assert!(
            all_files(&cut).iter().all(|n| !n.ends_with(".tmp")),
            "event {}: a temporary file left: {:?}",
            state.event,
            all_files(&cut)
        );
        if report.runs == 1 {
            assert_eq!(index.extent(0), Some((0, 10)), "event {}", state.event);
        }
    }
    drop(index);
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!((report.runs, index.extent(2)), (1, Some((0, 10))));
}

/// A temporary file left by a crash between a run's write and its rename
/// is deleted at the open, and never taken for a run, however whole it is.
#[test]
fn an_open_deletes_a_leftover_temporary_run_and_never_takes_it() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    index.append(1, 0, Entry { log_offset: 0, size: 100, tag: 0 }).unwrap();
    index.seal(&sim, 100).unwrap();
    drop(index);
    let run = Path::new(DIR).join(format!("{:020}", 0));
    let bytes = sim.file_bytes(&run).unwrap();
    sim.remove(&run).unwrap();
    let temporary = Path::new(DIR).join(format!("{:020}.tmp", 0));
    sim.write_file(&temporary, &bytes);
    let (read_only, report) = QueueIndex::open_read_only(&sim, Path::new(DIR)).unwrap();
    assert_eq!((report.runs, read_only.extent(1)), (0, None), "a temporary file is no run");
    assert!(sim.file_bytes(&temporary).is_some(), "a read-only open changes nothing");
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!((report.runs, report.replay_from, index.extent(1)), (0, 0, None), "a temporary file is no run");
    assert!(all_files(&sim).is_empty(), "the temporary file is deleted: {:?}", all_files(&sim));
}

/// Runs an expiry could not delete (a removal failing) stay the index's to
/// delete: the next expiry deletes them first, in log order, so that the
/// files left never hold a gap (which an open takes for a lost run, dropping
/// every later one) and none stays on disk for good.
#[test]
fn runs_an_expiry_could_not_delete_are_deleted_by_the_next_one() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    for k in 0..4u64 {
        index.append(1, k, Entry { log_offset: k * 100, size: 100, tag: 0 }).unwrap();
        index.seal(&sim, (k + 1) * 100).unwrap();
    }
    sim.fail_removes(true);
    assert!(index.expire(&sim, 200).is_err(), "the deletion failed");
    sim.fail_removes(false);
    assert_eq!(index.extent(1), Some((2, 4)), "the expired runs are out of the extents");
    assert_eq!(run_files(&sim).len(), 4, "and still on disk");
    assert_eq!(index.expire(&sim, 300).unwrap(), 1);
    assert_eq!(run_files(&sim), vec![format!("{:020}", 300)], "the runs left over are deleted first");
    drop(index);
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert!(report.dropped.is_empty(), "no gap: {report:?}");
    assert_eq!(index.extent(1), Some((3, 4)));
}

/// Seeding ends changes only the queues it seeds: a queue cut back to
/// offset 0 (known, with end 0) stays known, whatever ends are given, and
/// an end of 0 makes no queue known.
#[test]
fn seeding_ends_forgets_no_queue_whose_end_is_0() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    index.append(1, 0, Entry { log_offset: 0, size: 100, tag: 0 }).unwrap();
    assert!(index.truncate(1, 0, 100).unwrap());
    assert_eq!(index.extent(1), Some((0, 0)));
    assert_eq!(index.seed_ends(&sim, []).unwrap(), 0);
    assert_eq!(index.extent(1), Some((0, 0)), "the cut queue is still known");
    assert_eq!(index.seed_ends(&sim, [(2, 0), (3, 5)]).unwrap(), 1);
    assert_eq!((index.extent(1), index.extent(2), index.extent(3)), (Some((0, 0)), None, Some((5, 5))));
    assert_eq!(index.queue_count(), 2);
}

/// The ends of a queue table an open does not use are the only record of
/// the end of a queue whose entries all expired: they are written to the
/// file `ends` before the table goes, reported by every open until
/// `seed_ends` has written them into a new table (an owner that crashes
/// before it finds them again), and their file is deleted then.
#[test]
fn the_ends_of_an_unused_table_stay_on_disk_until_they_are_seeded() {
    let sim = SimStorage::new();
    let mut config = IndexConfig::default();
    config.table_every_rows = 1;
    let (index, _) = QueueIndex::open_with(&sim, Path::new(DIR), config).unwrap();
    index.append(1, 0, Entry { log_offset: 0, size: 100, tag: 0 }).unwrap();
    index.append(2, 0, Entry { log_offset: 100, size: 100, tag: 0 }).unwrap();
    index.seal(&sim, 200).unwrap();
    index.append(2, 1, Entry { log_offset: 200, size: 100, tag: 0 }).unwrap();
    index.seal(&sim, 300).unwrap();
    assert_eq!(index.expire(&sim, 200).unwrap(), 1);
    assert_eq!(index.extent(1), Some((1, 1)), "queue 1's entries all expired");
    drop(index);
    let run = Path::new(DIR).join(format!("{:020}", 200));
    let bytes = sim.file_bytes(&run).unwrap();
    assert!(sim.patch_file(&run, bytes.len() - 1, &[bytes[bytes.len() - 1] ^ 1]));
    let ends_file = Path::new(DIR).join("ends");
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert!(report.table_unused.is_some() && report.dropped.len() == 1, "{report:?}");
    assert_eq!(report.table_ends, vec![(1, 1), (2, 2)]);
    assert!(sim.file_bytes(&Path::new(DIR).join("table")).is_none(), "the table not used is deleted");
    assert!(sim.file_bytes(&ends_file).is_some(), "its ends are kept");
    // A crash before the owner dispatched again and seeded the ends.
    drop(index);
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!(report.table_ends, vec![(1, 1), (2, 2)], "the ends are reported again");
    index.append(2, 1, Entry { log_offset: 200, size: 100, tag: 0 }).unwrap();
    assert_eq!(index.seed_ends(&sim, []).unwrap(), 1, "queue 1: the kept ends are seeded");
    assert_eq!((index.extent(1), index.extent(2)), (Some((1, 1)), Some((1, 2))));
    assert!(sim.file_bytes(&ends_file).is_none(), "seeded: the file goes");
    drop(index);
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert!(report.table_ends.is_empty() && report.table_unused.is_none(), "{report:?}");
    assert_eq!(index.extent(1), Some((1, 1)), "queue 1's end from the new table");
}

/// An index deleted for a rebuild keeps the ends it is given on disk, for
/// the next open to report, and nothing else.
#[test]
fn an_index_removed_for_a_rebuild_keeps_the_ends_given() {
    let sim = SimStorage::new();
    let index = open(&sim, &Log::default());
    index.append(1, 0, Entry { log_offset: 0, size: 100, tag: 0 }).unwrap();
    index.seal(&sim, 100).unwrap();
    drop(index);
    assert!(QueueIndex::remove_keeping_ends(&sim, Path::new(DIR), [(1, 1), (3, 7), (3, 5)]).unwrap() >= 1);
    assert_eq!(all_files(&sim), vec!["ends".to_string()]);
    let (index, report) = QueueIndex::open(&sim, Path::new(DIR)).unwrap();
    assert_eq!((report.runs, report.table_ends.clone()), (0, vec![(1, 1), (3, 7)]));
    assert_eq!(index.extent(1), None, "not seeded before the owner dispatched again");
    drop(index);
    QueueIndex::remove_keeping_ends(&sim, Path::new(DIR), []).unwrap();
    assert!(all_files(&sim).is_empty(), "no ends given: none kept");
}
