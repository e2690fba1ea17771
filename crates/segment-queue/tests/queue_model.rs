//! A state-machine property test of the segment queue against a plain model: a
//! `Vec<u8>` of every byte appended, in order, at its absolute offset.
//!
//! Ops: append (rolling over with a padded tail when a chunk does not fit), flush,
//! commit, truncate, and reopen (after a clean stop, or after a power cut that loses
//! every unsynced byte). After each op, the queue's offsets and every readable byte
//! must match the model. `PROPTEST_CASES` sets the case count (`cargo xtask proptest`).

use std::path::Path;
use std::sync::Arc;

use mapped_file::{AppendStatus, Appended, SimStorage, Storage};
use proptest::prelude::*;
use segment_queue::{QueueConfig, SegmentQueue};
use transient_pool::{LockMemory, PoolConfig, TransientStorePool};

const SIZE: usize = 8 * 1024;
const PAD: u8 = 0xFF;

#[derive(Debug, Clone)]
enum Op {
    Append { len: usize, byte: u8 },
    Flush { least_pages: usize },
    Commit { least_pages: usize },
    Truncate { permille: u64 },
    Reopen { power_cut: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..=3000, any::<u8>()).prop_map(|(len, byte)| Op::Append { len, byte }),
        2 => (0usize..3).prop_map(|least_pages| Op::Flush { least_pages }),
        2 => (0usize..3).prop_map(|least_pages| Op::Commit { least_pages }),
        1 => (0u64..=1000).prop_map(|permille| Op::Truncate { permille }),
        1 => any::<bool>().prop_map(|power_cut| Op::Reopen { power_cut }),
    ]
}

struct Harness {
    sim: SimStorage,
    pool: Option<TransientStorePool>,
    queue: SegmentQueue,
    /// Every byte appended, at its absolute offset (padding included).
    model: Vec<u8>,
}

impl Harness {
    fn new(with_pool: bool) -> Self {
        let sim = SimStorage::new();
        let pool = with_pool.then(|| {
            let mut config = PoolConfig::new(3, SIZE);
            config.lock_memory = LockMemory::Never;
            TransientStorePool::new(config).unwrap()
        });
        let queue = Self::load(&sim, pool.clone());
        Harness { sim, pool, queue, model: Vec::new() }
    }

    fn load(sim: &SimStorage, pool: Option<TransientStorePool>) -> SegmentQueue {
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let config = QueueConfig { preallocate_next_segment: false, ..QueueConfig::new(SIZE) };
        SegmentQueue::load(storage, Path::new("/m"), config, pool).unwrap()
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Append { len, byte } => {
                let data = vec![byte; len];
                loop {
                    let file = self.queue.roll_to_writable_segment(self.model.len() as u64).unwrap();
                    match file.append_bytes(1, &data).unwrap() {
                        Appended::Written { wrote_offset, .. } => {
                            assert_eq!(wrote_offset, self.model.len() as u64);
                            self.model.extend_from_slice(&data);
                            break;
                        }
                        Appended::DoesNotFit { remaining } => {
                            file.append_with(1, |_, tail| {
                                tail.fill(PAD);
                                AppendStatus::Written { bytes: tail.len(), value: () }
                            })
                            .unwrap();
                            self.model.extend(std::iter::repeat_n(PAD, remaining));
                        }
                    }
                }
            }
            Op::Flush { least_pages } => {
                let before = self.queue.flushed_where();
                let progress = self.queue.flush(least_pages).unwrap();
                assert_eq!(progress.from, before);
                assert!(progress.to <= self.queue.max_offset());
                if least_pages == 0 {
                    assert_eq!(progress.to, self.queue.max_offset(), "flush(0) reaches the read position");
                }
            }
            Op::Commit { least_pages } => {
                self.queue.commit(least_pages).unwrap();
                if least_pages == 0 {
                    assert_eq!(self.queue.max_offset(), self.model.len() as u64, "commit(0) publishes everything");
                }
            }
            Op::Truncate { permille } => {
                let at = self.model.len() as u64 * permille / 1000;
                if at < self.queue.min_offset() {
                    return;
                }
                self.queue.truncate_dirty_files(at).unwrap();
                self.model.truncate(at as usize);
            }
            Op::Reopen { power_cut } => {
                // A clean stop keeps what reached the mapping (the page cache); a power
                // cut keeps only what was flushed.
                let survives = if power_cut { self.queue.flushed_where() } else { self.queue.max_offset() };
                let old = std::mem::replace(&mut self.queue, Self::load(&SimStorage::new(), None));
                drop(old);
                if power_cut {
                    self.sim.crash_losing_unsynced();
                }
                self.queue = Self::load(&self.sim, self.pool.clone());
                self.model.truncate(survives as usize);
                if self.queue.segment_count() > 0 {
                    self.queue.truncate_dirty_files(survives).unwrap();
                    self.queue.force_from(0).unwrap();
                    self.queue.set_committed_where(survives);
                }
            }
        }
        self.check();
    }

    fn check(&self) {
        let q = &self.queue;
        let max = q.max_offset();
        assert!(q.flushed_where() <= max, "flushed {} beyond readable {}", q.flushed_where(), max);
        assert!(max <= self.model.len() as u64);
        assert_eq!(q.max_wrote_position().max(q.min_offset()), (self.model.len() as u64).max(q.min_offset()));
        if self.pool.is_none() {
            assert_eq!(max, self.model.len() as u64, "without a pool every append is readable");
        }
        // Every readable byte equals the model, segment by segment.
        for file in q.segments() {
            let from = file.file_from_offset() as usize;
            let readable = file.read_position();
            let bytes = file.read(0, readable).unwrap();
            let expected = &self.model[from..from + readable];
            if let Some(i) = bytes.iter().zip(expected).position(|(a, b)| a != b) {
                panic!("segment at {from}: byte {} is {:#x}, model says {:#x}", from + i, bytes[i], expected[i]);
            }
        }
        // Lookup agrees with arithmetic for every segment boundary.
        for file in q.segments() {
            let found = q.find_mapped_file_by_offset(file.file_from_offset(), false).unwrap();
            assert_eq!(found.file_from_offset(), file.file_from_offset());
        }
    }
}

/// Case count: `PROPTEST_CASES` if set (as `cargo xtask proptest --cases N` does), else 64.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct(
            "proptest-regressions/queue_model.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_queue_matches_model(with_pool in any::<bool>(), ops in prop::collection::vec(op(), 1..60)) {
        let mut h = Harness::new(with_pool);
        for op in &ops {
            h.apply(op);
        }
        // Finally everything flushed survives a power cut, byte for byte.
        h.apply(&Op::Commit { least_pages: 0 });
        h.apply(&Op::Flush { least_pages: 0 });
        let len = h.model.len();
        h.apply(&Op::Reopen { power_cut: true });
        prop_assert_eq!(h.model.len(), len);
        prop_assert_eq!(h.sim.dirty_sectors(), 0);
    }
}
