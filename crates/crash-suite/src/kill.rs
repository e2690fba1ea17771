//! Layer 3: a child process appends under sync flush on the real file system and
//! reports each acknowledgement through a pipe; the parent SIGKILLs it at a random
//! moment, starts the next child on the same directory (which recovers it), and at
//! the end checks every acknowledged record. A kill keeps the page cache, so this
//! layer checks the process-death path (recovery, checkpoint, abort marker), not
//! missing syncs; layer 2 covers those.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};

use crate::common::*;

pub const SEGMENT: usize = 64 * 1024;

/// The child: append `body(0, seq)` from `start`, print `seq offset` once durable.
/// Children alternate write paths over one directory, as a store may between
/// restarts.
pub fn child(dir: &Path, start: u64, write_without_mmap: bool) -> Result<(), commitlog::Error> {
    let config = CommitLogConfig { write_without_mmap, ..config(SEGMENT, FlushDiskType::SyncFlush) };
    let log = CommitLog::open(dir, config)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for seq in start.. {
        let put = log.append(&body(0, seq, 20 + (seq % 400) as usize))?;
        if put.durability.wait().is_ok()
            && writeln!(out, "{seq} {}", put.wrote_offset).and_then(|()| out.flush()).is_err()
        {
            break;
        }
    }
    Ok(())
}

/// Tally of the kills.
#[derive(Default)]
pub struct Tally {
    pub kills: usize,
    pub acked: usize,
    pub lost: usize,
    pub garbage: usize,
}

pub fn run(seed: u64, kills: usize) -> Tally {
    let mut rng = Rng(seed);
    let dir = scratch();
    let mut acked: Vec<(u64, u64)> = Vec::new(); // (seq, offset)
    let mut tally = Tally::default();
    let exe = std::env::current_exe().expect("current exe");
    for _ in 0..kills {
        let start = acked.last().map_or(0, |(s, _)| s + 1) + 1_000_000 * tally.kills as u64;
        let mut child = Command::new(&exe)
            .args(["child", "--dir", dir.path().to_str().expect("utf-8 path"), "--start", &start.to_string()])
            .args(["--write-without-mmap", if write_without_mmap(tally.kills as u64) { "1" } else { "0" }])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        crate::watchdog::child_started(child.id());
        let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
        // Kill after a random number of acknowledgements (0: during start-up).
        let wait_for = rng.range(0, 60);
        let mut line = String::new();
        let mut seen = 0;
        while seen < wait_for {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if let Some((s, o)) = parse(&line) {
                acked.push((s, o));
                seen += 1;
            }
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        crate::watchdog::child_ended(child.id());
        // Acknowledgements already in the pipe count too.
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if let Some((s, o)) = parse(&line) {
                acked.push((s, o));
            }
        }
        tally.kills += 1;
    }
    // Check with the real recovery.
    let log = CommitLog::open(dir.path(), config(SEGMENT, FlushDiskType::SyncFlush)).expect("recover");
    let offsets: Vec<u64> = acked.iter().map(|(_, o)| *o).collect();
    let outcome = check_with(&log, |_, b| is_self_consistent(b), &offsets);
    // And each acknowledged offset holds the record with that sequence number.
    for (seq, offset) in &acked {
        match log.read(*offset) {
            Ok(r) if r.body[..] == body(0, *seq, 20 + (*seq % 400) as usize)[..] => {}
            _ => tally.lost += 1,
        }
    }
    tally.acked = acked.len();
    tally.lost = tally.lost.max(outcome.lost);
    tally.garbage = outcome.garbage;
    tally
}

fn parse(line: &str) -> Option<(u64, u64)> {
    let (s, o) = line.trim().split_once(' ')?;
    Some((s.parse().ok()?, o.parse().ok()?))
}
