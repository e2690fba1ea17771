//! Many queues in one store: creates a topic of `--queues` queues (50,000 by
//! default) on a real disk, puts `--rounds` messages on every queue (1 KiB,
//! round-robin, async flush), reads every queue back, and reports throughput,
//! the process's resident memory, open files and mappings (against
//! `ulimit -n` and `vm.max_map_count`), disk use, and memory per idle queue.
//! Then consumer offsets: every queue's offset committed by as many groups as
//! make `--offsets` (1,000,000) in all, in batches, then single commits from
//! `--committers` threads (8), and the time a reopen takes to load them.
//! Last, a killed store: a child process of this example puts the same
//! messages into a new store, waits until they are dispatched, and is killed
//! (SIGKILL); the time its reopen takes is printed with the log it dispatched
//! again (what the queue index had not sealed).
//! `cargo xtask scale` runs it; docs/message-store.md quotes it.
//!
//! ```text
//! cargo run --release -p message-store --example scale -- [--queues N] [--rounds R] [--offsets N] [--committers T] [--dir DIR]
//! ```

use std::path::Path;
use std::time::Instant;

use commitlog::{CommitLogConfig, FlushDiskType};
use message_store::{GetRequest, Message, MessageStore, MessageStoreConfig};

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A field of `/proc/self/status` in KiB (`VmRSS`), 0 where there is none.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn count(path: &str) -> usize {
    std::fs::read_dir(path).map_or(0, |d| d.count())
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |s| s.lines().count())
}

fn disk_kib(dir: &Path) -> u64 {
    let out = std::process::Command::new("du").arg("-sk").arg(dir).output();
    out.ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn limit(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "?".into(), |s| s.trim().to_string())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(dir) = args.iter().position(|a| a == "--killed-child").and_then(|i| args.get(i + 1)) {
        return killed_child(Path::new(dir), &args);
    }
    let queues = u32::try_from(arg(&args, "--queues", 50_000))?;
    let rounds = arg(&args, "--rounds", 2);
    let scratch = tempfile::tempdir()?;
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| scratch.path().to_path_buf(), std::path::PathBuf::from);
    let nofile = std::process::Command::new("sh").args(["-c", "ulimit -n"]).output()?;
    println!(
        "scale: {queues} queues x {rounds} messages of 1 KiB; ulimit -n {}, vm.max_map_count {}",
        String::from_utf8_lossy(&nofile.stdout).trim(),
        limit("/proc/sys/vm/max_map_count")
    );
    let config = store_config(queues)?;
    let rss_before = status_kib("VmRSS");
    let started = Instant::now();
    let store = MessageStore::open(&dir, config)?;
    store.create_topic("wide", queues)?;
    let rss_topic = status_kib("VmRSS");
    println!(
        "topic created in {:.2?}: {:.0} bytes of memory per queue never used",
        started.elapsed(),
        (rss_topic.saturating_sub(rss_before) * 1024) as f64 / f64::from(queues)
    );
    let body = vec![b'x'; 1024];
    let started = Instant::now();
    let mut peak_files = 0;
    let mut peak_maps = 0;
    let mut put = 0u64;
    for round in 0..rounds {
        for queue in 0..queues {
            store.put_message(&Message::new("wide", queue, body.clone()))?;
            put += 1;
            // Sampled every 5,000 puts: reading /proc costs more than a put.
            if put.is_multiple_of(5000) {
                peak_files = peak_files.max(count("/proc/self/fd"));
                peak_maps = peak_maps.max(mappings());
            }
        }
        if rounds <= 16 {
            println!("round {round}: {:.2?}", started.elapsed());
        }
    }
    let puts = u64::from(queues) * rounds;
    let put_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for queue in (0..queues).rev() {
        if !store.wait_for("wide", queue, rounds - 1, std::time::Duration::from_secs(60))?.arrived() {
            return Err(format!("queue {queue} was not dispatched within a minute").into());
        }
    }
    let dispatch_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut read = 0u64;
    for queue in 0..queues {
        let mut offset = 0;
        while offset < rounds {
            let got = store.get_messages(&GetRequest::new("wide", queue, offset).max_count(64).max_bytes(u64::MAX))?;
            if got.messages.is_empty() {
                return Err(format!("queue {queue}: nothing read at offset {offset} ({:?})", got.status).into());
            }
            read += got.messages.len() as u64;
            offset = got.next_offset;
        }
        if queue % 5000 == 0 {
            peak_files = peak_files.max(count("/proc/self/fd"));
            peak_maps = peak_maps.max(mappings());
        }
    }
    assert_eq!(read, puts, "every message read back");
    let read_secs = started.elapsed().as_secs_f64();
    let stats = store.stats();
    let rss_after = status_kib("VmRSS");
    println!(
        "puts: {puts} in {put_secs:.2}s ({:.0}/s); dispatch caught up {dispatch_secs:.2}s after; reads: {read} in {read_secs:.2}s ({:.0}/s)",
        puts as f64 / put_secs,
        read as f64 / read_secs
    );
    println!(
        "queue index: {} runs, {} entries in memory; peak open files {peak_files}, peak mappings {peak_maps}",
        stats.index_runs, stats.index_active_entries
    );
    // Idle queues leave memory at the next thorough flush; the index keeps
    // each one's extent (and the entries not sealed yet).
    store.seal_index()?;
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while store.stats().queues_in_use > 0 && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let idle = store.stats();
    println!(
        "idle: {} queues in use, index heap {:.0} bytes per queue (extents; every entry sealed)",
        idle.queues_in_use,
        idle.index_heap_bytes as f64 / f64::from(queues)
    );
    println!(
        "resident memory {} MiB ({:.0} bytes per queue, mapped runs' pages included), disk {} MiB",
        rss_after / 1024,
        (rss_after.saturating_sub(rss_before) * 1024) as f64 / f64::from(queues),
        disk_kib(&dir) / 1024
    );
    offsets(&store, &dir, queues, rounds, &args)?;
    store.shutdown()?;
    let started = Instant::now();
    let reopened = MessageStore::open(&dir, store_config(queues)?)?;
    println!(
        "reopened in {:.2?} with {} consumer offsets (clean {})",
        started.elapsed(),
        reopened.stats().consumer_offsets,
        reopened.log().recovery_report().clean_shutdown
    );
    reopened.shutdown()?;
    drop(reopened);
    killed(&dir.join("killed"), queues, rounds)
}

/// Puts `--rounds` messages on every one of `--queues` queues into a new
/// store in `dir`, waits until they are dispatched, says so on stdout and
/// waits to be killed.
fn killed_child(dir: &Path, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let queues = u32::try_from(arg(args, "--queues", 50_000))?;
    let rounds = arg(args, "--rounds", 2);
    let config = store_config(queues)?;
    let store = MessageStore::open(dir, config)?;
    store.create_topic("wide", queues)?;
    let body = vec![b'x'; 1024];
    for _ in 0..rounds {
        for queue in 0..queues {
            store.put_message(&Message::new("wide", queue, body.clone()))?;
        }
    }
    for queue in 0..queues {
        if !store.wait_for("wide", queue, rounds - 1, std::time::Duration::from_secs(60))?.arrived() {
            return Err(format!("queue {queue} was not dispatched within a minute").into());
        }
    }
    let stats = store.stats();
    println!("ready {} {}", store.log().max_offset(), stats.index_sealed_to);
    std::thread::sleep(std::time::Duration::from_secs(3600));
    Ok(())
}

/// Runs [`killed_child`] in a child process, kills it (SIGKILL) once its
/// messages are dispatched, and times the reopen.
fn killed(dir: &Path, queues: u32, rounds: u64) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["--killed-child", &dir.display().to_string()])
        .args(["--queues", &queues.to_string(), "--rounds", &rounds.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    child.kill()?;
    let status = child.wait()?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let [log_end, sealed_to] = fields[..] else {
        return Err(format!("the child process did not get ready ({status}): {line:?}").into());
    };
    let started = Instant::now();
    let reopened = MessageStore::open(dir, store_config(queues)?)?;
    let secs = started.elapsed().as_secs_f64();
    let report = reopened.open_report();
    let replayed = reopened.log().max_offset().saturating_sub(report.recovered_from);
    println!(
        "killed store: log {} MiB, queue index sealed to {sealed_to}; reopened in {secs:.2}s, {} messages ({} MiB of log) dispatched again",
        log_end >> 20,
        report.redispatched,
        replayed >> 20
    );
    for queue in [0, queues / 2, queues - 1] {
        let std::ops::Range { start: min, end: max } = reopened.queue_range("wide", queue)?;
        if (min, max) != (0, rounds) {
            return Err(format!("queue {queue} reopened with offsets {min}..{max}, not 0..{rounds}").into());
        }
    }
    reopened.shutdown()?;
    Ok(())
}

/// The store's config: room for a topic of `queues` queues (at least the default).
fn store_config(queues: u32) -> Result<MessageStoreConfig, commitlog::Error> {
    let config = MessageStoreConfig::new(store_log()?);
    Ok({
        let mut config = config;
        config.max_queues_per_topic = queues.max(config.max_queues_per_topic);
        config
    })
}

fn store_log() -> Result<CommitLogConfig, commitlog::Error> {
    CommitLogConfig::builder().mapped_file_size_commit_log(256 << 20).flush_disk_type(FlushDiskType::AsyncFlush).build()
}

/// Commits `--offsets` consumer offsets (every queue, by as many groups as
/// that takes) in batches of 1,000, then single commits from `--committers`
/// threads; prints the rates, the syncs they shared and the journal's size.
fn offsets(
    store: &MessageStore,
    dir: &Path,
    queues: u32,
    rounds: u64,
    args: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let total = arg(args, "--offsets", 1_000_000);
    let committers = arg(args, "--committers", 8);
    let groups = total.div_ceil(u64::from(queues)).max(1);
    let started = Instant::now();
    let syncs = store.stats().consumer_offset_syncs;
    let mut committed = 0u64;
    'groups: for group in 0..groups {
        let name = format!("g{group}");
        for chunk in (0..queues).collect::<Vec<_>>().chunks(1000) {
            let batch: Vec<(&str, u32, u64)> = chunk.iter().map(|&q| ("wide", q, rounds)).collect();
            store.commit_offsets(&name, &batch)?;
            committed += batch.len() as u64;
            if committed >= total {
                break 'groups;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "consumer offsets: {committed} committed in batches of 1,000 in {secs:.2}s ({:.0}/s, {} syncs)",
        committed as f64 / secs,
        store.stats().consumer_offset_syncs - syncs
    );
    let per_thread = 200_000 / committers.max(1);
    let syncs = store.stats().consumer_offset_syncs;
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..committers {
            s.spawn(move || {
                let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                for i in 0..per_thread {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let group = format!("g{}", x % groups);
                    let queue = u32::try_from((x >> 20) % u64::from(queues)).unwrap_or(0);
                    store.commit_offset(&group, "wide", queue, (rounds + i) % (rounds + 1)).expect("commit");
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let singles = per_thread * committers;
    let shared = store.stats().consumer_offset_syncs - syncs;
    println!(
        "consumer offsets: {singles} single commits from {committers} threads in {secs:.2}s ({:.0}/s, {shared} syncs: {:.1} commits each); journal {} KiB",
        singles as f64 / secs,
        singles as f64 / shared.max(1) as f64,
        disk_kib(&dir.join("config").join("offsets"))
    );
    Ok(())
}
