//! A watch over a test run: a test that runs longer than a limit is a hang.
//! The run is then killed (cargo and every process under it) and fails naming
//! the test and how to run it alone, instead of running on until CI's own
//! time runs out with nothing said of what hung.
//!
//! What it reads is the test harness's own report: libtest prints `test NAME
//! has been running for over 60 seconds` for a test still running after a
//! minute, and `test NAME ... ok` (or `FAILED`, `ignored`) when one ends.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long one test may run in `cargo xtask test` (and so in CI) before it
/// counts as hung: ten times the longest test of the suite today (about a
/// minute on 2 cores, in a debug build). `XTASK_TEST_HANG_SECS` sets another.
pub const HANG_LIMIT: Duration = Duration::from_secs(10 * 60);

/// The limit in effect: [`HANG_LIMIT`], or `XTASK_TEST_HANG_SECS` when set.
pub fn hang_limit() -> Result<Duration, String> {
    match std::env::var("XTASK_TEST_HANG_SECS") {
        Ok(secs) => secs
            .parse::<u64>()
            .ok()
            .filter(|&s| s > 0)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("XTASK_TEST_HANG_SECS takes a number of seconds above 0, not {secs:?}")),
        Err(_) => Ok(HANG_LIMIT),
    }
}

/// The seconds libtest waits before it says a test has been running long.
const LIBTEST_WARNS_AFTER: Duration = Duration::from_secs(60);

/// What a line of libtest's output says of one test.
#[derive(Debug, PartialEq, Eq)]
enum Said<'a> {
    /// `test NAME has been running for over 60 seconds`.
    Running(&'a str),
    /// `test NAME ... RESULT`: it ended.
    Ended(&'a str),
    /// `test result: ...`: the test binary's run ended.
    BinaryEnded,
}

fn said(line: &str) -> Option<Said<'_>> {
    let line = line.trim_end();
    if line.starts_with("test result: ") {
        return Some(Said::BinaryEnded);
    }
    let rest = line.strip_prefix("test ")?;
    if let Some(name) = rest.strip_suffix(" has been running for over 60 seconds") {
        return Some(Said::Running(name));
    }
    rest.split_once(" ... ").map(|(name, _)| Said::Ended(name))
}

/// Tests running for over a minute, by name, with when each started (about).
#[derive(Default)]
struct Long(HashMap<String, Instant>);

impl Long {
    fn hear(&mut self, line: &str) {
        match said(line) {
            Some(Said::Running(name)) => {
                let started = Instant::now().checked_sub(LIBTEST_WARNS_AFTER).unwrap_or_else(Instant::now);
                self.0.entry(name.to_string()).or_insert(started);
            }
            Some(Said::Ended(name)) => {
                self.0.remove(name);
            }
            Some(Said::BinaryEnded) => self.0.clear(),
            None => {}
        }
    }

    /// The test running longest, if it has run past `limit`.
    fn hung(&self, limit: Duration) -> Option<(String, Duration)> {
        self.0
            .iter()
            .map(|(name, started)| (name.clone(), started.elapsed()))
            .filter(|(_, ran)| *ran > limit)
            .max_by_key(|(_, ran)| *ran)
    }
}

/// Runs `command` (a `cargo test`), echoing its standard output and returning
/// it; fails on a non-zero exit, or, when a test runs past `limit`, kills the
/// run and fails naming the test.
pub fn run_tests(mut command: Command, limit: Duration) -> Result<(std::process::ExitStatus, String), String> {
    let mut child = command.stdout(Stdio::piped()).spawn().map_err(|e| format!("cannot run the tests: {e}"))?;
    let stdout = child.stdout.take().ok_or("the tests' standard output was not captured")?;
    let long = Arc::new(Mutex::new(Long::default()));
    let reader = {
        let long = Arc::clone(&long);
        std::thread::spawn(move || {
            let mut out = String::new();
            let mut lines = BufReader::new(stdout);
            let mut line = String::new();
            while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                print!("{line}");
                let _ = std::io::stdout().flush();
                long.lock().unwrap_or_else(PoisonError::into_inner).hear(&line);
                out.push_str(&line);
                line.clear();
            }
            out
        })
    };
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("cannot wait for the tests: {e}"))? {
            let out = reader.join().map_err(|_| "the tests' output reader panicked")?;
            return Ok((status, out));
        }
        let hung = long.lock().unwrap_or_else(PoisonError::into_inner).hung(limit);
        if let Some((name, ran)) = hung {
            // The reader is left to end on its own: a process that escaped the
            // kill would keep the pipe open, and a join wait for it.
            let killed = kill_tree(&mut child);
            return Err(format!(
                "test {name} ran for {:.0?}, past the limit of {limit:.0?}: a hang; the run was killed ({killed}). \
                 Run it alone: cargo test --workspace -- --exact {name}",
                ran
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kills `child` and every process under it (cargo runs the test binaries as
/// its children; a test may start processes of its own), deepest first so
/// none is left to its init; says how many.
fn kill_tree(child: &mut Child) -> String {
    let mut pids = descendants(child.id());
    pids.reverse();
    let killed = pids.len();
    if !pids.is_empty() {
        let mut kill = Command::new("kill");
        kill.arg("-KILL").args(pids.iter().map(u32::to_string));
        let _ = kill.stderr(Stdio::null()).status();
    }
    let _ = child.kill();
    let _ = child.wait();
    format!("cargo and {killed} process{} under it", if killed == 1 { "" } else { "es" })
}

/// Every process under `root`, parents before their children (from
/// `/proc/*/stat`; none where there is no `/proc`).
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            // `pid (comm) state ppid ...`: the name may hold spaces and parentheses.
            let Some(ppid) = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)) else {
                continue;
            };
            if let Ok(ppid) = ppid.parse::<u32>() {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &parent_of {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_lines_are_read() {
        assert_eq!(said("test a::b has been running for over 60 seconds\n"), Some(Said::Running("a::b")));
        assert_eq!(said("test a::b ... ok"), Some(Said::Ended("a::b")));
        assert_eq!(said("test a::b ... FAILED"), Some(Said::Ended("a::b")));
        assert_eq!(said("test src/lib.rs - X (line 5) ... ok"), Some(Said::Ended("src/lib.rs - X (line 5)")));
        assert_eq!(said("test result: ok. 3 passed; 0 failed"), Some(Said::BinaryEnded));
        assert_eq!(said("running 3 tests"), None);
    }

    #[test]
    fn a_test_that_ended_is_not_hung() {
        let mut long = Long::default();
        long.hear("test slow has been running for over 60 seconds");
        long.hear("test stuck has been running for over 60 seconds");
        assert!(long.hung(Duration::from_secs(120)).is_none());
        assert!(long.hung(Duration::from_secs(30)).is_some());
        long.hear("test slow ... ok");
        assert_eq!(long.hung(Duration::from_secs(30)).map(|(n, _)| n), Some("stuck".to_string()));
        long.hear("test result: FAILED. 1 passed; 1 failed");
        assert!(long.hung(Duration::ZERO).is_none());
    }

    /// A run whose test says it has been running and then hangs (with a
    /// process of its own under it) is killed, whole, and named.
    #[test]
    fn a_hung_run_is_killed_and_named() {
        let pid_file = std::env::temp_dir().join(format!("xtask-watch-{}", std::process::id()));
        let mut command = Command::new("sh");
        command.arg("-c").arg(format!(
            "sleep 300 & echo $! > {}; echo 'test tests::stuck has been running for over 60 seconds'; sleep 300",
            pid_file.display()
        ));
        let started = Instant::now();
        let err = run_tests(command, Duration::from_secs(1)).expect_err("a hang is an error");
        assert!(err.contains("tests::stuck") && err.contains("killed"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(60), "killed in {:?}", started.elapsed());
        // The test's own process (a grandchild) went too, not only the run.
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let _ = std::fs::remove_file(&pid_file);
        let alive = || {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!alive(), "process {} under the run still runs", pid.trim());
    }

    #[test]
    fn a_run_that_ends_returns_its_output() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo 'test a ... ok'; echo 'test result: ok. 1 passed'"]);
        let (status, out) = run_tests(command, Duration::from_secs(1)).unwrap();
        assert!(status.success());
        assert!(out.contains("test result: ok. 1 passed"));
    }
}
