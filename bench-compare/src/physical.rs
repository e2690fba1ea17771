//! The machine's own limits, measured in the same run as the systems.

use std::os::unix::fs::FileExt;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crate::{scratch, Line, BATCH, PRODUCERS, RECORD};

/// memcpy of 1 KiB records into an already-faulted anonymous mapping.
pub fn memcpy_into_faulted_mapping(records: usize) -> Line {
    let len = records * RECORD;
    let mut map = memmap2::MmapMut::map_anon(len).expect("map");
    map.iter_mut().step_by(4096).for_each(|b| *b = 1); // fault every page in
    let body = vec![7u8; RECORD];
    let start = Instant::now();
    for i in 0..records {
        map[i * RECORD..(i + 1) * RECORD].copy_from_slice(&body);
    }
    std::hint::black_box(&map);
    Line::new(records as u64, start.elapsed().as_secs_f64(), Vec::new())
}

/// A file of `len` bytes whose blocks are written (zeros) and synced.
fn written_file(len: usize) -> (tempfile::TempDir, std::fs::File) {
    let dir = scratch();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("f"))
        .expect("file");
    let zeros = vec![0u8; 1 << 20];
    for at in (0..len).step_by(zeros.len()) {
        file.write_all_at(&zeros, at as u64).expect("fill");
    }
    file.sync_all().expect("sync");
    (dir, file)
}

/// 64 KiB `pwrite` + `fdatasync` per batch, sequentially into blocks written
/// before: the best a durable batch of 64 records can do on this disk. The
/// latencies are of each write + sync.
pub fn pwrite_fdatasync_written(batches: usize) -> Line {
    let len = (batches * BATCH * RECORD).min(256 << 20);
    let (dir, file) = written_file(len);
    pwrite_fdatasync(dir, file, batches, len)
}

/// The same into a fresh file preallocated with `fallocate` (unwritten extents),
/// as a new segment is: each sync also converts the extents it covers.
pub fn pwrite_fdatasync_fallocated(batches: usize) -> Line {
    let len = (batches * BATCH * RECORD).min(256 << 20);
    let dir = scratch();
    let path = dir.path().join("f");
    // fallocate(1) does what the log's storage does (posix_fallocate), without
    // unsafe code here: the blocks are allocated, unwritten, and read as zeros.
    let status = std::process::Command::new("fallocate")
        .args(["-l", &len.to_string()])
        .arg(&path)
        .status()
        .expect("run fallocate(1)");
    assert!(status.success(), "fallocate(1) failed");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("file");
    file.sync_all().expect("sync");
    pwrite_fdatasync(dir, file, batches, len)
}

fn pwrite_fdatasync(_dir: tempfile::TempDir, file: std::fs::File, batches: usize, len: usize) -> Line {
    let bytes = BATCH * RECORD;
    let batch = vec![9u8; bytes];
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for i in 0..batches {
        let t = Instant::now();
        file.write_all_at(&batch, ((i * bytes) % len) as u64).expect("write");
        file.sync_data().expect("fdatasync");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Line::new((batches * BATCH) as u64, start.elapsed().as_secs_f64(), lat)
}

/// `fdatasync` after overwriting 4 KiB of written blocks: the latency of one
/// small sync. The latencies are of the sync alone.
pub fn fdatasync_4k(samples: usize) -> Line {
    let len = 64 << 20;
    let (_dir, file) = written_file(len);
    let page = vec![9u8; 4096];
    let mut lat = Vec::with_capacity(samples);
    let start = Instant::now();
    for i in 0..samples {
        file.write_all_at(&page, ((i * 4096) % len) as u64).expect("write");
        let t = Instant::now();
        file.sync_data().expect("fdatasync");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Line::new(samples as u64 * 4, start.elapsed().as_secs_f64(), lat)
}

/// Workload (b) with nothing of a log: [`PRODUCERS`] threads each write a 1
/// KiB record with `pwrite` under a lock (into blocks written before) and
/// wait until it is durable; a waiter that finds no sync running syncs
/// everything written so far (`fdatasync`) for all of them, the others wait
/// for it: the simplest group commit, what (b) can reach on this machine.
/// The latencies are each record's write and wait.
pub fn group_commit(per_producer: usize) -> Line {
    struct State {
        next: u64,
        durable: u64,
        syncing: bool,
    }
    let len = (PRODUCERS * per_producer * RECORD).min(256 << 20);
    let (_dir, file) = written_file(len);
    let state = Mutex::new(State { next: 0, durable: 0, syncing: false });
    let synced = Condvar::new();
    let start = Instant::now();
    let latencies: Vec<u64> = std::thread::scope(|scope| {
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (file, state, synced) = (&file, &state, &synced);
                scope.spawn(move || {
                    let body = vec![p as u8; RECORD];
                    let mut latencies = Vec::with_capacity(per_producer);
                    for _ in 0..per_producer {
                        let t = Instant::now();
                        let mut st = state.lock().expect("lock");
                        file.write_all_at(&body, st.next % len as u64).expect("write");
                        st.next += RECORD as u64;
                        let end = st.next;
                        while st.durable < end {
                            if st.syncing {
                                st = synced.wait(st).expect("wait");
                                continue;
                            }
                            st.syncing = true;
                            let target = st.next;
                            drop(st);
                            file.sync_data().expect("fdatasync");
                            st = state.lock().expect("lock");
                            st.syncing = false;
                            st.durable = st.durable.max(target);
                            synced.notify_all();
                        }
                        drop(st);
                        latencies.push(t.elapsed().as_nanos() as u64);
                    }
                    latencies
                })
            })
            .collect();
        producers.into_iter().flat_map(|p| p.join().expect("producer")).collect()
    });
    Line::new((PRODUCERS * per_producer) as u64, start.elapsed().as_secs_f64(), latencies)
}
