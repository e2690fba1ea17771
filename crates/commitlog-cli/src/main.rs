//! `commitlog`: see the log work, measure it, and inspect a store directory.
//!
//! Exit codes: 0 success (also when the reader of standard output went away), 1
//! error (a missing directory, topic or queue; a failure of the store), 2 bad
//! usage (arguments clap refuses, or that cannot work together: a group name
//! that is not valid, `--from` past a queue's end), 3 `verify` found problems
//! or `consume`/`receive --follow` stopped at damage.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use commitlog::{CommitLogConfig, FlushDiskType};

/// `print!` that returns the write's error instead of panicking: a closed pipe
/// (`| head -1`) ends the command quietly (see `main`), as Unix tools do.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*).map_err($crate::io("writing to stdout"))
    }};
}

/// `println!`, as [`out!`].
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::io("writing to stdout"))
    }};
}

mod args;
mod bench;
mod bench_doc;
mod inspect;
mod messages;
mod produce;
mod progress;
mod stdin_lines;
mod table;

/// Default segment size for logs the tool creates (the library's default).
const DEFAULT_SEGMENT_SIZE: usize = commitlog::CommitLogConfig::DEFAULT_SEGMENT_SIZE;

#[derive(Parser)]
#[command(
    name = "commitlog",
    version,
    about = "A RocketMQ-style commit log: benchmark it, write to it, inspect it; and a message store over it"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark each flush mode on a temporary directory and print a table
    /// (or the results document with --json; --baseline FILE compares with one).
    Bench(bench::BenchArgs),
    /// Append stdin lines as records; print each offset once acknowledged.
    Produce(produce::ProduceArgs),
    /// Print `OFFSET<TAB>BODY` for each record, in order (read-only).
    Consume(inspect::ConsumeArgs),
    /// Check every segment and record with CRCs (read-only); exit 3 on problems.
    Verify(inspect::DirArgs),
    /// Run recovery (may truncate a torn tail) and print what it did; with
    /// `--salvage`, first accept damage or missing segments (moved aside).
    Recover(inspect::RecoverArgs),
    /// Remove a segment directory that holds no segment from the store's list
    /// (retiring a disk; the log must be closed).
    ForgetDir(inspect::ForgetDirArgs),
    /// Print segments, offsets and checkpoint contents (read-only).
    Stat(inspect::StatArgs),
    /// Message store: put stdin lines on a topic's queue (or its queues);
    /// print `QUEUE_OFFSET<TAB>LOG_OFFSET` for each once acknowledged.
    Send(messages::SendArgs),
    /// Message store: print a queue's messages as a consumer group, from its
    /// committed offset to the queue's end, committing as it goes (`--peek`:
    /// without committing; `--follow`: read-only, on until Ctrl-C).
    Receive(messages::ReceiveArgs),
    /// Message store: the messages with a key, newest first.
    Query(messages::QueryArgs),
    /// Message store: topics and queues with their offsets, dispatch lag and each
    /// group's lag (read-only); `topics delete` deletes a topic.
    Topics(messages::TopicsCommand),
    /// Message store: consumer groups (`groups list`: each group's topics,
    /// queues and lag; `groups describe --group G`: per queue), read-only.
    Groups(messages::GroupsCommand),
    /// Message store: reset or remove a consumer group's offsets.
    Offsets(messages::OffsetsCommand),
}

/// When appends are acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FlushArg {
    /// After the record is durable (group commit).
    Sync,
    /// At once; flushed in the background.
    Async,
}

/// A failure, printed as one line.
#[derive(Debug)]
enum CliError {
    Log(commitlog::Error),
    Store(message_store::StoreError),
    Io {
        context: String,
        source: std::io::Error,
    },
    Input(String),
    /// Arguments that cannot work together (exit 2, like clap's own usage errors).
    Usage(String),
    /// `verify` found this many problems (already printed).
    Problems(usize),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Log(e) => write!(f, "{e}"),
            // The library's advice (turn auto_create_topics on) is no flag of
            // this tool: say how the tool creates a topic.
            CliError::Store(message_store::StoreError::UnknownTopic { topic }) => {
                write!(f, "topic {topic:?} does not exist (`commitlog send --create-queues N` creates it)")
            }
            CliError::Store(e) => write!(f, "{e}"),
            CliError::Io { context, source } => write!(f, "{context}: {source}"),
            CliError::Input(message) | CliError::Usage(message) => write!(f, "{message}"),
            CliError::Problems(n) => write!(f, "{n} problem(s) found"),
        }
    }
}

impl From<message_store::StoreError> for CliError {
    fn from(e: message_store::StoreError) -> Self {
        CliError::Store(e)
    }
}

impl From<commitlog::Error> for CliError {
    fn from(e: commitlog::Error) -> Self {
        CliError::Log(e)
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
    let context = context.into();
    move |source| CliError::Io { context, source }
}

/// Where a log's segments go: RocketMQ's `storePathCommitLog`, for a log the
/// tool creates or reopens.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct SegmentPathArgs {
    /// Segment directories for a log spread over disks (`storePathCommitLog`):
    /// `;`-separated or repeated. New segments go round-robin over them. Default:
    /// the directories the store recorded, or `<dir>/commitlog` for a new store.
    #[arg(long, value_name = "DIRS", value_delimiter = ';')]
    pub(crate) store_path_commit_log: Vec<std::path::PathBuf>,
    /// Segment directories to read but not to create segments in
    /// (`readOnlyCommitLogStorePaths`), `;`-separated or repeated.
    #[arg(long, value_name = "DIRS", value_delimiter = ';')]
    pub(crate) read_only_commit_log_store_paths: Vec<std::path::PathBuf>,
}

/// The configuration for opening an existing or new log in `dir`: the segment size
/// of existing segments wins; `--segment-size` must agree with it. The segment
/// directories are the ones given, else the ones the store recorded.
fn log_config(
    dir: &Path,
    flush: FlushArg,
    pool: bool,
    segment_size: Option<usize>,
    paths: &SegmentPathArgs,
) -> Result<CommitLogConfig, CliError> {
    let is_store = commitlog::inspect::check_store_dir(dir).is_ok();
    let existing = if is_store {
        Some(commitlog::inspect::list_segments(dir)?.segment_size as usize).filter(|&s| s > 0)
    } else {
        None
    };
    let size = match (existing, segment_size) {
        (Some(e), Some(asked)) if e != asked => {
            return Err(CliError::Usage(format!(
                "{} has {e}-byte segments, not --segment-size {asked}",
                dir.display()
            )));
        }
        (Some(e), _) => e,
        (None, asked) => asked.unwrap_or(DEFAULT_SEGMENT_SIZE),
    };
    let absolute = |given: &[std::path::PathBuf]| -> Result<Vec<std::path::PathBuf>, CliError> {
        given.iter().map(|p| std::path::absolute(p).map_err(io(format!("resolving {}", p.display())))).collect()
    };
    let (mut writable, mut read_only) =
        (absolute(&paths.store_path_commit_log)?, absolute(&paths.read_only_commit_log_store_paths)?);
    if writable.is_empty() && read_only.is_empty() && is_store {
        let recorded = commitlog::inspect::segment_dirs(dir)?;
        if recorded != [commitlog::SegmentDir::writable(dir.join(commitlog::SEGMENT_DIR))] {
            writable = recorded.iter().map(|d| d.path.clone()).collect();
            read_only = recorded.iter().filter(|d| d.read_only).map(|d| d.path.clone()).collect();
        }
    }
    let max_message_size = (4 << 20).min(size.saturating_sub(2 * commitlog::format::HEADER_SIZE));
    Ok(CommitLogConfig::builder()
        .mapped_file_size_commit_log(size)
        .store_path_commit_log(writable, read_only)
        .max_message_size(max_message_size)
        .flush_disk_type(match flush {
            FlushArg::Sync => FlushDiskType::SyncFlush,
            FlushArg::Async => FlushDiskType::AsyncFlush,
        })
        .transient_store_pool(pool, 2)
        .build()?)
}

/// Refuses a path that does not exist, with a clear message.
fn existing_dir(dir: &Path) -> Result<(), CliError> {
    if dir.exists() {
        Ok(())
    } else {
        Err(CliError::Input(format!("{} does not exist", dir.display())))
    }
}

/// A flag Ctrl-C (or SIGTERM) raises: the commands that run until stopped
/// (`consume --follow`, `stat --watch`, `receive --follow`) look at it and end
/// cleanly, exit code 0.
fn stop_on_ctrl_c() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>, CliError> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let raise = std::sync::Arc::clone(&stop);
    ctrlc::set_handler(move || raise.store(true, std::sync::atomic::Ordering::SeqCst))
        .map_err(|e| CliError::Input(format!("cannot handle Ctrl-C: {e}")))?;
    Ok(stop)
}

/// What the tool adds to an error that a library cannot say (its own flags).
fn hint(e: &CliError) -> &'static str {
    let log = match e {
        CliError::Log(e) | CliError::Store(message_store::StoreError::Log(e)) => e,
        _ => return "",
    };
    match log {
        commitlog::Error::SegmentLargerThanDisk { .. } => {
            " (for a new store, pass a smaller --segment-size; an existing store keeps its own)"
        }
        _ => "",
    }
}

/// The library's log lines on stderr: `RUST_LOG` picks them (`RUST_LOG=info`,
/// `RUST_LOG=commitlog=debug`); by default warnings and errors, so a rebuild
/// of derived data, a damaged file set aside or a failing flush is said where
/// an operator sees it.
fn log_to_stderr() {
    use std::io::IsTerminal as _;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // Only fails if a subscriber is set already, which nothing else does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    log_to_stderr();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => inspect::consume(args),
        Command::Verify(args) => inspect::verify(args),
        Command::Recover(args) => inspect::recover(args),
        Command::ForgetDir(args) => inspect::forget_dir(args),
        Command::Stat(args) => inspect::stat(args),
        Command::Send(args) => messages::send(args),
        Command::Receive(args) => messages::receive(args),
        Command::Query(args) => messages::query(args),
        Command::Topics(args) => messages::topics_command(args),
        Command::Groups(args) => messages::groups(args),
        Command::Offsets(args) => messages::offsets(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): nothing more to say, nothing wrong.
        Err(CliError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(CliError::Problems(n)) => {
            eprintln!("commitlog: {n} problem(s) found");
            ExitCode::from(3)
        }
        Err(CliError::Usage(message)) => {
            eprintln!("commitlog: usage error: {message}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("commitlog: error: {e}{}", hint(&e));
            ExitCode::from(1)
        }
    }
}
