//! `BatchWriter`: single records collected and appended as one batch; its
//! limits, its errors (nothing held is lost), its drop, and what a process
//! kill keeps (every record a flush returned).

mod common;

use commitlog::format::HEADER_SIZE;
use commitlog::{BatchWriter, CommitLog, Error, FlushDiskType};
use common::*;

#[test]
fn records_pushed_one_at_a_time_are_appended_in_batches_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let mut writer = BatchWriter::with_limits(log.clone(), 10, usize::MAX);
    let mut appended = Vec::new();
    let mut pushed = Vec::new();
    for seq in 0..95u32 {
        let b = body(0, seq, 20 + seq as usize);
        let before = log.max_offset();
        if let Some(batch) = writer.push(&b).unwrap() {
            assert_eq!(batch.offsets.len(), 10, "appended when full, before the record that did not fit");
            appended.extend(batch.offsets);
        } else {
            assert_eq!(log.max_offset(), before, "a record pushed is not in the log yet");
        }
        pushed.push(b);
    }
    assert_eq!(writer.held(), 5);
    appended.extend(writer.flush().unwrap().expect("five held").offsets);
    assert!(writer.flush().unwrap().is_none(), "nothing held");
    assert_eq!(appended.len(), pushed.len());
    for (offset, b) in appended.iter().zip(&pushed) {
        assert_eq!(&log.read(*offset).unwrap().body[..], &b[..]);
    }
    assert_eq!(bodies(&log), pushed, "in push order, nothing else");
    drop(writer);
    log.shutdown().unwrap();
}

#[test]
fn the_byte_limit_counts_headers_and_a_larger_record_goes_alone() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    // Three records of 100 bytes fit 3 * 132 bytes; a fourth does not.
    let mut writer = BatchWriter::with_limits(log.clone(), 1000, 3 * (HEADER_SIZE + 100));
    for seq in 0..3 {
        assert!(writer.push(&body(1, seq, 100)).unwrap().is_none());
    }
    assert_eq!(writer.push(&body(1, 3, 100)).unwrap().expect("full").offsets.len(), 3);
    // A record over the byte limit (within max_message_size) is held alone.
    let big = body(1, 4, 2000);
    assert_eq!(writer.push(&big).unwrap().expect("one held").offsets.len(), 1);
    assert_eq!(writer.held(), 1);
    let last = writer.flush().unwrap().expect("the big one");
    assert_eq!(&log.read(last.offsets[0]).unwrap().body[..], &big[..]);
    // The limit never lets a batch outgrow half a segment.
    let mut writer = BatchWriter::with_limits(log.clone(), usize::MAX, usize::MAX);
    let mut most = 0;
    for seq in 0..200 {
        if let Some(batch) = writer.push(&body(2, seq, 1000)).unwrap() {
            most = most.max(batch.wrote_bytes);
        }
    }
    assert!(most > 0 && most <= SEGMENT as u64 / 2, "{most}");
    drop(writer);
    log.shutdown().unwrap();
}

#[test]
fn errors_lose_nothing_the_writer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let mut writer = BatchWriter::with_limits(log.clone(), 4, usize::MAX);
    for seq in 0..3 {
        writer.push(&body(3, seq, 50)).unwrap();
    }
    let too_large = vec![0u8; 16 * 1024 + 1];
    assert!(matches!(writer.push(&too_large), Err(Error::RecordTooLarge { size: 16385, max: 16384 })));
    assert_eq!(writer.held(), 3, "a refused record changes nothing");
    log.shutdown().unwrap();
    writer.push(&body(3, 3, 50)).unwrap(); // the fourth still fits: nothing appended
    assert!(matches!(writer.push(&body(3, 4, 50)), Err(Error::Shutdown)));
    assert_eq!(
        writer.held(),
        4,
        "an append that failed keeps what was held, and the record that did not fit was not taken"
    );
    assert!(matches!(writer.flush(), Err(Error::Shutdown)));
    assert_eq!(writer.held(), 4);
}

#[test]
fn dropping_a_writer_appends_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let mut writer = BatchWriter::new(log.clone());
    let held: Vec<Vec<u8>> = (0..5).map(|seq| body(4, seq, 64)).collect();
    for b in &held {
        writer.push(b).unwrap();
    }
    assert!(bodies(&log).is_empty());
    drop(writer);
    assert_eq!(bodies(&log), held);
    log.shutdown().unwrap();
}

/// A process killed (its store as the page cache holds it, copied without a
/// shutdown) keeps every record a flush returned, and none the writer still
/// held: those never had an offset.
#[test]
fn a_kill_keeps_every_record_a_flush_returned() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let mut writer = BatchWriter::with_limits(log.clone(), 16, usize::MAX);
    let mut returned = Vec::new();
    for seq in 0..1000u32 {
        let b = body(5, seq, 300);
        if let Some(batch) = writer.push(&b).unwrap() {
            returned.extend(batch.offsets);
        }
    }
    assert!(writer.held() > 0, "some records held at the kill");
    let killed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), killed.path());
    std::mem::forget(writer); // killed: no drop runs
    let reopened = CommitLog::open(killed.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let kept = bodies(&reopened);
    assert_eq!(kept.len(), returned.len(), "every record a flush returned, nothing held");
    assert!(kept.iter().enumerate().all(|(seq, b)| *b == body(5, seq as u32, 300)));
    reopened.shutdown().unwrap();
    log.shutdown().unwrap();
}
