//! Runs the built `commitlog` binary: every subcommand, exit codes, bad input, and a
//! SIGKILL during `produce --flush sync`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SEGMENT: &str = "65536";

fn commitlog() -> Command {
    Command::new(env!("CARGO_BIN_EXE_commitlog"))
}

fn run(args: &[&str]) -> Output {
    commitlog().args(args).output().unwrap()
}

fn run_in(args: &[&str], stdin: &[u8]) -> Output {
    let mut child =
        commitlog().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The child may exit before reading (e.g. when it refuses to start).
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a one-line error on stderr, no panic or backtrace, and the exit code.
fn assert_clean_failure(out: &Output, code: i32, mentions: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
    assert!(err.contains(mentions), "expected {mentions:?} in {err:?}");
}

fn produce(dir: &Path, lines: &[String], flush: &str) -> Vec<u64> {
    let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let d = dir.to_str().unwrap();
    let out = run_in(&["produce", "--dir", d, "--flush", flush, "--segment-size", SEGMENT], input.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(|l| l.parse().unwrap()).collect()
}

fn consume(dir: &Path) -> Vec<(u64, String)> {
    let out = run(&["consume", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| {
            let (o, b) = l.split_once('\t').unwrap();
            (o.parse().unwrap(), b.to_string())
        })
        .collect()
}

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        out.push((entry.display().to_string(), std::fs::read(&entry).unwrap()));
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn produce_then_consume_round_trips_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = (0..3000).map(|i| format!("record {i} {}", "x".repeat(i % 50))).collect();
    let offsets = produce(dir.path(), &lines, "sync");
    assert_eq!(offsets.len(), lines.len());
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "input order");
    let more = produce(dir.path(), &["appended later".to_string()], "async");
    assert!(more[0] > *offsets.last().unwrap(), "recovered and continued");
    let records = consume(dir.path());
    assert_eq!(records.len(), 3001);
    for ((o, b), (offset, line)) in records.iter().zip(offsets.iter().zip(&lines)) {
        assert_eq!((o, b), (offset, line));
    }
    // --from and --hex.
    let from = offsets[2999].to_string();
    let out = run(&["consume", "--dir", dir.path().to_str().unwrap(), "--from", &from, "--hex"]);
    let hex_lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(hex_lines.len(), 2);
    assert_eq!(hex_lines[1], format!("{}\t{}", more[0], "617070656e646564206c61746572"));
}

#[test]
fn verify_stat_and_recover_describe_a_clean_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let offsets = produce(dir.path(), &(0..500).map(|i| format!("r{i}")).collect::<Vec<_>>(), "sync");
    let out = run(&["verify", "--dir", d, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["records"], 500);
    assert_eq!(v["first_offset"], 0);
    assert_eq!(v["last_offset"], *offsets.last().unwrap());
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    let out = run(&["verify", "--dir", d]);
    assert!(text(&out.stdout).contains("clean"));

    let out = run(&["stat", "--dir", d, "--json"]);
    assert!(out.status.success());
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["segment_size"], 65536);
    assert_eq!(s["abort_marker"], false);
    assert_eq!(s["locked"], false);
    assert_eq!(s["flushed_offset"], s["max_offset"]);
    assert!(text(&run(&["stat", "--dir", d]).stdout).contains("max offset"));

    let out = run(&["recover", "--dir", d, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["clean_shutdown"], true);
    assert_eq!(r["bytes_truncated"], 0);
    assert!(text(&run(&["recover", "--dir", d]).stdout).contains("normal"));
}

#[test]
fn read_only_subcommands_change_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    produce(dir.path(), &(0..100).map(|i| format!("r{i}")).collect::<Vec<_>>(), "async");
    // Leave a torn tail and an abort marker, as a crash would.
    std::fs::write(dir.path().join("abort"), b"1").unwrap();
    let before = tree(dir.path());
    for args in [
        vec!["consume", "--dir", d],
        vec!["verify", "--dir", d],
        vec!["stat", "--dir", d],
        vec!["consume", "--dir", d, "--hex"],
    ] {
        run(&args);
        assert!(tree(dir.path()) == before, "{args:?} changed the directory");
    }
}

#[test]
fn verify_reports_damage_with_file_and_offset_and_recover_truncates_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let offsets = produce(dir.path(), &(0..50).map(|i| format!("record-{i}")).collect::<Vec<_>>(), "sync");
    // Garbage right after the last record: a torn tail above the checkpoint.
    let seg = dir.path().join("commitlog").join(format!("{:020}", 0));
    let end = offsets.last().unwrap() + 32 + "record-49".len() as u64;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&[0x55; 40], end).unwrap();
    }
    let out = run(&["verify", "--dir", d]);
    assert_eq!(out.status.code(), Some(3));
    let report = text(&out.stdout);
    assert!(report.contains("00000000000000000000") && report.contains(&end.to_string()), "{report}");
    assert_eq!(consume(dir.path()).len(), 50, "consume prints the valid prefix");

    let out = run(&["recover", "--dir", d, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["end_offset"], end);
    assert_eq!(r["bytes_truncated"], 40);
    assert!(run(&["verify", "--dir", d]).status.success(), "clean after recovery");

    // Damage below the checkpoint is corruption: recover refuses, naming it.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&[0xFF], offsets[48] + 33).unwrap();
    }
    assert_clean_failure(&run(&["recover", "--dir", d]), 1, "corrupt record");
    let out = run(&["verify", "--dir", d]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stdout).contains("corrupt record below the checkpoint"));
}

#[test]
fn bad_input_gets_one_line_errors_and_non_zero_exits() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let m = missing.to_str().unwrap();
    for sub in ["consume", "verify", "stat", "recover"] {
        assert_clean_failure(&run(&[sub, "--dir", m]), 1, "does not exist");
    }
    assert!(!missing.exists(), "nothing created");
    let foreign = tempfile::tempdir().unwrap();
    std::fs::write(foreign.path().join("hello.txt"), b"hi").unwrap();
    let f = foreign.path().to_str().unwrap();
    for sub in ["consume", "verify", "stat", "recover"] {
        assert_clean_failure(&run(&[sub, "--dir", f]), 1, "not a commit log");
    }
    // A regular file where the store directory should be: said so (not "File
    // exists" or a bare "not a directory"), and left as it was.
    let file = foreign.path().join("hello.txt");
    let fl = file.to_str().unwrap();
    for args in [vec!["produce", "--dir", fl], vec!["verify", "--dir", fl], vec!["stat", "--dir", fl]] {
        let out = run_in(&args, b"x\n");
        assert_clean_failure(&out, 1, "is not a directory: a commit log store is a directory");
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"hi");
    let out = run(&["produce"]);
    assert_eq!(out.status.code(), Some(2), "bad flags are usage errors");
    assert_eq!(run(&["bench", "--mode", "turbo"]).status.code(), Some(2));
    assert_eq!(run(&["no-such-command"]).status.code(), Some(2));

    // A foreign file among the segments.
    let log = tempfile::tempdir().unwrap();
    produce(log.path(), &["a".to_string()], "sync");
    std::fs::write(log.path().join("commitlog").join("notes.txt"), b"x").unwrap();
    let l = log.path().to_str().unwrap();
    assert_clean_failure(&run_in(&["produce", "--dir", l], b"b\n"), 1, "notes.txt");
    let out = run(&["verify", "--dir", l]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stdout).contains("notes.txt"));
    std::fs::remove_file(log.path().join("commitlog").join("notes.txt")).unwrap();

    // A conflicting segment size.
    assert_clean_failure(
        &run_in(&["produce", "--dir", l, "--segment-size", "131072"], b"b\n"),
        2,
        "65536-byte segments",
    );
    // An oversized record.
    let big = "y".repeat(70_000) + "\n";
    assert_clean_failure(&run_in(&["produce", "--dir", l], big.as_bytes()), 1, "exceeds max_message_size");
}

#[test]
fn a_log_held_by_another_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut holder = commitlog()
        .args(["produce", "--dir", d, "--segment-size", SEGMENT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once it acknowledged a record it has the lock.
    let mut stdin = holder.stdin.take().unwrap();
    stdin.write_all(b"first\n").unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "0");
    assert_clean_failure(&run_in(&["produce", "--dir", d], b"second\n"), 1, "locked");
    assert_clean_failure(&run(&["recover", "--dir", d]), 1, "locked");
    let s: serde_json::Value = serde_json::from_slice(&run(&["stat", "--dir", d, "--json"]).stdout).unwrap();
    assert_eq!(s["locked"], true);
    drop(stdin);
    assert!(holder.wait().unwrap().success());
}

#[test]
fn sigkill_during_sync_produce_loses_no_printed_offset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let mut child = commitlog()
        .args(["produce", "--dir", &d, "--flush", "sync", "--segment-size", SEGMENT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for i in 0..1_000_000u64 {
            if writeln!(stdin, "kill-test {i} {}", "z".repeat((i % 200) as usize)).is_err() {
                return; // the child is gone
            }
        }
    });
    let mut printed = Vec::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while printed.len() < 2000 {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "produce stopped early");
        printed.push(line.trim().parse::<u64>().unwrap());
    }
    child.kill().unwrap(); // SIGKILL, mid-stream
    child.wait().unwrap();
    // Whatever else it printed before dying counts too.
    line.clear();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        if let Ok(o) = line.trim().parse::<u64>() {
            printed.push(o);
        }
        line.clear();
    }
    writer.join().unwrap();
    let records = consume(dir.path());
    let by_offset: std::collections::HashMap<u64, String> = records.into_iter().collect();
    for (i, offset) in printed.iter().enumerate() {
        let expected = format!("kill-test {i} {}", "z".repeat(i % 200));
        assert_eq!(by_offset.get(offset), Some(&expected), "acknowledged record {i} at {offset} lost");
    }
    // And the log recovers cleanly.
    let out = run(&["recover", "--dir", &d, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["clean_shutdown"], false);
}

#[test]
fn bench_runs_every_mode_and_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = run(&[
        "bench",
        "--dir",
        d,
        "--count",
        "2000",
        "--producers",
        "2",
        "--record-size",
        "128",
        "--segment-size",
        "1048576",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "commitlog-bench/1");
    assert!(v["machine"].as_str().unwrap().contains("Linux"));
    let runs = v["runs"].as_array().unwrap();
    let modes: Vec<&str> = runs.iter().map(|m| m["workload"].as_str().unwrap()).collect();
    assert_eq!(modes, ["sync", "async", "async-pool"]);
    for m in runs {
        assert_eq!(m["detail"]["records"], 2000);
        assert_eq!(m["detail"]["backend"], "pwrite", "the default write path, reported");
        assert!(m["records_per_sec"].as_f64().unwrap() > 0.0);
        assert!(m["config"].as_str().unwrap().contains("2 producers, 128 B records, 1 MiB segments"));
    }
    let sync = &runs[0];
    assert!(sync["detail"]["ack_latency"]["p99_us"].as_f64().unwrap() > 0.0, "sync reports durable-ack latency");
    assert_eq!(sync["latency"], sync["detail"]["ack_latency"], "sync's unit is the acknowledged record");
    assert!(sync["detail"]["records_per_flush"].as_f64().unwrap() >= 1.0, "sync reports records per flush");
    assert_eq!(runs[1]["latency"], runs[1]["detail"]["append_latency"]);
    assert!(dir.path().join("sync").exists(), "--dir keeps the logs");
    let progress = text(&out.stderr);
    for mode in ["sync", "async", "async-pool"] {
        assert!(progress.contains(&format!("bench: {mode}: 2000 records in")), "each mode said as it ends: {progress}");
    }
    assert!(!progress.contains("stopped at"), "{progress}");
    // A mode cut short by --duration-secs says so, on stderr and under the table.
    let short = run(&[
        "bench",
        "--mode",
        "sync",
        "--count",
        "100000000",
        "--duration-secs",
        "0.3",
        "--record-size",
        "64",
        "--segment-size",
        "1048576",
    ]);
    assert!(short.status.success(), "{}", text(&short.stderr));
    assert!(
        text(&short.stderr).contains("of 100000000 records")
            && text(&short.stderr).contains("stopped at --duration-secs 0.3")
    );
    assert!(text(&short.stdout).contains("sync: stopped at --duration-secs 0.3 after"), "{}", text(&short.stdout));
    let table = run(&[
        "bench",
        "--count",
        "500",
        "--mode",
        "async",
        "--backend",
        "mmap",
        "--record-size",
        "64",
        "--segment-size",
        "1048576",
    ]);
    assert!(table.status.success());
    let table = text(&table.stdout);
    assert!(table.contains("rec/s") && table.contains("rec/flush") && table.contains("mmap"), "{table}");

    // The document is a baseline for another configuration: one command prints the ratios and plots both.
    let base = dir.path().join("base.json");
    std::fs::write(&base, &out.stdout).unwrap();
    let plot = dir.path().join("plot.svg");
    let (b, p) = (base.to_str().unwrap(), plot.to_str().unwrap());
    let against = ["bench", "--count", "500", "--mode", "async", "--record-size", "64", "--segment-size", "2097152"];
    let cmp = run(&[&against[..], &["--baseline", b, "--plot", p]].concat());
    assert!(cmp.status.success(), "{}", text(&cmp.stderr));
    let cmp = text(&cmp.stdout);
    let line = cmp.lines().find(|l| l.starts_with("| async |")).unwrap_or_else(|| panic!("no async row: {cmp}"));
    assert!(line.contains("2 MiB segments) vs commitlog (pwrite, 2 producers, 128 B records, 1 MiB"), "{line}");
    assert!(line.contains('x'), "a ratio: {line}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("baseline"), "{svg}");
    // A file that is not a results document is refused before anything runs.
    let wrong = run(&[&against[..], &["--baseline", p]].concat());
    assert_eq!(wrong.status.code(), Some(1));
    assert!(text(&wrong.stderr).contains("not a benchmark results document"), "{}", text(&wrong.stderr));
}

#[test]
fn bad_numeric_arguments_are_usage_errors_not_panics() {
    let cases: &[&[&str]] = &[
        &["bench", "--duration-secs", "NaN"],
        &["bench", "--duration-secs=-1"],
        &["bench", "--duration-secs", "inf"],
        &["bench", "--duration-secs", "0"],
        &["bench", "--producers", "0"],
        &["bench", "--count", "0"],
        &["bench", "--record-size", "0"],
        &["bench", "--segment-size", "1000"],
        &["bench", "--segment-size", "18446744073709551615"],
        &["bench", "--record-size", "70000", "--segment-size", "65536"],
        &["produce", "--dir", "/nonexistent", "--segment-size", "5"],
        &["consume", "--dir", "/nonexistent", "--from", "-1"],
    ];
    for args in cases {
        let out = run(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Runs the tool with a time limit: a hang is a failure, not a stuck test.
fn run_bounded(args: &[&str], stdin: &[u8], limit: std::time::Duration) -> Output {
    let mut child =
        commitlog().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = done.send(());
        out
    });
    if finished.recv_timeout(limit).is_err() {
        // SIGKILL the hung child (its pid cannot be reused while we have not reaped it).
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("commitlog {args:?} did not finish within {limit:?}");
    }
    waiter.join().unwrap().unwrap()
}

#[test]
fn a_segment_named_near_the_end_of_the_offset_space_is_an_error_not_a_hang() {
    // 18446744073709547520 = 2^64 - 4096: the segment's end overflows u64. This once
    // passed `verify` and made `produce` spin forever on wrapped offsets.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    std::fs::create_dir_all(dir.path().join("commitlog")).unwrap();
    std::fs::write(dir.path().join("commitlog").join("18446744073709547520"), vec![0u8; 4096]).unwrap();
    let limit = std::time::Duration::from_secs(20);
    let out = run_bounded(&["verify", "--dir", d], b"", limit);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("18446744073709547520"), "{}", text(&out.stdout));
    let out = run_bounded(&["produce", "--dir", d, "--segment-size", "4096"], b"x\n", limit);
    assert_clean_failure(&out, 1, "18446744073709547520");
    for cmd in ["recover", "stat", "consume"] {
        let out = run_bounded(&[cmd, "--dir", d], b"", limit);
        assert!(!text(&out.stderr).contains("panicked"), "{cmd}: {}", text(&out.stderr));
    }
}

/// A log configuration under async flush that never flushes by itself:
/// records become durable only when the test says so (`flush_all`); the
/// checkpoint records it within 20 ms.
fn unflushed_log_config() -> commitlog::CommitLogConfig {
    use commitlog::{CommitLogConfig, FlushConfig, FlushDiskType};
    CommitLogConfig::builder()
        .mapped_file_size_commit_log(65536)
        .max_message_size(16 * 1024)
        .flush_disk_type(FlushDiskType::AsyncFlush)
        .flush(FlushConfig {
            flush_interval_commit_log_ms: 3_600_000,
            flush_commit_log_thorough_interval_ms: 3_600_000,
            ..FlushConfig::default()
        })
        .checkpoint_interval_ms(20)
        .build()
        .unwrap()
}

/// Starts `commitlog ARGS` with its stdout lines sent to the receiver as they come.
fn spawn_lines(args: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = commitlog().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Ends a `--follow` child with Ctrl-C and checks it exits cleanly.
fn interrupt(mut child: std::process::Child) {
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "Ctrl-C ends --follow cleanly, not with a signal: {exit:?}");
}

#[test]
fn consume_follow_prints_records_once_durable_across_segments_and_ends_cleanly_on_ctrl_c() {
    use commitlog::CommitLog;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), unflushed_log_config()).unwrap();
    let first: Vec<u64> = (0..3).map(|i| log.append(format!("first {i}").as_bytes()).unwrap().wrote_offset).collect();
    log.flush_all().unwrap();

    let (child, rx) = spawn_lines(&["consume", "--dir", dir.path().to_str().unwrap(), "--follow"]);
    let next = |what: &str| rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no line for {what}"));
    for (i, offset) in first.iter().enumerate() {
        assert_eq!(next("a durable record"), format!("{offset}\tfirst {i}"));
    }

    // Not durable yet: not printed.
    let pending = log.append(b"pending").unwrap().wrote_offset;
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err(), "printed a record a crash could take back");
    // Durable, and on into later segments (12 KiB bodies: five per segment).
    let big = vec![b'x'; 12 * 1024];
    let more: Vec<u64> = (0..12).map(|_| log.append(&big).unwrap().wrote_offset).collect();
    log.flush_all().unwrap();
    assert_eq!(next("the pending record"), format!("{pending}\tpending"));
    for offset in &more {
        let line = next("a record in a later segment");
        assert!(line.starts_with(&format!("{offset}\t")), "{line}");
    }
    assert!(more.last().unwrap() > &(2 * 65536), "the records crossed two segment boundaries");

    interrupt(child);
    log.shutdown().unwrap();
}

#[test]
fn stat_prints_times_for_people_and_watch_repeats_with_rates_until_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    produce(dir.path(), &["one".to_string(), "two".to_string()], "sync");
    let out = run(&["stat", "--dir", d]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("checkpoint time")).expect("a checkpoint time line");
    assert!(line.contains(" UTC (") && line.contains(" ago)"), "{line}");
    let json: serde_json::Value = serde_json::from_slice(&run(&["stat", "--dir", d, "--json"]).stdout).unwrap();
    assert!(json["checkpoint_time"].as_str().unwrap().ends_with(" UTC"));

    let mut child = commitlog().args(["stat", "--dir", d, "--watch", "0.05"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut rates = 0;
    while rates < 2 {
        let line = lines.next().expect("stat --watch ended by itself").unwrap();
        if line.starts_with("appended") {
            rates += 1;
            if rates == 2 {
                assert!(line.contains("MB/s"), "a rate from the second report on: {line}");
            }
        }
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success(), "Ctrl-C ends --watch cleanly");
    let bad = run(&["stat", "--dir", d, "--watch", "0"]);
    assert_clean_failure(&bad, 2, "positive");
}

#[test]
fn a_store_over_several_directories_is_written_read_verified_and_recovered() {
    let (store, disk1, disk2) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (d, p1, p2) = (store.path().to_str().unwrap(), disk1.path().to_str().unwrap(), disk2.path().to_str().unwrap());
    let lines: Vec<String> = (0..400).map(|i| format!("record {i:04} {}", "x".repeat(400))).collect();
    let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let paths = format!("{p1};{p2}");
    let args = ["produce", "--dir", d, "--flush", "sync", "--segment-size", SEGMENT, "--store-path-commit-log", &paths];
    let out = run_in(&args, input.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let in_dir =
        |p: &Path| std::fs::read_dir(p).unwrap().filter(|e| e.as_ref().unwrap().file_name().len() == 20).count();
    assert!(in_dir(disk1.path()) >= 1 && in_dir(disk2.path()) >= 1, "segments on both disks");

    // The tools find every segment from the store directory alone.
    let bodies: Vec<String> = consume(store.path()).into_iter().map(|(_, b)| b).collect();
    assert_eq!(bodies, lines);
    let out = run(&["verify", "--dir", d]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let out = run(&["stat", "--dir", d]);
    let stat = text(&out.stdout);
    assert!(stat.contains(&format!("segment directory   {p1} (writable)")), "{stat}");
    assert!(stat.contains(&format!("segment directory   {p2} (writable)")), "{stat}");
    let out = run(&["recover", "--dir", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Appending again without naming the directories uses the recorded ones.
    let more = produce(store.path(), &["one more".to_string()], "sync");
    assert_eq!(more.len(), 1);
    assert_eq!(consume(store.path()).last().unwrap().1, "one more");

    // Leaving a directory out is refused with the reason; a missing one is a problem.
    let out = run_in(&["produce", "--dir", d, "--store-path-commit-log", p1], b"x\n");
    assert_clean_failure(&out, 1, "which the configuration does not list");
    let moved = disk2.path().with_extension("moved");
    std::fs::rename(disk2.path(), &moved).unwrap();
    let out = run(&["verify", "--dir", d]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("segment directory is missing"), "{}", text(&out.stdout));
    // ... and the log refuses to open without it, naming it.
    assert_clean_failure(&run_in(&["produce", "--dir", d], b"x\n"), 1, "is missing: is its disk mounted?");
    assert!(!disk2.path().exists(), "the missing directory was created");
    std::fs::rename(&moved, disk2.path()).unwrap();
    // forget-dir refuses a directory that holds segments, or one not listed.
    assert_clean_failure(&run(&["forget-dir", "--dir", d, p2]), 1, "still holds");
    assert_clean_failure(&run(&["forget-dir", "--dir", d, "/nowhere"]), 1, "is not one of the store's");
    assert_eq!(consume(store.path()).len(), lines.len() + 1, "nothing changed");
}

/// Flips one byte of a store's file at `at` (a position in the file).
fn damage_at(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, at).unwrap();
    f.write_all_at(&[byte[0] ^ 0xFF], at).unwrap();
}

/// A store of several segments with 3,000 records of 40 bytes, shut down cleanly.
fn three_thousand(dir: &Path) -> Vec<u64> {
    produce(dir, &(0..3000).map(|i| format!("record-{i:05}-{}", "x".repeat(28))).collect::<Vec<_>>(), "async")
}

#[test]
fn tools_say_where_damage_below_the_checkpoint_stops_them_and_salvage_gives_a_way_forward() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let offsets = three_thousand(dir.path());
    let victim = offsets[820];
    let seg = |o: u64| dir.path().join("commitlog").join(format!("{:020}", o - o % 65536));
    damage_at(&seg(victim), victim % 65536 + 40);

    // consume prints the records before the damage, then says where and why: exit 3.
    let out = run(&["consume", "--dir", d]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 820);
    let err = text(&out.stderr);
    assert!(err.contains(&format!("stopped at offset {victim}")) && err.contains("durable"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // --follow too, instead of stalling.
    let out = run_bounded(&["consume", "--dir", d, "--follow"], b"", std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&victim.to_string()));

    // recover opens (the damage is below the checkpoint's segment) and says what it
    // did not check.
    let out = run(&["recover", "--dir", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("not checked") && said.contains("commitlog verify"), "{said}");

    // Damage in the last segment: recover and produce refuse, and say what to do.
    let last = *offsets.last().unwrap();
    damage_at(&seg(last), last % 65536 + 40);
    let out = run(&["recover", "--dir", d]);
    assert_clean_failure(&out, 1, "recover --salvage");
    assert_clean_failure(&run_in(&["produce", "--dir", d], b"more\n"), 1, "corrupt record");
    // The failed opens left the store as they found it.
    let s: serde_json::Value = serde_json::from_slice(&run(&["stat", "--dir", d, "--json"]).stdout).unwrap();
    assert_eq!(s["abort_marker"], false, "a failed open left the abort marker");

    // The way forward: salvage keeps every record before the first damage and
    // moves the rest aside, saying what it moved.
    let out = run(&["recover", "--dir", d, "--salvage", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["salvage"]["end"], victim);
    let moved = r["salvage"]["moved"].as_array().unwrap();
    assert!(!moved.is_empty());
    for m in moved {
        assert!(Path::new(m["to"].as_str().unwrap()).exists(), "{m}");
    }
    assert!(text(&out.stderr).contains("moved aside"));
    assert_eq!(consume(dir.path()).len(), 820);
    assert!(run(&["verify", "--dir", d]).status.success());
    assert_eq!(produce(dir.path(), &["after".to_string()], "sync"), vec![victim]);
}

/// Runs `args` with stdout read for one line and then closed, as `| head -1` does.
fn first_line_then_close(args: &[&str], stdin: &[u8]) -> (std::process::ExitStatus, String, String) {
    let mut child =
        commitlog().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    // The reader is dropped here: the pipe is closed.
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    (out.status, first, text(&out.stderr))
}

#[test]
fn every_subcommand_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // Many 4 KiB segments, so every listing is larger than a pipe's buffer.
    let lines: Vec<String> = (0..10_000).map(|i| format!("{i:05}-{}", "y".repeat(1200))).collect();
    let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let out = run_in(&["produce", "--dir", d, "--flush", "async", "--segment-size", "4096"], input.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let more: String = (0..20_000).map(|i| format!("{i}\n")).collect();
    for (args, stdin) in [
        (vec!["stat", "--dir", d], &b""[..]),
        (vec!["verify", "--dir", d], b""),
        (vec!["consume", "--dir", d], b""),
        (vec!["consume", "--dir", d, "--hex"], b""),
        (vec!["produce", "--dir", d, "--flush", "async"], more.as_bytes()),
    ] {
        let (status, first, stderr) = first_line_then_close(&args, stdin);
        assert!(!first.is_empty(), "{args:?}: no output");
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

#[test]
fn receive_follow_prints_durable_messages_beside_the_running_store_and_commits_nothing() {
    use message_store::{Message, MessageStore, MessageStoreConfig};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    // Messages are dispatched once written (async flush), durable only when the test flushes.
    let store = MessageStore::open(dir.path(), MessageStoreConfig::new(unflushed_log_config())).unwrap();
    store.create_topic("t", 2).unwrap();
    let put = |queue: u32, body: String| {
        store.put_message(&Message::new("t", queue, body.into_bytes())).unwrap();
        store.dispatch_now().unwrap();
    };
    for i in 0..3 {
        put(1, format!("m{i}"));
        put(0, format!("other {i}"));
    }
    store.log().flush_all().unwrap();

    let d = dir.path().to_str().unwrap();
    let (child, rx) = spawn_lines(&["receive", "--dir", d, "--topic", "t", "--queue", "1", "--group", "g", "--follow"]);
    let next = |what: &str| rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no line for {what}"));
    for i in 0..3 {
        assert_eq!(next("a durable message"), format!("{i}\tm{i}"));
    }
    // Dispatched but not durable: not printed.
    put(1, "pending".into());
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err(), "printed a message a crash could take back");
    // Durable, and on into later segments of the log (12 kB bodies: five per segment).
    store.log().flush_all().unwrap();
    assert_eq!(next("the pending message"), "3\tpending");
    for i in 0..10 {
        put(1, format!("{i}{}", "x".repeat(12 * 1000)));
    }
    store.log().flush_all().unwrap();
    for i in 0..10 {
        let line = next("a message in a later segment");
        assert!(line.starts_with(&format!("{}\t{i}x", 4 + i)), "{}", &line[..20.min(line.len())]);
    }
    interrupt(child);
    assert_eq!(store.committed_offset("g", "t", 1).unwrap(), None, "--follow commits nothing");
    store.shutdown().unwrap();
    // A queue the store does not have: a clear refusal.
    assert_clean_failure(
        &run(&[
            "receive",
            "--dir",
            dir.path().to_str().unwrap(),
            "--topic",
            "t",
            "--queue",
            "5",
            "--group",
            "g",
            "--follow",
        ]),
        1,
        "queue 5 does not exist",
    );
}

#[test]
fn messages_go_in_with_send_come_out_with_receive_and_topics_shows_the_lag_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let d = store.to_str().unwrap();
    let sent = run_in(
        &[
            "send",
            "--dir",
            d,
            "--segment-size",
            SEGMENT,
            "--topic",
            "orders",
            "--queue",
            "1",
            "--create-queues",
            "2",
            "--tags",
            "new",
        ],
        b"first\nsecond\nthird\n",
    );
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let offsets: Vec<u64> =
        text(&sent.stdout).lines().map(|l| l.split('\t').next().unwrap().parse().unwrap()).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    let first = run(&["receive", "--dir", d, "--topic", "orders", "--queue", "1", "--group", "g", "--max", "2"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "0\tfirst\n1\tsecond\n");
    // The group goes on from its committed offset; a filter for another tag finds nothing.
    let rest = run(&["receive", "--dir", d, "--topic", "orders", "--queue", "1", "--group", "g", "--json"]);
    let line: serde_json::Value = serde_json::from_str(text(&rest.stdout).trim()).unwrap();
    assert_eq!((line["queue_offset"].as_u64(), line["body"].as_str()), (Some(2), Some("third")));
    let other = run(&["receive", "--dir", d, "--topic", "orders", "--queue", "1", "--group", "h", "--tags", "old"]);
    assert!(other.status.success() && other.stdout.is_empty(), "{}", text(&other.stderr));
    let before = tree(&store);
    let listing = run(&["topics", "--dir", d, "--json"]);
    assert!(listing.status.success(), "{}", text(&listing.stderr));
    assert_eq!(tree(&store), before, "topics is read-only");
    let report: serde_json::Value = serde_json::from_slice(&listing.stdout).unwrap();
    assert_eq!(report["dispatch_lag_bytes"].as_u64(), Some(0));
    let queue = &report["queues"][1];
    assert_eq!((queue["min_offset"].as_u64(), queue["max_offset"].as_u64()), (Some(0), Some(3)));
    let group = report["groups"].as_array().unwrap().iter().find(|g| g["group"] == "g").unwrap();
    assert_eq!((group["offset"].as_u64(), group["lag"].as_u64()), (Some(3), Some(0)));
    let h = report["groups"].as_array().unwrap().iter().find(|g| g["group"] == "h").unwrap();
    assert_eq!(h["offset"].as_u64(), Some(3), "filtered messages are consumed too");
    // Refusals: one line, nothing written.
    assert_clean_failure(&run_in(&["send", "--dir", d, "--topic", "nope"], b"x\n"), 1, "does not exist");
    assert_clean_failure(
        &run(&["receive", "--dir", d, "--topic", "orders", "--queue", "7", "--group", "g"]),
        1,
        "queue 7",
    );
    assert_clean_failure(&run(&["receive", "--dir", d, "--topic", "orders", "--group", "bad group"]), 2, "group");
    assert_clean_failure(&run(&["topics", "--dir", dir.path().join("missing").to_str().unwrap()]), 1, "does not exist");
}

/// A message store of 30 messages on queue 0 of topic `t` (a group's offset
/// at 20), closed, made with `send` and `receive`.
fn thirty_messages(dir: &Path) {
    let d = dir.to_str().unwrap();
    let lines: String = (0..30).map(|i| format!("message {i:02}\n")).collect();
    let sent = run_in(
        &["send", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--create-queues", "2", "--key", "k"],
        lines.as_bytes(),
    );
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let read = run(&["receive", "--dir", d, "--topic", "t", "--group", "g", "--max", "20"]);
    assert!(read.status.success(), "{}", text(&read.stderr));
}

/// Flips a byte in the middle of the queue index's first run (a clean
/// shutdown of the store sealed one).
fn damage_run(dir: &Path) -> PathBuf {
    use std::os::unix::fs::FileExt;
    let run = dir.join("queueindex").join(format!("{:020}", 0));
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&run).unwrap();
    let at = file.metadata().unwrap().len() / 2;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0xFF], at).unwrap();
    run
}

#[test]
fn verify_checks_a_message_stores_derived_data_and_recover_repairs_it_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    thirty_messages(dir.path());
    let clean = run(&["verify", "--dir", d, "--json"]);
    assert!(clean.status.success(), "{}{}", text(&clean.stdout), text(&clean.stderr));
    let report: serde_json::Value = serde_json::from_slice(&clean.stdout).unwrap();
    assert_eq!(report["message_store"]["messages"].as_u64(), Some(30));
    assert_eq!(report["message_store"]["entries"].as_u64(), Some(30));
    assert_eq!(report["message_store"]["keys"].as_u64(), Some(30));

    let run_file = damage_run(dir.path());
    let before = tree(dir.path());
    let found = run(&["verify", "--dir", d]);
    assert_eq!(found.status.code(), Some(3), "{}", text(&found.stdout));
    let said = text(&found.stdout);
    assert!(said.contains(&format!("problem: {}: body CRC mismatch", run_file.display())), "{said}");
    assert_eq!(tree(dir.path()), before, "verify is read-only");
    // Read-only readers do not trust the run either: they read the log.
    let topics = run(&["topics", "--dir", d, "--json"]);
    assert!(topics.status.success(), "{}", text(&topics.stderr));
    let topics: serde_json::Value = serde_json::from_slice(&topics.stdout).unwrap();
    let queue0 = topics["queues"].as_array().unwrap().iter().find(|q| q["queue"] == 0).unwrap().clone();
    assert_eq!(queue0["max_offset"].as_u64(), Some(30), "{topics}");

    let repaired = run(&["recover", "--dir", d, "--json"]);
    assert!(repaired.status.success(), "{}{}", text(&repaired.stdout), text(&repaired.stderr));
    let report: serde_json::Value = serde_json::from_slice(&repaired.stdout).unwrap();
    let dropped = report["message_store"]["index_runs_dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 1, "{report}");
    assert!(dropped[0].as_str().unwrap().starts_with(run_file.to_str().unwrap()), "{report}");
    assert!(report["message_store"]["problems"].as_array().unwrap().is_empty(), "{report}");
    assert!(run(&["verify", "--dir", d]).status.success());
    // Nothing lost: the group reads on from 20, the next message gets 30.
    let rest = run(&["receive", "--dir", d, "--topic", "t", "--queue", "0", "--group", "g"]);
    let lines: Vec<String> = text(&rest.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 10, "{}", text(&rest.stderr));
    assert_eq!(lines[0], "20\tmessage 20");
    let next = run_in(&["send", "--dir", d, "--topic", "t"], b"after\n");
    assert!(text(&next.stdout).starts_with("30\t"), "{}", text(&next.stdout));

    // Text output names what it did.
    damage_run(dir.path());
    let repaired = run(&["recover", "--dir", d]);
    assert!(repaired.status.success(), "{}", text(&repaired.stderr));
    assert!(text(&repaired.stdout).contains("index runs dropped"), "{}", text(&repaired.stdout));
    assert!(run(&["verify", "--dir", d]).status.success());
}

#[test]
fn receive_follow_reads_through_a_damaged_index_run_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    thirty_messages(dir.path());
    damage_run(dir.path());
    let out = run_bounded(
        &["receive", "--dir", d, "--topic", "t", "--queue", "0", "--group", "other", "--follow", "--max", "30"],
        b"",
        std::time::Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 30, "{}", text(&out.stderr));
    assert_eq!(lines[7], "7\tmessage 07");
}

#[test]
fn consume_from_inside_a_record_names_the_records_start() {
    let dir = tempfile::tempdir().unwrap();
    let offsets = produce(dir.path(), &["first record".to_string(), "second".to_string()], "sync");
    let out = run(&["consume", "--dir", dir.path().to_str().unwrap(), "--from", &(offsets[0] + 7).to_string()]);
    assert_clean_failure(&out, 2, &format!("inside the record at {}", offsets[0]));
}

#[test]
fn receive_on_a_missing_or_foreign_directory_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir");
    let out = run(&["receive", "--dir", missing.to_str().unwrap(), "--topic", "t", "--group", "g"]);
    assert_clean_failure(&out, 1, "does not exist");
    assert!(!dir.path().join("no").exists(), "no store, no parents made");
    let out = run(&["receive", "--dir", dir.path().to_str().unwrap(), "--topic", "t", "--group", "g"]);
    assert_clean_failure(&out, 1, "not a message store");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing made");
}

#[test]
fn receive_on_a_full_disk_prints_the_queue_and_says_it_could_not_commit() {
    // A small tmpfs filled to the last byte (root only: the crash suite's
    // disk layers mount theirs the same way).
    if !Command::new("id").arg("-u").output().is_ok_and(|o| text(&o.stdout).trim() == "0") {
        eprintln!("skipped: not running as root, cannot mount a tmpfs");
        return;
    }
    let mount = tempfile::tempdir().unwrap();
    let mp = mount.path().to_str().unwrap();
    assert!(Command::new("mount").args(["-t", "tmpfs", "-o", "size=40m", "tmpfs", mp]).status().unwrap().success());
    let unmount = || {
        let _ = Command::new("umount").arg(mp).status();
    };
    let store = mount.path().join("store");
    thirty_messages(&store);
    let filler = mount.path().join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let chunk = vec![1u8; 4096];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.flush();
    let s = store.to_str().unwrap();
    let out = run(&["receive", "--dir", s, "--topic", "t", "--queue", "0", "--group", "g"]);
    let printed = text(&out.stdout);
    let err = text(&out.stderr);
    unmount();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(printed.lines().count(), 10, "{printed}{err}");
    assert!(printed.starts_with("20\tmessage 20\n"), "{printed}");
    assert!(err.contains("not committed"), "{err}");
}

/// `send` over several queues: round-robin, and a queue named per line.
#[test]
fn send_spreads_lines_over_queues_round_robin_or_as_each_line_says() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["send", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--create-queues", "3", "--round-robin"];
    let sent = run_in(&args, b"a\nb\nc\nd\n");
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let placed: Vec<(String, String)> = text(&sent.stdout)
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 3, "QUEUE, QUEUE_OFFSET, LOG_OFFSET: {l}");
            (cols[0].to_string(), cols[1].to_string())
        })
        .collect();
    let expected: Vec<(String, String)> =
        [("0", "0"), ("1", "0"), ("2", "0"), ("0", "1")].iter().map(|(q, o)| (q.to_string(), o.to_string())).collect();
    assert_eq!(placed, expected);
    let by_line = run_in(&["send", "--dir", d, "--topic", "t", "--line-queue"], b"2\tto two\n1\tto one\n");
    assert!(by_line.status.success(), "{}", text(&by_line.stderr));
    assert_eq!(text(&by_line.stdout).lines().map(|l| l.split('\t').next().unwrap()).collect::<Vec<_>>(), ["2", "1"]);
    let two = run(&["receive", "--dir", d, "--topic", "t", "--queue", "2", "--group", "g"]);
    assert_eq!(text(&two.stdout), "0\tc\n1\tto two\n");
    assert_clean_failure(&run_in(&["send", "--dir", d, "--topic", "t", "--line-queue"], b"no tab\n"), 1, "line 1");
    assert_clean_failure(&run_in(&["send", "--dir", d, "--topic", "t", "--line-queue"], b"9\tx\n"), 1, "line 1");
    assert_clean_failure(&run_in(&["send", "--dir", d, "--topic", "t", "--line-queue", "--round-robin"], b""), 2, "");
}

/// `receive --peek` commits nothing; `--json` carries any body losslessly.
#[test]
fn receive_peeks_without_committing_and_json_bodies_are_lossless() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let sent = run_in(
        &["send", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--create-queues", "1"],
        b"text\n\xff\xfe\x00\n",
    );
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let receive = |extra: &[&str]| {
        let mut args = vec!["receive", "--dir", d, "--topic", "t", "--group", "g", "--json"];
        args.extend_from_slice(extra);
        let out = run(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect::<Vec<_>>()
    };
    let peeked = receive(&["--peek"]);
    assert_eq!(peeked.len(), 2);
    assert_eq!((peeked[0]["body"].as_str(), peeked[0]["body_encoding"].as_str()), (Some("text"), Some("utf8")));
    assert_eq!((peeked[1]["body"].as_str(), peeked[1]["body_encoding"].as_str()), (Some("//4A"), Some("base64")));
    assert_eq!((peeked[1]["topic"].as_str(), peeked[1]["queue"].as_u64()), (Some("t"), Some(0)));
    assert_eq!(receive(&["--peek"]), peeked, "a peek commits nothing: the same again");
    assert_eq!(receive(&[]), peeked, "a receive reads them and commits");
    assert!(receive(&[]).is_empty(), "committed");
    assert_clean_failure(&run(&["receive", "--dir", d, "--topic", "t", "--group", "g", "--peek", "--follow"]), 2, "");
}

/// `query --key`, `topics delete`, `offsets reset` and `offsets remove`.
#[test]
fn query_finds_keys_topics_delete_and_offsets_reset_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (topic, key) in [("a", "k"), ("b", "k"), ("b", "other")] {
        let args =
            ["send", "--dir", d, "--segment-size", SEGMENT, "--topic", topic, "--create-queues", "2", "--key", key];
        let sent = run_in(&args, format!("{topic} with {key}\n").as_bytes());
        assert!(sent.status.success(), "{}", text(&sent.stderr));
    }
    let found = run(&["query", "--dir", d, "--key", "k"]);
    assert!(found.status.success(), "{}", text(&found.stderr));
    assert_eq!(text(&found.stdout), "b\t0\t0\tb with k\na\t0\t0\ta with k\n", "every topic, newest first");
    let one = run(&["query", "--dir", d, "--key", "k", "--topic", "a", "--json"]);
    let line: serde_json::Value = serde_json::from_str(text(&one.stdout).trim()).unwrap();
    assert_eq!((line["topic"].as_str(), line["body"].as_str()), (Some("a"), Some("a with k")));
    let none = run(&["query", "--dir", d, "--key", "k", "--begin", "1", "--end", "2"]);
    assert!(none.status.success() && none.stdout.is_empty() && text(&none.stderr).contains("no message"));
    assert_clean_failure(&run(&["query", "--dir", d, "--key", "k", "--topic", "zz"]), 1, "does not exist");
    assert_clean_failure(&run(&["query", "--dir", d, "--key", "k", "--begin", "9", "--end", "1"]), 2, "after");
    assert_clean_failure(&run(&["query", "--dir", d, "--key", "k", "--begin", "someday"]), 2, "RFC 3339");

    let reset = |to: &[&str]| {
        let mut args = vec!["offsets", "reset", "--dir", d, "--group", "g", "--topic", "b", "--execute"];
        args.extend_from_slice(to);
        let out = run(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(reset(&["--latest", "--new-group"]), "0\t-\t2\n1\t-\t0\n", "QUEUE, CURRENT, NEW");
    assert_eq!(reset(&["--earliest", "--queue", "0"]), "0\t2\t0\n");
    assert_eq!(reset(&["--offset", "1", "--queue", "0"]), "0\t0\t1\n");
    assert_eq!(reset(&["--time", "2000-01-01T00:00:00Z", "--queue", "0"]), "0\t1\t0\n");
    let read = run(&["receive", "--dir", d, "--topic", "b", "--queue", "0", "--group", "g", "--peek"]);
    assert_eq!(text(&read.stdout), "0\tb with k\n1\tb with other\n", "from the offset reset to");
    assert_clean_failure(&run(&["offsets", "reset", "--dir", d, "--group", "g", "--topic", "b"]), 2, "--to-earliest");
    assert_clean_failure(
        &run(&["offsets", "reset", "--dir", d, "--group", "g", "--topic", "zz", "--latest"]),
        1,
        "--create-queues",
    );
    let removed = run(&["offsets", "remove", "--dir", d, "--group", "g"]);
    assert_eq!(text(&removed.stdout), "removed 2 offset(s) of group g\n", "{}", text(&removed.stderr));

    let deleted = run(&["topics", "delete", "--dir", d, "--topic", "b"]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    assert_clean_failure(&run(&["topics", "delete", "--dir", d, "--topic", "b"]), 1, "does not exist");
    let listing: serde_json::Value = serde_json::from_slice(&run(&["topics", "--dir", d, "--json"]).stdout).unwrap();
    assert!(listing["queues"].as_array().unwrap().iter().all(|q| q["topic"] == "a"), "{listing}");
    assert_eq!(text(&run(&["query", "--dir", d, "--key", "k"]).stdout), "a\t0\t0\ta with k\n");
    assert_clean_failure(&run(&["topics"]), 2, "--dir");
}

/// The same mistake exits the same way with and without `--follow`: a missing
/// topic or queue is an error (1), `--from` past the queue's end bad usage (2).
#[test]
fn receive_exits_alike_with_and_without_follow() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let sent = run_in(&["send", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--create-queues", "1"], b"x\n");
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    for follow in [&[][..], &["--follow"][..]] {
        let with = |args: &[&str]| {
            let mut all = vec!["receive", "--dir", d, "--group", "g"];
            all.extend_from_slice(args);
            all.extend_from_slice(follow);
            run_bounded(&all, b"", std::time::Duration::from_secs(20))
        };
        assert_clean_failure(&with(&["--topic", "nope"]), 1, "does not exist");
        assert_clean_failure(&with(&["--topic", "t", "--queue", "3"]), 1, "queue 3");
        assert_clean_failure(&with(&["--topic", "t", "--from", "99"]), 2, "past the queue's end 1");
    }
    let wrong = run_in(&["send", "--dir", d, "--topic", "nope"], b"x\n");
    assert_clean_failure(&wrong, 1, "--create-queues");
    assert!(!text(&wrong.stderr).contains("auto_create_topics"), "advice the tool cannot follow");
}

#[test]
fn verify_says_what_the_open_repairs_of_a_lost_queue_index_runs_or_dispatch_checkpoint() {
    for damage in ["queueindex/ deleted", "the runs deleted", "config/dispatch deleted"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        thirty_messages(dir.path());
        let index_dir = dir.path().join("queueindex");
        match damage {
            "queueindex/ deleted" => std::fs::remove_dir_all(&index_dir).unwrap(),
            "the runs deleted" => {
                for entry in std::fs::read_dir(&index_dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.file_name().unwrap().len() == 20 {
                        std::fs::remove_file(path).unwrap();
                    }
                }
            }
            _ => std::fs::remove_file(dir.path().join("config").join("dispatch")).unwrap(),
        }
        let found = run(&["verify", "--dir", d]);
        assert_eq!(found.status.code(), Some(3), "{damage}: {}", text(&found.stdout));
        let said = text(&found.stdout);
        assert!(said.contains("the next open"), "{damage}: {said}");
        // Nothing was lost: an open repairs it, and the group reads on from 20.
        let rest = run(&["receive", "--dir", d, "--topic", "t", "--queue", "0", "--group", "g"]);
        let lines: Vec<String> = text(&rest.stdout).lines().map(String::from).collect();
        assert_eq!(lines.len(), 10, "{damage}: {}", text(&rest.stderr));
        assert_eq!(lines[0], "20\tmessage 20", "{damage}");
        let clean = run(&["verify", "--dir", d]);
        assert!(clean.status.success(), "{damage}: {}", text(&clean.stdout));
    }
}

/// `receive` without `--queue` reads every queue of the topic (in queue
/// order, each line with its queue) and commits the group's offset in each;
/// `--queue` reads one; `--from` needs one queue.
#[test]
fn receive_reads_every_queue_of_the_topic_unless_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["send", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--create-queues", "3", "--round-robin"];
    let sent = run_in(&args, b"a\nb\nc\nd\ne\nf\ng\n");
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let all = run(&["receive", "--dir", d, "--topic", "t", "--group", "g"]);
    assert!(all.status.success(), "{}", text(&all.stderr));
    assert_eq!(text(&all.stdout), "0\t0\ta\n0\t1\td\n0\t2\tg\n1\t0\tb\n1\t1\te\n2\t0\tc\n2\t1\tf\n");
    let again = run(&["receive", "--dir", d, "--topic", "t", "--group", "g"]);
    assert_eq!(text(&again.stdout), "", "every queue's offset committed: {}", text(&again.stderr));
    let one = run(&["receive", "--dir", d, "--topic", "t", "--group", "h", "--queue", "1", "--json"]);
    let queues: Vec<u64> = text(&one.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["queue"].as_u64().unwrap())
        .collect();
    assert_eq!(queues, [1, 1], "{}", text(&one.stderr));
    let capped = run(&["receive", "--dir", d, "--topic", "t", "--group", "k", "--max", "4", "--peek"]);
    assert_eq!(text(&capped.stdout), "0\t0\ta\n0\t1\td\n0\t2\tg\n1\t0\tb\n", "--max over every queue read");
    assert_clean_failure(&run(&["receive", "--dir", d, "--topic", "t", "--group", "g", "--from", "0"]), 2, "--queue");
    for follow in [&[][..], &["--follow"][..]] {
        let group = if follow.is_empty() { "m" } else { "n" };
        let mut args = vec!["receive", "--dir", d, "--topic", "t", "--group", group, "--max", "7"];
        args.extend_from_slice(follow);
        let out = run_bounded(&args, b"", std::time::Duration::from_secs(20));
        assert_eq!(text(&out.stdout).lines().count(), 7, "{follow:?}: {}", text(&out.stderr));
    }
}

/// A malformed `--tags` is a usage error before anything is read: the
/// group's offset stays where it was (a filter that matched nothing would have
/// moved it past every message).
#[test]
fn receive_refuses_a_malformed_tag_expression_and_moves_no_offset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["send", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--create-queues", "1", "--tags", "a"];
    assert!(run_in(&args, b"x\ny\n").status.success());
    for follow in [&[][..], &["--follow"][..]] {
        let mut args = vec!["receive", "--dir", d, "--topic", "t", "--group", "g", "--tags", "a ||| b"];
        args.extend_from_slice(follow);
        assert_clean_failure(&run_bounded(&args, b"", std::time::Duration::from_secs(20)), 2, "--tags");
    }
    let read = run(&["receive", "--dir", d, "--topic", "t", "--group", "g", "--tags", "a || b"]);
    assert_eq!(text(&read.stdout), "0\tx\n1\ty\n", "{}", text(&read.stderr));
}

/// The message commands on a plain commit log say it is one, instead of
/// printing an empty listing and exiting 0.
#[test]
fn message_commands_on_a_plain_commit_log_say_it_is_not_a_message_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    produce(dir.path(), &["r".to_string()], "sync");
    assert_clean_failure(&run(&["topics", "--dir", d]), 1, "not a message store");
    assert_clean_failure(&run(&["receive", "--dir", d, "--topic", "t", "--group", "g"]), 1, "not a message store");
    assert_clean_failure(&run(&["query", "--dir", d, "--key", "k"]), 1, "not a message store");
    assert_eq!(consume(dir.path()), [(0, "r".to_string())], "the log untouched");
}

/// Ctrl-C during `send` (or `produce`) ends it as the end of its input would:
/// every line read is acknowledged and printed, and the store is closed
/// cleanly (no abort marker: the next open recovers nothing).
#[test]
fn ctrl_c_during_send_or_produce_closes_the_store_cleanly() {
    for command in ["send", "produce"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let mut args = vec![command, "--dir", d, "--segment-size", SEGMENT];
        if command == "send" {
            args.extend(["--topic", "t", "--create-queues", "1"]);
        }
        let mut child = commitlog()
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"one\ntwo\nthree\n").unwrap();
        stdin.flush().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        for _ in 0..3 {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "{command}: an acknowledgement per line");
        }
        // stdin stays open: the command waits for more when Ctrl-C comes.
        assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
        let exit = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(exit.success(), "{command}: Ctrl-C ends it cleanly: {exit:?} {err}");
        drop(stdin);
        let markers: Vec<_> = walk(dir.path()).into_iter().filter(|p| p.file_name().unwrap() == "abort").collect();
        assert!(markers.is_empty(), "{command}: closed cleanly, no abort marker: {markers:?}");
        if command == "send" {
            let read = run(&["receive", "--dir", d, "--topic", "t", "--group", "g"]);
            assert_eq!(text(&read.stdout), "0\tone\n1\ttwo\n2\tthree\n", "{}", text(&read.stderr));
        } else {
            assert_eq!(consume(dir.path()).len(), 3);
        }
    }
}

/// The tool shows the library's warnings on stderr (a rebuild of derived data
/// is said where an operator sees it, without colour codes in a file or
/// pipe); `RUST_LOG=off` silences them.
#[test]
fn the_library_warnings_reach_stderr_and_rust_log_picks_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    thirty_messages(dir.path());
    let rest = |env: Option<&str>| {
        std::fs::remove_file(dir.path().join("config").join("dispatch")).unwrap();
        let mut command = commitlog();
        command.args(["receive", "--dir", d, "--topic", "t", "--group", "g", "--peek"]);
        match env {
            Some(value) => command.env("RUST_LOG", value),
            None => command.env_remove("RUST_LOG"),
        };
        command.output().unwrap()
    };
    let said = rest(None);
    assert_eq!(text(&said.stdout).lines().count(), 10, "{}", text(&said.stderr));
    let err = text(&said.stderr);
    assert!(err.contains("WARN") && err.contains("dispatch checkpoint"), "the rebuild is said: {err}");
    assert!(!err.contains('\u{1b}'), "no colour codes into a pipe: {err:?}");
    let quiet = rest(Some("off"));
    assert_eq!(text(&quiet.stdout).lines().count(), 10);
    assert_eq!(text(&quiet.stderr), "", "RUST_LOG=off");
}

/// `recover` on a store whose queue index was deleted says how many messages
/// its open dispatched again from the log.
#[test]
fn recover_reports_the_messages_dispatched_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    thirty_messages(dir.path());
    std::fs::remove_dir_all(dir.path().join("queueindex")).unwrap();
    let repaired = run(&["recover", "--dir", d, "--json"]);
    assert!(repaired.status.success(), "{}", text(&repaired.stderr));
    let report: serde_json::Value = serde_json::from_slice(&repaired.stdout).unwrap();
    assert_eq!(report["message_store"]["redispatched"].as_u64(), Some(30), "{report}");
    std::fs::remove_dir_all(dir.path().join("queueindex")).unwrap();
    let said = text(&run(&["recover", "--dir", d]).stdout);
    assert!(said.contains("dispatched again    30 messages"), "{said}");
}

/// `--config` reads the store's configuration from a TOML file (every knob
/// of `MessageStoreConfig`); a bad file is an error naming it; the writer's
/// options (`--flush`, `--segment-size`) are `send`'s only.
#[test]
fn a_config_file_reaches_every_knob_and_writer_options_are_sends_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let d = store.to_str().unwrap();
    let file = dir.path().join("store.toml");
    std::fs::write(
        &file,
        "auto_create_topics = true\ndefault_topic_queue_nums = 3\n\n[log]\nmapped_file_size_commit_log = 65536\nflush_disk_type = \"sync_flush\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let sent = run_in(&["send", "--dir", d, "--config", f, "--topic", "auto", "--round-robin"], b"a\nb\nc\nd\n");
    assert!(sent.status.success(), "auto-created by the file's knob: {}", text(&sent.stderr));
    let listing: serde_json::Value = serde_json::from_slice(&run(&["topics", "--dir", d, "--json"]).stdout).unwrap();
    let queues = listing["queues"].as_array().unwrap().iter().filter(|q| q["topic"] == "auto").count();
    assert_eq!(queues, 3, "{listing}");
    let segments: Vec<_> = walk(&store).into_iter().filter(|p| p.parent().unwrap().ends_with("commitlog")).collect();
    assert!(
        segments.iter().all(|p| std::fs::metadata(p).unwrap().len() == 65536),
        "the file's segment size: {segments:?}"
    );
    let read = run(&["receive", "--dir", d, "--config", f, "--topic", "auto", "--group", "g"]);
    assert_eq!(text(&read.stdout).lines().count(), 4, "{}", text(&read.stderr));

    std::fs::write(&file, "auto_create_topic = true\n").unwrap();
    assert_clean_failure(
        &run(&["receive", "--dir", d, "--config", f, "--topic", "auto", "--group", "g"]),
        1,
        "auto_create_topic",
    );
    let missing = dir.path().join("none.toml");
    let out = run(&["receive", "--dir", d, "--config", missing.to_str().unwrap(), "--topic", "auto", "--group", "g"]);
    assert_clean_failure(&out, 1, "none.toml");
    for command in [
        &["receive", "--topic", "auto", "--group", "g"][..],
        &["query", "--key", "k"][..],
        &["topics", "delete", "--topic", "auto"][..],
    ] {
        let mut args = command.to_vec();
        args.extend(["--dir", d, "--flush", "async"]);
        assert_clean_failure(&run(&args), 2, "--flush");
    }
}

/// `offsets reset` previews unless `--execute`; refuses a target past a
/// queue's end (unless `--clamp`) and a group without offsets (unless
/// `--new-group`); moves by `--shift-by` and `--by-duration`. `groups list`
/// and `groups describe` show each group's lag; `topics create` makes a
/// topic; `query --log-offset` finds a message by where `send` put it.
#[test]
fn offsets_reset_previews_and_refuses_and_groups_topics_and_lookups_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let made = run(&["topics", "create", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--queues", "2"]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let sent = run_in(&["send", "--dir", d, "--topic", "t", "--round-robin"], b"a\nb\nc\nd\ne\n");
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let third_log_offset = text(&sent.stdout).lines().nth(2).unwrap().split('\t').nth(2).unwrap().to_string();
    let found = run(&["query", "--dir", d, "--log-offset", &third_log_offset]);
    assert_eq!(text(&found.stdout), "t\t0\t1\tc\n", "{}", text(&found.stderr));
    assert_clean_failure(&run(&["query", "--dir", d, "--log-offset", "1"]), 1, "");
    // The key lookup's filters do not apply to one offset: refused, not ignored.
    for filter in [["--topic", "t"], ["--begin", "0"], ["--end", "0"], ["--max", "5"]] {
        let out = run(&["query", "--dir", d, "--log-offset", &third_log_offset, filter[0], filter[1]]);
        assert_clean_failure(&out, 2, "cannot be used with");
    }
    let read = run(&["receive", "--dir", d, "--topic", "t", "--group", "g", "--max", "3"]);
    assert!(read.status.success(), "{}", text(&read.stderr));

    let offsets = |q: u32| -> Option<u64> {
        let listing: serde_json::Value =
            serde_json::from_slice(&run(&["groups", "describe", "--dir", d, "--group", "g", "--json"]).stdout).unwrap();
        listing.as_array().unwrap().iter().find(|r| r["queue"] == q).map(|r| r["offset"].as_u64().unwrap())
    };
    assert_eq!((offsets(0), offsets(1)), (Some(3), None), "receive read queue 0's three, and stopped");
    let reset = |extra: &[&str]| {
        let mut args = vec!["offsets", "reset", "--dir", d, "--group", "g", "--topic", "t"];
        args.extend_from_slice(extra);
        run(&args)
    };
    let preview = reset(&["--to-earliest"]);
    assert_eq!(text(&preview.stdout), "0\t3\t0\n1\t-\t0\n");
    assert!(text(&preview.stderr).contains("--execute"), "{}", text(&preview.stderr));
    assert_eq!(offsets(0), Some(3), "a preview changes nothing");
    assert_clean_failure(&reset(&["--to-offset", "9", "--execute"]), 2, "past the queue's end");
    assert_eq!(offsets(0), Some(3), "refused: nothing changed");
    let clamped = reset(&["--to-offset", "9", "--clamp", "--execute", "--queue", "0"]);
    assert_eq!(text(&clamped.stdout), "0\t3\t3\n", "{}", text(&clamped.stderr));
    let shifted = reset(&["--shift-by", "-2", "--execute"]);
    assert_eq!(text(&shifted.stdout), "0\t3\t1\n1\t-\t0\n", "{}", text(&shifted.stderr));
    assert_eq!(offsets(0), Some(1));
    let ago = reset(&["--by-duration", "1h", "--execute"]);
    assert_eq!(text(&ago.stdout), "0\t1\t0\n1\t0\t0\n", "an hour ago: every message; {}", text(&ago.stderr));
    assert_clean_failure(&reset(&["--by-duration", "soon"]), 2, "duration");
    let unknown = run(&["offsets", "reset", "--dir", d, "--group", "typo", "--topic", "t", "--to-latest", "--execute"]);
    assert_clean_failure(&unknown, 1, "--new-group");
    assert_eq!(
        text(&run(&["groups", "list", "--dir", d]).stdout).lines().filter(|l| l.starts_with("typo")).count(),
        0,
        "no offsets made for a group that never existed"
    );
    let list = run(&["groups", "list", "--dir", d, "--json"]);
    let groups: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(groups[0]["group"], "g");
    assert_eq!(groups[0]["lag"].as_u64(), Some(5), "{groups}");
    assert_clean_failure(&run(&["groups", "describe", "--dir", d, "--group", "nobody"]), 1, "no committed offset");
    let again = run(&["topics", "create", "--dir", d, "--topic", "t", "--queues", "3"]);
    assert_clean_failure(&again, 1, "exists");
}

/// Ctrl-C ends `send` and `produce` even while their input keeps coming.
#[test]
fn ctrl_c_ends_send_and_produce_while_input_keeps_coming() {
    let mut running = Vec::new();
    for command in ["send", "produce"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let mut args = vec![command, "--dir", d, "--segment-size", SEGMENT];
        if command == "send" {
            args.extend(["--topic", "t", "--create-queues", "1"]);
        }
        let mut child =
            commitlog().args(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // Input that never pauses: the pipe stays full.
        let writer = std::thread::spawn(move || {
            let line = [b'x'; 63].iter().copied().chain([b'\n']).collect::<Vec<u8>>();
            let started = std::time::Instant::now();
            while started.elapsed() < std::time::Duration::from_secs(30) {
                if stdin.write_all(&line).is_err() {
                    return;
                }
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{command}: started");
        let drainer = std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let exited = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        if exited.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = writer.join();
        let _ = drainer.join();
        if exited.is_none() {
            running.push(command);
        }
    }
    assert!(running.is_empty(), "{running:?}: still running 10 s after Ctrl-C while the input kept coming");
}

/// `--config` on an existing store whose segments are not 64 MiB, with a
/// file that says nothing of segments: the store keeps the shapes its files
/// show, and opens.
#[test]
fn a_config_file_opens_an_existing_store_with_its_own_segment_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let d = store.to_str().unwrap();
    let made = run(&["topics", "create", "--dir", d, "--segment-size", SEGMENT, "--topic", "t", "--queues", "1"]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let file = dir.path().join("store.toml");
    std::fs::write(&file, "commit_dispatch_wait_ms = 100\n").unwrap();
    let out = run(&["receive", "--dir", d, "--config", file.to_str().unwrap(), "--topic", "t", "--group", "g"]);
    assert!(out.status.success(), "exit {:?}: {}", out.status.code(), text(&out.stderr));
}

/// A config file's explicit `[limits]` are kept when its small segments
/// lower the log's `max_message_size`: a body over `max_body_size` is
/// refused.
#[test]
fn a_config_files_message_limits_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let d = store.to_str().unwrap();
    let file = dir.path().join("store.toml");
    std::fs::write(
        &file,
        "[log]\nmapped_file_size_commit_log = 65536\nflush_disk_type = \"sync_flush\"\n\n[limits]\nmax_body_size = 100\nmax_properties_size = 100\n",
    )
    .unwrap();
    let line = format!("{}\n", "x".repeat(1000));
    let sent = run_in(
        &["send", "--dir", d, "--config", file.to_str().unwrap(), "--topic", "t", "--create-queues", "1"],
        line.as_bytes(),
    );
    assert!(!sent.status.success(), "a 1000-byte body went in under max_body_size = 100: {}", text(&sent.stdout));
}

/// A new store made with `--config` whose `[log]` names segment
/// directories (`store_path_commit_log`) keeps its segments there.
#[test]
fn a_config_files_segment_directories_are_used_for_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let d = store.to_str().unwrap();
    let disk = dir.path().join("disk-a");
    std::fs::create_dir(&disk).unwrap();
    let file = dir.path().join("store.toml");
    std::fs::write(
        &file,
        format!(
            "[log]\nmapped_file_size_commit_log = 65536\nmax_message_size = 4096\nflush_disk_type = \"sync_flush\"\nstore_path_commit_log = [{:?}]\n",
            disk.to_str().unwrap()
        ),
    )
    .unwrap();
    let sent = run_in(
        &["send", "--dir", d, "--config", file.to_str().unwrap(), "--topic", "t", "--create-queues", "1"],
        b"a\n",
    );
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let in_disk = walk(&disk).len();
    let in_store: Vec<_> = walk(&store).into_iter().filter(|p| p.parent().unwrap().ends_with("commitlog")).collect();
    assert!(in_disk > 0, "no segment in the configured directory; segments in {in_store:?}");
}
