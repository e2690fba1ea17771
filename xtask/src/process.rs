//! Running cargo, rustup and the project's own programs (timed, echoed, failing
//! on a non-zero exit), and reading what a test run printed.

use std::env;
use std::process::Command;
use std::time::Instant;

/// Runs `cargo <args>` with extra environment variables, failing on a non-zero exit.
pub fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    run_cargo(args, envs, false).map(drop)
}

/// As [`cargo`], but captures standard output (and echoes it) for the caller to read.
pub fn cargo_output(args: &[&str], envs: &[(&str, &str)]) -> Result<String, String> {
    run_cargo(args, envs, true)
}

/// Runs cargo, timing it; with `capture`, standard output is collected (and
/// echoed) and returned, else it streams and the result is empty.
fn run_cargo(args: &[&str], envs: &[(&str, &str)], capture: bool) -> Result<String, String> {
    run_timed(cargo_command(), "cargo", args, envs, capture)
}

/// The cargo that runs xtask (`$CARGO`), else the one on the `PATH`.
fn cargo_command() -> Command {
    Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The end of a timed run: its time said, and a non-zero exit an error.
fn finished(
    label: &str,
    args: &[&str],
    started: Instant,
    status: std::process::ExitStatus,
    stdout: String,
) -> Result<String, String> {
    eprintln!("xtask: {label} {} took {:.1?}", args[0], started.elapsed());
    if status.success() {
        Ok(stdout)
    } else {
        Err(format!("`{label} {}` failed ({status})", args.join(" ")))
    }
}

/// Runs `command` with `args` appended (shown as `label args...`), timing it;
/// fails on a non-zero exit. `capture` as for [`run_cargo`].
pub fn run_timed(
    mut command: Command,
    label: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    capture: bool,
) -> Result<String, String> {
    let started = Instant::now();
    eprintln!("xtask: {label} {}", args.join(" "));
    command.args(args).envs(envs.iter().copied());
    let (status, stdout) = if capture {
        let out =
            command.stderr(std::process::Stdio::inherit()).output().map_err(|e| format!("cannot run {label}: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("{stdout}");
        (out.status, stdout)
    } else {
        (command.status().map_err(|e| format!("cannot run {label}: {e}"))?, String::new())
    };
    finished(label, args, started, status, stdout)
}

/// Runs `cargo <args>`, a test run, under the hang watch
/// ([`watch::run_tests`](crate::watch::run_tests), its limit
/// [`watch::hang_limit`](crate::watch::hang_limit)), timed and echoed as
/// [`cargo`] is; returns what it printed on standard output.
pub fn cargo_tests(args: &[&str], envs: &[(&str, &str)]) -> Result<String, String> {
    let limit = crate::watch::hang_limit()?;
    let mut command = cargo_command();
    command.args(args).envs(envs.iter().copied());
    let started = Instant::now();
    eprintln!("xtask: cargo {} (a test running over {limit:.0?} is a hang)", args.join(" "));
    let (status, stdout) = crate::watch::run_tests(command, limit)?;
    finished("cargo", args, started, status, stdout)
}

/// Runs `rustup run <toolchain> cargo <args>`, failing on a non-zero exit; with
/// `capture`, standard output is echoed and returned.
pub fn rustup_cargo(toolchain: &str, args: &[&str], envs: &[(&str, &str)], capture: bool) -> Result<String, String> {
    let mut command = Command::new("rustup");
    command.args(["run", toolchain, "cargo"]);
    run_timed(command, &format!("cargo +{toolchain}"), args, envs, capture)
}

/// True when `rustup <args>` runs and exits with success (a probe: output dropped).
pub fn rustup_succeeds(args: &[&str]) -> bool {
    Command::new("rustup").args(args).output().is_ok_and(|o| o.status.success())
}

/// Runs `rustup <args>` to install something, streaming its output; `failure` is
/// the error when it does not succeed.
pub fn rustup_install(args: &[&str], failure: &str) -> Result<(), String> {
    eprintln!("xtask: rustup {}", args.join(" "));
    let status = Command::new("rustup").args(args).status().map_err(|e| format!("cannot run rustup: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(failure.to_string())
    }
}

/// Sum of `N passed` over the `test result:` lines of a cargo test run.
pub fn passed_count(output: &str) -> Option<u64> {
    let counts: Vec<u64> = output
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}
