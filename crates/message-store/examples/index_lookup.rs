//! Key lookups at scale: puts `--keys` messages (10,000,000 by default), each with
//! one key, on a real disk (async flush, 8 queues), waits for dispatch, then looks
//! up `--lookups` random keys (100,000) and prints the latency distribution of
//! `query_by_key` (p50, p99, p99.9, max) against the 100 µs p99 target.
//! `cargo xtask index-lookup` runs it; docs/message-store.md quotes it.
//!
//! ```text
//! cargo run --release -p message-store --example index_lookup -- [--keys N] [--lookups M] [--dir DIR]
//! ```

use std::time::{Duration, Instant};

use commitlog::{CommitLogConfig, FlushDiskType};
use message_store::{Message, MessageStore, MessageStoreConfig};

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keys = arg(&args, "--keys", 10_000_000);
    let lookups = arg(&args, "--lookups", 100_000);
    let scratch = tempfile::tempdir()?;
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| scratch.path().to_path_buf(), std::path::PathBuf::from);
    let log = CommitLogConfig::builder()
        .mapped_file_size_commit_log(1 << 30)
        .flush_disk_type(FlushDiskType::AsyncFlush)
        .build()?;
    let store = MessageStore::open(&dir, MessageStoreConfig::new(log))?;
    store.create_topic("t", 8)?;
    let started = Instant::now();
    for i in 0..keys {
        let queue = (i % 8) as u32;
        store.put_message(&Message::new("t", queue, i.to_le_bytes().to_vec()).with_key(format!("key-{i}")))?;
    }
    let put_secs = started.elapsed().as_secs_f64();
    let last_offset = keys.div_ceil(8).saturating_sub(1);
    for queue in 0..8 {
        if !store.wait_for("t", queue, last_offset.saturating_sub(1), Duration::from_secs(600))?.arrived() {
            return Err("dispatch did not catch up in 10 minutes".into());
        }
    }
    println!(
        "index-lookup: {keys} keys put in {put_secs:.1}s ({:.0}/s), dispatched and indexed after {:.1}s",
        keys as f64 / put_secs,
        started.elapsed().as_secs_f64()
    );
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut latencies = Vec::with_capacity(lookups as usize);
    for _ in 0..lookups {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let i = state % keys;
        let key = format!("key-{i}");
        let t0 = Instant::now();
        let found = store.query_by_key("t", &key, 0, u64::MAX, 1)?;
        latencies.push(t0.elapsed());
        if found.len() != 1 || found[0].body[..] != i.to_le_bytes() {
            return Err(format!("key {key} not found").into());
        }
    }
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    let p99 = at(0.99);
    println!(
        "lookups: {lookups} random keys: p50 {:?}, p99 {p99:?}, p99.9 {:?}, max {:?} (target p99 <= 100 µs: {:.2}x of it)",
        at(0.5),
        at(0.999),
        latencies[latencies.len() - 1],
        p99.as_secs_f64() / 100e-6
    );
    store.shutdown()?;
    Ok(())
}
