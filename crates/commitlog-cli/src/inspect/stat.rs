//! `stat`: the store's shape, read-only; `--watch` prints it again with rates.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use commitlog::inspect;
use serde::Serialize;

use super::{listing, name, DirArgs, ProblemReport};
use crate::table::render;
use crate::{io, stop_on_ctrl_c, CliError};

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
    let bar = crate::progress::segments(listing.segments.len() - start, "scanning");
    for segment in listing.segments.iter().skip(start).filter(|s| s.len == listing.segment_size) {
        bar.inc(1);
        let bytes = inspect::read_segment(segment)?;
        let scan = inspect::scan_segment(&bytes, segment.start_offset, 0, |_, _, _| {});
        max_offset = Some(scan.end_offset);
        if !scan.ends_with_blank {
            break;
        }
    }
    bar.finish_and_clear();
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
    let stop = stop_on_ctrl_c()?;
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
