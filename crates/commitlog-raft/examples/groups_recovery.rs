//! What recovery costs with many raft groups on one log: G groups (1,000) of
//! E entries (100) of 100 bytes each, written interleaved; then the engine is
//! opened three times and `EngineRecovery` printed: after a clean shutdown
//! (the index's runs and the state file cover the log), with the queue index
//! lost (the whole log replayed into it), and the first of those again once the page
//! cache holds the files.
//!
//! ```text
//! cargo run --release -p commitlog-raft --example groups_recovery -- [--groups 1000] [--entries 100] [--dir DIR]
//! ```

use std::io::Cursor; // the default snapshot data of `declare_raft_types!`
use std::time::Instant;

use commitlog_raft::{RaftLogEngine, RaftStoreConfig, QUEUE_INDEX_DIR, RAFT_DIR};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

openraft::declare_raft_types!(
    /// Entries of strings.
    Strings: D = String, R = String,
);

type Error = Box<dyn std::error::Error + Send + Sync>;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, Error> {
    match args.iter().position(|a| a == name) {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad {name}").into()),
        None => Ok(default),
    }
}

/// Files under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries.filter_map(Result::ok).map(|e| if e.path().is_dir() { files_under(&e.path()) } else { 1 }).sum()
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let groups: u64 = arg(&args, "--groups", 1000)?;
    let entries: u64 = arg(&args, "--entries", 100)?;
    let root = tempfile::tempdir_in(arg(&args, "--dir", std::env::temp_dir())?)?;
    let dir = root.path();
    let config = RaftStoreConfig::default();

    let engine = RaftLogEngine::<Strings>::open(dir, config.clone())?;
    // Every group created and its vote saved (an election), all at once.
    let created = Instant::now();
    let stores = (0..groups).map(|g| engine.open_group(g)).collect::<Result<Vec<_>, _>>()?;
    let create_ms = created.elapsed().as_secs_f64() * 1e3;
    let voted = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for store in &stores {
        let mut store = store.clone();
        tasks.spawn(async move { store.save_vote(&openraft::Vote::new(1, 1)).await });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let vote_ms = voted.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    // Ten entries per group per round, every group at once: group commit
    // shares the syncs.
    for round in 0..entries.div_ceil(10) {
        let mut tasks = tokio::task::JoinSet::new();
        for store in &stores {
            let mut store = store.clone();
            let first = round * 10 + 1;
            let last = (first + 9).min(entries);
            tasks.spawn(async move {
                let batch = (first..=last).map(|i| Entry::<Strings> {
                    log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
                    payload: EntryPayload::Normal("v".repeat(100)),
                });
                store.blocking_append(batch).await
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
    }
    let bytes = engine.commit_log().max_offset();
    let write_ms = started.elapsed().as_secs_f64() * 1e3;
    let dir_str = dir.to_string_lossy().into_owned();
    let mappings = std::fs::read_to_string("/proc/self/maps")?.lines().filter(|l| l.contains(&dir_str)).count();
    println!(
        "{{\"case\": \"write\", \"groups\": {groups}, \"entries\": {entries}, \"log_mib\": {:.1}, \"create_ms\": {create_ms:.1}, \"vote_ms\": {vote_ms:.1}, \"write_ms\": {write_ms:.1}, \"raft_files\": {}, \"mappings\": {mappings}}}",
        bytes as f64 / (1 << 20) as f64,
        files_under(&dir.join("raft")),
    );
    engine.shutdown()?;
    drop((engine, stores));

    for case in ["after a clean shutdown", "with the index lost", "after a clean shutdown, warm"] {
        if case == "with the index lost" {
            for file in std::fs::read_dir(dir.join(RAFT_DIR).join(QUEUE_INDEX_DIR))? {
                std::fs::remove_file(file?.path())?;
            }
        }
        let engine = RaftLogEngine::<Strings>::open(dir, config.clone())?;
        let recovery = engine.recovery();
        println!(
            "{{\"case\": \"{case}\", \"groups\": {}, \"replayed_from\": {}, \"records_replayed\": {}, \"index_rebuilt\": {}, \"open_ms\": {:.1}}}",
            recovery.groups,
            recovery.replayed_from,
            recovery.records_replayed,
            recovery.index_rebuilt,
            recovery.elapsed.as_secs_f64() * 1e3
        );
        engine.shutdown()?;
    }
    Ok(())
}
