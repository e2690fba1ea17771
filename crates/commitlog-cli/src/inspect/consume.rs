//! `consume`: the records of the log, in order, from an offset; `--follow`
//! keeps printing them as they become durable.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use commitlog::inspect::{self, Listing};

use super::{listing, problems_found};
use crate::{io, stop_on_ctrl_c, CliError};

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
    let stop = stop_on_ctrl_c()?;
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

/// The start of the record of a segment's `bytes` that holds offset `at`
/// past its first byte, if a valid record does.
fn record_holding(bytes: &[u8], start_offset: u64, at: u64) -> Option<u64> {
    let mut holding = None;
    inspect::scan_segment(bytes, start_offset, 0, |offset, _, body| {
        let end = offset + (commitlog::format::HEADER_SIZE + body.len()) as u64;
        if offset < at && at < end {
            holding = Some(offset);
        }
    });
    holding
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
        return problems_found(listing.problems.len());
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
                return Err(match record_holding(&bytes, segment.start_offset, from) {
                    Some(start) => CliError::Usage(format!(
                        "offset {from} is inside the record at {start}: records start at {start} and after it (`--from {start}`)"
                    )),
                    None => CliError::Input(format!("no record at offset {offset}: {reason}")),
                });
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
            problems_found(listing.problems.len())
        }
        _ => problems_found(listing.problems.len()),
    }
}
