//! Layer 2f: the message store under simulated power loss. Producers put
//! messages on four queues of one topic (two producers share queues, so the put
//! lock matters), a consumer reads every queue and commits its offsets, all on
//! `SimStorage`; after every write and sync the storage sends a snapshot, and
//! crash images of it are opened as message stores and checked:
//!
//! - the store opens;
//! - every queue reads back densely from its first offset to its end, each
//!   message at the offset it claims (no entry names a missing or different
//!   record);
//! - under sync flush, every message acknowledged or consumed before that point
//!   is at its (queue, offset) with its body (a message a consumer saw was
//!   durable: dispatch reads only durable data), and every committed consumer
//!   offset survives;
//! - every acknowledged key is found by the index (sync flush);
//! - a new put on each queue takes the queue's end: no offset is used twice;
//! - nothing derived needed repair: a power cut never damages what the store
//!   made durable (a torn last queue-index run, whose seal never returned, is
//!   recovery; any other dropped run, a rebuilt key index or registry would
//!   hide a broken ordering).
//!
//! Every other run seals the queue index every five entries (else at each log
//! segment's end); one run in three deletes the log's first segment once the
//! producers are done, so the index expires with it (messages the log deleted
//! are not looked for). One run in four uses async flush, where the log can
//! lose its tail: only the structure is checked there.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use commitlog::{CommitLogConfig, FlushDiskType};
use mapped_file::sim::SimSnapshot;
use mapped_file::Storage;
use message_store::{GetRequest, Message, MessageStore, MessageStoreConfig};

use crate::common::*;

const SEGMENT: usize = 16 * 1024;
const QUEUES: u32 = 4;
const ROOT: &str = "/sim-message-store";

/// Tally of one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Crash images opened.
    pub states: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Messages a consumer read.
    pub consumed: u64,
    /// Acknowledged or consumed messages missing after recovery.
    pub lost: u64,
    /// Queues that do not read back densely, or entries naming the wrong record.
    pub garbage: u64,
    /// Committed consumer offsets that went back.
    pub offsets_lost: u64,
    /// Acknowledged keys the index did not find.
    pub keys_lost: u64,
    /// New puts that took an offset below the queue's end.
    pub reused: u64,
    /// Images that did not open.
    pub open_errors: u64,
    /// Reads of a live queue that failed (an entry for a record readers may
    /// not see yet: dispatched before it was durable).
    pub read_errors: u64,
    /// Crash images whose derived data the store had to repair from the log:
    /// a power cut must never damage what the dispatch checkpoint says was
    /// durable (the repair would hide the broken ordering).
    pub repaired: u64,
}

impl Tally {
    /// What must be zero.
    pub fn violations(&self) -> u64 {
        self.lost
            + self.garbage
            + self.offsets_lost
            + self.keys_lost
            + self.reused
            + self.open_errors
            + self.read_errors
            + self.repaired
    }

    /// Adds another run's tally.
    pub fn add(&mut self, o: Tally) {
        self.states += o.states;
        self.acked += o.acked;
        self.consumed += o.consumed;
        self.lost += o.lost;
        self.garbage += o.garbage;
        self.offsets_lost += o.offsets_lost;
        self.keys_lost += o.keys_lost;
        self.reused += o.reused;
        self.open_errors += o.open_errors;
        self.read_errors += o.read_errors;
        self.repaired += o.repaired;
    }
}

/// What was seen to hold at some event: (queue, offset, body) found, or a
/// committed (queue, offset).
#[derive(Debug, Default)]
struct Seen {
    /// (queue, offset, body, event, log offset).
    messages: Vec<(u32, u64, Vec<u8>, u64, u64)>,
    commits: Vec<(u32, u64, u64)>,
    /// Acknowledged keys: (key, body, event, log offset).
    keys: Vec<(String, Vec<u8>, u64, u64)>,
}

fn store_config(flush: FlushDiskType, seal_entries: usize) -> MessageStoreConfig {
    // The log's own read limit off: dispatch's durable limit must hold by itself.
    let log = CommitLogConfig { checkpoint_interval_ms: 1, read_limit_to_flushed: false, ..config(SEGMENT, flush) };
    let mut config = MessageStoreConfig::new(log);
    config.flush_interval_consume_queue_ms = 2;
    config.flush_consume_queue_thorough_interval_ms = 5;
    // Small index files (a simulated disk copies every file at each event),
    // two slots (chains long and shared), rolled every 32 keys.
    config.index = message_store::IndexConfig::new(2, 32);
    config.queue_index_seal_entries = seal_entries;
    config.consumer_offsets_journal_size = 64 << 10;
    config
}

/// One workload under one seed; `stop_at_first` ends at the first violation.
pub fn run_seed(seed: u64, images_per_point: usize, stop_at_first: bool) -> Tally {
    let flush = if seed % 4 == 3 { FlushDiskType::AsyncFlush } else { FlushDiskType::SyncFlush };
    let durable = flush == FlushDiskType::SyncFlush;
    let path = write_without_mmap(seed);
    let sim = sim_storage(path);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    // Every other run seals the queue index every few entries, not only at
    // each log segment's end.
    let budget = if seed % 2 == 1 { 5 } else { 1 << 20 };
    let store = MessageStore::open_with_storage(ROOT, store_config(flush, budget), storage).expect("open");
    // A slow disk: messages stay written but not durable long enough for a
    // consumer to see them, if dispatch ever let it.
    sim.set_sync_delay(Duration::from_micros(300));
    store.create_topic("t", QUEUES).expect("topic");
    let (tx, rx) = mpsc::sync_channel::<SimSnapshot>(256);
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    sim.set_snapshot_sink(Some(tx));

    let checker = {
        let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
        let mut rng = Rng(seed ^ 0x5703E);
        std::thread::spawn(move || {
            let mut tally = Tally::default();
            // Every snapshot is checked, also those sent after the workload
            // stopped (an async run's producers finish long before); past the
            // first violation of a planted-bug run, they are only drained.
            let mut found = false;
            for snapshot in rx {
                if found {
                    continue; // drain so the store never blocks
                }
                let (messages, commits, keys) = {
                    let seen = seen.lock().expect("seen");
                    let messages: Vec<_> = seen
                        .messages
                        .iter()
                        .filter(|m| m.3 <= snapshot.event)
                        .map(|(q, o, b, _, at)| (*q, *o, b.clone(), *at))
                        .collect();
                    let commits: Vec<_> =
                        seen.commits.iter().filter(|c| c.2 <= snapshot.event).map(|(q, o, _)| (*q, *o)).collect();
                    let keys: Vec<_> = seen
                        .keys
                        .iter()
                        .filter(|k| k.2 <= snapshot.event)
                        .map(|(k, b, _, at)| (k.clone(), b.clone(), *at))
                        .collect();
                    (messages, commits, keys)
                };
                let masks = [0, u64::MAX].into_iter().chain((0..images_per_point).map(|_| rng.next()));
                for mask in masks {
                    let image = crash_image(&snapshot, mask, path);
                    tally.add(check_image(image, store_config(flush, budget), durable, &messages, &commits, &keys));
                }
                if stop_at_first && tally.violations() > 0 {
                    found = true;
                    stop.store(true, Ordering::Relaxed);
                }
            }
            tally
        })
    };

    let producers: Vec<_> = (0..3u32)
        .map(|p| {
            let (store, sim, seen, stop) = (store.clone(), sim.clone(), Arc::clone(&seen), Arc::clone(&stop));
            let mut rng = Rng(seed.wrapping_mul(31).wrapping_add(u64::from(p)));
            std::thread::spawn(move || {
                let mut acked = 0u64;
                for seq in 0..30u64 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // Producers 0 and 1 share queues 0 and 1; producer 2 has 2 and 3.
                    let queue = if p < 2 { rng.range(0, 2) } else { rng.range(2, 4) } as u32;
                    let b = body(p, seq, rng.range(20, 600) as usize);
                    let key = format!("k{p}-{seq}");
                    let Ok(put) = store.put_message(&Message::new("t", queue, b.clone()).with_key(key)) else { break };
                    if put.durability.wait().is_ok() && durable {
                        // The event first: the storage's lock is never taken under this one.
                        let event = sim.event_count();
                        let mut seen = seen.lock().expect("seen");
                        seen.keys.push((format!("k{p}-{seq}"), b.clone(), event, put.log_offset));
                        seen.messages.push((queue, put.queue_offset, b, event, put.log_offset));
                        acked += 1;
                    }
                }
                acked
            })
        })
        .collect();
    let consumer = {
        let (store, sim, seen, stop) = (store.clone(), sim.clone(), Arc::clone(&seen), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut next = [0u64; QUEUES as usize];
            let mut consumed = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut progressed = false;
                for queue in 0..QUEUES {
                    let q = queue as usize;
                    let Ok(got) =
                        store.get_messages(&GetRequest::new("t", queue, next[q]).max_count(16).max_bytes(u64::MAX))
                    else {
                        return (consumed, 1);
                    };
                    let event = sim.event_count();
                    for m in &got.messages {
                        if durable {
                            let m = (queue, m.queue_offset, m.body.to_vec(), event, m.log_offset);
                            seen.lock().expect("seen").messages.push(m);
                        }
                        consumed += 1;
                    }
                    if got.next_offset > next[q] {
                        next[q] = got.next_offset;
                        progressed = true;
                        if store.commit_offset("g", "t", queue, next[q]).is_ok() && durable {
                            // The event first: the storage's lock is never taken under this one.
                            let event = sim.event_count();
                            seen.lock().expect("seen").commits.push((queue, next[q], event));
                        }
                    }
                }
                // Caught up: wait on every queue at once (under async flush a
                // put to a queue waited on indexes its own message).
                let watches: Vec<(&str, u32, u64)> = (0..QUEUES).map(|q| ("t", q, next[q as usize])).collect();
                if !progressed && store.wait_for_any(&watches, Duration::from_millis(2)).is_err() {
                    return (consumed, 1);
                }
            }
            (consumed, 0)
        })
    };
    let acked: u64 = producers.into_iter().map(|p| p.join().expect("producer")).sum();
    std::thread::sleep(Duration::from_millis(20)); // the consumer catches up
    if seed.is_multiple_of(3) {
        // The log's cleaning deletes its first segment: the index expires
        // with it (at the next thorough flush), never before.
        let _ = store.log().flush_all();
        // The log keeps segments whose queue-index entries are not sealed.
        let _ = store.dispatch_now();
        let _ = store.seal_index();
        let _ = store.log().delete_segments_before(SEGMENT as u64, 1);
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let (consumed, mut read_errors) = consumer.join().expect("consumer");
    // Dispatch never stops on a store this run drives (an entry that is not
    // its queue's next, from the put path or dispatch, would stop it).
    if let Some(err) = store.stats().dispatch_error {
        if std::env::var_os("CRASH_DEBUG").is_some() {
            eprintln!("seed {seed}: dispatch stopped: {err}");
        }
        read_errors += 1;
    }
    sim.set_snapshot_sink(None);
    let _ = store.shutdown();
    drop(store);
    let mut tally = checker.join().expect("checker");
    tally.acked = acked;
    tally.consumed = consumed;
    tally.read_errors = read_errors;
    tally
}

/// Opens `image` as a message store and checks it.
fn check_image(
    image: mapped_file::SimStorage,
    config: MessageStoreConfig,
    durable: bool,
    messages: &[(u32, u64, Vec<u8>, u64)],
    commits: &[(u32, u64)],
    keys: &[(String, Vec<u8>, u64)],
) -> Tally {
    let mut tally = Tally { states: 1, ..Tally::default() };
    debug_assert!(image.file_bytes(&Path::new(ROOT).join(commitlog::ABORT_FILE)).is_some());
    let storage: Arc<dyn Storage> = Arc::new(image);
    let Ok(store) = MessageStore::open_with_storage(ROOT, config, storage) else {
        tally.open_errors += 1;
        return tally;
    };
    let report = store.open_report();
    // A power cut may tear the run being sealed (the last one, never
    // returned as sealed): dropping it is recovery. Any other is damage.
    let repaired_at_open = report.rebuilt_all.is_some()
        || report.index_rebuilt
        || report.topics_recovered
        || report.index_runs_dropped.len() > 1;
    let log_min = store.log().min_offset();
    for queue in 0..QUEUES {
        let Ok(std::ops::Range { start: min, end: max }) = store.queue_range("t", queue) else {
            tally.garbage += 1;
            continue;
        };
        let mut found = Vec::new();
        let mut offset = min;
        while offset < max {
            match store.get_messages(&GetRequest::new("t", queue, offset).max_count(64).max_bytes(u64::MAX)) {
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
                    tally.garbage += 1; // an error, or no message where the queue says one is
                    break;
                }
            }
        }
        if durable {
            // Messages the log's cleaning deleted are not looked for.
            for (_, o, b, _) in messages.iter().filter(|m| m.0 == queue && m.3 >= log_min) {
                if !found.iter().any(|(fo, fb)| fo == o && fb == b) {
                    tally.lost += 1;
                }
            }
            for (_, o) in commits.iter().filter(|c| c.0 == queue) {
                if store.committed_offset("g", "t", queue).unwrap().is_none_or(|c| c < *o) {
                    tally.offsets_lost += 1;
                }
            }
        }
        match store.put_message(&Message::new("t", queue, body(9, 0, 20))) {
            Ok(put) if put.queue_offset == max => {}
            _ => tally.reused += 1,
        }
    }
    if durable {
        for (key, body, _) in keys.iter().filter(|k| k.2 >= log_min) {
            match store.query_by_key("t", key, 0, u64::MAX, 4) {
                Ok(found) if found.iter().any(|m| m.body[..] == body[..]) => {}
                other => {
                    if std::env::var_os("CRASH_DEBUG").is_some() && tally.keys_lost == 0 {
                        eprintln!("key {key} not found: {:?}; {report:?}", other.map(|f| f.len()));
                    }
                    tally.keys_lost += 1
                }
            }
        }
    }
    if repaired_at_open {
        tally.repaired += 1;
    }

    let _ = store.shutdown();
    tally
}
