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

/// Says on stderr where and why a read stopped at damage; the command then
/// exits 3, as `verify` does.
fn damage(message: String) -> CliError {
    eprintln!("commitlog: {message}; `commitlog verify` lists the damage, `commitlog recover --salvage` keeps the records before it (docs/operations.md)");
    CliError::Problems(1)
}

/// `consume --follow`: prints the records below the durable offset from `from`
/// (or the first record), then every 100 ms whatever became durable since, until
/// Ctrl-C (or SIGTERM). Damage below the durable offset ends it with exit 3.
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
        // The durable offset first: what it covers is in the segments listed after.
        let durable = inspect::store_files(&args.dir).checkpoint.map_or(0, |c| c.flushed_offset);
        let listing = listing(&args.dir)?;
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
            next = Some(print_durable(&listing, at, durable, args.hex, &mut out)?);
        }
        out.flush().map_err(io("writing to stdout"))?;
        std::thread::sleep(FOLLOW_POLL);
    }
    out.flush().map_err(io("writing to stdout"))
}

/// Prints the records from `next` up to `durable`, crossing segments; returns
/// where it stopped (the next record to print once more is durable). Durable
/// offsets fall between records, so anything but a record below `durable` is
/// damage.
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
            return Err(damage(format!("no segment holds offset {next}, below the durable offset {durable}")));
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
        if let Some((offset, reason)) = scan.invalid {
            return Err(damage(format!(
                "stopped at offset {offset} in {}: {reason}, below the durable offset {durable}",
                segment.path.display()
            )));
        }
        if scan.ends_with_blank {
            next = segment.start_offset + size;
            continue;
        }
        let reached = segment.start_offset + end;
        if scan.end_offset < reached {
            return Err(damage(format!(
                "stopped at offset {} in {}: zeros below the durable offset {durable}",
                scan.end_offset,
                segment.path.display()
            )));
        }
        return Ok(scan.end_offset);
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
/// Where it stops short of the durable offset (damage, a missing segment), it
/// says where and why and exits 3; a torn tail above the durable offset (what
/// recovery truncates) is noted and is not an error.
pub fn consume(args: ConsumeArgs) -> Result<(), CliError> {
    if args.follow {
        return follow(&args);
    }
    // The durable offset first: what it covers is in the segments read after.
    let durable = inspect::store_files(&args.dir).checkpoint.map(|c| c.flushed_offset);
    let listing = listing(&args.dir)?;
    for p in &listing.problems {
        eprintln!("commitlog: problem: {}: {}", p.path.display(), p.message);
    }
    let Some(first) = listing.segments.first() else {
        return match listing.problems.len() {
            0 => Ok(()),
            n => Err(CliError::Problems(n)),
        };
    };
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
    let mut stopped: Option<(u64, String)> = None;
    for (i, segment) in listing.segments[start..].iter().enumerate() {
        if segment.start_offset != expected {
            stopped = Some((expected, format!("no segment holds offset {expected}")));
            break;
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
        if let Some((offset, reason)) = scan.invalid {
            stopped = Some((offset, format!("{reason} in {}", segment.path.display())));
            break;
        }
        if !scan.ends_with_blank {
            stopped = Some((scan.end_offset, format!("end of data in {}", segment.path.display())));
            break;
        }
        expected = segment.start_offset + size;
    }
    let flushed = out.flush();
    if let Some(e) = write_error {
        return finish_output(Err(e));
    }
    finish_output(flushed)?;
    match (stopped, durable) {
        (Some((offset, why)), Some(durable)) if offset < durable => {
            Err(damage(format!("stopped at offset {offset}: {why}, below the durable offset {durable}")))
        }
        (Some((offset, why)), _) if !why.starts_with("end of data") => {
            eprintln!(
                "commitlog: note: stopped at offset {offset}: {why}, above the durable offset (a torn tail: the next open truncates it)"
            );
            problems_found(&listing)
        }
        _ => problems_found(&listing),
    }
}

/// Exit 3 if the listing had problems (already printed).
fn problems_found(listing: &Listing) -> Result<(), CliError> {
    match listing.problems.len() {
        0 => Ok(()),
        n => Err(CliError::Problems(n)),
    }
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
        outln!("{}", serde_json::to_string_pretty(&report).expect("serialisable"))?;
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
        out!("{}", render(&rows))?;
        outln!(
            "{} segments, {} records, first offset {}, last offset {}",
            report.segments.len(),
            report.records,
            report.first_offset.map_or("-".into(), |o| o.to_string()),
            report.last_offset.map_or("-".into(), |o| o.to_string())
        )?;
        for p in &report.problems {
            outln!("problem: {} at {}: {}", p.file, p.offset.map_or("-".into(), |o| o.to_string()), p.message)?;
        }
        if report.problems.is_empty() {
            outln!("clean")?;
        }
    }
    match report.problems.len() {
        0 => Ok(()),
        n => Err(CliError::Problems(n)),
    }
}

/// `recover`'s arguments.
#[derive(Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Accept what stops the store from opening: damage below the checkpoint,
    /// segments missing at its front or end. Every valid record before the first
    /// problem is kept; the damaged rest of its segment and every later segment
    /// are moved aside into `salvaged-<ms>/` in their directory, and listed.
    #[arg(long)]
    salvage: bool,
}

#[derive(Serialize)]
struct MovedReport {
    from: String,
    to: String,
    offset: Option<u64>,
    bytes: u64,
}

#[derive(Serialize)]
struct SalvageSummary {
    front: u64,
    end: u64,
    stopped_by: Option<String>,
    front_lost: Option<(u64, u64)>,
    durable_lost: Option<(u64, u64)>,
    moved: Vec<MovedReport>,
}

#[derive(Serialize)]
struct RecoverReport {
    dir: String,
    clean_shutdown: bool,
    checkpoint_offset: u64,
    scanned_from: u64,
    /// Records below `scanned_from` were not checked by this recovery.
    unchecked_below: u64,
    records_scanned: u64,
    end_offset: u64,
    bytes_truncated: u64,
    segments_deleted: usize,
    stopped_at: Option<String>,
    salvage: Option<SalvageSummary>,
}

/// Opens the log (running recovery) and shuts it down cleanly; with
/// `--salvage`, first accepts what stops it from opening.
pub fn recover(args: RecoverArgs) -> Result<(), CliError> {
    let dir = &args.dir.dir;
    existing_dir(dir)?;
    inspect::check_store_dir(dir)?;
    let salvage = if args.salvage {
        let s = commitlog::admin::salvage(dir)?;
        for m in &s.moved {
            eprintln!(
                "commitlog: moved aside: {} ({} bytes{}) -> {}",
                m.from.display(),
                m.bytes,
                m.offset.map_or(String::new(), |o| format!(" from offset {o}")),
                m.to.display()
            );
        }
        Some(SalvageSummary {
            front: s.front,
            end: s.end,
            stopped_by: s.stopped_by,
            front_lost: s.front_lost,
            durable_lost: s.durable_lost,
            moved: s
                .moved
                .iter()
                .map(|m| MovedReport {
                    from: m.from.display().to_string(),
                    to: m.to.display().to_string(),
                    offset: m.offset,
                    bytes: m.bytes,
                })
                .collect(),
        })
    } else {
        None
    };
    let config = log_config(dir, FlushArg::Async, false, None, &crate::SegmentPathArgs::default())?;
    let log = CommitLog::open(dir, config)?;
    let r = log.recovery_report().clone();
    let min_offset = log.min_offset();
    log.shutdown()?;
    let report = RecoverReport {
        dir: dir.display().to_string(),
        clean_shutdown: r.clean_shutdown,
        checkpoint_offset: r.durable_offset,
        scanned_from: r.scanned_from,
        unchecked_below: r.scanned_from.saturating_sub(min_offset),
        records_scanned: r.records_recovered,
        end_offset: r.end_offset,
        bytes_truncated: r.bytes_truncated,
        segments_deleted: r.segments_deleted,
        stopped_at: r.stopped_at.map(|(o, reason)| format!("{o}: {reason}")),
        salvage,
    };
    if args.dir.json {
        return outln!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    }
    if let Some(s) = &report.salvage {
        outln!("{}: salvaged", report.dir)?;
        outln!("kept                records from {} to {}", s.front, s.end)?;
        if let Some(why) = &s.stopped_by {
            outln!("stopped by          {why}")?;
        }
        if let Some((from, to)) = s.front_lost {
            outln!("lost at the front   [{from}, {to}): segments missing")?;
        }
        if let Some((from, to)) = s.durable_lost {
            outln!("durable data given up [{from}, {to})")?;
        }
        for m in &s.moved {
            outln!("moved aside         {} -> {} ({} bytes)", m.from, m.to, m.bytes)?;
        }
    }
    outln!(
        "{}: {} recovery",
        report.dir,
        if report.clean_shutdown { "normal (clean shutdown)" } else { "abnormal (abort marker found)" }
    )?;
    outln!("checkpoint offset   {}", report.checkpoint_offset)?;
    outln!("scanned from        {}", report.scanned_from)?;
    outln!("records scanned     {}", report.records_scanned)?;
    outln!("end offset          {}", report.end_offset)?;
    outln!("bytes truncated     {}", report.bytes_truncated)?;
    outln!("segments deleted    {}", report.segments_deleted)?;
    if let Some(s) = &report.stopped_at {
        outln!("stopped at          {s}")?;
    }
    if report.unchecked_below > 0 {
        outln!(
            "not checked         the {} bytes from {min_offset} to {}: recovery checks only the checkpoint's segment on; run `commitlog verify` to check everything",
            report.unchecked_below,
            report.scanned_from
        )?;
    }
    Ok(())
}

/// `forget-dir`'s arguments.
#[derive(Args)]
pub struct ForgetDirArgs {
    /// Store directory (the log must be closed).
    #[arg(long)]
    dir: PathBuf,
    /// The segment directory to remove from the store's list: it must hold no
    /// segment (deleted by retention, or lost with its disk).
    #[arg(value_name = "SEGMENT_DIR")]
    segment_dir: PathBuf,
}

/// Removes a segment directory that holds no segment from the store's list.
pub fn forget_dir(args: ForgetDirArgs) -> Result<(), CliError> {
    existing_dir(&args.dir)?;
    let segment_dir =
        std::path::absolute(&args.segment_dir).map_err(io(format!("resolving {}", args.segment_dir.display())))?;
    let report = commitlog::admin::forget_segment_dir(&args.dir, &segment_dir)?;
    outln!("{}: {} forgotten", args.dir.display(), report.forgotten.display())?;
    for d in &report.remaining {
        outln!("segment directory   {} ({})", d.path.display(), if d.read_only { "read-only" } else { "writable" })?;
    }
    if let Some((front, first)) = report.front_missing {
        outln!(
            "warning             the remaining directories hold no segment for [{front}, {first}): the next open refuses until `commitlog recover --salvage` accepts their loss"
        )?;
    }
    outln!("leave it out of store_path_commit_log / read_only_commit_log_store_paths from now on")
}

#[derive(Serialize)]
struct StatReport {
    dir: String,
    /// Where the segments are: `[path, "writable" | "read-only"]`, as recorded.
    segment_dirs: Vec<(String, &'static str)>,
    segments: Vec<(String, u64)>,
    /// Per segment, the directory it is in (when there are several).
    #[serde(skip)]
    segment_homes: Vec<String>,
    segment_size: u64,
    total_bytes: u64,
    min_offset: Option<u64>,
    max_offset: Option<u64>,
    flushed_offset: Option<u64>,
    checkpoint_timestamp_ms: Option<u64>,
    /// `checkpoint_timestamp_ms` for people, UTC.
    checkpoint_time: Option<String>,
    checkpoint_problem: Option<String>,
    abort_marker: bool,
    abort_pid: Option<u32>,
    locked: bool,
    problems: Vec<ProblemReport>,
}

/// `stat`'s arguments.
#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print the figures again every SECONDS (2 by default), with append and
    /// flush rates, until Ctrl-C. With `--json`, one object per line.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2", value_parser = crate::args::duration_secs)]
    watch: Option<Duration>,
}

/// `YYYY-MM-DD hh:mm:ss.mmm UTC` of milliseconds since the Unix epoch.
pub fn utc_time(epoch_ms: u64) -> String {
    let (days, ms_of_day) = (epoch_ms / 86_400_000, epoch_ms % 86_400_000);
    // Days to a civil date (Howard Hinnant's algorithm), for days >= 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let (h, m, sec, milli) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{sec:02}.{milli:03} UTC")
}

/// How long ago `epoch_ms` was, for people: `3.2 s ago`, `5 min ago`, `2.1 h ago`.
fn age(epoch_ms: u64, now_ms: u64) -> String {
    let secs = now_ms.saturating_sub(epoch_ms) as f64 / 1000.0;
    match secs {
        s if s < 60.0 => format!("{s:.1} s ago"),
        s if s < 3600.0 => format!("{:.0} min ago", s / 60.0),
        s if s < 86_400.0 => format!("{:.1} h ago", s / 3600.0),
        s => format!("{:.1} days ago", s / 86_400.0),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn stat_report(dir: &std::path::Path) -> Result<StatReport, CliError> {
    let listing = listing(dir)?;
    let files = inspect::store_files(dir);
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
    let checkpoint_timestamp_ms = files.checkpoint.map(|c| c.physic_msg_timestamp);
    let home = |p: &std::path::Path| p.parent().map(|d| d.display().to_string()).unwrap_or_default();
    Ok(StatReport {
        dir: dir.display().to_string(),
        segment_dirs: inspect::segment_dirs(dir)?
            .into_iter()
            .map(|d| (d.path.display().to_string(), if d.read_only { "read-only" } else { "writable" }))
            .collect(),
        segments: listing.segments.iter().map(|s| (name(&s.path), s.len)).collect(),
        segment_homes: listing.segments.iter().map(|s| home(&s.path)).collect(),
        segment_size: listing.segment_size,
        total_bytes: listing.segments.iter().map(|s| s.len).sum(),
        min_offset: listing.segments.first().map(|s| s.start_offset),
        max_offset,
        flushed_offset: files.checkpoint.map(|c| c.flushed_offset),
        checkpoint_timestamp_ms,
        checkpoint_time: checkpoint_timestamp_ms.map(utc_time),
        checkpoint_problem: files.checkpoint_problem.clone(),
        abort_marker: files.abort_marker,
        abort_pid: files.abort_pid,
        locked: files.locked,
        problems: listing.problems.iter().map(ProblemReport::from).collect(),
    })
}

fn print_stat(report: &StatReport, segments_table: bool) -> Result<(), CliError> {
    let opt = |o: Option<u64>| o.map_or("-".to_string(), |v| v.to_string());
    let several = report.segment_dirs.len() > 1;
    if segments_table {
        let mut rows = vec![vec!["segment".to_string(), "bytes".to_string()]];
        rows.extend(report.segments.iter().map(|(n, b)| vec![n.clone(), b.to_string()]));
        if several {
            rows[0].push("directory".into());
            for (row, home) in rows[1..].iter_mut().zip(&report.segment_homes) {
                row.push(home.clone());
            }
        }
        out!("{}", render(&rows))?;
    }
    if several {
        for (path, kind) in &report.segment_dirs {
            outln!("segment directory   {path} ({kind})")?;
        }
    }
    outln!(
        "segments            {} of {} bytes ({} bytes in all)",
        report.segments.len(),
        report.segment_size,
        report.total_bytes
    )?;
    outln!("min offset          {}", opt(report.min_offset))?;
    outln!("max offset          {}", opt(report.max_offset))?;
    outln!("flushed offset      {} (checkpoint)", opt(report.flushed_offset))?;
    let checkpoint_time = match report.checkpoint_timestamp_ms {
        Some(ms) => format!("{} ({})", utc_time(ms), age(ms, now_ms())),
        None => "-".into(),
    };
    outln!("checkpoint time     {checkpoint_time}: store time of the newest durable record")?;
    if let Some(p) = &report.checkpoint_problem {
        outln!("checkpoint problem  {p}")?;
    }
    let abort = match (report.abort_marker, report.abort_pid) {
        (true, Some(pid)) => format!("present (pid {pid}): open now, or the last process died"),
        (true, None) => "present: open now, or the last process died".into(),
        (false, _) => "absent: shut down cleanly".into(),
    };
    outln!("abort marker        {abort}")?;
    outln!("locked              {}", if report.locked { "yes, by a running process" } else { "no" })?;
    for p in &report.problems {
        outln!("problem: {}: {}", p.file, p.message)?;
    }
    Ok(())
}

/// Prints the store's shape without changing anything; with `--watch`, again and
/// again with rates, until Ctrl-C.
pub fn stat(args: StatArgs) -> Result<(), CliError> {
    let Some(interval) = args.watch else {
        let report = stat_report(&args.dir.dir)?;
        if args.dir.json {
            outln!("{}", serde_json::to_string_pretty(&report).expect("serialisable"))?;
        } else {
            print_stat(&report, true)?;
        }
        return Ok(());
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| CliError::Input(format!("cannot handle Ctrl-C: {e}")))?;
    }
    let mut last: Option<(std::time::Instant, Option<u64>, Option<u64>)> = None;
    while !stop.load(Ordering::SeqCst) {
        let report = stat_report(&args.dir.dir)?;
        let now = std::time::Instant::now();
        let rate = |before: Option<u64>, after: Option<u64>, since: std::time::Instant| match (before, after) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / now.duration_since(since).as_secs_f64().max(1e-9)),
            _ => None,
        };
        let (appended, flushed) = match last {
            Some((since, max, flushed)) => {
                (rate(max, report.max_offset, since), rate(flushed, report.flushed_offset, since))
            }
            None => (None, None),
        };
        last = Some((now, report.max_offset, report.flushed_offset));
        if args.dir.json {
            let line = serde_json::json!({
                "time": utc_time(now_ms()),
                "stat": &report,
                "appended_bytes_per_sec": appended,
                "flushed_bytes_per_sec": flushed,
            });
            outln!("{line}")?;
        } else {
            outln!("== {} ==", utc_time(now_ms()))?;
            print_stat(&report, false)?;
            let per_sec = |r: Option<f64>| r.map_or("-".to_string(), |v| format!("{:.2} MB/s", v / 1e6));
            outln!("appended            {}", per_sec(appended))?;
            outln!("flushed             {}", per_sec(flushed))?;
        }
        std::io::stdout().flush().map_err(io("writing to stdout"))?;
        // Sleep in slices, so Ctrl-C ends the wait at once.
        let until = now + interval;
        while !stop.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_printed_as_utc_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29 00:00:00.000 UTC", "a leap day");
        assert_eq!(utc_time(1_764_596_700_123), "2025-12-01 13:45:00.123 UTC");
        assert_eq!(utc_time(4_102_444_799_999), "2099-12-31 23:59:59.999 UTC");
        assert_eq!(age(1000, 4200), "3.2 s ago");
        assert_eq!(age(0, 300_000), "5 min ago");
        assert_eq!(age(0, 2 * 86_400_000), "2.0 days ago");
    }
}
