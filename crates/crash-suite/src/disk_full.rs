//! Layer 5: a full disk is an error at segment creation, never a SIGBUS. Mounts a
//! tiny tmpfs (root only; otherwise the layer says why it is skipped) and runs the
//! writer in a child process, so a SIGBUS would show as its death by signal.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use commitlog::{CommitLog, FlushDiskType};

use crate::common::*;

const SEGMENT: usize = 1 << 20;

/// The real storage, except that it cannot tell its disk space: the guard never
/// refuses, so the file system's own ENOSPC at `fallocate` is what stops the
/// writer (the path this layer exists for; the guard's look before a new
/// segment would otherwise refuse first).
#[derive(Debug)]
struct Blind(mapped_file::MmapStorage);

impl mapped_file::Storage for Blind {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.0.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<mapped_file::DirEntry>> {
        self.0.list(dir)
    }
    fn create(&self, path: &Path, len: usize) -> std::io::Result<mapped_file::OpenedSegment> {
        self.0.create(path, len)
    }
    fn open(&self, path: &Path, len: usize) -> std::io::Result<mapped_file::OpenedSegment> {
        self.0.open(path, len)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.0.remove(path)
    }
    fn read_small(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        self.0.read_small(path)
    }
    fn replace_small(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.0.replace_small(path, bytes)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.rename(from, to)
    }
    fn release(&self) {
        self.0.release()
    }
}

/// The child: append until an error; exit 0 if the error is a clean one.
pub fn child(dir: &Path) -> i32 {
    let storage = match mapped_file::MmapStorage::lock(dir) {
        Ok(storage) => storage,
        Err(e) => {
            eprintln!("lock failed cleanly: {e}");
            return 0;
        }
    };
    let config = config(SEGMENT, FlushDiskType::AsyncFlush);
    let storage = Blind(storage.write_without_mmap(config.write_without_mmap));
    let log = match CommitLog::open_with_storage(dir, config, std::sync::Arc::new(storage)) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("open failed cleanly: {e}");
            return 0;
        }
    };
    for seq in 0.. {
        if let Err(e) = log.append(&body(0, seq, 4000)) {
            eprintln!("append failed cleanly at record {seq}: {e}");
            return 0;
        }
    }
    1
}

pub enum Outcome {
    Passed { detail: String },
    Failed { detail: String },
    Skipped { reason: String },
}

/// A small tmpfs mounted for the life of the value (root only).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Self, String> {
        // `/proc/self` belongs to the process's effective user.
        let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self")) == 0;
        if !root {
            return Err("not running as root, cannot mount a tmpfs".into());
        }
        let dir = tempfile::tempdir().expect("mount point");
        let mp = dir.path().to_str().expect("utf-8");
        match Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", mp]).status() {
            Ok(s) if s.success() => {
                crate::watchdog::mounted(dir.path());
                Ok(Tmpfs { dir })
            }
            Ok(s) => Err(format!("mount -t tmpfs failed ({s})")),
            Err(e) => Err(format!("cannot run mount: {e}")),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
        crate::watchdog::unmounted(self.dir.path());
    }
}

/// Records acknowledged: (offset, body).
type Acked = Vec<(u64, Vec<u8>)>;

/// Durable appends of 3,000-byte records until one is refused with `DiskFull`;
/// returns the used share it reported and every record acknowledged, or why the
/// run failed (another error, a failed wait, never refused).
fn append_until_full(log: &CommitLog) -> Result<(f64, Acked), String> {
    let mut acked: Acked = Vec::new();
    loop {
        let b = body(0, acked.len() as u64, 3000);
        match log.append(&b) {
            Ok(put) => match put.durability.wait() {
                Ok(()) => acked.push((put.wrote_offset, b)),
                Err(e) => return Err(format!("a durable wait failed: {e}")),
            },
            Err(commitlog::Error::DiskFull { used_percent, .. }) => return Ok((used_percent, acked)),
            Err(e) => return Err(format!("refused by {e}, not the guard, after {} records", acked.len())),
        }
        if acked.len() > 100_000 {
            return Err("never refused".into());
        }
    }
}

/// Shuts `log` down, reopens the store and counts the records of `expected` it
/// does not hold as written.
fn lost_after_reopen(
    log: CommitLog,
    dir: &Path,
    config: commitlog::CommitLogConfig,
    expected: &[&(u64, Vec<u8>)],
) -> Result<usize, String> {
    log.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    drop(log);
    let reopened = CommitLog::open(dir, config).map_err(|e| format!("reopen: {e}"))?;
    let lost =
        expected.iter().filter(|(o, b)| reopened.read(*o).map(|r| r.body.to_vec()).ok().as_ref() != Some(b)).count();
    let _ = reopened.shutdown();
    Ok(lost)
}

/// The disk-space guard on a real small tmpfs: appends are refused before the disk
/// is full, nothing acknowledged is lost, and deleting segments brings appends back.
pub fn run_guard() -> Outcome {
    // 8 MiB with 1 MiB segments, refused from 60 % on.
    let fs = match Tmpfs::mount("8m") {
        Ok(fs) => fs,
        Err(reason) => return Outcome::Skipped { reason },
    };
    let dir = fs.path().join("log");
    let config = commitlog::CommitLogConfig {
        disk_space_warning_level_ratio: 60,
        clean_resource_interval_ms: 2,
        ..config(SEGMENT, FlushDiskType::SyncFlush)
    };
    let fail = |detail: String| Outcome::Failed { detail };
    let log = match CommitLog::open(&dir, config.clone()) {
        Ok(log) => log,
        Err(e) => return fail(format!("open: {e}")),
    };
    let (refused_at, mut acked) = match append_until_full(&log) {
        Ok(found) => found,
        Err(detail) => return fail(detail),
    };
    // By the timer's look at 60 % or more, or by the look before a new segment
    // (1 MiB of 8) that would take the disk there.
    if !(60.0 - 12.5..100.0).contains(&refused_at) {
        return fail(format!("refused at {refused_at:.1} % used"));
    }
    // Free space: delete every segment but the last two; appends come back.
    let end = acked.last().map_or(0, |(o, _)| *o);
    let keep_from = end - end % SEGMENT as u64 - SEGMENT as u64;
    let deleted = match log.delete_segments_before(keep_from, 100) {
        Ok(n) => n,
        Err(e) => return fail(format!("deleting while full: {e}")),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while log.is_disk_full() {
        if std::time::Instant::now() > deadline {
            return fail(format!("appends never came back after deleting {deleted} segments"));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let after = body(1, 0, 3000);
    match log.append(&after).map(|put| (put.wrote_offset, put.durability.wait())) {
        Ok((offset, Ok(()))) => acked.push((offset, after)),
        other => return fail(format!("append after freeing space: {other:?}")),
    }
    let kept: Vec<&(u64, Vec<u8>)> = acked.iter().filter(|(o, _)| *o >= keep_from).collect();
    match lost_after_reopen(log, &dir, config, &kept) {
        Ok(0) => {}
        Ok(lost) => return fail(format!("{lost} acknowledged records lost or damaged")),
        Err(detail) => return fail(detail),
    }
    Outcome::Passed {
        detail: format!(
            "refused at {refused_at:.1} % used (limit 60 %, a new segment counted), {} acked, 0 lost, appends back after deleting {deleted} segments",
            acked.len()
        ),
    }
}

/// A disk filled faster than the guard's timer looks: on a 12 MiB tmpfs with
/// 1 MiB segments, the timer at 10 s (RocketMQ's default), a producer appends
/// durably as fast as it can. The look before each new segment must refuse with
/// `DiskFull` below the limit (90 %), never the file system with ENOSPC, and
/// nothing acknowledged may be lost.
pub fn run_fast_fill() -> Outcome {
    let fs = match Tmpfs::mount("12m") {
        Ok(fs) => fs,
        Err(reason) => return Outcome::Skipped { reason },
    };
    let dir = fs.path().join("log");
    let config = commitlog::CommitLogConfig {
        disk_space_warning_level_ratio: 90,
        clean_resource_interval_ms: 10_000,
        ..config(SEGMENT, FlushDiskType::SyncFlush)
    };
    let fail = |detail: String| Outcome::Failed { detail };
    let log = match CommitLog::open(&dir, config.clone()) {
        Ok(log) => log,
        Err(e) => return fail(format!("open: {e}")),
    };
    let started = std::time::Instant::now();
    let (refused_at, acked) = match append_until_full(&log) {
        Ok(found) => found,
        Err(detail) => return fail(detail),
    };
    let took = started.elapsed();
    if refused_at >= 90.0 {
        return fail(format!("refused at {refused_at:.1} % used, past the limit"));
    }
    match lost_after_reopen(log, &dir, config, &acked.iter().collect::<Vec<_>>()) {
        Ok(0) => {}
        Ok(lost) => return fail(format!("{lost} acknowledged records lost or damaged")),
        Err(detail) => return fail(detail),
    }
    Outcome::Passed {
        detail: format!(
            "{} acked in {took:.1?} (the timer looks every 10 s), refused by the look before a new segment at {refused_at:.1} % used (limit 90 %), never ENOSPC, 0 lost",
            acked.len()
        ),
    }
}

/// The cleaning service on a real small tmpfs: appending four times the disk's
/// size, it deletes the oldest segments (forcibly, none has expired) and appends
/// are never refused; it deletes only what brings the disk back below the
/// forcible ratio (40 % of 8 MiB: three 1 MiB segments stay), so the newest
/// records stay readable.
pub fn run_clean() -> Outcome {
    let fs = match Tmpfs::mount("8m") {
        Ok(fs) => fs,
        Err(reason) => return Outcome::Skipped { reason },
    };
    let dir = fs.path().join("log");
    let config = commitlog::CommitLogConfig {
        disk_space_warning_level_ratio: 90,
        disk_max_used_space_ratio: 30,
        disk_space_clean_forcibly_ratio: 40,
        clean_resource_interval_ms: 2,
        ..config(SEGMENT, FlushDiskType::SyncFlush)
    };
    let fail = |detail: String| Outcome::Failed { detail };
    let log = match CommitLog::open(&dir, config) {
        Ok(log) => log,
        Err(e) => return fail(format!("open: {e}")),
    };
    let mut last = Vec::new();
    let mut max_used: f64 = 0.0;
    // The fewest segments seen once cleaning began.
    let mut fewest = usize::MAX;
    let total = 4 * 8 * SEGMENT; // four times the file system
    let mut written = 0;
    let mut seq = 0;
    while written < total {
        let b = body(0, seq, 3000);
        match log.append(&b).map(|put| (put.wrote_offset, put.durability.wait())) {
            Ok((offset, Ok(()))) => last.push((offset, b)),
            Ok((_, Err(e))) => return fail(format!("a durable wait failed: {e}")),
            Err(e) => return fail(format!("append {seq} refused after {written} bytes: {e}")),
        }
        if last.len() > 64 {
            last.remove(0);
        }
        max_used = max_used.max(log.disk_used_percent().unwrap_or(0.0));
        if log.clean_stats().forcibly_deleted > 0 {
            fewest = fewest.min(log.segment_count());
        }
        written += 3000 + commitlog::format::HEADER_SIZE;
        seq += 1;
    }
    let stats = log.clean_stats();
    let unreadable =
        last.iter().filter(|(o, b)| log.read(*o).map(|r| r.body.to_vec()).ok().as_ref() != Some(b)).count();
    let _ = log.shutdown();
    if stats.forcibly_deleted == 0 || unreadable > 0 || fewest < 3 {
        return fail(format!(
            "{stats:?}, {unreadable} of the newest 64 records unreadable, {fewest} segments left at the fewest (3 fit below the ratio)"
        ));
    }
    Outcome::Passed {
        detail: format!(
            "{seq} durable appends ({} MiB) on an 8 MiB tmpfs, none refused; {} segments deleted before they expired, never more than needed ({fewest} kept at the fewest), the disk at most {max_used:.0} % full; the newest 64 records readable",
            written >> 20,
            stats.forcibly_deleted
        ),
    }
}

pub fn run() -> Outcome {
    let fs = match Tmpfs::mount("3m") {
        Ok(fs) => fs,
        Err(reason) => return Outcome::Skipped { reason },
    };
    let mp = fs.path().to_str().expect("utf-8").to_string();
    let exe = std::env::current_exe().expect("current exe");
    // 3 MiB: room for the small files and two 1 MiB segments, not a third.
    let out = Command::new(exe)
        .args(["child-disk-full", "--dir", &format!("{mp}/log")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|child| {
            let pid = child.id();
            crate::watchdog::child_started(pid);
            let out = child.wait_with_output();
            crate::watchdog::child_ended(pid);
            out
        });
    drop(fs);
    match out {
        Err(e) => Outcome::Failed { detail: format!("cannot run child: {e}") },
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            match (out.status.code(), out.status.signal()) {
                (Some(0), _) => Outcome::Passed { detail: stderr },
                (_, Some(sig)) => Outcome::Failed { detail: format!("writer killed by signal {sig} (7 is SIGBUS)") },
                (code, _) => Outcome::Failed { detail: format!("writer exited {code:?}: {stderr}") },
            }
        }
    }
}
