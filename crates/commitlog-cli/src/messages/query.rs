//! `query`: messages by key, newest first.

use std::io::Write;

use clap::Args;

use super::{message_json, with_store, StoreArgs};
use crate::{io, CliError};

/// `query`'s arguments.
#[derive(Args)]
pub struct QueryArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The key (a message's `--key` when it was sent).
    #[arg(long, required_unless_present = "log_offset", conflicts_with = "log_offset")]
    key: Option<String>,
    /// Instead of a key: the message whose log record starts here (`send`
    /// prints it; RocketMQ's `queryMsgByOffset`). The key lookup's filters
    /// (`--topic`, `--begin`, `--end`, `--max`) do not apply to it: given
    /// with it, they are a usage error, not ignored.
    #[arg(long, value_name = "OFFSET", conflicts_with_all = ["topic", "begin", "end", "max"])]
    log_offset: Option<u64>,
    /// Only this topic (default: every topic).
    #[arg(long)]
    topic: Option<String>,
    /// Stored at or after this time: ms since the Unix epoch, or RFC 3339
    /// (`2026-12-06T12:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = crate::args::time_ms)]
    begin: Option<u64>,
    /// Stored at or before this time (as `--begin`).
    #[arg(long, value_name = "TIME", value_parser = crate::args::time_ms)]
    end: Option<u64>,
    /// The most messages printed (at most 1,024).
    #[arg(long, default_value_t = 32, value_parser = crate::args::count_in::<usize>(1024))]
    max: usize,
    /// One JSON object per message.
    #[arg(long)]
    json: bool,
}

/// Prints the messages with `--key` (RocketMQ's `queryMessage`, by the key
/// index), newest first: `TOPIC<TAB>QUEUE<TAB>QUEUE_OFFSET<TAB>BODY`, or
/// JSON lines. Nothing found is not an error (a note on stderr).
pub fn query(args: QueryArgs) -> Result<(), CliError> {
    let begin = args.begin.unwrap_or(0);
    let end = args.end.unwrap_or(u64::MAX);
    if begin > end {
        return Err(CliError::Usage(format!("--begin {begin} is after --end {end}")));
    }
    let Some(key) = &args.key else {
        let offset = args.log_offset.expect("clap requires --key or --log-offset");
        return with_store(&args.store, |store| match store.message_at_log_offset(offset)? {
            Some(message) => print(&args, &[message]),
            None => Err(CliError::Input(format!("the message at log offset {offset} expired with the log's front"))),
        });
    };
    with_store(&args.store, |store| {
        let topics: Vec<String> = match &args.topic {
            Some(topic) if store.topics().iter().any(|(t, _)| t == topic) => vec![topic.clone()],
            Some(topic) => {
                return Err(CliError::Input(format!("{}: topic {topic:?} does not exist", args.store.dir.display())))
            }
            None => store.topics().into_iter().map(|(t, _)| t).collect(),
        };
        let mut found = Vec::new();
        for topic in &topics {
            found.extend(store.query_by_key(topic, key, begin, end, args.max)?);
        }
        found.sort_by(|a, b| b.store_timestamp_ms.cmp(&a.store_timestamp_ms).then(b.log_offset.cmp(&a.log_offset)));
        found.truncate(args.max);
        if found.is_empty() {
            eprintln!("commitlog: no message with key {key:?}");
        }
        print(&args, &found)
    })
}

/// The messages as `query` prints them: `TOPIC<TAB>QUEUE<TAB>QUEUE_OFFSET<TAB>BODY`,
/// or JSON lines.
fn print(args: &QueryArgs, found: &[message_store::StoredMessage]) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for message in found {
        if args.json {
            writeln!(out, "{}", message_json(message))
        } else {
            write!(out, "{}\t{}\t{}\t", message.topic, message.queue_id, message.queue_offset)
                .and_then(|()| out.write_all(&message.body))
                .and_then(|()| out.write_all(b"\n"))
        }
        .map_err(io("writing to stdout"))?;
    }
    out.flush().map_err(io("writing to stdout"))
}
