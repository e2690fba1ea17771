//! openraft's own durable log stores at the storage API, as `RaftCore` drives
//! them through the v1 adaptor: append a batch, await it (`append_to_log`
//! returns once the store says the entries are stored). Prints one JSON line:
//!
//! ```text
//! commitlog-raft-compare --store sled|rocks --batch N --seconds S [--dir DIR]
//! {"store": "sled", "batch": 1, "appends_per_sec": …, "entries_per_sec": …, "p50_us": …, "p99_us": …}
//! ```
//!
//! `commitlog-raft`'s side is its `storage_api` example, with the same
//! arguments and output; `cargo xtask raft-bench` runs both in interleaved
//! rounds. Entries carry a 100-byte value, like the example's.

use std::time::{Duration, Instant};

use openraft::storage::RaftStorage;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftTypeConfig};

type Error = Box<dyn std::error::Error>;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, Error> {
    match args.iter().position(|a| a == name) {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad {name}").into()),
        None => Ok(default),
    }
}

/// Appends batches of `batch` entries made by `entry` for `seconds`; prints the line.
async fn run<C, S>(
    name: &str,
    mut store: S,
    batch: u64,
    seconds: u64,
    entry: impl Fn(u64) -> Entry<C>,
) -> Result<(), Error>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
    S: RaftStorage<C>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut latencies = Vec::new();
    let mut next = 1u64;
    let started = Instant::now();
    while Instant::now() < deadline {
        let entries: Vec<Entry<C>> = (next..next + batch).map(&entry).collect();
        let t0 = Instant::now();
        store.append_to_log(entries).await.map_err(|e| e.to_string())?;
        latencies.push(t0.elapsed());
        next += batch;
    }
    report(name, batch, started.elapsed(), &mut latencies);
    Ok(())
}

fn report(name: &str, batch: u64, elapsed: Duration, latencies: &mut [Duration]) {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)].as_secs_f64() * 1e6;
    let appends = latencies.len() as f64 / elapsed.as_secs_f64();
    println!(
        "{{\"store\": \"{name}\", \"batch\": {batch}, \"appends_per_sec\": {appends:.0}, \"entries_per_sec\": {:.0}, \"p50_us\": {:.0}, \"p99_us\": {:.0}}}",
        appends * batch as f64,
        at(0.5),
        at(0.99)
    );
}

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let store = arg(&args, "--store", "sled".to_string())?;
    let batch: u64 = arg(&args, "--batch", 1)?;
    let seconds: u64 = arg(&args, "--seconds", 3)?;
    let root = tempfile::tempdir_in(arg(&args, "--dir", std::env::temp_dir())?)?;
    let value = "x".repeat(100);
    match store.as_str() {
        "sled" => {
            use openraft_sledstore::{ExampleRequest, SledStore, TypeConfig};
            let db = sled::open(root.path().join("sled"))?;
            let store = SledStore::new(std::sync::Arc::new(db)).await;
            let entry = |i: u64| Entry::<TypeConfig> {
                log_id: log_id(i),
                payload: EntryPayload::Normal(ExampleRequest::Set { key: format!("k{i}"), value: value.clone() }),
            };
            run("sled", store, batch, seconds, entry).await
        }
        #[cfg(feature = "rocks")]
        "rocks" => {
            use openraft_rocksstore::{RocksRequest, RocksStore, TypeConfig};
            let store = RocksStore::new(root.path().join("rocks")).await;
            let entry = |i: u64| Entry::<TypeConfig> {
                log_id: log_id(i),
                payload: EntryPayload::Normal(RocksRequest::Set { key: format!("k{i}"), value: value.clone() }),
            };
            run("rocks", store, batch, seconds, entry).await
        }
        other => Err(format!("--store {other}: sled, or rocks (built with --features rocks)").into()),
    }
}
