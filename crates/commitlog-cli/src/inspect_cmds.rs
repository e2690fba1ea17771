//! `consume`, `verify`, `stat` (read-only) and `recover`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use commitlog::inspect::{self, Listing, Problem};
use commitlog::CommitLog;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::table::render;
use crate::{existing_dir, io, log_config, CliError, FlushArg};

#[derive(Args)]
pub struct DirArgs {
    /// Store directory.
    #[arg(long)]
    dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ConsumeArgs {
    /// Store directory.
    #[arg(long)]
    dir: PathBuf,
    /// Offset of the first record to print (default: the first record).
    #[arg(long, value_name = "OFFSET")]
    from: Option<u64>,
    /// Print bodies as hex.
    #[arg(long)]
    hex: bool,
    /// Keep printing records as they become durable (the checkpoint's flushed
    /// offset), like `tail -f`; Ctrl-C ends it cleanly. Only durable records are
    /// printed, so nothing shown can be taken back by a crash.
    #[arg(long)]
    follow: bool,
}

/// How often `consume --follow` looks for newly durable records.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// One record as `consume` prints it: `OFFSET<TAB>BODY` (the body as hex with `--hex`).
fn print_record(out: &mut impl Write, hex_body: bool, offset: u64, body: &[u8]) -> std::io::Result<()> {
    if hex_body {
        writeln!(out, "{offset}\t{}", hex(body))
    } else {
        write!(out, "{offset}\t").and_then(|()| out.write_all(body)).and_then(|()| out.write_all(b"\n"))
    }
}

/// Output errors end `consume` quietly when the reader went away (`| head`).
fn finish_output(result: std::io::Result<()>) -> Result<(), CliError> {
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(io("writing to stdout")),
    }
}

/// `consume --follow`: prints the records below the durable offset from `from`
/// (or the first record), then every 100 ms whatever became durable since, until
/// Ctrl-C (or SIGTERM).
fn follow(args: &ConsumeArgs) -> Result<(), CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| CliError::Input(format!("cannot handle Ctrl-C: {e}")))?;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut next = args.from;
    while !stop.load(Ordering::SeqCst) {
        let listing = listing(&args.dir)?;
        let durable = inspect::store_files(&args.dir).checkpoint.map_or(0, |c| c.flushed_offset);
        if let Some(first) = listing.segments.first() {
            let at = *next.get_or_insert(first.start_offset);
            if at < first.start_offset {
                eprintln!(
                    "commitlog: warning: records before {} were deleted; going on from there",
                    first.start_offset
                );
                next = Some(first.start_offset);
            }
        }
        if let Some(at) = next {
            match print_durable(&listing, at, durable, args.hex, &mut out) {
                Ok(reached) => next = Some(reached),
                Err(CliError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        if let Err(e) = out.flush() {
            return finish_output(Err(e));
        }
        std::thread::sleep(FOLLOW_POLL);
    }
    finish_output(out.flush())
}

/// Prints the records from `next` up to `durable`, crossing segments; returns
/// where it stopped (the next record to print once more is durable).
fn print_durable(
    listing: &Listing,
    mut next: u64,
    durable: u64,
    hex_body: bool,
    out: &mut impl Write,
) -> Result<u64, CliError> {
    let size = listing.segment_size.max(1);
    while next < durable {
        let Some(segment) = listing.segments.iter().find(|s| s.start_offset <= next && next < s.start_offset + size)
        else {
            break; // not created yet, or not listed yet
        };
        let pos = next - segment.start_offset;
        let end = durable.saturating_sub(segment.start_offset).min(size);
        let bytes = inspect::read_segment_range(segment, pos, (end - pos) as usize)?;
        let mut written = Ok(());
        let scan = inspect::scan_segment(&bytes, next, 0, |offset, _, body| {
            if written.is_ok() {
                written = print_record(out, hex_body, offset, body);
            }
        });
        written.map_err(io("writing to stdout"))?;
        if !scan.ends_with_blank {
            // The durable end, or a record not wholly durable yet: later.
            return Ok(scan.end_offset);
        }
        next = segment.start_offset + size;
    }
    Ok(next)
}

fn listing(dir: &std::path::Path) -> Result<Listing, CliError> {
    existing_dir(dir)?;
    Ok(inspect::list_segments(dir)?)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Prints the valid prefix of the log from `--from`, without changing anything.
pub fn consume(args: ConsumeArgs) -> Result<(), CliError> {
    if args.follow {
        return follow(&args);
    }
    let listing = listing(&args.dir)?;
    for p in &listing.problems {
        eprintln!("commitlog: warning: {}: {}", p.path.display(), p.message);
    }
    let Some(first) = listing.segments.first() else { return Ok(()) };
    let from = args.from.unwrap_or(first.start_offset);
    let size = listing.segment_size.max(1);
    let start = listing
        .segments
        .iter()
        .position(|s| s.start_offset <= from && from < s.start_offset + size)
        .ok_or_else(|| CliError::Input(format!("offset {from} is outside the log")))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut write_error = None;
    let mut expected = listing.segments[start].start_offset;
    for (i, segment) in listing.segments[start..].iter().enumerate() {
        if segment.start_offset != expected {
            break; // a gap: the valid prefix ends here
        }
        let bytes = inspect::read_segment(segment)?;
        let from_pos = if i == 0 { (from - segment.start_offset) as usize } else { 0 };
        let scan = inspect::scan_segment(&bytes, segment.start_offset, from_pos, |offset, _, body| {
            if write_error.is_some() {
                return;
            }
            if let Err(e) = print_record(&mut out, args.hex, offset, body) {
                write_error = Some(e);
            }
        });
        if i == 0 && scan.records == 0 && !scan.ends_with_blank && from_pos > 0 {
            if let Some((offset, reason)) = scan.invalid {
                return Err(CliError::Input(format!("no record at offset {offset}: {reason}")));
            }
        }
        if !scan.ends_with_blank {
            break;
        }
        expected = segment.start_offset + size;
    }
    let flushed = out.flush();
    finish_output(write_error.map_or(flushed, Err))
}

#[derive(Serialize)]
struct SegmentReport {
    file: String,
    start_offset: u64,
    bytes: u64,
    records: u64,
    first_offset: Option<u64>,
    last_offset: Option<u64>,
    end_offset: u64,
}

#[derive(Serialize)]
struct ProblemReport {
    file: String,
    offset: Option<u64>,
    message: String,
}

impl From<&Problem> for ProblemReport {
    fn from(p: &Problem) -> Self {
        ProblemReport { file: p.path.display().to_string(), offset: p.offset, message: p.message.clone() }
    }
}

#[derive(Serialize)]
struct VerifyReport {
    dir: String,
    segments: Vec<SegmentReport>,
    records: u64,
    first_offset: Option<u64>,
    last_offset: Option<u64>,
    end_offset: Option<u64>,
    checkpoint_flushed_offset: Option<u64>,
    problems: Vec<ProblemReport>,
}

fn name(path: &std::path::Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Scans every segment and record with CRC checks, changing nothing.
pub fn verify(args: DirArgs) -> Result<(), CliError> {
    let listing = listing(&args.dir)?;
    let files = inspect::store_files(&args.dir);
    let durable = files.checkpoint.map(|c| c.flushed_offset);
    let mut problems: Vec<ProblemReport> = listing.problems.iter().map(ProblemReport::from).collect();
    if let Some(p) = &files.checkpoint_problem {
        problems.push(ProblemReport { file: "checkpoint".into(), offset: None, message: p.clone() });
    }
    let bar = ProgressBar::new(listing.segments.len() as u64);
    bar.set_style(ProgressStyle::with_template("verifying {bar:30} {pos}/{len} segments").expect("valid template"));
    let mut segments = Vec::new();
    let mut ended_at: Option<u64> = None;
    let count = listing.segments.len();
    for (i, segment) in listing.segments.iter().enumerate() {
        bar.inc(1);
        if segment.len != listing.segment_size {
            continue; // already reported
        }
        let bytes = inspect::read_segment(segment)?;
        let scan = inspect::scan_segment(&bytes, segment.start_offset, 0, |_, _, _| {});
        if let Some((offset, reason)) = scan.invalid {
            let kind = match durable {
                Some(d) if offset < d => "corrupt record below the checkpoint",
                _ => "invalid record (a torn tail; `commitlog recover` truncates it)",
            };
            problems.push(ProblemReport {
                file: name(&segment.path),
                offset: Some(offset),
                message: format!("{kind}: {reason}"),
            });
        } else if !scan.ends_with_blank && i + 1 < count {
            problems.push(ProblemReport {
                file: name(&segment.path),
                offset: Some(scan.end_offset),
                message: "data ends before the segment is full, but later segments exist".into(),
            });
        }
        if ended_at.is_none() && !scan.ends_with_blank {
            ended_at = Some(scan.end_offset);
        }
        segments.push(SegmentReport {
            file: name(&segment.path),
            start_offset: segment.start_offset,
            bytes: segment.len,
            records: scan.records,
            first_offset: scan.first_offset,
            last_offset: scan.last_offset,
            end_offset: scan.end_offset,
        });
    }
    bar.finish_and_clear();
    let end_offset = ended_at.or_else(|| segments.last().map(|s| s.end_offset));
    if let (Some(d), Some(end)) = (durable, end_offset) {
        if end < d {
            problems.push(ProblemReport {
                file: "checkpoint".into(),
                offset: Some(d),
                message: format!("checkpoint says data is durable up to {d}, but valid data ends at {end}"),
            });
        }
    }
    let report = VerifyReport {
        dir: args.dir.display().to_string(),
        records: segments.iter().map(|s| s.records).sum(),
        first_offset: segments.iter().find_map(|s| s.first_offset),
        last_offset: segments.iter().rev().find_map(|s| s.last_offset),
        end_offset,
        checkpoint_flushed_offset: durable,
        segments,
        problems,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    } else {
        let mut rows = vec![vec!["segment", "records", "first", "last", "end"].into_iter().map(String::from).collect()];
        for s in &report.segments {
            let opt = |o: Option<u64>| o.map_or("-".to_string(), |v| v.to_string());
            rows.push(vec![
                s.file.clone(),
                s.records.to_string(),
                opt(s.first_offset),
                opt(s.last_offset),
                s.end_offset.to_string(),
            ]);
        }
        print!("{}", render(&rows));
        println!(
            "{} segments, {} records, first offset {}, last offset {}",
            report.segments.len(),
            report.records,
            report.first_offset.map_or("-".into(), |o| o.to_string()),
            report.last_offset.map_or("-".into(), |o| o.to_string())
        );
        for p in &report.problems {
            println!("problem: {} at {}: {}", p.file, p.offset.map_or("-".into(), |o| o.to_string()), p.message);
        }
        if report.problems.is_empty() {
            println!("clean");
        }
    }
    match report.problems.len() {
        0 => Ok(()),
        n => Err(CliError::Problems(n)),
    }
}

#[derive(Serialize)]
struct RecoverReport {
    dir: String,
    clean_shutdown: bool,
    checkpoint_offset: u64,
    scanned_from: u64,
    records_scanned: u64,
    end_offset: u64,
    bytes_truncated: u64,
    segments_deleted: usize,
    stopped_at: Option<String>,
}

/// Opens the log (running recovery) and shuts it down cleanly.
pub fn recover(args: DirArgs) -> Result<(), CliError> {
    existing_dir(&args.dir)?;
    inspect::check_store_dir(&args.dir)?;
    let config = log_config(&args.dir, FlushArg::Async, false, None)?;
    let log = CommitLog::open(&args.dir, config)?;
    let r = log.recovery_report().clone();
    log.shutdown()?;
    let report = RecoverReport {
        dir: args.dir.display().to_string(),
        clean_shutdown: r.clean_shutdown,
        checkpoint_offset: r.durable_offset,
        scanned_from: r.scanned_from,
        records_scanned: r.records_recovered,
        end_offset: r.end_offset,
        bytes_truncated: r.bytes_truncated,
        segments_deleted: r.segments_deleted,
        stopped_at: r.stopped_at.map(|(o, reason)| format!("{o}: {reason}")),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    } else {
        println!(
            "{}: {} recovery",
            report.dir,
            if report.clean_shutdown { "normal (clean shutdown)" } else { "abnormal (abort marker found)" }
        );
        println!("checkpoint offset   {}", report.checkpoint_offset);
        println!("scanned from        {}", report.scanned_from);
        println!("records scanned     {}", report.records_scanned);
        println!("end offset          {}", report.end_offset);
        println!("bytes truncated     {}", report.bytes_truncated);
        println!("segments deleted    {}", report.segments_deleted);
        if let Some(s) = &report.stopped_at {
            println!("stopped at          {s}");
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct StatReport {
    dir: String,
    segments: Vec<(String, u64)>,
    segment_size: u64,
    total_bytes: u64,
    min_offset: Option<u64>,
    max_offset: Option<u64>,
    flushed_offset: Option<u64>,
    checkpoint_timestamp_ms: Option<u64>,
    checkpoint_problem: Option<String>,
    abort_marker: bool,
    abort_pid: Option<u32>,
    locked: bool,
    problems: Vec<ProblemReport>,
}

/// Prints the store's shape without changing anything.
pub fn stat(args: DirArgs) -> Result<(), CliError> {
    let listing = listing(&args.dir)?;
    let files = inspect::store_files(&args.dir);
    // The end of valid data: scan forward from the checkpoint's segment.
    let size = listing.segment_size.max(1);
    let from = files.checkpoint.map_or(0, |c| c.flushed_offset);
    let mut max_offset = None;
    let start =
        listing.segments.iter().position(|s| s.start_offset <= from && from < s.start_offset + size).unwrap_or(0);
    for segment in listing.segments.iter().skip(start).filter(|s| s.len == listing.segment_size) {
        let bytes = inspect::read_segment(segment)?;
        let scan = inspect::scan_segment(&bytes, segment.start_offset, 0, |_, _, _| {});
        max_offset = Some(scan.end_offset);
        if !scan.ends_with_blank {
            break;
        }
    }
    let report = StatReport {
        dir: args.dir.display().to_string(),
        segments: listing.segments.iter().map(|s| (name(&s.path), s.len)).collect(),
        segment_size: listing.segment_size,
        total_bytes: listing.segments.iter().map(|s| s.len).sum(),
        min_offset: listing.segments.first().map(|s| s.start_offset),
        max_offset,
        flushed_offset: files.checkpoint.map(|c| c.flushed_offset),
        checkpoint_timestamp_ms: files.checkpoint.map(|c| c.physic_msg_timestamp),
        checkpoint_problem: files.checkpoint_problem.clone(),
        abort_marker: files.abort_marker,
        abort_pid: files.abort_pid,
        locked: files.locked,
        problems: listing.problems.iter().map(ProblemReport::from).collect(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
        return Ok(());
    }
    let opt = |o: Option<u64>| o.map_or("-".to_string(), |v| v.to_string());
    let mut rows = vec![vec!["segment".to_string(), "bytes".to_string()]];
    rows.extend(report.segments.iter().map(|(n, b)| vec![n.clone(), b.to_string()]));
    print!("{}", render(&rows));
    println!(
        "segments            {} of {} bytes ({} bytes in all)",
        report.segments.len(),
        report.segment_size,
        report.total_bytes
    );
    println!("min offset          {}", opt(report.min_offset));
    println!("max offset          {}", opt(report.max_offset));
    println!("flushed offset      {} (checkpoint)", opt(report.flushed_offset));
    println!("checkpoint time     {} ms", opt(report.checkpoint_timestamp_ms));
    if let Some(p) = &report.checkpoint_problem {
        println!("checkpoint problem  {p}");
    }
    let abort = match (report.abort_marker, report.abort_pid) {
        (true, Some(pid)) => format!("present (pid {pid}): open now, or the last process died"),
        (true, None) => "present: open now, or the last process died".into(),
        (false, _) => "absent: shut down cleanly".into(),
    };
    println!("abort marker        {abort}");
    println!("locked              {}", if report.locked { "yes, by a running process" } else { "no" });
    for p in &report.problems {
        println!("problem: {}: {}", p.file, p.message);
    }
    Ok(())
}
