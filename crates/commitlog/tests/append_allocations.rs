//! The append path allocates nothing per record: a counting allocator watches the
//! appending thread (background services are not counted: they run per flush,
//! not per record).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};

struct Counting;

thread_local! {
    /// Whether this thread's allocations are counted, and how many there were:
    /// per thread, so tests running side by side do not count each other's.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// const-initialised thread-locals that count never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while `work` runs.
fn allocations_during(work: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    work();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get) - before
}

/// Large segments: no roll-over (which opens a file) inside the measured window.
fn log(dir: &std::path::Path) -> CommitLog {
    let config = CommitLogConfig {
        mapped_file_size_commit_log: 64 << 20,
        max_message_size: 1 << 20,
        ..common::config(FlushDiskType::AsyncFlush)
    };
    CommitLog::open(dir, config).unwrap()
}

#[test]
fn ten_thousand_appends_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = log(dir.path());
    let body = vec![7u8; 1024];
    // Warm-up: the staging buffer of a segment written without mmap grows once.
    for _ in 0..16 {
        log.append(&body).unwrap();
    }
    let allocations = allocations_during(|| {
        for _ in 0..10_000 {
            let put = log.append(&body).unwrap();
            assert!(put.durability.is_done());
        }
    });
    assert_eq!(allocations, 0, "the append path allocated {allocations} times");
    log.shutdown().unwrap();
}

#[test]
fn a_batch_allocates_a_constant_whatever_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let log = log(dir.path());
    let small: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 1024]).collect();
    let large: Vec<Vec<u8>> = (0..256).map(|i| vec![i as u8; 1024]).collect();
    log.append_batch(&large).unwrap(); // warm-up
    let per_small = allocations_during(|| drop(log.append_batch(&small).unwrap()));
    let per_large = allocations_during(|| drop(log.append_batch(&large).unwrap()));
    // The CRCs and the offsets handed back: two vectors per batch.
    assert!(per_small <= 2 && per_large <= 2, "{per_small} and {per_large} allocations per batch");
    log.shutdown().unwrap();
}
