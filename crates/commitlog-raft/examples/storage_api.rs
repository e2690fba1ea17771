//! `commitlog-raft` at openraft's storage API, as `RaftCore` drives it: append
//! a batch, await its flush callback (`blocking_append`). Prints one JSON line,
//! the same as `raft-compare` prints for openraft's own stores, which
//! `cargo xtask raft-bench` runs beside it in interleaved rounds:
//!
//! ```text
//! cargo run --release -p commitlog-raft --example storage_api -- --batch N --seconds S [--dir DIR]
//! {"store": "commitlog", "batch": 1, "appends_per_sec": …, "entries_per_sec": …, "p50_us": …, "p99_us": …}
//! ```
//!
//! Entries carry a key and a 100-byte value, as the peers' do.

use std::io::Cursor; // the default snapshot data of `declare_raft_types!`
use std::time::{Duration, Instant};

use commitlog_raft::{RaftLogStore, RaftStoreConfig};
use openraft::storage::RaftLogStorageExt;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
use serde::{Deserialize, Serialize};

/// A write, shaped as the peers' example requests are.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub enum Request {
    /// Set `key` to `value`.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
}

openraft::declare_raft_types!(
    /// Entries of requests.
    Requests: D = Request, R = (),
);

type Error = Box<dyn std::error::Error + Send + Sync>;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, Error> {
    match args.iter().position(|a| a == name) {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad {name}").into()),
        None => Ok(default),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let batch: u64 = arg(&args, "--batch", 1)?;
    let seconds: u64 = arg(&args, "--seconds", 3)?;
    let root = tempfile::tempdir_in(arg(&args, "--dir", std::env::temp_dir())?)?;
    let mut store = RaftLogStore::<Requests>::open(root.path(), RaftStoreConfig::default())?;
    let value = "x".repeat(100);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut latencies = Vec::new();
    let mut next = 1u64;
    let started = Instant::now();
    while Instant::now() < deadline {
        let entries: Vec<Entry<Requests>> = (next..next + batch)
            .map(|i| Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
                payload: EntryPayload::Normal(Request::Set { key: format!("k{i}"), value: value.clone() }),
            })
            .collect();
        let t0 = Instant::now();
        store.blocking_append(entries).await?;
        latencies.push(t0.elapsed());
        next += batch;
    }
    let elapsed = started.elapsed();
    store.shutdown()?;
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)].as_secs_f64() * 1e6;
    let appends = latencies.len() as f64 / elapsed.as_secs_f64();
    println!(
        "{{\"store\": \"commitlog\", \"batch\": {batch}, \"appends_per_sec\": {appends:.0}, \"entries_per_sec\": {:.0}, \"p50_us\": {:.0}, \"p99_us\": {:.0}}}",
        appends * batch as f64,
        at(0.5),
        at(0.99)
    );
    Ok(())
}
