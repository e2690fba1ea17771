//! Tails: records delivered once durable (or written), in order, across
//! roll-overs, woken by the log; a typed error behind retention; an end at
//! shutdown; the same as an async stream.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use commitlog::{CommitLog, CommitLogConfig, Error, FlushConfig, FlushDiskType, Tail, TailLimit};
use common::*;

/// Async flush that flushes only when told (`flush_all`).
fn unflushed() -> CommitLogConfig {
    CommitLogConfig {
        flush: FlushConfig {
            flush_interval_commit_log_ms: 3_600_000,
            flush_commit_log_thorough_interval_ms: 3_600_000,
            ..config(FlushDiskType::AsyncFlush).flush
        },
        ..config(FlushDiskType::AsyncFlush)
    }
}

fn body_of(tail: &mut Tail) -> Vec<u8> {
    tail.next_timeout(Duration::from_secs(20)).unwrap().expect("a record within 20 s").body.to_vec()
}

#[test]
fn a_durable_tail_delivers_a_record_only_once_it_is_durable_and_wakes_at_the_flush() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), unflushed()).unwrap();
    let mut tail = log.tail(log.min_offset(), TailLimit::Durable);
    log.append(b"one").unwrap();
    log.append(b"two").unwrap();
    assert!(tail.next_timeout(Duration::from_millis(200)).unwrap().is_none(), "delivered before durable");
    // A tail blocked in another thread is woken by the flush, not by a timer.
    let waiter = std::thread::spawn(move || (body_of(&mut tail), body_of(&mut tail)));
    std::thread::sleep(Duration::from_millis(100));
    let flushed = std::time::Instant::now();
    log.flush_all().unwrap();
    assert_eq!(waiter.join().unwrap(), (b"one".to_vec(), b"two".to_vec()));
    // Its wait is 20 s: woken by the flush, it returns long before.
    assert!(flushed.elapsed() < Duration::from_secs(10), "not woken by the flush: {:?}", flushed.elapsed());
    log.shutdown().unwrap();
}

#[test]
fn a_written_tail_follows_appends_across_roll_overs_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // No background flush: only appends wake the tail.
    let log = CommitLog::open(dir.path(), unflushed()).unwrap();
    let mut tail = log.tail(log.max_offset(), TailLimit::Written);
    let started = std::time::Instant::now();
    let reader = std::thread::spawn(move || (0..400).map(|_| body_of(&mut tail)).collect::<Vec<_>>());
    let written: Vec<Vec<u8>> = (0..400u32).map(|i| body(0, i, 500 + (i as usize % 7) * 100)).collect();
    std::thread::sleep(Duration::from_millis(100)); // the reader waits before the first append
    for b in &written {
        log.append(b).unwrap();
    }
    assert!(log.segment_count() > 3, "the tail crossed roll-overs");
    assert_eq!(reader.join().unwrap(), written);
    assert!(started.elapsed() < Duration::from_secs(10), "not woken by appends: {:?}", started.elapsed());
    log.shutdown().unwrap();
}

#[test]
fn a_tail_behind_retention_gets_a_typed_error_never_a_wrong_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let mut tail = log.tail(0, TailLimit::Durable);
    for i in 0..200u32 {
        log.append(&body(0, i, 1000)).unwrap().durability.wait().unwrap();
    }
    log.delete_segments_before(2 * SEGMENT as u64, 10).unwrap();
    let front = log.min_offset();
    assert!(front > 0);
    match tail.try_next() {
        Err(Error::FellBehind { offset: 0, min }) => assert_eq!(min, front),
        other => panic!("expected FellBehind, got {other:?}"),
    }
    // Started at the new front, a tail reads on.
    let mut tail = log.tail(log.min_offset(), TailLimit::Durable);
    assert!(tail.try_next().unwrap().is_some());
    log.shutdown().unwrap();
}

#[test]
fn shutdown_ends_a_waiting_tail_after_what_it_could_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), unflushed()).unwrap();
    let mut tail = log.tail(0, TailLimit::Durable);
    log.append(b"last").unwrap();
    let waiter = std::thread::spawn(move || {
        let mut got = Vec::new();
        for record in tail.by_ref() {
            let record = record.unwrap();
            got.push(record.body.to_vec());
        }
        (got, tail.is_closed())
    });
    std::thread::sleep(Duration::from_millis(100));
    log.shutdown().unwrap(); // flushes "last", then ends the tail
    let (got, closed) = waiter.join().unwrap();
    assert!(closed);
    assert!(got.len() <= 1, "{got:?}");
}

/// A waker that unparks the thread that polls.
struct Unpark(std::thread::Thread);
impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future on this thread, parking between polls (no runtime needed).
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_secs(20));
    }
}

fn next_item(tail: &mut Tail) -> impl Future<Output = Option<Result<commitlog::Record, Error>>> + '_ {
    std::future::poll_fn(move |cx| futures_core::Stream::poll_next(Pin::new(&mut *tail), cx))
}

#[test]
fn a_tail_is_a_stream_woken_by_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let mut tail = log.tail(0, TailLimit::Durable);
    let writer = {
        let log = log.clone();
        std::thread::spawn(move || {
            for i in 0..50u32 {
                std::thread::sleep(Duration::from_millis(2));
                log.append(&body(1, i, 64)).unwrap().durability.wait().unwrap();
            }
        })
    };
    let got: Vec<Vec<u8>> = block_on(collect(&mut tail, 50)).into_iter().map(|r| r.body.to_vec()).collect();
    writer.join().unwrap();
    assert_eq!(got, (0..50u32).map(|i| body(1, i, 64)).collect::<Vec<_>>());
    log.shutdown().unwrap();
    assert!(block_on(next_item(&mut tail)).is_none(), "the stream ends at shutdown");
}

async fn collect(tail: &mut Tail, n: usize) -> Vec<commitlog::Record> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(next_item(tail).await.expect("not ended").unwrap());
    }
    out
}
