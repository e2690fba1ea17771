//! The message-store commands: `send` (stdin lines to a topic's queues),
//! `receive` (a queue as a consumer group, committing its offset, or peeking),
//! `query` (messages by key), `topics` (topics, queues, dispatch lag and each
//! group's lag, read-only; `topics delete`) and `offsets` (`reset`, `remove`).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc;

use base64::Engine as _;
use clap::{Args, Subcommand};
use message_store::{inspect, GetRequest, Message, MessageStore, MessageStoreConfig, ResetTo, TagFilter};

use crate::{io, log_config, CliError, FlushArg};

/// Messages waiting for their acknowledgement at once.
const IN_FLIGHT: usize = 4096;

/// Where the store is and how to open it.
#[derive(Args)]
pub struct StoreArgs {
    /// Store directory (created if missing, recovered otherwise).
    #[arg(long)]
    dir: PathBuf,
    /// When a message counts as acknowledged.
    #[arg(long, value_enum, default_value = "sync")]
    flush: FlushArg,
    /// Segment size for a new log (existing logs keep theirs).
    #[arg(long, value_name = "BYTES", value_parser = crate::args::segment_size)]
    segment_size: Option<usize>,
}

impl StoreArgs {
    /// Opens (or creates) the store, with the shapes its files show.
    fn open(&self) -> Result<MessageStore, CliError> {
        open_store(&self.dir, self.flush, self.segment_size)
    }

    /// Opens the store, which must exist: a command that reads never creates one.
    fn open_existing(&self) -> Result<MessageStore, CliError> {
        crate::existing_dir(&self.dir)?;
        commitlog::inspect::check_store_dir(&self.dir).map_err(|_| {
            CliError::Input(format!("{} is not a message store (no commitlog/ in it)", self.dir.display()))
        })?;
        self.open()
    }
}

/// Opens the message store in `dir`: a new one with `segment_size` segments, an
/// existing one with its own segment size and the key index's shape and the
/// queue counts its files show (a program may have configured others than the
/// defaults; a file of an unexpected size would be taken for damage).
pub(crate) fn open_store(
    dir: &std::path::Path,
    flush: FlushArg,
    segment_size: Option<usize>,
) -> Result<MessageStore, CliError> {
    let log = log_config(dir, flush, false, segment_size, &crate::SegmentPathArgs::default())?;
    let config = if dir.join("config").is_dir() || dir.join("consumequeue").is_dir() {
        inspect::existing_config(dir, log)?
    } else {
        MessageStoreConfig::new(log)
    };
    Ok(MessageStore::open(dir, config)?)
}

/// A queue of a topic in a store.
#[derive(Args)]
pub struct QueueArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// The queue of the topic.
    #[arg(long, default_value_t = 0)]
    queue: u32,
}

#[derive(Args)]
pub struct SendArgs {
    #[command(flatten)]
    queue: QueueArgs,
    /// Create the topic with this many queues if it does not exist.
    #[arg(long, value_name = "N")]
    create_queues: Option<u32>,
    /// The tag of every message.
    #[arg(long)]
    tags: Option<String>,
    /// A key of every message (repeat for several).
    #[arg(long = "key")]
    keys: Vec<String>,
    /// Spread the lines over every queue of the topic, round-robin from
    /// `--queue`; prints `QUEUE<TAB>QUEUE_OFFSET<TAB>LOG_OFFSET`.
    #[arg(long, conflicts_with = "line_queue")]
    round_robin: bool,
    /// Each line is `QUEUE<TAB>BODY`: the message goes to that queue; prints
    /// `QUEUE<TAB>QUEUE_OFFSET<TAB>LOG_OFFSET`.
    #[arg(long)]
    line_queue: bool,
}

/// Puts each stdin line (without its newline) on the queue (or the queues:
/// `--round-robin`, `--line-queue`) and prints `QUEUE_OFFSET<TAB>LOG_OFFSET`
/// (with the queue first, over several queues) in input order once
/// acknowledged.
pub fn send(args: SendArgs) -> Result<(), CliError> {
    let store = args.queue.store.open()?;
    let result = send_lines(&store, &args);
    let shutdown = store.shutdown().map_err(CliError::from);
    result.and(shutdown)
}

fn send_lines(store: &MessageStore, args: &SendArgs) -> Result<(), CliError> {
    let topic = &args.queue.topic;
    if let Some(queues) = args.create_queues {
        store.create_topic(topic, queues)?;
    }
    let queues = store.topics().into_iter().find(|(t, _)| t == topic).map(|(_, n)| n);
    // Said as every command says it: with the tool's way to create it.
    let queues = queues.ok_or_else(|| message_store::StoreError::UnknownTopic { topic: topic.clone() })?;
    let several = args.round_robin || args.line_queue;
    let (tx, rx) = mpsc::sync_channel::<(u32, message_store::PutResult)>(IN_FLIGHT);
    let printer = std::thread::spawn(move || -> Result<(), CliError> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for (queue, put) in rx {
            let (queue_offset, log_offset) = (put.queue_offset, put.log_offset);
            put.durability.wait().map_err(|e| {
                CliError::Input(format!("message at queue {queue} offset {queue_offset} was not acknowledged: {e}"))
            })?;
            let written = if several {
                writeln!(out, "{queue}\t{queue_offset}\t{log_offset}")
            } else {
                writeln!(out, "{queue_offset}\t{log_offset}")
            };
            written.and_then(|()| out.flush()).map_err(io("writing to stdout"))?;
        }
        Ok(())
    });
    let mut result = Ok(());
    for (number, line) in std::io::stdin().lock().split(b'\n').enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                result = Err(CliError::Io { context: "reading stdin".into(), source: e });
                break;
            }
        };
        let (queue, body) = if args.line_queue {
            match split_queue(&line) {
                Some(split) => split,
                None => {
                    result = Err(CliError::Input(format!("line {}: not QUEUE<TAB>BODY (--line-queue)", number + 1)));
                    break;
                }
            }
        } else if args.round_robin {
            let queue = (u64::from(args.queue.queue) + number as u64) % u64::from(queues);
            (u32::try_from(queue).expect("below the queue count"), line)
        } else {
            (args.queue.queue, line)
        };
        let mut message = Message::new(topic.clone(), queue, body);
        message.tags = args.tags.clone();
        message.keys = args.keys.clone();
        match store.put_message(&message) {
            Ok(put) => {
                if tx.send((queue, put)).is_err() {
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
    result.and(printed)
}

/// `QUEUE<TAB>BODY` split, the queue a whole number.
fn split_queue(line: &[u8]) -> Option<(u32, Vec<u8>)> {
    let tab = line.iter().position(|&b| b == b'\t')?;
    let queue = std::str::from_utf8(&line[..tab]).ok()?.trim().parse().ok()?;
    Some((queue, line[tab + 1..].to_vec()))
}

#[derive(Args)]
pub struct ReceiveArgs {
    #[command(flatten)]
    queue: QueueArgs,
    /// The consumer group: reading starts at its committed offset (else the
    /// queue's first), and its offset is committed after each batch.
    #[arg(long)]
    group: String,
    /// Start here instead of the group's offset.
    #[arg(long)]
    from: Option<u64>,
    /// RocketMQ's subscription expression: `*`, or tags separated by `||`.
    #[arg(long, default_value = "*")]
    tags: String,
    /// Stop after this many messages.
    #[arg(long, value_parser = crate::args::count_in::<usize>(1 << 40))]
    max: Option<usize>,
    /// One JSON object per message.
    #[arg(long)]
    json: bool,
    /// Keep printing messages as they arrive, like `tail -f`, reading the
    /// store's files beside the process that runs it (nothing is opened,
    /// locked or written: the group's offset is where it starts, and is not
    /// committed). Only durable messages are printed. Ctrl-C ends it.
    #[arg(long)]
    follow: bool,
    /// Print the messages without committing the group's offset (the store
    /// is opened; the next `receive` prints them again).
    #[arg(long, conflicts_with = "follow")]
    peek: bool,
}

/// How often `receive --follow` looks for new messages.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Prints the queue's messages from the group's offset to the queue's end
/// (`OFFSET<TAB>BODY`, or JSON lines), committing the group's offset as it goes;
/// with `--follow`, read-only and on until Ctrl-C.
pub fn receive(args: ReceiveArgs) -> Result<(), CliError> {
    message_store::validate_group(&args.group).map_err(|e| CliError::Usage(e.to_string()))?;
    let (dir, topic, queue) = (&args.queue.store.dir, args.queue.topic.as_str(), args.queue.queue);
    crate::existing_dir(dir)?;
    if args.follow {
        // Read-only: the registry must be readable to follow a queue.
        check_queue(dir, &inspect::topics(dir)?, topic, queue)?;
        return follow(&args);
    }
    if let (Ok(topics), Ok(())) = (inspect::topics(dir), commitlog::inspect::check_store_dir(dir)) {
        // Refused before the store is opened (an open writes its abort marker).
        check_queue(dir, &topics, topic, queue)?;
    }
    let store = match args.queue.store.open_existing() {
        Ok(store) => store,
        Err(err) if is_out_of_space(&err) => return read_without_committing(&args, &err),
        Err(err) => return Err(err),
    };
    let result = receive_messages(&store, &args);
    let shutdown = store.shutdown().map_err(CliError::from);
    result.and(shutdown)
}

/// Refuses a topic or queue `topics` (the store's) does not have: exit 1.
fn check_queue(dir: &std::path::Path, topics: &[(String, u32)], topic: &str, queue: u32) -> Result<(), CliError> {
    match topics.iter().find(|(t, _)| t == topic) {
        None => Err(CliError::Input(format!("{}: topic {topic:?} does not exist", dir.display()))),
        Some((_, count)) if queue >= *count => Err(CliError::Input(format!(
            "{}: topic {topic:?} has {count} queues; queue {queue} does not exist",
            dir.display()
        ))),
        Some(_) => Ok(()),
    }
}

/// Refuses `--from` past the queue's end `end` (its next message's offset):
/// a usage error (exit 2), with or without `--follow`.
fn check_from(from: Option<u64>, end: u64) -> Result<(), CliError> {
    match from {
        Some(from) if from > end => Err(CliError::Usage(format!("--from {from} is past the queue's end {end}"))),
        _ => Ok(()),
    }
}

fn receive_messages(store: &MessageStore, args: &ReceiveArgs) -> Result<(), CliError> {
    let filter = TagFilter::parse(&args.tags);
    let (topic, queue) = (&args.queue.topic, args.queue.queue);
    let range = store.queue_range(topic, queue)?;
    check_from(args.from, range.end)?;
    let mut offset = args.from.or_else(|| store.committed_offset(&args.group, topic, queue)).unwrap_or(range.start);
    let mut left = args.max.unwrap_or(usize::MAX);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    while left > 0 {
        let got = store.get_messages(
            &GetRequest::new(topic, queue, offset)
                .max_count(left.min(256))
                .max_bytes(4 << 20)
                .filter(filter.clone())
                .group(&args.group),
        )?;
        use message_store::GetStatus as S;
        match got.status {
            S::Found | S::NoMatchedMessage => {}
            S::OffsetTooSmall => {
                eprintln!("commitlog: warning: offsets before {} expired; going on from there", got.next_offset);
            }
            S::NoMessageInQueue | S::NoNewMessage => break,
            S::OffsetOverflow => {
                return Err(CliError::Usage(format!("offset {offset} is past the queue's end {}", got.max_offset)))
            }
            _ => {} // a status of a later version: go on from next_offset
        }
        for message in &got.messages {
            print_message(&mut out, args.json, message).map_err(io("writing to stdout"))?;
        }
        left = left.saturating_sub(got.messages.len());
        offset = got.next_offset;
        out.flush().map_err(io("writing to stdout"))?;
        // Committed once printed: a reader that dies re-reads, never skips.
        if !args.peek {
            store.commit_offset(&args.group, topic, queue, offset)?;
        }
    }
    out.flush().map_err(io("writing to stdout"))
}

/// True when `err` comes from a full disk (`ENOSPC`): the store cannot be
/// opened to commit, but it can still be read.
fn is_out_of_space(err: &CliError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = match err {
        CliError::Store(e) => Some(e),
        CliError::Log(e) => Some(e),
        _ => None,
    };
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(28) || io.kind() == std::io::ErrorKind::StorageFull {
                return true;
            }
        }
        if matches!(e.downcast_ref::<commitlog::Error>(), Some(commitlog::Error::DiskFull { .. })) {
            return true;
        }
        source = e.source();
    }
    false
}

/// `receive` on a disk too full to open the store (its abort marker, its
/// offsets): the queue is printed from the files, read-only, as `--follow`
/// reads it, up to what is durable; the group's offset is not committed, which
/// is the error it ends with.
fn read_without_committing(args: &ReceiveArgs, why: &CliError) -> Result<(), CliError> {
    eprintln!("commitlog: warning: cannot open the store to commit ({why}); reading it without committing");
    read_files(args, None)?;
    Err(CliError::Input(format!(
        "group {}'s offset was not committed (the disk is full; it stays where it was, the next receive reads these again)",
        args.group
    )))
}

/// Prints the queue from the files (`inspect::read_queue`), from `--from`,
/// else the group's committed offset, else the queue's first, up to `--max`:
/// to its durable end, or, with `stop` (`--follow`), on every 100 ms until
/// `stop` is raised. A damaged entry ends it with exit 3.
fn read_files(args: &ReceiveArgs, stop: Option<&std::sync::atomic::AtomicBool>) -> Result<(), CliError> {
    let dir = &args.queue.store.dir;
    let (topic, queue) = (args.queue.topic.as_str(), args.queue.queue);
    let mut offset = match args.from {
        Some(from) => from,
        None => {
            committed_in_files(dir, &args.group, topic, queue)?.unwrap_or(inspect::queue(dir, topic, queue)?.min_offset)
        }
    };
    let filter = TagFilter::parse(&args.tags);
    let mut left = args.max.unwrap_or(usize::MAX);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    while left > 0 && !stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst)) {
        let read = inspect::read_queue(dir, topic, queue, offset, left.min(256), &filter)?;
        if let Some(first) = read.skipped_to {
            eprintln!("commitlog: warning: offsets before {first} expired; going on from there");
        }
        for message in &read.messages {
            print_message(&mut out, args.json, message).map_err(io("writing to stdout"))?;
        }
        out.flush().map_err(io("writing to stdout"))?;
        if let Some(damage) = read.damaged {
            return Err(damaged_queue(topic, queue, damage));
        }
        left = left.saturating_sub(read.messages.len());
        if read.next_offset == offset {
            if stop.is_none() {
                break;
            }
            std::thread::sleep(FOLLOW_POLL);
        }
        offset = read.next_offset;
    }
    out.flush().map_err(io("writing to stdout"))
}

/// The offset `group` committed in `topic`'s queue, read from the files.
fn committed_in_files(dir: &std::path::Path, group: &str, topic: &str, queue: u32) -> Result<Option<u64>, CliError> {
    Ok(inspect::consumer_offsets(dir)?
        .into_iter()
        .find(|g| g.group == group && g.topic == topic && g.queue_id == queue)
        .map(|g| g.offset))
}

/// A read of the files that met a damaged entry below the recorded end
/// (`QueueRead::damaged`): said on stderr, exit 3 (as `consume` does at damage).
fn damaged_queue(topic: &str, queue: u32, damage: inspect::DamagedEntry) -> CliError {
    let names = match damage.log_offset {
        Some(offset) => format!("its entry names log offset {offset}, not its message"),
        None => "its entry is missing".to_string(),
    };
    eprintln!(
        "commitlog: queue {topic}/{queue} is damaged at offset {} ({names}): the next open of the store repairs it from the log (`commitlog recover` now); `commitlog verify` lists the damage",
        damage.queue_offset
    );
    CliError::Problems(1)
}

/// A body for JSON, losslessly: the text when it is UTF-8, else base64; with
/// its encoding (`utf8` or `base64`).
fn json_body(body: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(body) {
        Ok(text) => (text.to_string(), "utf8"),
        Err(_) => (base64::engine::general_purpose::STANDARD.encode(body), "base64"),
    }
}

/// A message as one JSON object: its place, times, tags, keys and body.
fn message_json(message: &message_store::StoredMessage) -> serde_json::Value {
    let (body, encoding) = json_body(&message.body);
    serde_json::json!({
        "topic": message.topic,
        "queue": message.queue_id,
        "queue_offset": message.queue_offset,
        "log_offset": message.log_offset,
        "store_timestamp_ms": message.store_timestamp_ms,
        "born_timestamp_ms": message.born_timestamp_ms,
        "tags": message.tags,
        "keys": message.keys,
        "body": body,
        "body_encoding": encoding,
    })
}

/// One message as `receive` prints it: `OFFSET<TAB>BODY`, or a JSON line.
fn print_message(out: &mut impl Write, json: bool, message: &message_store::StoredMessage) -> std::io::Result<()> {
    if json {
        writeln!(out, "{}", message_json(message))
    } else {
        write!(out, "{}\t", message.queue_offset)
            .and_then(|()| out.write_all(&message.body))
            .and_then(|()| out.write_all(b"\n"))
    }
}

/// `receive --follow`: reads the queue from the files (`inspect::read_queue`),
/// from `--from`, else the group's committed offset, else the queue's first,
/// then every 100 ms what became durable since, until Ctrl-C or `--max`. The
/// caller has checked the topic and queue exist.
fn follow(args: &ReceiveArgs) -> Result<(), CliError> {
    let dir = &args.queue.store.dir;
    let (topic, queue) = (args.queue.topic.as_str(), args.queue.queue);
    check_from(args.from, inspect::queue(dir, topic, queue)?.max_offset)?;
    let stop = crate::stop_on_ctrl_c()?;
    read_files(args, Some(&stop))
}

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
}

#[derive(Args)]
struct TopicDeleteArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic.
    #[arg(long)]
    topic: String,
}

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
        Some(TopicsAction::Delete(args)) => with_store(&args.store, |store| {
            if store.delete_topic(&args.topic)? {
                outln!("deleted topic {}", args.topic)
            } else {
                Err(CliError::Input(format!("{}: topic {:?} does not exist", args.store.dir.display(), args.topic)))
            }
        }),
    }
}

/// Opens the existing store of `store`, runs `work` on it, and shuts it down
/// (reporting the first error).
fn with_store(store: &StoreArgs, work: impl FnOnce(&MessageStore) -> Result<(), CliError>) -> Result<(), CliError> {
    let store = store.open_existing()?;
    let result = work(&store);
    let shutdown = store.shutdown().map_err(CliError::from);
    result.and(shutdown)
}

/// Lists topics and queues with their offsets, the dispatch lag and each
/// group's lag, from the files (read-only: safe beside a running store).
fn topics(args: TopicsArgs) -> Result<(), CliError> {
    let dir = args.dir.expect("clap requires --dir without a subcommand");
    crate::existing_dir(&dir)?;
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

#[derive(Args)]
pub struct QueryArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The key (a message's `--key` when it was sent).
    #[arg(long)]
    key: String,
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
            found.extend(store.query_by_key(topic, &args.key, begin, end, args.max)?);
        }
        found.sort_by(|a, b| b.store_timestamp_ms.cmp(&a.store_timestamp_ms).then(b.log_offset.cmp(&a.log_offset)));
        found.truncate(args.max);
        if found.is_empty() {
            eprintln!("commitlog: no message with key {:?}", args.key);
        }
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        for message in &found {
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
    })
}

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
