//! `cargo xtask raft-bench [--seconds S]`: openraft's storage API beside its own
//! durable stores, then the 3-node cluster's committed entries/s; both write
//! their sections of docs/benchmarks.md.

use std::path::Path;
use std::process::Command;

use crate::process::{cargo, run_timed};

/// Committed entries/s of the 3-node cluster for 1, 8 and 64 raft groups:
/// every group on one commit log, a commit log per group, and in memory; 3
/// rounds with the order rotating. The medians and their ratios go into
/// docs/benchmarks.md between the markers that bench-compare keeps.
pub fn run(seconds: u64) -> Result<(), String> {
    const GROUPS: [u64; 3] = [1, 8, 64];
    const STORES: [&str; 3] = ["commitlog", "separate", "memory"];
    raft_api(seconds.min(3))?;
    cargo(&["build", "-q", "--release", "-p", "commitlog-raft", "--example", "raft-node"], &[])?;
    let exe = Path::new("target/release/examples/raft-node");
    let secs = seconds.to_string();
    /// A run's committed entries/s, the group-0 leader's and the busiest node's
    /// log syncs per committed entry, and how many nodes led a group.
    type Run = (f64, f64, f64, f64);
    let mut rates: std::collections::BTreeMap<(u64, &str), Vec<Run>> = Default::default();
    for round in 0..3 {
        for groups in GROUPS {
            for k in 0..STORES.len() {
                let store = STORES[(k + round) % STORES.len()];
                // 32 clients for one group, 4 per group beyond (every group busy).
                let clients = (4 * groups).max(32).to_string();
                let groups_arg = groups.to_string();
                let args =
                    ["bench", "--store", store, "--groups", &groups_arg, "--seconds", &secs, "--clients", &clients];
                let out = run_timed(Command::new(exe), "raft-node", &args, &[], true)?;
                let run = (
                    json_number(&out, "committed_per_sec")?,
                    json_number(&out, "group0_leader_syncs_per_entry")?,
                    json_number(&out, "max_node_syncs_per_entry")?,
                    json_number(&out, "leading_nodes")?,
                );
                rates.entry((groups, store)).or_default().push(run);
            }
        }
    }
    let mut rows = String::new();
    for groups in GROUPS {
        let run = |store: &str| median_by(&rates[&(groups, store)], |r| r.0);
        let m = |store: &str| run(store).0;
        let runs =
            |store: &str| rates[&(groups, store)].iter().map(|r| format!("{:.0}", r.0)).collect::<Vec<_>>().join(", ");
        let syncs = |store: &str| format!("{:.2} / {:.2}", run(store).1, run(store).2);
        let leading = |store: &str| format!("{:.0}", run(store).3);
        rows.push_str(&format!(
            "| {groups} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x | {} | {} | {} / {} | {} / {} / {} |\n",
            m("commitlog"),
            m("separate"),
            m("memory"),
            m("commitlog") / m("separate"),
            m("commitlog") / m("memory"),
            syncs("commitlog"),
            syncs("separate"),
            leading("commitlog"),
            leading("separate"),
            runs("commitlog"),
            runs("separate"),
            runs("memory"),
        ));
    }
    let one = median_by(&rates[&(1, "commitlog")], |r| r.0).0;
    let eight = median_by(&rates[&(8, "commitlog")], |r| r.0).0;
    let section = format!(
        "<!-- raft-bench:start -->\n## Replicated log: a 3-node openraft cluster on loopback\n\n\
         `cargo xtask raft-bench` ({seconds} s per run; G raft groups per node, keys sharded over them; 32 clients for \
         one group, 4 per group beyond, each writing 100-byte values to its group's leader, a write counted once \
         committed and applied; 3 rounds, the order rotating; the `raft-node` example's processes, JSON over \
         TCP, snapshots off). *shared*: every group of a node on one commit log (`RaftLogEngine`); *separate*: \
         a commit log per group (its own syncs); *memory*: an in-memory log store reporting every append durable \
         at once (the ceiling). *syncs/entry*: log syncs (group-commit flushes that made bytes durable, \
         from each node's `Syncs` RPC before and after the run) per committed entry, of the node leading group 0 \
         / of the busiest node, in the median run; *leaders on*: how many nodes led a group in that run (one: \
         group 0's leader's figure is every group's leader's).\n\n\
         | groups | shared (entries/s) | separate | memory | shared / separate | shared / memory | syncs/entry shared | syncs/entry separate | leaders on (shared / separate) | runs (shared / separate / memory) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n{rows}\n\
         8 groups on one log: **{:.2}x** the 1-group figure. See docs/replication.md for where the time goes.\n\
         <!-- raft-bench:end -->\n",
        eight / one
    );
    print!("{section}");
    replace_section("docs/benchmarks.md", "raft-bench", &section)
}

/// The number after `"name": ` in a run's one-line JSON output.
fn json_number(out: &str, name: &str) -> Result<f64, String> {
    out.split(&format!("\"{name}\": "))
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|r| r.trim().parse::<f64>().ok())
        .ok_or(format!("no {name} in {out:?}"))
}

/// The run whose `key` is the median of `runs` (the upper one of an even count).
fn median_by<T: Copy>(runs: &[T], key: impl Fn(&T) -> f64) -> T {
    let mut runs = runs.to_vec();
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    runs[runs.len() / 2]
}

/// Writes `section` between `<!-- {marker}:start -->` and `<!-- {marker}:end -->`
/// of the document at `path` (appended if it has no such markers).
fn replace_section(path: &str, marker: &str, section: &str) -> Result<(), String> {
    let (start, end) = (format!("<!-- {marker}:start -->"), format!("<!-- {marker}:end -->\n"));
    let old = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let new = match (old.find(&start), old.find(end.trim_end())) {
        (Some(a), Some(b)) => {
            let b = (b + end.len()).min(old.len());
            format!("{}{section}{}", &old[..a], &old[b..])
        }
        _ => format!("{old}\n{section}"),
    };
    std::fs::write(path, new).map_err(|e| format!("{path}: {e}"))
}

/// `commitlog-raft` at openraft's storage API (append a batch, await its
/// callback) beside openraft's own durable stores, sled and RocksDB, built in
/// `raft-compare/` (the v1 storage trait, without the workspace's
/// `storage-v2`; RocksDB needs libclang): batches of 1 and 64 entries, 3
/// rounds with the order rotating; the medians go into docs/benchmarks.md.
fn raft_api(seconds: u64) -> Result<(), String> {
    const STORES: [&str; 3] = ["commitlog", "sled", "rocks"];
    const BATCHES: [u64; 2] = [1, 64];
    cargo(&["build", "-q", "--release", "-p", "commitlog-raft", "--example", "storage_api"], &[])?;
    cargo(&["build", "-q", "--release", "--manifest-path", "raft-compare/Cargo.toml", "--features", "rocks"], &[])
        .map_err(|e| {
            format!("{e}: raft-compare builds RocksDB, which needs libclang (apt-get install libclang-dev)")
        })?;
    let ours = Path::new("target/release/examples/storage_api");
    let peers = Path::new("raft-compare/target/release/commitlog-raft-compare");
    let secs = seconds.to_string();
    /// A run's entries/s, p50 and p99 (µs).
    type Run = (f64, f64, f64);
    let mut runs: std::collections::BTreeMap<(u64, &str), Vec<Run>> = Default::default();
    for round in 0..3 {
        for batch in BATCHES {
            for k in 0..STORES.len() {
                let store = STORES[(k + round) % STORES.len()];
                let batch_arg = batch.to_string();
                let out = if store == "commitlog" {
                    let args = ["--batch", batch_arg.as_str(), "--seconds", &secs];
                    run_timed(Command::new(ours), "storage_api", &args, &[], true)?
                } else {
                    let args = ["--store", store, "--batch", batch_arg.as_str(), "--seconds", &secs];
                    run_timed(Command::new(peers), "raft-compare", &args, &[], true)?
                };
                let figures =
                    (json_number(&out, "entries_per_sec")?, json_number(&out, "p50_us")?, json_number(&out, "p99_us")?);
                runs.entry((batch, store)).or_default().push(figures);
            }
        }
    }
    let median = |v: &[Run]| median_by(v, |r| r.0);
    let mut rows = String::new();
    for batch in BATCHES {
        let ours = median(&runs[&(batch, "commitlog")]);
        // rocksstore does not sync its appends: the durable peer is sled.
        let best = median(&runs[&(batch, "sled")]).0;
        for store in STORES {
            let (rate, p50, p99) = median(&runs[&(batch, store)]);
            let all = runs[&(batch, store)].iter().map(|r| format!("{:.0}", r.0)).collect::<Vec<_>>().join(", ");
            let ratio = if store == "commitlog" {
                format!("**{:.2}x** sled", ours.0 / best)
            } else {
                format!("{:.2}x", ours.0 / rate)
            };
            rows.push_str(&format!("| {batch} | {store} | {rate:.0} | {p50:.0} | {p99:.0} | {ratio} | {all} |\n"));
        }
    }
    let section = format!(
        "<!-- raft-api:start -->\n## Replicated log: openraft's storage API\n\n\
         `cargo xtask raft-bench` (its first part; {seconds} s per run): append a batch of entries (a key and a \
         100-byte value each) and await it, as `RaftCore` does, one batch at a time: `commitlog-raft` \
         (`examples/storage_api.rs`: `append`, then its flush callback) against openraft's own stores \
         `openraft-sledstore` 0.9 and `openraft-rocksstore` 0.9 (`raft-compare/`: `append_to_log`, the v1 \
         trait). sled's `append_to_log` flushes its log (`flush_async`) before it returns; rocksstore's writes \
         the entries with RocksDB's default write options, which do not sync the write-ahead log: its figures \
         are of an append that a power cut can take back, so the ratio that counts is to sled. 3 rounds, the \
         order rotating; medians.\n\n\
         | batch | store | entries/s | p50 (µs) | p99 (µs) | commitlog / this | runs (entries/s) |\n\
         |---|---|---|---|---|---|---|\n{rows}\
         <!-- raft-api:end -->\n"
    );
    print!("{section}");
    replace_section("docs/benchmarks.md", "raft-api", &section)
}
