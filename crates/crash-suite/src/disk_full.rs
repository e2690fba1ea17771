//! Layer 5: a full disk is an error at segment creation, never a SIGBUS. Mounts a
//! tiny tmpfs (root only; otherwise the layer says why it is skipped) and runs the
//! writer in a child process, so a SIGBUS would show as its death by signal.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use commitlog::{CommitLog, FlushDiskType};

use crate::common::*;

const SEGMENT: usize = 1 << 20;

/// The child: append until an error; exit 0 if the error is a clean one.
pub fn child(dir: &Path) -> i32 {
    let log = match CommitLog::open(dir, config(SEGMENT, FlushDiskType::AsyncFlush)) {
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

pub fn run() -> Outcome {
    // `/proc/self` belongs to the process's effective user.
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self")) == 0;
    if !root {
        return Outcome::Skipped { reason: "not running as root, cannot mount a tmpfs".into() };
    }
    let mount_point = tempfile::tempdir().expect("mount point");
    let mp = mount_point.path().to_str().expect("utf-8").to_string();
    // 3 MiB: room for the small files and two 1 MiB segments, not a third.
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=3m", "tmpfs", &mp]).status();
    match mounted {
        Ok(s) if s.success() => {}
        Ok(s) => return Outcome::Skipped { reason: format!("mount -t tmpfs failed ({s})") },
        Err(e) => return Outcome::Skipped { reason: format!("cannot run mount: {e}") },
    }
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(exe).args(["child-disk-full", "--dir", &format!("{mp}/log")]).output();
    let _ = Command::new("umount").arg(&mp).status();
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
