//! `groups`: the consumer groups of a store, read from its files (safe
//! beside a running store): `groups list` (each group's topics, queues and
//! lag), `groups describe --group G` (its committed offset, the queue's end
//! and the lag, per queue).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use message_store::inspect;

use crate::CliError;

/// `groups`' subcommands.
#[derive(Args)]
pub struct GroupsCommand {
    #[command(subcommand)]
    action: GroupsAction,
}

#[derive(Subcommand)]
enum GroupsAction {
    /// Each group with committed offsets: its topics, its queues and its lag
    /// (messages not committed past), read-only.
    List(GroupsArgs),
    /// One group per queue: committed offset, the queue's end, the lag,
    /// read-only.
    Describe(DescribeArgs),
}

/// Where the store is and how to print.
#[derive(Args)]
struct GroupsArgs {
    /// The store's directory.
    #[arg(long)]
    dir: PathBuf,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `groups describe`'s arguments.
#[derive(Args)]
struct DescribeArgs {
    #[command(flatten)]
    store: GroupsArgs,
    /// The group.
    #[arg(long)]
    group: String,
}

/// One committed offset with its queue's end.
struct Row {
    group: String,
    topic: String,
    queue: u32,
    offset: u64,
    end: u64,
}

impl Row {
    fn lag(&self) -> u64 {
        self.end.saturating_sub(self.offset)
    }
}

/// The committed offsets of the store in `dir`, each with its queue's end.
fn rows(dir: &std::path::Path) -> Result<Vec<Row>, CliError> {
    super::existing_store(dir)?;
    let queues = inspect::queues(dir)?;
    let ends: BTreeMap<(&str, u32), u64> =
        queues.iter().map(|q| ((q.topic.as_str(), q.queue_id), q.max_offset)).collect();
    Ok(inspect::consumer_offsets(dir)?
        .into_iter()
        .map(|g| {
            let end = ends.get(&(g.topic.as_str(), g.queue_id)).copied().unwrap_or(0);
            Row { group: g.group, topic: g.topic, queue: g.queue_id, offset: g.offset, end }
        })
        .collect())
}

/// `groups list` or `groups describe`.
pub fn groups(command: GroupsCommand) -> Result<(), CliError> {
    match command.action {
        GroupsAction::List(args) => list(&args),
        GroupsAction::Describe(args) => describe(&args),
    }
}

fn list(args: &GroupsArgs) -> Result<(), CliError> {
    let rows = rows(&args.dir)?;
    // group -> (topics, queues, lag)
    let mut groups: BTreeMap<&str, (Vec<&str>, usize, u64)> = BTreeMap::new();
    for row in &rows {
        let entry = groups.entry(&row.group).or_default();
        if !entry.0.contains(&row.topic.as_str()) {
            entry.0.push(&row.topic);
        }
        entry.1 += 1;
        entry.2 += row.lag();
    }
    if args.json {
        let report: Vec<_> = groups
            .iter()
            .map(|(group, (topics, queues, lag))| {
                serde_json::json!({ "group": group, "topics": topics, "queues": queues, "lag": lag })
            })
            .collect();
        return outln!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    }
    outln!("{:<24} {:>6} {:>12}  TOPICS", "GROUP", "QUEUES", "LAG")?;
    for (group, (topics, queues, lag)) in &groups {
        outln!("{group:<24} {queues:>6} {lag:>12}  {}", topics.join(","))?;
    }
    Ok(())
}

fn describe(args: &DescribeArgs) -> Result<(), CliError> {
    message_store::validate_group(&args.group).map_err(|e| CliError::Usage(e.to_string()))?;
    let rows: Vec<Row> = rows(&args.store.dir)?.into_iter().filter(|r| r.group == args.group).collect();
    if rows.is_empty() {
        return Err(CliError::Input(format!(
            "{}: group {:?} has no committed offset",
            args.store.dir.display(),
            args.group
        )));
    }
    if args.store.json {
        let report: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "topic": r.topic, "queue": r.queue, "offset": r.offset, "end": r.end, "lag": r.lag(),
                })
            })
            .collect();
        return outln!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    }
    outln!("{:<24} {:>6} {:>12} {:>12} {:>12}", "TOPIC", "QUEUE", "OFFSET", "END", "LAG")?;
    for r in &rows {
        outln!("{:<24} {:>6} {:>12} {:>12} {:>12}", r.topic, r.queue, r.offset, r.end, r.lag())?;
    }
    Ok(())
}
