//! The two leading designs for the message store's queue index, measured side
//! by side in one process on a real disk: (A) `queue-index` (runs sealed per
//! log range) and (B) one ordered LSM keyspace as RocketMQ 5 (fjall; key =
//! queue u64 BE ++ offset u64 BE, value = the 20-byte entry; one write batch
//! per dispatch round of 256 entries; made durable at each of (A)'s seal
//! points, as a checkpoint would). The same entries: `--entries` (2,000,000)
//! over `--queues` (50,000), queues drawn uniformly at random, 3 interleaved
//! rounds; then 20,000 reads of 32 entries at a random offset of a random
//! queue. Prints entries/s, read latency (mean, p99), and bytes written to
//! the disk (`/proc/self/io`).
//!
//! ```text
//! cargo run --release --manifest-path bench-compare/Cargo.toml --bin index-compare -- [--queues N] [--entries N]
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use fjall::{Config, PartitionCreateOptions, PersistMode};
use mapped_file::MmapStorage;
use queue_index::{Entry, QueueIndex};

const SEAL_EVERY: u64 = 1 << 16;
const ROUND: usize = 256;

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("write_bytes:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The workload: (queue, queue offset, entry) in log order.
fn workload(queues: u64, entries: u64) -> (Vec<(u64, u64, Entry)>, Vec<u64>) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut ends = vec![0u64; queues as usize];
    let items = (0..entries)
        .map(|i| {
            let q = rng.next() % queues;
            let offset = ends[q as usize];
            ends[q as usize] += 1;
            (q, offset, Entry { log_offset: i * 1100, size: 1100, tag: q })
        })
        .collect();
    (items, ends)
}

struct Figures {
    secs: f64,
    written: u64,
    reads: Vec<Duration>,
}

fn ours(dir: &Path, items: &[(u64, u64, Entry)], ends: &[u64]) -> Figures {
    let storage = MmapStorage::lock(dir).expect("lock");
    let (index, _) = QueueIndex::open(&storage, &dir.join("queueindex")).expect("open");
    let w0 = written_bytes();
    let t0 = Instant::now();
    for (i, &(q, offset, entry)) in items.iter().enumerate() {
        index.append(q, offset, entry).expect("append");
        if (i as u64 + 1).is_multiple_of(SEAL_EVERY) {
            index.seal(&storage, entry.log_offset + 1100).expect("seal");
        }
    }
    let end = items.last().map_or(0, |l| l.2.log_offset + 1100);
    index.seal(&storage, end).expect("seal");
    let secs = t0.elapsed().as_secs_f64();
    let written = written_bytes() - w0;
    let reads = reads(ends, |q, at| index.get(q, at, 32).len());
    Figures { secs, written, reads }
}

fn lsm(dir: &Path, items: &[(u64, u64, Entry)], ends: &[u64]) -> Figures {
    let keyspace = Config::new(dir.join("lsm")).manual_journal_persist(true).open().expect("open");
    let cq = keyspace.open_partition("consume_queue", PartitionCreateOptions::default()).expect("partition");
    let w0 = written_bytes();
    let t0 = Instant::now();
    for (round, chunk) in items.chunks(ROUND).enumerate() {
        let mut batch = keyspace.batch();
        for &(q, offset, entry) in chunk {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&q.to_be_bytes());
            key[8..].copy_from_slice(&offset.to_be_bytes());
            let mut value = [0u8; 20];
            value[..8].copy_from_slice(&entry.log_offset.to_le_bytes());
            value[8..12].copy_from_slice(&entry.size.to_le_bytes());
            value[12..].copy_from_slice(&entry.tag.to_le_bytes());
            batch.insert(&cq, key, value);
        }
        batch.commit().expect("commit");
        if (((round + 1) * ROUND) as u64).is_multiple_of(SEAL_EVERY) {
            keyspace.persist(PersistMode::SyncAll).expect("persist");
        }
    }
    keyspace.persist(PersistMode::SyncAll).expect("persist");
    let secs = t0.elapsed().as_secs_f64();
    let written = written_bytes() - w0;
    let reads = reads(ends, |q, at| {
        let mut from = [0u8; 16];
        from[..8].copy_from_slice(&q.to_be_bytes());
        from[8..].copy_from_slice(&at.to_be_bytes());
        let mut to = [0u8; 16];
        to[..8].copy_from_slice(&q.to_be_bytes());
        to[8..].copy_from_slice(&(at + 32).to_be_bytes());
        cq.range(from..to).count()
    });
    Figures { secs, written, reads }
}

fn reads(ends: &[u64], mut read: impl FnMut(u64, u64) -> usize) -> Vec<Duration> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut times = Vec::with_capacity(20_000);
    while times.len() < 20_000 {
        let q = rng.next() % ends.len() as u64;
        if ends[q as usize] == 0 {
            continue;
        }
        let at = rng.next() % ends[q as usize];
        let t = Instant::now();
        let got = read(q, at);
        times.push(t.elapsed());
        assert!(got > 0, "queue {q} offset {at} read nothing");
    }
    times.sort_unstable();
    times
}

fn line(name: &str, f: &Figures, entries: usize) -> String {
    let mean = f.reads.iter().sum::<Duration>() / f.reads.len() as u32;
    let p99 = f.reads[f.reads.len() * 99 / 100];
    format!(
        "{name}: {:.0} entries/s, {:.1} MB written ({:.1} B per entry); reads of 32: mean {:.1} us, p99 {:.1} us",
        entries as f64 / f.secs,
        f.written as f64 / 1e6,
        f.written as f64 / entries as f64,
        mean.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let queues = arg(&args, "--queues", 50_000);
    let entries = arg(&args, "--entries", 2_000_000);
    let (items, ends) = workload(queues, entries);
    println!("index-compare: {entries} entries over {queues} queues (uniform), a seal or persist every {SEAL_EVERY}; 3 interleaved rounds");
    for round in 0..3 {
        let a = tempfile::tempdir().expect("scratch");
        let ours = ours(a.path(), &items, &ends);
        let b = tempfile::tempdir().expect("scratch");
        let theirs = lsm(b.path(), &items, &ends);
        println!("round {round}: {}", line("(A) queue-index", &ours, items.len()));
        println!("round {round}: {}", line("(B) fjall LSM  ", &theirs, items.len()));
        println!(
            "round {round}: (A)/(B) entries/s {:.2}x, bytes written {:.2}x, read p99 {:.2}x",
            theirs.secs / ours.secs,
            ours.written as f64 / theirs.written.max(1) as f64,
            ours.reads[ours.reads.len() * 99 / 100].as_secs_f64()
                / theirs.reads[theirs.reads.len() * 99 / 100].as_secs_f64()
        );
    }
}
