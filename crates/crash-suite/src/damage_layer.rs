//! Layer 2g: the message store's derived data damaged at random. A store of
//! four queues (keys, a consumer group's offsets, several queue-index runs and
//! key-index files) is built on `SimStorage` and closed, or crashed; then,
//! case after case, a copy of it gets one to three random damages to what the
//! log does not hold itself (queue-index runs with bytes flipped, zeroed or
//! copied from another run; runs cut, grown or deleted; the queue table
//! garbled, cut or deleted; all of `queueindex/` deleted; the dispatch
//! checkpoint garbled, cut or deleted; the topic registry garbled or deleted;
//! key-index files damaged or deleted), and is opened as a message store and
//! checked:
//!
//! - it opens;
//! - every queue reads back densely, each message at its offset;
//! - every acknowledged message is there, at its offset, with its body
//!   (unless the log's cleaning deleted it: one base in three moves the log's
//!   front, so queues whose messages all went are known by their ends alone);
//! - no committed consumer offset went back;
//! - every acknowledged key is found (after a rebuild of the index where the
//!   damage was inside a sealed index file's items, which only a full check,
//!   `commitlog verify`, sees: the open reads the index's footers, not its items);
//! - a new put on each queue takes the queue's end, past every acknowledged
//!   offset: no offset the log holds is given twice.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use commitlog::{CommitLogConfig, FlushDiskType};
use mapped_file::{SimStorage, Storage};
use message_store::{GetRequest, Message, MessageStore, MessageStoreConfig};

use crate::common::*;

const ROOT: &str = "/sim-damage";
const QUEUES: u32 = 4;
const TOPIC: &str = "t";

/// Tally of one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Damaged stores opened.
    pub cases: u64,
    /// Damages applied.
    pub damages: u64,
    /// Messages acknowledged in the base store.
    pub acked: u64,
    /// Cases where the store said it repaired something.
    pub repaired: u64,
    /// Acknowledged messages not found at their offset.
    pub lost: u64,
    /// Queues that do not read back densely, or messages at the wrong offset.
    pub garbage: u64,
    /// Committed consumer offsets that went back.
    pub offsets_lowered: u64,
    /// Acknowledged keys not found.
    pub keys_lost: u64,
    /// New puts that took an offset the log held.
    pub reused: u64,
    /// Stores that did not open.
    pub open_errors: u64,
}

impl Tally {
    /// What must be zero.
    pub fn violations(&self) -> u64 {
        self.lost + self.garbage + self.offsets_lowered + self.keys_lost + self.reused + self.open_errors
    }

    /// Adds another run's tally.
    pub fn add(&mut self, o: Tally) {
        self.cases += o.cases;
        self.damages += o.damages;
        self.acked += o.acked;
        self.repaired += o.repaired;
        self.lost += o.lost;
        self.garbage += o.garbage;
        self.offsets_lowered += o.offsets_lowered;
        self.keys_lost += o.keys_lost;
        self.reused += o.reused;
        self.open_errors += o.open_errors;
    }
}

fn store_config() -> MessageStoreConfig {
    let log = CommitLogConfig { checkpoint_interval_ms: 1, ..config(16 * 1024, FlushDiskType::SyncFlush) };
    let mut config = MessageStoreConfig::new(log);
    config.flush_interval_consume_queue_ms = 3_600_000;
    config.flush_consume_queue_thorough_interval_ms = 3_600_000;
    // Small index files: several sealed ones and a live one.
    config.index = message_store::IndexConfig::new(16, 32);
    config.consumer_offsets_journal_size = 64 << 10;
    config
}

/// The base store: what was acknowledged, and the consumer's committed offsets.
struct Base {
    image: mapped_file::sim::SimSnapshot,
    /// (queue, offset, body, key, log offset)
    acked: Vec<(u32, u64, Vec<u8>, String, u64)>,
    committed: Vec<(u32, u64)>,
}

fn open(storage: SimStorage) -> Result<MessageStore, message_store::StoreError> {
    let storage: Arc<dyn Storage> = Arc::new(storage);
    MessageStore::open_with_storage(ROOT, store_config(), storage)
}

/// Puts messages on the queues at random, the consumer committing offsets as
/// it goes; closed cleanly, or (`crash`) snapshotted as a crash leaves it
/// (everything acknowledged is durable; the rest is kept or lost at random).
fn base(rng: &mut Rng, crash: bool) -> Base {
    let sim = sim_storage(write_without_mmap(rng.next()));
    let store = open(sim.clone()).expect("open the base store");
    store.create_topic(TOPIC, QUEUES).expect("topic");
    let messages = rng.range(60, 1100);
    let mut acked = Vec::new();
    let mut committed = Vec::new();
    for seq in 0..messages {
        // Runs on one queue, so that queues span index runs unevenly.
        let queue =
            if rng.next().is_multiple_of(4) { rng.range(0, u64::from(QUEUES)) as u32 } else { (seq / 37 % 4) as u32 };
        let b = body(queue, seq, rng.range(16, 200) as usize);
        let key = format!("k{seq}");
        let put = store.put_message(&Message::new(TOPIC, queue, b.clone()).with_key(key.clone())).expect("put");
        put.durability.wait().expect("durable");
        acked.push((queue, put.queue_offset, b, key, put.log_offset));
        if rng.next().is_multiple_of(16) {
            let offset = acked.iter().filter(|a| a.0 == queue).count() as u64;
            if store
                .wait_for(TOPIC, queue, offset - 1, std::time::Duration::from_secs(10))
                .is_ok_and(message_store::Waited::arrived)
                && store.commit_offset("g", TOPIC, queue, offset).is_ok()
            {
                committed.push((queue, offset));
            }
        }
        if rng.next().is_multiple_of(200) {
            store.dispatch_now().expect("dispatch");
        }
        if rng.next().is_multiple_of(90) {
            // A queue-index run sealed here: several runs, of uneven lengths.
            store.dispatch_now().expect("dispatch");
            store.seal_index().expect("seal");
        }
    }
    for queue in 0..QUEUES {
        let n = acked.iter().filter(|a| a.0 == queue).count() as u64;
        if n > 0 {
            assert!(store
                .wait_for(TOPIC, queue, n - 1, std::time::Duration::from_secs(10))
                .is_ok_and(message_store::Waited::arrived));
        }
    }
    if rng.next().is_multiple_of(3) {
        // The log's cleaning moves its front (the queue index sealed first:
        // the log keeps the segments of unsealed entries): queues whose
        // messages all go are known by their ends alone, which every damage
        // must leave them.
        store.dispatch_now().expect("dispatch");
        store.seal_index().expect("seal");
        let cut = rng.range(0, store.log().max_offset());
        store.log().delete_segments_before(cut, usize::MAX).expect("delete segments");
    }
    let image = if crash {
        let snapshot = sim.snapshot();
        drop(store.shutdown());
        snapshot
    } else {
        store.shutdown().expect("shutdown");
        sim.snapshot()
    };
    Base { image, acked, committed }
}

/// The files of a directory of `storage`, with their paths.
fn files_under(storage: &SimStorage, dir: &Path) -> Vec<PathBuf> {
    storage.list(dir).unwrap_or_default().into_iter().map(|f| dir.join(f.name)).collect()
}

/// What the damages did: the index's one case the open cannot see, and what
/// each was (printed with `CRASH_DEBUG` set when a case fails).
#[derive(Default)]
struct Damaged {
    /// An item inside a sealed index file.
    sealed_index_items: bool,
    what: Vec<String>,
}

/// One random damage to the derived data of `storage`.
fn damage(rng: &mut Rng, storage: &SimStorage, done: &mut Damaged) {
    let root = Path::new(ROOT);
    let index_dir = root.join("queueindex");
    let runs = {
        let mut files: Vec<PathBuf> =
            files_under(storage, &index_dir).into_iter().filter(|p| !p.ends_with("table")).collect();
        files.sort();
        files
    };
    let index_files = {
        let mut files = files_under(storage, &root.join("index"));
        files.sort();
        files
    };
    match rng.range(0, 14) {
        // A run's bytes: flipped, zeroed, or another run's.
        0..=4 if !runs.is_empty() => {
            let file = &runs[rng.range(0, runs.len() as u64) as usize];
            let Some(bytes) = storage.file_bytes(file).filter(|b| !b.is_empty()) else { return };
            let at = rng.range(0, bytes.len() as u64) as usize;
            let new: Vec<u8> = match rng.range(0, 3) {
                0 => vec![bytes[at] ^ (1 << rng.range(0, 8))],
                1 => vec![0; rng.range(1, 64) as usize],
                _ => {
                    let other = &runs[rng.range(0, runs.len() as u64) as usize];
                    let other = storage.file_bytes(other).unwrap_or_default();
                    other.get(at..).unwrap_or_default().iter().take(64).copied().collect()
                }
            };
            storage.patch_file(file, at, &new);
            done.what.push(format!("{} at {at} := {new:02x?}", file.display()));
        }
        // A run cut, grown, or deleted.
        5 | 6 if !runs.is_empty() => {
            let file = &runs[rng.range(0, runs.len() as u64) as usize];
            let Some(mut bytes) = storage.file_bytes(file) else { return };
            done.what.push(format!("{} cut, grown or deleted", file.display()));
            match rng.range(0, 3) {
                0 => {
                    bytes.truncate(rng.range(0, bytes.len() as u64) as usize);
                    storage.write_file(file, &bytes);
                }
                1 => {
                    bytes.extend(std::iter::repeat_n(0u8, rng.range(1, 5000) as usize));
                    storage.write_file(file, &bytes);
                }
                _ => {
                    let _ = storage.remove(file);
                }
            }
        }
        // The queue table: a byte flipped, cut, or deleted.
        7 => {
            let path = index_dir.join("table");
            done.what.push("the queue table damaged".into());
            match (rng.range(0, 3), storage.file_bytes(&path)) {
                (0, Some(mut bytes)) if !bytes.is_empty() => {
                    let at = rng.range(0, bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << rng.range(0, 8);
                    storage.write_file(&path, &bytes);
                }
                (1, Some(bytes)) => storage.write_file(&path, &bytes[..rng.range(0, bytes.len() as u64) as usize]),
                _ => {
                    let _ = storage.remove(&path);
                }
            }
        }
        // The whole queue index.
        8 if rng.next().is_multiple_of(3) => {
            done.what.push("every queue-index file deleted".into());
            for file in files_under(storage, &index_dir) {
                let _ = storage.remove(&file);
            }
        }
        // The dispatch checkpoint.
        9 => {
            done.what.push("the dispatch checkpoint damaged".into());
            let path = root.join("config/dispatch");
            match (rng.range(0, 3), storage.file_bytes(&path)) {
                (0, Some(mut bytes)) if !bytes.is_empty() => {
                    let at = rng.range(0, bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << rng.range(0, 8);
                    storage.write_file(&path, &bytes);
                }
                (1, Some(bytes)) => storage.write_file(&path, &bytes[..rng.range(0, bytes.len() as u64) as usize]),
                _ => {
                    let _ = storage.remove(&path);
                }
            }
        }
        // The topic registry.
        10 => {
            done.what.push("the topic registry damaged".into());
            let path = root.join("config/topics");
            if rng.next().is_multiple_of(2) {
                let _ = storage.remove(&path);
            } else {
                storage.write_file(&path, b"# not the registry\nt x\n");
            }
        }
        // The index: a header, an item, a footer; a file cut or deleted.
        _ if !index_files.is_empty() => {
            let k = rng.range(0, index_files.len() as u64) as usize;
            let file = &index_files[k];
            let Some(bytes) = storage.file_bytes(file).filter(|b| b.len() >= 64 + 28 * 32) else { return };
            let sealed = k + 1 < index_files.len();
            let how = rng.range(0, 5);
            done.what.push(format!("index file {k} of {} (sealed: {sealed}) damaged: {how}", index_files.len()));
            match how {
                0 => {
                    storage.patch_file(file, rng.range(0, 16) as usize, &[rng.next() as u8 | 1]);
                }
                1 => {
                    // Items start at 64, 28 bytes each.
                    let item = rng.range(0, 32) as usize;
                    storage.patch_file(file, 64 + 28 * item, &[0u8; 28]);
                    done.sealed_index_items |= sealed;
                }
                2 => {
                    storage.patch_file(file, bytes.len() - 64 + rng.range(0, 52) as usize, &[0x77]);
                }
                3 => storage.write_file(file, &bytes[..rng.range(0, bytes.len() as u64) as usize]),
                _ => {
                    let _ = storage.remove(file);
                }
            }
        }
        _ => {}
    }
}

/// Opens a damaged copy and checks it.
fn check(base: &Base, storage: SimStorage, done: &Damaged) -> Tally {
    let mut tally = Tally { cases: 1, ..Tally::default() };
    let store = match open(storage) {
        Ok(store) => store,
        Err(err) => {
            eprintln!("damage: the store did not open: {err}");
            tally.open_errors += 1;
            return tally;
        }
    };
    let report = store.open_report();
    let front = store.log().min_offset();
    for queue in 0..QUEUES {
        let Ok(std::ops::Range { start: min, end: max }) = store.queue_range(TOPIC, queue) else {
            tally.garbage += 1;
            continue;
        };
        let mut found = Vec::new();
        let mut offset = min;
        while offset < max {
            match store.get_messages(&GetRequest::new(TOPIC, queue, offset).max_count(64).max_bytes(u64::MAX)) {
                Ok(got) if !got.messages.is_empty() => {
                    for m in got.messages {
                        if m.queue_offset != offset || !is_self_consistent(&m.body) {
                            tally.garbage += 1;
                        }
                        found.push((m.queue_offset, m.body.to_vec()));
                        offset = m.queue_offset + 1;
                    }
                }
                _ => {
                    tally.garbage += 1;
                    break;
                }
            }
        }
        let acked: Vec<_> = base.acked.iter().filter(|a| a.0 == queue).collect();
        // Messages the log's cleaning deleted are not looked for.
        for (_, o, b, _, _) in acked.iter().filter(|a| a.4 >= front) {
            if !found.iter().any(|(fo, fb)| fo == o && fb == b) {
                tally.lost += 1;
            }
        }
        let committed = base.committed.iter().filter(|c| c.0 == queue).map(|c| c.1).max();
        if committed.is_some_and(|c| store.committed_offset("g", TOPIC, queue).unwrap().is_none_or(|now| now < c)) {
            tally.offsets_lowered += 1;
        }
        let held = acked.iter().map(|a| a.1 + 1).max().unwrap_or(0);
        match store.put_message(&Message::new(TOPIC, queue, body(9, 0, 20))) {
            Ok(put) if put.queue_offset == max && put.queue_offset >= held => {}
            _ => tally.reused += 1,
        }
    }
    let missing_keys = |store: &MessageStore| {
        base.acked
            .iter()
            .filter(|(_, _, b, key, at)| {
                *at >= front
                    && !store
                        .query_by_key(TOPIC, key, 0, u64::MAX, 4)
                        .is_ok_and(|f| f.iter().any(|m| m.body[..] == b[..]))
            })
            .count() as u64
    };
    let mut keys_lost = missing_keys(&store);
    if keys_lost > 0 && done.sealed_index_items {
        // Only a full check sees inside a sealed file; `recover` rebuilds then.
        if store.rebuild_index().is_ok() {
            keys_lost = missing_keys(&store);
        }
    }
    tally.keys_lost += keys_lost;
    if report.rebuilt_all.is_some()
        || report.index_rebuilt
        || report.topics_recovered
        || !report.index_runs_dropped.is_empty()
    {
        tally.repaired += 1;
    }
    let _ = store.shutdown();
    tally
}

/// One base store under `seed` and `cases` damaged copies of it;
/// `stop_at_first` ends at the first violation.
pub fn run_seed(seed: u64, cases: usize, stop_at_first: bool) -> Tally {
    let mut rng = Rng(seed);
    let crashed = seed % 3 == 2;
    let base = base(&mut rng, crashed);
    let mut tally = Tally { acked: base.acked.len() as u64, ..Tally::default() };
    for _ in 0..cases {
        // A crashed base keeps each unsynced sector or not, case by case.
        let image = base.image.crash_image(|_| !crashed || rng.next() & 1 == 1);
        let mut done = Damaged::default();
        let damages = rng.range(1, 4);
        for _ in 0..damages {
            damage(&mut rng, &image, &mut done);
        }
        tally.damages += damages;
        let case = check(&base, image, &done);
        if case.violations() > 0 && std::env::var_os("CRASH_DEBUG").is_some() {
            eprintln!("message-damage seed {seed}: {case:?} after {:?}", done.what);
        }
        tally.add(case);
        if stop_at_first && tally.violations() > 0 {
            break;
        }
    }
    tally
}
