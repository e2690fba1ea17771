//! The same work through each peer crate's public API.

use std::sync::Arc;
use std::time::Instant;

use crate::{scratch, Line, Outcome, Sizes, System, BATCH, PRODUCERS, RECORD, SEGMENT};

/// rocketmq-store's MappedFileQueue, flushed with msync.
pub const ROCKETMQ: System = System {
    name: "rocketmq-store 1.0.0 (MappedFileQueue, msync)",
    ours: false,
    a: rocketmq_durable_batches,
    b: |_| Outcome::NotApplicable("no multi-producer durable wait in its MappedFileQueue"),
    c: rocketmq_no_sync,
    // Its queue has no batch append: (c) already appends one record at a time.
    c_single: rocketmq_no_sync,
};

/// TiKV's raft-engine.
pub const RAFT_ENGINE: System = System {
    name: "raft-engine 0.4.2",
    ours: false,
    a: raft_engine_durable_batches,
    b: raft_engine_group_commit,
    c: |s| raft_engine_no_sync(s, BATCH),
    c_single: |s| raft_engine_no_sync(s, 1),
};

/// okaywal.
pub const OKAYWAL: System = System {
    name: "okaywal 0.3.1",
    ours: false,
    a: okaywal_durable_batches,
    b: okaywal_group_commit,
    c: |_| Outcome::NotApplicable("always syncs on commit"),
    c_single: |_| Outcome::NotApplicable("always syncs on commit"),
};

// ---- rocketmq-store: its MappedFileQueue with msync flush ------------------------

fn rmq_queue(dir: &std::path::Path) -> rocketmq_store::MappedFileQueue {
    // Segment size a multiple of the record size, so a segment fills exactly.
    rocketmq_store::MappedFileQueue::new(dir.to_string_lossy().into_owned(), SEGMENT as u64, None)
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

fn rocketmq_durable_batches(sizes: &Sizes) -> Outcome {
    let batches = sizes.a_batches;
    let dir = scratch();
    let queue = rmq_queue(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..BATCH {
            rmq_append(&queue, &body);
        }
        queue.flush(0);
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Outcome::Measured(Line::new((batches * BATCH) as u64, start.elapsed().as_secs_f64(), lat))
}

fn rocketmq_no_sync(sizes: &Sizes) -> Outcome {
    let dir = scratch();
    let queue = rmq_queue(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(sizes.c_batches);
    let start = Instant::now();
    for _ in 0..sizes.c_batches {
        let t = Instant::now();
        for _ in 0..BATCH {
            rmq_append(&queue, &body);
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Outcome::Measured(Line::new((sizes.c_batches * BATCH) as u64, start.elapsed().as_secs_f64(), lat))
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

fn raft_engine_durable_batches(sizes: &Sizes) -> Outcome {
    let batches = sizes.a_batches;
    let dir = scratch();
    let engine = raft(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for b in 0..batches {
        let mut batch = raft_batch(1, (b * BATCH) as u64, BATCH, &body);
        let t = Instant::now();
        engine.write(&mut batch, true).expect("write");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Outcome::Measured(Line::new((batches * BATCH) as u64, start.elapsed().as_secs_f64(), lat))
}

fn raft_engine_group_commit(sizes: &Sizes) -> Outcome {
    let per_producer = sizes.b_per_producer;
    let dir = scratch();
    let engine = Arc::new(raft(dir.path()));
    let start = Instant::now();
    let threads: Vec<_> = (0..PRODUCERS as u64)
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
    Outcome::Measured(Line::new(lat.len() as u64, start.elapsed().as_secs_f64(), lat))
}

/// (c) with `per_write` = 64, (c') with 1: 64 records per timed unit, in
/// writes of `per_write` records.
fn raft_engine_no_sync(sizes: &Sizes, per_write: usize) -> Outcome {
    let dir = scratch();
    let engine = raft(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(sizes.c_batches);
    let start = Instant::now();
    for b in 0..sizes.c_batches {
        let t = Instant::now();
        for w in (0..BATCH).step_by(per_write) {
            // Building the batch (copying the bodies in) is part of its append.
            let mut batch = raft_batch(1, (b * BATCH + w) as u64, per_write, &body);
            engine.write(&mut batch, false).expect("write");
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Outcome::Measured(Line::new((sizes.c_batches * BATCH) as u64, start.elapsed().as_secs_f64(), lat))
}

// ---- okaywal: begin_entry / write_chunk / commit (always durable) ------------------

fn okay(dir: &std::path::Path) -> okaywal::WriteAheadLog {
    okaywal::WriteAheadLog::recover(dir, okaywal::LogVoid).expect("okaywal open")
}

fn okaywal_durable_batches(sizes: &Sizes) -> Outcome {
    let batches = sizes.a_batches;
    let dir = scratch();
    let wal = okay(dir.path());
    let body = vec![1u8; RECORD];
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for _ in 0..batches {
        let t = Instant::now();
        let mut entry = wal.begin_entry().expect("entry");
        for _ in 0..BATCH {
            entry.write_chunk(&body).expect("chunk");
        }
        entry.commit().expect("commit");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Outcome::Measured(Line::new((batches * BATCH) as u64, start.elapsed().as_secs_f64(), lat))
}

fn okaywal_group_commit(sizes: &Sizes) -> Outcome {
    let per_producer = sizes.b_per_producer;
    let dir = scratch();
    let wal = okay(dir.path());
    let start = Instant::now();
    let threads: Vec<_> = (0..PRODUCERS as u8)
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
    Outcome::Measured(Line::new(lat.len() as u64, start.elapsed().as_secs_f64(), lat))
}
