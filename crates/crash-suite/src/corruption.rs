//! Layer 1: the corruption matrix. Every damage is applied to a copy of a log left
//! by a crash (durable part below the checkpoint, an unflushed tail above it), then
//! the log is opened and read back.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use commitlog::{CommitLog, Error, FlushDiskType};

use crate::common::*;

const SEGMENT: usize = 16 * 1024;

struct Base {
    dir: tempfile::TempDir,
    written: HashMap<u64, Vec<u8>>,
    /// (offset, len) of every record, in order.
    records: Vec<(u64, usize)>,
    checkpoint: u64,
    end: u64,
}

fn base(rng: &mut Rng) -> Base {
    let live = scratch();
    let mut written = HashMap::new();
    let mut records = Vec::new();
    let log = CommitLog::open(live.path(), config(SEGMENT, FlushDiskType::AsyncFlush)).expect("open");
    for seq in 0..120 {
        let b = body(0, seq, rng.range(10, 700) as usize);
        let at = log.append(&b).expect("append").wrote_offset;
        records.push((at, b.len() + 32));
        written.insert(at, b);
    }
    log.shutdown().expect("shutdown"); // checkpoint = end of these
    let log = CommitLog::open(live.path(), config(SEGMENT, FlushDiskType::AsyncFlush)).expect("reopen");
    let checkpoint = log.max_offset();
    for seq in 120..130 {
        let b = body(0, seq, rng.range(10, 700) as usize);
        let at = log.append(&b).expect("append").wrote_offset;
        records.push((at, b.len() + 32));
        written.insert(at, b);
    }
    let end = log.max_offset();
    let dir = scratch();
    copy_dir(live.path(), dir.path()); // what a crash leaves: abort marker, unflushed tail
    drop(log);
    Base { dir, written, records, checkpoint, end }
}

/// Tally of the matrix.
#[derive(Default)]
pub struct Tally {
    pub cases: usize,
    pub panics: usize,
    pub garbage: usize,
    pub silent_below_checkpoint: usize,
    pub unclear_errors: usize,
    pub kinds: Vec<(&'static str, usize)>,
}

/// Applies `damage` to a fresh copy, opens, reads everything, judges.
/// `below` says whether durable data (below the checkpoint) was damaged.
fn case(base: &Base, tally: &mut Tally, damage: impl FnOnce(&Path), below: bool, expect_open_error: bool) {
    tally.cases += 1;
    let trial = scratch();
    copy_dir(base.dir.path(), trial.path());
    damage(trial.path());
    let result = catch_unwind(AssertUnwindSafe(|| {
        let opened = CommitLog::open(trial.path(), config(SEGMENT, FlushDiskType::AsyncFlush));
        match opened {
            Err(e) => Err(e),
            Ok(log) => {
                let acked: Vec<u64> = Vec::new();
                Ok(check(&log, &base.written, &acked))
            }
        }
    }));
    match result {
        Err(_) => tally.panics += 1,
        Ok(Err(e)) => {
            // An error must name what is wrong: a file or an offset.
            let text = e.to_string();
            let clear =
                matches!(e, Error::Corrupt { .. } | Error::Queue(_) | Error::File(_) | Error::Checkpoint { .. });
            if !clear || text.is_empty() {
                tally.unclear_errors += 1;
            }
            if !expect_open_error && !below {
                tally.unclear_errors += 1; // damage above the checkpoint must recover
            }
        }
        Ok(Ok(outcome)) => {
            tally.garbage += outcome.garbage;
            if expect_open_error {
                tally.unclear_errors += 1;
            }
            // Damage to durable data must surface as an error, never as fewer records.
            if below && outcome.iteration_error.is_none() && outcome.records < 120 {
                tally.silent_below_checkpoint += 1;
                if std::env::var_os("CRASH_SUITE_DEBUG").is_some() {
                    let log = CommitLog::open(trial.path(), config(SEGMENT, FlushDiskType::AsyncFlush));
                    eprintln!(
                        "silent: {} records; {:?}",
                        outcome.records,
                        log.map(|l| l.recovery_report().clone()).ok()
                    );
                }
            }
        }
    }
}

pub fn run(seed: u64, soak: bool) -> Tally {
    let mut rng = Rng(seed);
    let base = base(&mut rng);
    let mut tally = Tally::default();
    let seg = |dir: &Path, offset: u64| segment_path(dir, SEGMENT, offset);
    let last3_start = base.records[base.records.len() - 3].0;
    let in_file = |o: u64| o % SEGMENT as u64;

    // Torn tails: zero everything from every byte of the last three records on.
    let before = tally.cases;
    for at in last3_start..base.end {
        let end = base.end;
        case(&base, &mut tally, |d| patch(&seg(d, at), in_file(at), &vec![0; (end - at) as usize]), false, false);
    }
    tally.kinds.push(("truncations", tally.cases - before));

    // Bit flips at every byte of the last three records, and sampled below.
    let before = tally.cases;
    for (i, at) in (last3_start..base.end).enumerate() {
        let path_at = at;
        case(&base, &mut tally, |d| flip(&seg(d, path_at), in_file(path_at), 1 << (i % 8)), false, false);
    }
    let step = if soak { 1 } else { 53 };
    for (i, at) in (0..base.checkpoint).step_by(step).enumerate() {
        if is_blank_area(&base, at) {
            continue;
        }
        case(&base, &mut tally, |d| flip(&seg(d, at), in_file(at), 1 << (i % 8)), true, false);
    }
    tally.kinds.push(("bit flips", tally.cases - before));

    // Zeroed 512-byte sectors and 4 KiB pages, everywhere there is data.
    let before = tally.cases;
    for unit in [512u64, 4096] {
        let mut at = 0;
        while at < base.end {
            let len = unit.min(SEGMENT as u64 - in_file(at));
            let below = at < base.checkpoint;
            if has_data(&base, at, len) {
                case(&base, &mut tally, |d| patch(&seg(d, at), in_file(at), &vec![0; len as usize]), below, false);
            }
            at += unit;
        }
    }
    tally.kinds.push(("zeroed sectors/pages", tally.cases - before));

    // A stale record (valid at its own offset) planted where the next one goes.
    let before = tally.cases;
    for &(src, len) in base.records.iter().step_by(17) {
        let end = base.end;
        case(
            &base,
            &mut tally,
            |d| {
                let bytes = std::fs::read(seg(d, src)).expect("read");
                let start = in_file(src) as usize;
                let stale = bytes[start..start + len].to_vec();
                if in_file(end) as usize + stale.len() <= SEGMENT {
                    patch(&seg(d, end), in_file(end), &stale);
                }
            },
            false,
            false,
        );
    }
    tally.kinds.push(("stale records", tally.cases - before));

    // Files: wrong sizes, a missing segment, a foreign file.
    let before = tally.cases;
    let first = seg(base.dir.path(), 0);
    let name = first.file_name().expect("name").to_owned();
    for cut in [0u64, 1, 4095, SEGMENT as u64 - 1] {
        let name = name.clone();
        case(&base, &mut tally, |d| set_len(&d.join(commitlog::SEGMENT_DIR).join(&name), cut), true, true);
    }
    let middle = seg(base.dir.path(), SEGMENT as u64).file_name().expect("name").to_owned();
    case(
        &base,
        &mut tally,
        |d| std::fs::remove_file(d.join(commitlog::SEGMENT_DIR).join(&middle)).expect("rm"),
        true,
        true,
    );
    case(
        &base,
        &mut tally,
        |d| std::fs::write(d.join(commitlog::SEGMENT_DIR).join("foreign.bin"), b"x").expect("w"),
        false,
        true,
    );
    tally.kinds.push(("file-level damages", tally.cases - before));
    tally
}

fn flip(path: &Path, at: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open");
    let mut b = [0u8];
    file.read_exact_at(&mut b, at).expect("read");
    b[0] ^= mask;
    file.write_all_at(&b, at).expect("write");
}

fn set_len(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).expect("open").set_len(len).expect("set_len");
}

/// True if `at` lies in no record (a blank, or zeros).
fn is_blank_area(base: &Base, at: u64) -> bool {
    !base.records.iter().any(|&(o, l)| o <= at && at < o + l as u64)
}

fn is_blank_range(base: &Base, at: u64, len: u64) -> bool {
    !base.records.iter().any(|&(o, l)| o < at + len && at < o + l as u64)
}

fn has_data(base: &Base, at: u64, len: u64) -> bool {
    !is_blank_range(base, at, len)
}
