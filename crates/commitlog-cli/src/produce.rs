//! `commitlog produce`: stdin lines in, acknowledged offsets out, pipelined.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;

use clap::Args;
use commitlog::{CommitLog, DurabilityHandle};

use crate::{io, log_config, CliError, FlushArg};

/// Records waiting for their acknowledgement at once (the pipeline depth).
const IN_FLIGHT: usize = 4096;

#[derive(Args)]
pub struct ProduceArgs {
    /// Store directory (created if missing, recovered otherwise).
    #[arg(long)]
    dir: PathBuf,
    /// When a record counts as acknowledged.
    #[arg(long, value_enum, default_value = "sync")]
    flush: FlushArg,
    /// Append through the off-heap write-buffer pool.
    #[arg(long)]
    pool: bool,
    /// Segment size for a new log (existing logs keep theirs).
    #[arg(long, value_name = "BYTES", value_parser = crate::args::segment_size)]
    segment_size: Option<usize>,
    #[command(flatten)]
    paths: crate::SegmentPathArgs,
}

/// Appends each stdin line (without its newline) and prints its offset, in input
/// order, once acknowledged: under `--flush sync` only after it is durable. Appends
/// do not wait for earlier acknowledgements (up to 4096 in flight).
pub fn run(args: ProduceArgs) -> Result<(), CliError> {
    let config = log_config(&args.dir, args.flush, args.pool, args.segment_size, &args.paths)?;
    let log = CommitLog::open(&args.dir, config)?;
    let (tx, rx) = mpsc::sync_channel::<(u64, DurabilityHandle)>(IN_FLIGHT);
    let printer = std::thread::spawn(move || -> Result<u64, CliError> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let mut printed = 0;
        for (offset, handle) in rx {
            handle
                .wait()
                .map_err(|e| CliError::Input(format!("record at offset {offset} was not acknowledged: {e}")))?;
            writeln!(out, "{offset}").and_then(|()| out.flush()).map_err(io("writing to stdout"))?;
            printed += 1;
        }
        Ok(printed)
    });
    let mut result = Ok(());
    for (number, line) in crate::stdin_lines::StdinLines::read()?.enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                result = Err(CliError::Io { context: "reading stdin".into(), source: e });
                break;
            }
        };
        match log.append(&line) {
            Ok(put) => {
                if tx.send((put.wrote_offset, put.durability)).is_err() {
                    break; // the printer stopped on an error; it reports it
                }
            }
            Err(e) => {
                result = Err(CliError::Input(format!("line {}: {e}", number + 1)));
                break;
            }
        }
    }
    drop(tx);
    let printed = printer.join().map_err(|_| CliError::Input("the output thread panicked".into()))?;
    let shutdown = log.shutdown().map_err(CliError::from);
    result.and(printed.map(|_| ())).and(shutdown)
}
