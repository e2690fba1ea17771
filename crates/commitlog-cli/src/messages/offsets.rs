//! `offsets`: reset or remove a consumer group's offsets.

use clap::{Args, Subcommand};
use message_store::ResetTo;

use super::{with_store, StoreArgs};
use crate::CliError;

/// `offsets`' subcommands.
#[derive(Args)]
pub struct OffsetsCommand {
    #[command(subcommand)]
    action: OffsetsAction,
}

#[derive(Subcommand)]
enum OffsetsAction {
    /// Move a group's offsets in a topic (every queue, or `--queue`) to the
    /// earliest, the latest, an offset or a time; prints `QUEUE<TAB>OFFSET`.
    /// Opens the store.
    Reset(ResetArgs),
    /// Remove a group's offsets (in every topic, or `--topic`): it consumes
    /// as a new group. Opens the store.
    Remove(RemoveArgs),
}

/// `offsets reset`'s arguments: where to.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["earliest", "latest", "offset", "time"])))]
struct ResetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The consumer group.
    #[arg(long)]
    group: String,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// Only this queue (default: every queue of the topic).
    #[arg(long)]
    queue: Option<u32>,
    /// Each queue's first offset.
    #[arg(long)]
    earliest: bool,
    /// Each queue's end: only messages sent from now on.
    #[arg(long)]
    latest: bool,
    /// This offset, clamped to each queue's range.
    #[arg(long)]
    offset: Option<u64>,
    /// The first message stored at or after this time: ms since the Unix
    /// epoch, or RFC 3339.
    #[arg(long, value_name = "TIME", value_parser = crate::args::time_ms)]
    time: Option<u64>,
}

/// `offsets remove`'s arguments.
#[derive(Args)]
struct RemoveArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The consumer group.
    #[arg(long)]
    group: String,
    /// Only in this topic.
    #[arg(long)]
    topic: Option<String>,
}

/// `offsets reset` or `offsets remove`.
pub fn offsets(command: OffsetsCommand) -> Result<(), CliError> {
    match command.action {
        OffsetsAction::Reset(args) => {
            message_store::validate_group(&args.group).map_err(|e| CliError::Usage(e.to_string()))?;
            let to = match (args.earliest, args.latest, args.offset, args.time) {
                (true, ..) => ResetTo::Earliest,
                (_, true, ..) => ResetTo::Latest,
                (_, _, Some(offset), _) => ResetTo::Offset(offset),
                (_, _, _, Some(time)) => ResetTo::Time(time),
                _ => unreachable!("clap requires one of --earliest, --latest, --offset, --time"),
            };
            with_store(&args.store, |store| {
                for (queue, offset) in store.reset_consumer_offsets(&args.group, &args.topic, args.queue, to)? {
                    outln!("{queue}\t{offset}")?;
                }
                Ok(())
            })
        }
        OffsetsAction::Remove(args) => {
            message_store::validate_group(&args.group).map_err(|e| CliError::Usage(e.to_string()))?;
            with_store(&args.store, |store| {
                let removed = store.remove_consumer_offsets(&args.group, args.topic.as_deref())?;
                outln!("removed {removed} offset(s) of group {}", args.group)
            })
        }
    }
}
