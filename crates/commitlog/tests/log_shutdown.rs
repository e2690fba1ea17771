//! Shutdown is a barrier: every append either fails with `Error::Shutdown` or is
//! covered by the final flush and checkpoint.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use commitlog::{CommitLog, CommitLogConfig, Error, FlushDiskType};
use common::*;

/// Appenders race `shutdown()` many times; every `Ok` must end at or below the
/// checkpoint's flushed offset, and be there when the log is opened again.
fn appends_racing_shutdown(config: CommitLogConfig, rounds: usize) {
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let log = CommitLog::open(dir.path(), config.clone()).unwrap();
        let appended = Arc::new(AtomicU64::new(0));
        let start = Arc::new(Barrier::new(5));
        let producers: Vec<_> = (0..4u32)
            .map(|p| {
                let (log, appended, start) = (log.clone(), Arc::clone(&appended), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    let mut ok = Vec::new();
                    for seq in 0.. {
                        match log.append(&body(p, seq, 200)) {
                            Ok(put) => {
                                ok.push((put.wrote_offset, put.next_offset()));
                                appended.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(Error::Shutdown) => break,
                            Err(other) => panic!("append failed: {other}"),
                        }
                    }
                    ok
                })
            })
            .collect();
        start.wait();
        // Shut down while the producers are busy: after a round-dependent number of
        // appends, so the race lands in different places.
        while appended.load(Ordering::Relaxed) < 20 + round as u64 * 7 {
            std::thread::yield_now();
        }
        log.shutdown().unwrap();
        let ok: Vec<(u64, u64)> = producers.into_iter().flat_map(|p| p.join().unwrap()).collect();
        assert!(matches!(log.append(b"late"), Err(Error::Shutdown)));
        let flushed =
            commitlog::inspect::store_files(dir.path()).checkpoint.expect("checkpoint written").flushed_offset;
        let past: Vec<&(u64, u64)> = ok.iter().filter(|(_, end)| *end > flushed).collect();
        assert!(past.is_empty(), "round {round}: acknowledged appends past the final flush at {flushed}: {past:?}");
        drop(log);

        let log = CommitLog::open(dir.path(), config.clone()).unwrap();
        assert!(log.recovery_report().clean_shutdown);
        for (offset, _) in &ok {
            log.read(*offset).unwrap_or_else(|e| panic!("round {round}: acknowledged record at {offset} lost: {e}"));
        }
        log.shutdown().unwrap();
    }
}

#[test]
fn async_flush_appends_racing_shutdown_are_all_covered() {
    appends_racing_shutdown(config(FlushDiskType::AsyncFlush), 40);
}

#[test]
fn write_buffer_appends_racing_shutdown_are_all_covered() {
    let mut c = config(FlushDiskType::AsyncFlush);
    c.transient_store_pool_enable = true;
    c.transient_store_pool_size = 3;
    appends_racing_shutdown(c, 40);
}

#[test]
fn sync_flush_without_waiting_appends_racing_shutdown_are_all_covered() {
    let mut c = config(FlushDiskType::SyncFlush);
    c.wait_store_msg_ok = false;
    appends_racing_shutdown(c, 40);
}

#[test]
fn a_second_shutdown_returns_after_the_first_finished() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let put = log.append(b"one").unwrap();
    let other = log.clone();
    let second = std::thread::spawn(move || other.shutdown());
    log.shutdown().unwrap();
    second.join().unwrap().unwrap();
    assert!(commitlog::inspect::store_files(dir.path()).checkpoint.unwrap().flushed_offset >= put.next_offset());
    assert!(matches!(log.flush_all(), Err(Error::Shutdown)));
    assert!(matches!(log.delete_segments_before(u64::MAX, 1), Err(Error::Shutdown)));
}
