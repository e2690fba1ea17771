//! `topics`: topics and queues with their offsets, the dispatch lag and each
//! group's lag (read-only); `topics delete`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use message_store::inspect;

use super::{with_store, StoreArgs};
use crate::CliError;

/// `topics`: the listing, or `topics delete`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TopicsCommand {
    #[command(subcommand)]
    action: Option<TopicsAction>,
    #[command(flatten)]
    list: TopicsArgs,
}

#[derive(Subcommand)]
enum TopicsAction {
    /// Delete a topic (RocketMQ's `deleteTopics`): its queues and every
    /// group's offsets in it go, durably; its messages stay in the log until
    /// their segments are cleaned, never read again. Opens the store.
    Delete(TopicDeleteArgs),
    /// Create a topic with N queues (a new store if the directory has none);
    /// one that exists with N queues is left as it is. Opens the store.
    Create(TopicCreateArgs),
}

/// `topics create`'s arguments.
#[derive(Args)]
struct TopicCreateArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    write: super::WriteArgs,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// Its queues.
    #[arg(long, value_name = "N")]
    queues: u32,
}

/// `topics delete`'s arguments.
#[derive(Args)]
struct TopicDeleteArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic.
    #[arg(long)]
    topic: String,
}

/// The listing's arguments.
#[derive(Args)]
pub struct TopicsArgs {
    /// Store directory.
    #[arg(long, required = true)]
    dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `topics` (the listing) or `topics delete`.
pub fn topics_command(command: TopicsCommand) -> Result<(), CliError> {
    match command.action {
        None => topics(command.list),
        Some(TopicsAction::Create(args)) => {
            message_store::validate_topic(&args.topic).map_err(|e| CliError::Usage(e.to_string()))?;
            let (store, write) = (&args.store, &args.write);
            let store = super::open_store(&store.dir, store.config.as_deref(), write.flush, write.segment_size)?;
            let created = store.create_topic(&args.topic, args.queues).map_err(CliError::from);
            let shutdown = store.shutdown().map_err(CliError::from);
            created.and(shutdown)?;
            outln!("topic {} has {} queues", args.topic, args.queues)
        }
        Some(TopicsAction::Delete(args)) => with_store(&args.store, |store| {
            if store.delete_topic(&args.topic)? {
                outln!("deleted topic {}", args.topic)
            } else {
                Err(CliError::Input(format!("{}: topic {:?} does not exist", args.store.dir.display(), args.topic)))
            }
        }),
    }
}

/// Lists topics and queues with their offsets, the dispatch lag and each
/// group's lag, from the files (read-only: safe beside a running store).
fn topics(args: TopicsArgs) -> Result<(), CliError> {
    let dir = args.dir.expect("clap requires --dir without a subcommand");
    super::existing_store(&dir)?;
    let queues = inspect::queues(&dir)?;
    let groups = inspect::consumer_offsets(&dir)?;
    let dispatch_point = inspect::dispatch_point(&dir)?;
    let durable_end = commitlog::inspect::store_files(&dir).checkpoint.map(|c| c.flushed_offset);
    let dispatch_lag = durable_end.zip(dispatch_point).map(|(end, point)| end.saturating_sub(point));
    let lag_of = |g: &inspect::GroupOffset| {
        queues
            .iter()
            .find(|q| q.topic == g.topic && q.queue_id == g.queue_id)
            .map_or(0, |q| q.max_offset.saturating_sub(g.offset))
    };
    if args.json {
        let report = serde_json::json!({
            "dispatch_point": dispatch_point,
            "log_durable_end": durable_end,
            "dispatch_lag_bytes": dispatch_lag,
            "queues": queues.iter().map(|q| serde_json::json!({
                "topic": q.topic, "queue": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
                "sealed_end": q.sealed_end,
            })).collect::<Vec<_>>(),
            "groups": groups.iter().map(|g| serde_json::json!({
                "group": g.group, "topic": g.topic, "queue": g.queue_id, "offset": g.offset, "lag": lag_of(g),
            })).collect::<Vec<_>>(),
        });
        return outln!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    }
    let show = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    outln!(
        "dispatch point {} of durable log end {} (lag {} bytes, as of the last checkpoints)",
        show(dispatch_point),
        show(durable_end),
        show(dispatch_lag)
    )?;
    outln!("{:<24} {:>6} {:>12} {:>12}", "TOPIC", "QUEUE", "MIN", "MAX")?;
    for q in &queues {
        outln!("{:<24} {:>6} {:>12} {:>12}", q.topic, q.queue_id, q.min_offset, q.max_offset)?;
    }
    if !groups.is_empty() {
        outln!("{:<24} {:<24} {:>6} {:>12} {:>12}", "GROUP", "TOPIC", "QUEUE", "OFFSET", "LAG")?;
        for g in &groups {
            outln!("{:<24} {:<24} {:>6} {:>12} {:>12}", g.group, g.topic, g.queue_id, g.offset, lag_of(g))?;
        }
    }
    Ok(())
}
