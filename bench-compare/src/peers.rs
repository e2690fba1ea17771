//! The same work through each peer crate's public API.

use std::sync::Arc;
use std::time::Instant;

use crate::{scratch, Line, Result, RECORD};

const RMQ: &str = "rocketmq-store 1.0.0 (MappedFileQueue, msync)";
const RAFT: &str = "raft-engine 0.4.2";
const OKAY: &str = "okaywal 0.3.1";

// ---- rocketmq-store: its MappedFileQueue with msync flush ------------------------

fn rmq_queue(dir: &std::path::Path) -> rocketmq_store::MappedFileQueue {
    // Segment size a multiple of the record size, so a segment fills exactly.
    rocketmq_store::MappedFileQueue::new(dir.to_string_lossy().into_owned(), 128 << 20, None)
}

fn rmq_append(queue: &rocketmq_store::MappedFileQueue, data: &[u8]) {
    use rocketmq_store::MappedFile;
    loop {
        let file = queue.get_last_mapped_file_mut_start_offset(0, true).expect("mapped file");
        if file.append_message_bytes(data) {
            return;
        }
        assert!(file.is_full(), "append refused on a file that is not full");
    }
}

pub fn rocketmq_durable_batches(batches: usize) -> Result {
    let dir = scratch();
    let queue = rmq_queue(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..64 {
            rmq_append(&queue, &body);
        }
        queue.flush(0);
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Result::Measured(Line::new(RMQ, (batches * 64) as u64, start.elapsed().as_secs_f64(), lat))
}

pub fn rocketmq_no_sync(records: usize) -> Result {
    let dir = scratch();
    let queue = rmq_queue(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(records);
    let start = Instant::now();
    for _ in 0..records {
        let t = Instant::now();
        rmq_append(&queue, &body);
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Result::Measured(Line::new(RMQ, records as u64, start.elapsed().as_secs_f64(), lat))
}

// ---- raft-engine: write(batch, sync) ------------------------------------------------

fn raft(dir: &std::path::Path) -> raft_engine::Engine {
    let cfg = raft_engine::Config { dir: dir.to_string_lossy().into_owned(), ..Default::default() };
    raft_engine::Engine::open(cfg).expect("raft-engine open")
}

fn raft_batch(region: u64, first_key: u64, n: usize, body: &[u8]) -> raft_engine::LogBatch {
    let mut batch = raft_engine::LogBatch::default();
    for i in 0..n as u64 {
        let _ = batch.put(region, (first_key + i).to_be_bytes().to_vec(), body.to_vec());
    }
    batch
}

pub fn raft_engine_durable_batches(batches: usize) -> Result {
    let dir = scratch();
    let engine = raft(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for b in 0..batches {
        let mut batch = raft_batch(1, (b * 64) as u64, 64, &body);
        let t = Instant::now();
        engine.write(&mut batch, true).expect("write");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Result::Measured(Line::new(RAFT, (batches * 64) as u64, start.elapsed().as_secs_f64(), lat))
}

pub fn raft_engine_group_commit(per_producer: usize) -> Result {
    let dir = scratch();
    let engine = Arc::new(raft(dir.path()));
    let start = Instant::now();
    let threads: Vec<_> = (0..16u64)
        .map(|p| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                let body = vec![p as u8; RECORD];
                let mut lat = Vec::with_capacity(per_producer);
                for i in 0..per_producer {
                    let mut batch = raft_batch(p + 1, i as u64, 1, &body);
                    let t = Instant::now();
                    engine.write(&mut batch, true).expect("write");
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                lat
            })
        })
        .collect();
    let lat: Vec<u64> = threads.into_iter().flat_map(|t| t.join().expect("producer")).collect();
    Result::Measured(Line::new(RAFT, lat.len() as u64, start.elapsed().as_secs_f64(), lat))
}

pub fn raft_engine_no_sync(records: usize) -> Result {
    let dir = scratch();
    let engine = raft(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(records);
    let start = Instant::now();
    for i in 0..records {
        let mut batch = raft_batch(1, i as u64, 1, &body);
        let t = Instant::now();
        engine.write(&mut batch, false).expect("write");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Result::Measured(Line::new(RAFT, records as u64, start.elapsed().as_secs_f64(), lat))
}

// ---- okaywal: begin_entry / write_chunk / commit (always durable) ------------------

fn okay(dir: &std::path::Path) -> okaywal::WriteAheadLog {
    okaywal::WriteAheadLog::recover(dir, okaywal::LogVoid).expect("okaywal open")
}

pub fn okaywal_durable_batches(batches: usize) -> Result {
    let dir = scratch();
    let wal = okay(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for _ in 0..batches {
        let t = Instant::now();
        let mut entry = wal.begin_entry().expect("entry");
        for _ in 0..64 {
            entry.write_chunk(&body).expect("chunk");
        }
        entry.commit().expect("commit");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Result::Measured(Line::new(OKAY, (batches * 64) as u64, start.elapsed().as_secs_f64(), lat))
}

pub fn okaywal_group_commit(per_producer: usize) -> Result {
    let dir = scratch();
    let wal = okay(dir.path());
    let start = Instant::now();
    let threads: Vec<_> = (0..16u8)
        .map(|p| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                let body = vec![p; RECORD];
                let mut lat = Vec::with_capacity(per_producer);
                for _ in 0..per_producer {
                    let t = Instant::now();
                    let mut entry = wal.begin_entry().expect("entry");
                    entry.write_chunk(&body).expect("chunk");
                    entry.commit().expect("commit");
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                lat
            })
        })
        .collect();
    let lat: Vec<u64> = threads.into_iter().flat_map(|t| t.join().expect("producer")).collect();
    Result::Measured(Line::new(OKAY, lat.len() as u64, start.elapsed().as_secs_f64(), lat))
}
