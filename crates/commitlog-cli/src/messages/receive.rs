//! `receive`: a queue as a consumer group, committing its offset as it goes;
//! `--peek` without committing, `--follow` read-only from the files.

use std::io::Write;

use clap::Args;
use message_store::{inspect, GetRequest, MessageStore, TagFilter};

use super::{message_json, QueueArgs};
use crate::{io, CliError};

/// `receive`'s arguments.
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
