//! Concurrent producers in every flush mode, with and without the write-buffer pool.

mod common;

use std::collections::HashSet;

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
use common::*;

const PRODUCERS: u32 = 4;
const PER_PRODUCER: u32 = 400;

fn run(config: CommitLogConfig, wait: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config.clone()).unwrap();
    let acknowledges_after_flush = config.acknowledges_after_flush();
    let threads: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut offsets = Vec::new();
                for seq in 0..PER_PRODUCER {
                    let put = log.append(&body(p, seq, 64 + (seq as usize % 700))).unwrap();
                    let end = put.next_offset();
                    offsets.push(put.wrote_offset);
                    if wait {
                        put.durability.wait().unwrap();
                        if acknowledges_after_flush {
                            assert!(log.flushed_offset() >= end, "acknowledged before flushed");
                        }
                    }
                }
                offsets
            })
        })
        .collect();
    let offsets: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert_eq!(offsets.iter().collect::<HashSet<_>>().len(), offsets.len(), "offsets are unique");
    log.shutdown().unwrap();

    let log = CommitLog::open(dir.path(), config).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    let all = bodies(&log);
    assert_eq!(all.len() as u32, PRODUCERS * PER_PRODUCER);
    // Each producer's records appear in its own order, intact.
    for p in 0..PRODUCERS {
        let mine: Vec<&Vec<u8>> = all.iter().filter(|b| b[..4] == p.to_le_bytes()).collect();
        assert_eq!(mine.len() as u32, PER_PRODUCER);
        for (seq, b) in mine.iter().enumerate() {
            assert_eq!(**b, body(p, seq as u32, b.len()));
        }
    }
    log.shutdown().unwrap();
}

#[test]
fn sync_flush() {
    run(config(FlushDiskType::SyncFlush), true);
}

#[test]
fn sync_flush_with_write_buffer_pool() {
    let mut c = config(FlushDiskType::SyncFlush);
    c.transient_store_pool_enable = true;
    c.transient_store_pool_size = 3;
    run(c, true);
}

#[test]
fn sync_flush_without_waiting_for_store() {
    let mut c = config(FlushDiskType::SyncFlush);
    c.wait_store_msg_ok = false;
    run(c, true);
}

#[test]
fn async_flush() {
    run(config(FlushDiskType::AsyncFlush), true);
}

#[test]
fn async_flush_with_write_buffer_pool() {
    let mut c = config(FlushDiskType::AsyncFlush);
    c.transient_store_pool_enable = true;
    c.transient_store_pool_size = 3;
    run(c, false);
}

#[test]
fn async_flush_with_preallocation_and_warm_up() {
    let mut c = config(FlushDiskType::AsyncFlush);
    c.preallocate_next_segment = true;
    c.warm_mapped_file_enable = true;
    run(c, false);
}
