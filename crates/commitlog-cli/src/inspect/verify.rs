//! `verify`: every segment and record CRC-checked, nothing changed.

use commitlog::inspect;
use serde::Serialize;

use super::{listing, name, problems_found, DirArgs, ProblemReport};
use crate::table::render;
use crate::CliError;

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

/// What the check of a message store's derived data covered.
#[derive(Serialize)]
struct MessageStoreReport {
    messages: u64,
    queues: usize,
    entries: u64,
    keys: u64,
    index_items: u64,
    consumer_offsets: usize,
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
    /// The queue index, key index and `config/` against the log, for a
    /// message store.
    message_store: Option<MessageStoreReport>,
    problems: Vec<ProblemReport>,
}

/// True when `dir` holds a message store (its `config/` or `consumequeue/`).
pub(crate) fn is_message_store(dir: &std::path::Path) -> bool {
    dir.join("config").is_dir() || dir.join("consumequeue").is_dir()
}

/// Scans every segment and record with CRC checks, and a message store's
/// derived data against the log, changing nothing.
pub fn verify(args: DirArgs) -> Result<(), CliError> {
    let listing = listing(&args.dir)?;
    let files = inspect::store_files(&args.dir);
    let durable = files.checkpoint.map(|c| c.flushed_offset);
    let mut problems: Vec<ProblemReport> = listing.problems.iter().map(ProblemReport::from).collect();
    if let Some(p) = &files.checkpoint_problem {
        problems.push(ProblemReport { file: "checkpoint".into(), offset: None, message: p.clone() });
    }
    let bar = crate::progress::segments(listing.segments.len(), "verifying");
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
    let message_store = if is_message_store(&args.dir) {
        let check = crate::progress::step("checking the message store's indexes against the log", || {
            message_store::inspect::check(&args.dir)
        })?;
        problems.extend(check.problems.iter().map(|p| ProblemReport {
            file: p.path.display().to_string(),
            offset: p.index,
            message: p.message.clone(),
        }));
        Some(MessageStoreReport {
            messages: check.messages,
            queues: check.queues,
            entries: check.entries,
            keys: check.keys,
            index_items: check.items,
            consumer_offsets: check.offsets,
        })
    } else {
        None
    };
    let report = VerifyReport {
        dir: args.dir.display().to_string(),
        records: segments.iter().map(|s| s.records).sum(),
        first_offset: segments.iter().find_map(|s| s.first_offset),
        last_offset: segments.iter().rev().find_map(|s| s.last_offset),
        end_offset,
        checkpoint_flushed_offset: durable,
        message_store,
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
        if let Some(m) = &report.message_store {
            outln!(
                "message store: {} messages checked against {} queue-index entries of {} queues, {} keys and {} items of the key index, {} consumer offsets",
                m.messages,
                m.entries,
                m.queues,
                m.keys,
                m.index_items,
                m.consumer_offsets
            )?;
        }
        for p in &report.problems {
            outln!("problem: {}{}: {}", p.file, p.offset.map_or(String::new(), |o| format!(" at {o}")), p.message)?;
        }
        if report.problems.is_empty() {
            outln!("clean")?;
        }
    }
    problems_found(report.problems.len())
}
