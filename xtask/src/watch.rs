//! A watch over a test run: a test that runs longer than a limit is a hang.
//! The run is then killed (cargo and every process under it) and fails naming
//! the test and how to run it alone, instead of running on until CI's own
//! time runs out with nothing said of what hung.
//!
//! What it reads is the test harness's own report: libtest prints `test NAME
//! has been running for over 60 seconds` for a test still running after a
//! minute, and `test NAME ... ok` (or `FAILED`, `ignored`) when one ends.
//! With one test thread it says nothing of a test running long but prints
//! `test NAME ... ` as the test starts: a test binary silent past the limit
//! is then the hang, named by that line. The limit is at least the minute
//! libtest waits before it says anything.

use std::collections::HashMap;
use std::io::{Read, Write};
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
            .filter(|&s| s >= LIBTEST_WARNS_AFTER.as_secs())
            .map(Duration::from_secs)
            .ok_or_else(|| {
                format!(
                    "XTASK_TEST_HANG_SECS takes a number of seconds of at least {} (libtest says nothing of a \
                     test running long before), not {secs:?}",
                    LIBTEST_WARNS_AFTER.as_secs()
                )
            }),
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

/// What the watch knows of the run, from its standard output.
struct Heard {
    /// Tests running for over a minute, by name, with when each started (about).
    long: HashMap<String, Instant>,
    /// Between a test binary's `running N tests` and its `test result:`.
    in_binary: bool,
    /// The line being printed, not ended yet: with one test thread libtest
    /// prints `test NAME ... ` when a test starts and its result on the same
    /// line when it ends, and says nothing of a test running long.
    partial: Vec<u8>,
    /// When the run last printed anything.
    last_output: Instant,
    /// Everything printed, for the caller.
    out: String,
    /// The output ended (every process holding it closed it).
    closed: bool,
}

impl Heard {
    fn new() -> Self {
        Heard {
            long: HashMap::new(),
            in_binary: false,
            partial: Vec::new(),
            last_output: Instant::now(),
            out: String::new(),
            closed: false,
        }
    }

    /// Takes `bytes` of output: each line ended is read and echoed (bytes
    /// that are not UTF-8 as U+FFFD; through `print!`, so a test of this
    /// module has its echo captured).
    fn take(&mut self, bytes: &[u8]) {
        self.last_output = Instant::now();
        for &byte in bytes {
            self.partial.push(byte);
            if byte == b'\n' {
                let line = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                print!("{line}");
                let _ = std::io::stdout().flush();
                self.hear(&line);
                self.out.push_str(&line);
            }
        }
    }

    /// The output closed: a last line not ended (a test binary that
    /// aborted mid-line, with one test thread) is echoed and kept too.
    fn end(&mut self) {
        if !self.partial.is_empty() {
            self.take(b"\n");
        }
    }

    fn hear(&mut self, line: &str) {
        match said(line) {
            Some(Said::Running(name)) => {
                let started = Instant::now().checked_sub(LIBTEST_WARNS_AFTER).unwrap_or_else(Instant::now);
                self.long.entry(name.to_string()).or_insert(started);
            }
            Some(Said::Ended(name)) => {
                self.long.remove(name);
            }
            Some(Said::BinaryEnded) => {
                self.long.clear();
                self.in_binary = false;
            }
            None if line.starts_with("running ") => self.in_binary = true,
            None => {}
        }
    }

    /// The test running longest, if it has run past `limit`; or, when a test
    /// binary has printed nothing for `limit`, the test its unfinished line
    /// names (one test thread), else what is known.
    fn hung(&self, limit: Duration) -> Option<(String, Duration)> {
        let long = self
            .long
            .iter()
            .map(|(name, started)| (name.clone(), started.elapsed()))
            .filter(|(_, ran)| *ran > limit)
            .max_by_key(|(_, ran)| *ran);
        if long.is_some() {
            return long;
        }
        let silent = self.last_output.elapsed();
        if !self.in_binary || silent <= limit {
            return None;
        }
        let partial = String::from_utf8_lossy(&self.partial);
        let name = partial.trim_end().strip_prefix("test ").and_then(|rest| rest.strip_suffix(" ..."));
        Some((name.map_or_else(|| "(unnamed: a test binary printed nothing)".to_string(), str::to_string), silent))
    }
}

/// The watch's state, locked (a panic while it was held leaves it usable).
fn lock(heard: &Mutex<Heard>) -> std::sync::MutexGuard<'_, Heard> {
    heard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `text` quoted for a POSIX shell.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// How long, after cargo ends, the watch waits for the rest of its output (a
/// process a test left behind may hold the pipe open for good).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Runs `command` (a `cargo test`), echoing its standard output and returning
/// it; fails on a non-zero exit, or, when a test runs past `limit`, kills the
/// run and fails naming the test.
pub fn run_tests(mut command: Command, limit: Duration) -> Result<(std::process::ExitStatus, String), String> {
    let mut child = command.stdout(Stdio::piped()).spawn().map_err(|e| format!("cannot run the tests: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("the tests' standard output was not captured")?;
    let heard = Arc::new(Mutex::new(Heard::new()));
    {
        // Left to end on its own: a process that escaped a kill, or one a
        // test left running, may keep the pipe open.
        let heard = Arc::clone(&heard);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => lock(&heard).take(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let mut heard = lock(&heard);
            heard.end();
            heard.closed = true;
        });
    }
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("cannot wait for the tests: {e}"))? {
            let ended = Instant::now();
            while !lock(&heard).closed && ended.elapsed() < OUTPUT_GRACE {
                std::thread::sleep(Duration::from_millis(20));
            }
            let out = std::mem::take(&mut lock(&heard).out);
            return Ok((status, out));
        }
        let hung = lock(&heard).hung(limit);
        if let Some((name, ran)) = hung {
            let killed = kill_tree(&mut child);
            return Err(format!(
                "test {name} ran for {ran:.0?}, past the limit of {limit:.0?}: a hang; the run was killed ({killed}). \
                 Run it alone: cargo test --workspace -- --exact {}",
                shell_quoted(&name)
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

    /// A command running `script` in `sh`: a stand-in for a test run.
    fn sh(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

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
        let mut long = Heard::new();
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
        let command = sh(&format!(
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
        let command = sh("echo 'test a ... ok'; echo 'test result: ok. 1 passed'");
        let (status, out) = run_tests(command, Duration::from_secs(1)).unwrap();
        assert!(status.success());
        assert!(out.contains("test result: ok. 1 passed"));
    }

    /// A byte of output that is not UTF-8 (a process under a test writing to
    /// the inherited stdout) neither ends the watch's reading (the run's next
    /// write met a closed pipe) nor loses the output.
    #[test]
    fn output_that_is_not_utf8_does_not_break_the_run() {
        let command = sh("printf 'caf\\351\\n'; sleep 1; echo 'test a ... ok'; echo 'test result: ok. 1 passed'");
        let (status, out) = run_tests(command, Duration::from_secs(60)).unwrap();
        assert!(status.success() && out.contains("test result: ok"), "status {status}, output read {out:?}");
    }

    /// A run whose cargo ended returns though a process a test left behind
    /// still holds its output open (it waited for that process, with no
    /// limit).
    #[test]
    fn a_run_that_ended_returns_though_a_process_it_left_holds_stdout() {
        let command = sh("sleep 15 & echo 'test a ... ok'; echo 'test result: ok. 1 passed'");
        let started = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(run_tests(command, Duration::from_secs(60)).map(|(s, _)| s.success())));
        let got = rx.recv_timeout(Duration::from_secs(5));
        assert!(got.is_ok(), "run_tests had not returned {:?} after the run ended", started.elapsed());
    }

    /// The command printed to run a hung test alone is one a shell takes,
    /// also for a doc test (its name holds spaces and parentheses).
    #[test]
    fn the_command_named_for_a_hung_doc_test_runs_in_a_shell() {
        let command = sh("echo 'test src/lib.rs - Thing (line 5) has been running for over 60 seconds'; sleep 30");
        let err = run_tests(command, Duration::from_secs(1)).expect_err("a hang");
        let run = err.split("Run it alone: ").nth(1).unwrap();
        let check = Command::new("sh").arg("-n").arg("-c").arg(run).output().unwrap();
        assert!(check.status.success(), "{run:?}: {}", String::from_utf8_lossy(&check.stderr));
    }

    /// With one test thread libtest says nothing of a test running long; a
    /// binary silent past the limit is a hang, named by its unfinished line.
    #[test]
    fn a_hang_with_one_test_thread_is_named() {
        let command = sh("echo 'running 2 tests'; echo 'test a ... ok'; printf 'test tests::stuck ... '; sleep 300");
        let started = Instant::now();
        let err = run_tests(command, Duration::from_secs(2)).expect_err("a hang");
        assert!(err.contains("test tests::stuck ran for"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(60), "killed in {:?}", started.elapsed());
    }

    /// Output silent past the limit before any test binary runs (cargo
    /// compiling, which prints to standard error) is not a hang.
    #[test]
    fn silence_outside_a_test_binary_is_not_a_hang() {
        let command = sh("sleep 2; echo 'running 1 test'; echo 'test a ... ok'; echo 'test result: ok. 1 passed'");
        let (status, out) = run_tests(command, Duration::from_secs(1)).unwrap();
        assert!(status.success() && out.contains("test result: ok"), "{out}");
    }

    /// The run's last line, unended (one test thread: a test that aborted
    /// its binary leaves `test NAME ... ` with no newline), is returned and
    /// echoed: the name of the test that crashed stays in the log.
    #[test]
    fn an_unended_last_line_is_not_lost() {
        let command = sh("echo 'running 1 test'; printf 'test tests::aborts ... '; exit 101");
        let (status, out) = run_tests(command, Duration::from_secs(60)).unwrap();
        assert!(!status.success());
        assert!(out.contains("test tests::aborts"), "output read {out:?}");
    }
}
