//! `commitlog bench`: each flush mode, side by side, in one run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use commitlog::{CommitLog, FlushStats};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::bench_doc::{self, Doc, Latency, Row};
use crate::table::render;
use crate::{io, log_config, CliError, FlushArg};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Sync flush: each producer waits for its record to be durable (group commit).
    Sync,
    /// Async flush straight into the mapping.
    Async,
    /// Async flush through the off-heap write-buffer pool.
    AsyncPool,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
            Mode::AsyncPool => "async-pool",
        }
    }
}

/// How segments are written (`write_without_mmap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// `pwrite` + `fdatasync`, read through a read-only mapping (the default).
    Pwrite,
    /// Copies into a read-write mapping, synced with `msync`.
    Mmap,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Pwrite => "pwrite",
            Backend::Mmap => "mmap",
        }
    }
}

#[derive(Args)]
pub struct BenchArgs {
    /// Directory for the logs (kept afterwards); default: a temporary one, removed.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Record body size in bytes (1 to 1 GiB; at most what fits in a segment).
    #[arg(long, default_value_t = 1024, value_parser = crate::args::count_in::<usize>(1 << 30))]
    record_size: usize,
    /// Producer threads per mode (1 to 1024).
    #[arg(long, default_value_t = 4, value_parser = crate::args::count_in::<usize>(1024))]
    producers: usize,
    /// Records per mode, 1 to 100 million (the run stops at this count or the
    /// duration, whichever first).
    #[arg(long, default_value_t = 200_000, value_parser = crate::args::count_in::<u64>(100_000_000))]
    count: u64,
    /// Longest run per mode, in seconds (positive, at most a day).
    #[arg(long, default_value = "8", value_parser = crate::args::duration_secs)]
    duration_secs: Duration,
    /// Segment size in bytes (a multiple of 4096 below 4 GiB).
    #[arg(long, default_value_t = 64 << 20, value_parser = crate::args::segment_size)]
    segment_size: usize,
    /// Modes to run (repeat or comma-separate); default: all.
    #[arg(long, value_enum, value_delimiter = ',')]
    mode: Vec<Mode>,
    /// How segments are written.
    #[arg(long, value_enum, default_value = "pwrite")]
    backend: Backend,
    /// Print the results document (JSON, format `commitlog-bench/1`) instead of
    /// a table; keep it as a baseline for another machine or configuration.
    #[arg(long)]
    json: bool,
    /// A results document of an earlier run (`--json`, or `cargo xtask
    /// bench-compare`'s docs/benchmarks.json): print this run side by side with
    /// it, as ratios (on stderr with `--json`).
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Write the plot of this run (and of the baseline, if given) to FILE as SVG.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(Serialize)]
struct ModeResult {
    mode: Mode,
    producers: usize,
    record_size: usize,
    records: u64,
    seconds: f64,
    records_per_sec: f64,
    mb_per_sec: f64,
    append_latency: Latency,
    ack_latency: Option<Latency>,
    flushes: u64,
    records_per_flush: Option<f64>,
    backend: Backend,
    /// The records asked for (`--count`, rounded up to whole producers).
    records_asked: u64,
    /// The mode stopped at `--duration-secs` before `--count` was reached.
    stopped_at_duration: bool,
}

fn run_mode(mode: Mode, args: &BenchArgs, dir: &std::path::Path) -> Result<ModeResult, CliError> {
    let (flush, pool) = match mode {
        Mode::Sync => (FlushArg::Sync, false),
        Mode::Async => (FlushArg::Async, false),
        Mode::AsyncPool => (FlushArg::Async, true),
    };
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(format!("clearing {}", dir.display())))?;
    }
    let mut config = log_config(dir, flush, pool, Some(args.segment_size), &crate::SegmentPathArgs::default())?;
    if args.record_size > config.max_message_size {
        return Err(CliError::Usage(format!(
            "--record-size {} exceeds the limit {} for this segment size",
            args.record_size, config.max_message_size
        )));
    }
    config.max_message_size = config.max_message_size.max(args.record_size);
    config.write_without_mmap = args.backend == Backend::Pwrite;
    let log = CommitLog::open(dir, config)?;
    let producers = args.producers;
    let per_producer = args.count.div_ceil(producers as u64);
    let deadline = Instant::now() + args.duration_secs;
    let done = Arc::new(AtomicU64::new(0));
    let bar = ProgressBar::new(per_producer * producers as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>10} {bar:30} {pos}/{len} records {elapsed}").expect("valid template"),
    );
    bar.set_prefix(mode.name());
    let started = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let (log, done) = (log.clone(), Arc::clone(&done));
            let body = vec![p as u8; args.record_size];
            let wait = mode == Mode::Sync;
            std::thread::spawn(move || -> Result<(Vec<u64>, Vec<u64>), commitlog::Error> {
                let mut append = Vec::with_capacity(per_producer as usize);
                let mut ack = Vec::with_capacity(if wait { per_producer as usize } else { 0 });
                for i in 0..per_producer {
                    if i % 256 == 0 && Instant::now() >= deadline {
                        break;
                    }
                    let t0 = Instant::now();
                    let put = log.append(&body)?;
                    append.push(t0.elapsed().as_nanos() as u64);
                    if wait {
                        put.durability.wait()?;
                        ack.push(t0.elapsed().as_nanos() as u64);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok((append, ack))
            })
        })
        .collect();
    while !threads.iter().all(|t| t.is_finished()) {
        bar.set_position(done.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut append = Vec::new();
    let mut ack = Vec::new();
    for t in threads {
        let (a, k) = t.join().map_err(|_| CliError::Input("a producer thread panicked".into()))??;
        append.extend(a);
        ack.extend(k);
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let stats: FlushStats = log.flush_stats();
    log.shutdown()?;
    let records = append.len() as u64;
    let records_asked = per_producer * producers as u64;
    let stopped_at_duration = records < records_asked;
    // Said as each mode ends, on stderr (the bar shows only on a terminal).
    if stopped_at_duration {
        eprintln!(
            "bench: {}: {records} of {records_asked} records in {seconds:.1} s: stopped at --duration-secs {}",
            mode.name(),
            args.duration_secs.as_secs_f64()
        );
    } else {
        eprintln!("bench: {}: {records} records in {seconds:.1} s", mode.name());
    }
    let flushes = if mode == Mode::Sync { stats.group_commit.flushes } else { stats.periodic_flushes };
    Ok(ModeResult {
        mode,
        producers,
        record_size: args.record_size,
        records,
        seconds,
        records_per_sec: records as f64 / seconds,
        mb_per_sec: (records * (args.record_size + commitlog::format::HEADER_SIZE) as u64) as f64 / seconds / 1e6,
        append_latency: Latency::of(append).unwrap_or_default(),
        ack_latency: Latency::of(ack),
        flushes,
        records_per_flush: (mode == Mode::Sync && flushes > 0).then(|| records as f64 / flushes as f64),
        backend: args.backend,
        records_asked,
        stopped_at_duration,
    })
}

impl Mode {
    fn title(self, producers: usize) -> String {
        match self {
            Mode::Sync => format!("sync: {producers} producers, each waits for its record to be durable"),
            Mode::Async => format!("async: {producers} producers, flushed in the background"),
            Mode::AsyncPool => format!("async-pool: {producers} producers, through the write-buffer pool"),
        }
    }
}

/// The results document's row of one mode: its unit of latency is the
/// acknowledged record where producers wait, else the append.
fn row(r: &ModeResult, segment_size: usize) -> Row {
    Row {
        workload: r.mode.name().into(),
        title: r.mode.title(r.producers),
        system: "commitlog".into(),
        config: format!(
            "{}, {} producers, {} B records, {} MiB segments",
            r.backend.name(),
            r.producers,
            r.record_size,
            segment_size >> 20
        ),
        ours: true,
        records_per_sec: r.records_per_sec,
        min_records_per_sec: None,
        max_records_per_sec: None,
        mb_per_sec: r.mb_per_sec,
        latency: Some(r.ack_latency.unwrap_or(r.append_latency)),
        detail: serde_json::to_value(r).expect("serialisable"),
    }
}

pub fn run(args: BenchArgs) -> Result<(), CliError> {
    // Read the baseline first: a wrong file should not cost a whole run.
    let baseline = match &args.baseline {
        Some(path) => Some(Doc::read(path).map_err(|e| CliError::Input(format!("baseline {}: {e}", path.display())))?),
        None => None,
    };
    let modes = if args.mode.is_empty() { vec![Mode::Sync, Mode::Async, Mode::AsyncPool] } else { args.mode.clone() };
    let temp;
    let root = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().map_err(io("creating a temporary directory"))?;
            temp.path().to_path_buf()
        }
    };
    let mut results = Vec::new();
    eprintln!(
        "bench: {} mode(s), each up to {} records or {} s, in {}",
        modes.len(),
        args.count,
        args.duration_secs.as_secs_f64(),
        root.display()
    );
    for mode in modes {
        eprintln!("bench: {}: opening a log and running {} producers...", mode.name(), args.producers);
        results.push(run_mode(mode, &args, &root.join(mode.name()))?);
    }
    let doc = Doc::new(&root, results.iter().map(|r| row(r, args.segment_size)).collect());
    if let Some(path) = &args.plot {
        std::fs::write(path, bench_doc::svg(&doc, baseline.as_ref()))
            .map_err(io(format!("writing the plot {}", path.display())))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&doc).expect("serialisable"))?;
        if let Some(baseline) = &baseline {
            eprintln!("{}", bench_doc::ratio_table(&doc, baseline));
        }
        return Ok(());
    }
    let us = |v: f64| format!("{v:.1}");
    let mut rows = vec![[
        "mode",
        "backend",
        "records",
        "rec/s",
        "MB/s",
        "append p50",
        "p99",
        "p99.9",
        "max",
        "ack p50",
        "p99",
        "p99.9",
        "flushes",
        "rec/flush",
    ]
    .map(String::from)
    .to_vec()];
    for r in &results {
        let ack = r.ack_latency;
        rows.push(vec![
            r.mode.name().to_string(),
            r.backend.name().to_string(),
            r.records.to_string(),
            format!("{:.0}", r.records_per_sec),
            format!("{:.1}", r.mb_per_sec),
            us(r.append_latency.p50_us),
            us(r.append_latency.p99_us),
            us(r.append_latency.p999_us),
            us(r.append_latency.max_us),
            ack.map_or("-".into(), |a| us(a.p50_us)),
            ack.map_or("-".into(), |a| us(a.p99_us)),
            ack.map_or("-".into(), |a| us(a.p999_us)),
            r.flushes.to_string(),
            r.records_per_flush.map_or("-".into(), |v| format!("{v:.1}")),
        ]);
    }
    outln!(
        "{} producers, {}-byte records, {}-byte segments; latencies in microseconds",
        args.producers,
        args.record_size,
        args.segment_size
    )?;
    out!("{}", render(&rows))?;
    for r in results.iter().filter(|r| r.stopped_at_duration) {
        outln!(
            "{}: stopped at --duration-secs {} after {} of {} records",
            r.mode.name(),
            args.duration_secs.as_secs_f64(),
            r.records,
            r.records_asked
        )?;
    }
    if let Some(baseline) = &baseline {
        out!("\n{}", bench_doc::ratio_table(&doc, baseline))?;
    }
    Ok(())
}
