//! `recover` (run recovery, or first salvage what stops it) and `forget-dir`
//! (retire an empty segment directory): the commands that change a store.

use std::path::PathBuf;

use clap::Args;
use commitlog::inspect;
use commitlog::CommitLog;
use serde::Serialize;

use super::DirArgs;
use crate::{existing_dir, io, log_config, CliError, FlushArg};

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

/// What `recover` did to a message store's derived data.
#[derive(Serialize, Default)]
struct MessageStoreRepair {
    /// Why the whole queue index was rebuilt from the log, if it was.
    rebuilt_all: Option<String>,
    /// The topic registry was recovered.
    topics_recovered: bool,
    /// Queue-index runs the open found damaged and dropped (their log ranges
    /// dispatched again), each with why.
    index_runs_dropped: Vec<String>,
    /// The key index was rebuilt.
    index_rebuilt: bool,
    /// Messages the open dispatched again from the log (a queue index or a
    /// dispatch checkpoint lost or damaged, or a crash since the last seal).
    redispatched: u64,
    /// Consumer offsets lowered to their queue's end (the log lost messages).
    offsets_lowered: usize,
    /// Problems the check found after opening, each repaired.
    repaired_after_check: Vec<String>,
    /// Problems left (exit 3).
    problems: Vec<super::ProblemReport>,
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
    /// A message store's derived data, repaired from the log.
    message_store: Option<MessageStoreRepair>,
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
    let log = crate::progress::step("recovering the log", || CommitLog::open(dir, config))?;
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
        message_store: if super::verify::is_message_store(dir) { Some(repair_message_store(dir)?) } else { None },
    };
    let problems = report.message_store.as_ref().map_or(0, |m| m.problems.len());
    if args.dir.json {
        outln!("{}", serde_json::to_string_pretty(&report).expect("serialisable"))?;
        return super::problems_found(problems);
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
    if let Some(m) = &report.message_store {
        outln!("message store       derived data checked against the log")?;
        if let Some(why) = &m.rebuilt_all {
            outln!("rebuilt all         the queue index, from the log: {why}")?;
        }
        if m.topics_recovered {
            outln!("topics recovered    config/topics, from the dispatch checkpoint and the log")?;
        }
        outln!("index runs dropped  {} (their log ranges dispatched again)", m.index_runs_dropped.len())?;
        outln!("dispatched again    {} messages, from the log", m.redispatched)?;
        for why in &m.index_runs_dropped {
            outln!("  {why}")?;
        }
        if m.index_rebuilt {
            outln!("index rebuilt       from the log")?;
        }
        if m.offsets_lowered > 0 {
            outln!("offsets lowered     {} consumer offsets to their queue's end (the log no longer holds what they passed)", m.offsets_lowered)?;
        }
        for what in &m.repaired_after_check {
            outln!("repaired            {what}")?;
        }
        for p in &m.problems {
            outln!("problem: {}{}: {}", p.file, p.offset.map_or(String::new(), |o| format!(" at {o}")), p.message)?;
        }
    }
    super::problems_found(problems)
}

/// Opens the message store in `dir` (its open drops damaged queue-index runs
/// and dispatches their range again, recovers a lost registry, rebuilds a key
/// index it cannot trust), then checks everything against the log and
/// rebuilds what that check still finds wrong: the queue index (its runs
/// deleted, and its table if that is what is wrong: the next open builds it
/// from the log), the key index. What is
/// left is reported.
fn repair_message_store(dir: &std::path::Path) -> Result<MessageStoreRepair, CliError> {
    use message_store::inspect::Derived;
    let open_store = || crate::messages::open_store(dir, None, Some(FlushArg::Sync), None);
    let store = crate::progress::step("opening the message store (dispatching what its indexes miss)", open_store)?;
    let open = store.open_report();
    store.shutdown()?;
    let mut repair = MessageStoreRepair {
        rebuilt_all: open.rebuilt_all.clone(),
        topics_recovered: open.topics_recovered,
        index_runs_dropped: open.index_runs_dropped.clone(),
        index_rebuilt: open.index_rebuilt,
        redispatched: open.redispatched,
        offsets_lowered: open.offsets_lowered,
        ..MessageStoreRepair::default()
    };
    let check = crate::progress::step("checking the message store's indexes against the log", || {
        message_store::inspect::check(dir)
    })?;
    let queue_index = check.problems.iter().any(|p| p.kind == Derived::QueueIndex);
    let key_index = check.problems.iter().any(|p| p.kind == Derived::Index);
    if queue_index {
        // The runs go (the next open builds them from the log); the queue
        // table stays unless the check found it wrong: it keeps the ends of
        // queues whose messages all expired, which the log no longer shows.
        let index_dir = dir.join("queueindex");
        let table = index_dir.join("table");
        let table_wrong = check.problems.iter().any(|p| p.kind == Derived::QueueIndex && p.path == table);
        let entries = std::fs::read_dir(&index_dir).map_err(io(format!("listing {}", index_dir.display())))?;
        for entry in entries {
            let path = entry.map_err(io(format!("listing {}", index_dir.display())))?.path();
            if path != table || table_wrong {
                std::fs::remove_file(&path).map_err(io(format!("removing {}", path.display())))?;
            }
        }
    }
    if queue_index || key_index {
        let store = crate::progress::step("rebuilding the message store's indexes from the log", open_store)?;
        if queue_index {
            let again = store.open_report().redispatched;
            repair
                .repaired_after_check
                .push(format!("the queue index ({again} messages dispatched again from the log)"));
        }
        if key_index {
            let messages = crate::progress::step("rebuilding the key index from the log", || store.rebuild_index())?;
            repair.index_rebuilt = true;
            repair.repaired_after_check.push(format!("the key index ({messages} messages indexed again)"));
        }
        store.shutdown()?;
    }
    let left = if queue_index || key_index { message_store::inspect::check(dir)? } else { check };
    repair.problems = left
        .problems
        .iter()
        .map(|p| super::ProblemReport {
            file: p.path.display().to_string(),
            offset: p.index,
            message: p.message.clone(),
        })
        .collect();
    Ok(repair)
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
