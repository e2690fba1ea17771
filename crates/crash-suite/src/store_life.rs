//! Layer 2i: the whole message store's life, run from seeds. The steps, the
//! model and its checks are the message store's own whole-store model test
//! (`crates/message-store/tests/store_life/model.rs`, shared by path): topics
//! made, deleted and made again under their name, puts, reads, commits and
//! their removals, resets and journal compactions, seals, the log's front
//! moving, clean reopens and power cuts, under sync and async flush, with the
//! write-buffer pool on and off; after every step the whole store is checked
//! against the model (the store opens and needs no repair of what it made
//! durable; every durable message at its place with its keys; no offset given
//! twice; a deleted topic never seen again; every returned commit kept).
//! Here each seed draws its own sequence, so a soak runs many more than the
//! property test's cases, and the planted bugs of the store's records (a
//! compaction that keeps names its snapshot drops, a topic's creation point
//! past the durable log, a deletion undone by the checkpoint, the log's front
//! past unsealed queue-index entries) must each make some seed fail.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use commitlog::FlushDiskType;

use crate::common::Rng;

#[path = "../../message-store/tests/store_life/model.rs"]
#[allow(dead_code)] // the property test's helpers this layer does not use
mod model;

use model::{Op, Reset, GROUPS, KEYS, QUEUES, TOPICS};

/// What one run (or several) did.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Runs.
    pub runs: u64,
    /// Steps run and checked.
    pub steps: u64,
    /// Runs in which a check failed.
    pub failed: u64,
    /// The first failure: the seed, the check's message and the steps.
    pub first: Option<String>,
}

impl Tally {
    /// Runs whose check failed.
    pub fn violations(&self) -> u64 {
        self.failed
    }

    /// Adds another tally.
    pub fn add(&mut self, o: Tally) {
        self.runs += o.runs;
        self.steps += o.steps;
        self.failed += o.failed;
        if self.first.is_none() {
            self.first = o.first;
        }
    }
}

/// The steps of `seed`'s run: `n` of them, weighted as the property test's.
fn ops(rng: &mut Rng, n: usize) -> Vec<Op> {
    let mut pick = |len: usize| rng.range(0, len as u64) as usize;
    let mut out = Vec::with_capacity(n);
    // (weight, kind), as in `tests/store_life.rs`.
    const WEIGHTS: [u64; 19] = [3, 2, 1, 8, 3, 5, 2, 1, 4, 2, 2, 2, 2, 1, 3, 1, 2, 3, 1];
    let total: u64 = WEIGHTS.iter().sum();
    for _ in 0..n {
        let mut roll = pick(total as usize) as u64;
        let kind = WEIGHTS.iter().position(|&w| {
            if roll < w {
                true
            } else {
                roll -= w;
                false
            }
        });
        let topic = pick(TOPICS.len());
        let queue = pick(QUEUES as usize) as u32;
        let group = pick(GROUPS.len());
        let key = match pick(2) {
            0 => None,
            _ => Some(pick(KEYS.len())),
        };
        let at = pick(1 << 16) as u64;
        out.push(match kind.unwrap_or(0) {
            0 => Op::Create(topic),
            1 => Op::Delete(topic),
            2 => Op::CleanUnused(pick(4) as u8),
            3 => Op::Put { topic, queue, key, len: pick(64) },
            4 => Op::PutBatch { topic, queue, n: 1 + pick(4), key },
            5 => Op::Fill { topic, queue },
            6 => Op::Get { topic, queue, at, max: 1 + pick(5) },
            7 => Op::Tail { topic, queue },
            8 => Op::Commit { group, topic, queue, at },
            9 => {
                let commits =
                    (0..1 + pick(3)).map(|_| (pick(TOPICS.len()), pick(QUEUES as usize) as u32, at)).collect();
                Op::CommitMany { group, commits }
            }
            10 => Op::CommitBurst { group, topic, queue },
            11 => Op::Remove { group, topic: (pick(2) == 0).then_some(topic) },
            12 => {
                let to = match pick(3) {
                    0 => Reset::Earliest,
                    1 => Reset::Latest,
                    _ => Reset::Offset(pick(40) as u64),
                };
                Op::Reset { group, topic, queue: (pick(2) == 0).then_some(queue), to }
            }
            13 => Op::SealIndex,
            14 => Op::MoveFront,
            15 => Op::Flush,
            16 => Op::Reopen,
            17 => Op::PowerLoss,
            _ => Op::CleanOffsets(topic),
        });
    }
    out
}

/// Serialises runs that silence the panic hook (a failed check panics).
static QUIET: Mutex<()> = Mutex::new(());

/// One run of `steps` steps under `seed`: sync flush on even seeds, async on
/// odd ones; the write-buffer pool on one seed in three.
pub fn run_seed(seed: u64, steps: usize) -> Tally {
    let flush = if seed.is_multiple_of(2) { FlushDiskType::SyncFlush } else { FlushDiskType::AsyncFlush };
    let pool = seed % 3 == 2;
    let ops = ops(&mut Rng(seed), steps);
    let config = model::config(flush, pool);
    let _quiet = QUIET.lock().unwrap_or_else(|e| e.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| model::run(&config, &ops)));
    std::panic::set_hook(hook);
    let first = result.err().map(|payload| {
        let why = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("seed {seed} ({flush:?}, pool {pool}): {why}; steps {ops:?}")
    });
    Tally { runs: 1, steps: ops.len() as u64, failed: u64::from(first.is_some()), first }
}
