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
    /// earliest, the latest, an offset, a time, a while ago, or by N; prints
    /// `QUEUE<TAB>CURRENT<TAB>NEW`, and applies it only with `--execute`.
    /// Opens the store.
    Reset(ResetArgs),
    /// Remove a group's offsets (in every topic, or `--topic`): it consumes
    /// as a new group. Opens the store.
    Remove(RemoveArgs),
}

/// `offsets reset`'s arguments: where to, and whether to apply it.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration", "shift_by"])))]
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
    #[arg(long, alias = "earliest")]
    to_earliest: bool,
    /// Each queue's end: only messages sent from now on.
    #[arg(long, alias = "latest")]
    to_latest: bool,
    /// This offset in each queue (past a queue's end is refused unless
    /// `--clamp`).
    #[arg(long, alias = "offset", value_name = "N")]
    to_offset: Option<u64>,
    /// The first message stored at or after this time: ms since the Unix
    /// epoch, or RFC 3339.
    #[arg(long, alias = "time", value_name = "TIME", value_parser = crate::args::time_ms)]
    to_datetime: Option<u64>,
    /// The first message stored at or after this long ago (`90s`, `15m`,
    /// `2h`, `7d`, or combined: `1h30m`).
    #[arg(long, value_name = "DURATION", value_parser = crate::args::ago)]
    by_duration: Option<std::time::Duration>,
    /// The committed offset moved by N messages (negative: back), within each
    /// queue's range.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
    /// Apply the reset (without it, only print what it would do).
    #[arg(long)]
    execute: bool,
    /// Move a target past a queue's end to the end instead of refusing it.
    #[arg(long)]
    clamp: bool,
    /// Reset a group that has no committed offset yet (it is made).
    #[arg(long)]
    new_group: bool,
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
        OffsetsAction::Reset(args) => reset(&args),
        OffsetsAction::Remove(args) => {
            message_store::validate_group(&args.group).map_err(|e| CliError::Usage(e.to_string()))?;
            with_store(&args.store, |store| {
                let removed = store.remove_consumer_offsets(&args.group, args.topic.as_deref())?;
                outln!("removed {removed} offset(s) of group {}", args.group)
            })
        }
    }
}

/// `offsets reset`: prints `QUEUE<TAB>CURRENT<TAB>NEW` for each queue (`-`
/// where the group has no offset); applies it, in one sync, with `--execute`.
/// A target past a queue's end (without `--clamp`) and a group without
/// offsets (without `--new-group`) are refused before anything changes.
fn reset(args: &ResetArgs) -> Result<(), CliError> {
    message_store::validate_group(&args.group).map_err(|e| CliError::Usage(e.to_string()))?;
    let to = match (args.to_earliest, args.to_latest, args.to_offset, args.to_datetime, args.by_duration, args.shift_by)
    {
        (true, ..) => ResetTo::Earliest,
        (_, true, ..) => ResetTo::Latest,
        (_, _, Some(offset), ..) => ResetTo::Offset(offset),
        (_, _, _, Some(time), ..) => ResetTo::Time(time),
        (.., Some(ago), _) => {
            ResetTo::Time(now_ms().saturating_sub(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)))
        }
        (.., Some(by)) => ResetTo::ShiftBy(by),
        _ => unreachable!("clap requires one target"),
    };
    with_store(&args.store, |store| {
        if !args.new_group && !store.group_exists(&args.group) {
            return Err(CliError::Input(format!(
                "group {:?} has no committed offset (a typo?); --new-group resets it all the same",
                args.group
            )));
        }
        let plan = store.plan_offsets_reset(&args.group, &args.topic, args.queue, to)?;
        // Only an offset given outright is refused past the end; a time, a
        // duration or a shift lands within each queue's range by definition.
        if !args.clamp && args.to_offset.is_some() {
            if let Some(past) = plan.iter().find(|r| r.clamped_from.is_some_and(|w| w > i128::from(r.max_offset))) {
                return Err(CliError::Usage(format!(
                    "queue {}: offset {} is past the queue's end {} (--clamp moves it to the end)",
                    past.queue_id,
                    past.clamped_from.unwrap_or_default(),
                    past.max_offset
                )));
            }
        }
        for r in &plan {
            let current = r.current.map_or_else(|| "-".to_string(), |c| c.to_string());
            outln!("{}\t{current}\t{}", r.queue_id, r.offset)?;
        }
        if args.execute {
            store.reset_consumer_offsets(&args.group, &args.topic, args.queue, to)?;
            eprintln!("commitlog: group {}'s offsets in {} reset", args.group, args.topic);
        } else {
            eprintln!("commitlog: nothing changed (a preview); --execute resets the offsets");
        }
        Ok(())
    })
}

/// Now, in ms since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
