//! `receive`: a topic's queues (every one, or one) as a consumer group,
//! committing its offsets as it goes; `--peek` without committing, `--follow`
//! read-only from the files.

use std::io::Write;
use std::path::Path;

use clap::Args;
use message_store::{inspect, GetRequest, MessageStore, TagFilter};

use super::{message_json, StoreArgs};
use crate::{io, CliError};

/// `receive`'s arguments.
#[derive(Args)]
pub struct ReceiveArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// Read this queue of the topic only. Without it every queue of the
    /// topic is read, one after the other in queue order, and each line
    /// starts with the message's queue (`QUEUE<TAB>OFFSET<TAB>BODY`) when the
    /// topic has more than one.
    #[arg(long)]
    queue: Option<u32>,
    /// The consumer group: reading starts at its committed offset in each
    /// queue (else the queue's first), and its offset is committed after each
    /// batch.
    #[arg(long)]
    group: String,
    /// Start here instead of the group's offset (one queue only: `--queue`,
    /// or a topic of one queue).
    #[arg(long)]
    from: Option<u64>,
    /// RocketMQ's subscription expression: `*`, or tags separated by `||`
    /// (a malformed one, such as `a ||| b`, is refused).
    #[arg(long, default_value = "*")]
    tags: String,
    /// Stop after this many messages (over every queue read).
    #[arg(long, value_parser = crate::args::count_in::<usize>(1 << 40))]
    max: Option<usize>,
    /// One JSON object per message (with its queue).
    #[arg(long)]
    json: bool,
    /// Keep printing messages as they arrive, like `tail -f`, reading the
    /// store's files beside the process that runs it (nothing is opened,
    /// locked or written: the group's offsets are where it starts, and are
    /// not committed). Only durable messages are printed. Ctrl-C ends it.
    #[arg(long)]
    follow: bool,
    /// Print the messages without committing the group's offsets (the store
    /// is opened; the next `receive` prints them again).
    #[arg(long, conflicts_with = "follow")]
    peek: bool,
}

/// How often `receive --follow` looks for new messages.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// The queues one `receive` reads, and how its lines look.
struct Reading<'a> {
    args: &'a ReceiveArgs,
    filter: TagFilter,
    /// The queues, in the order read.
    queues: Vec<u32>,
    /// Lines start with the queue (the topic has several and all are read).
    with_queue: bool,
}

impl<'a> Reading<'a> {
    /// The queues `args` asks for of a topic `topics` (the store's) has;
    /// refuses a missing topic or queue (exit 1) and `--from` on several
    /// queues (exit 2).
    fn new(args: &'a ReceiveArgs, filter: TagFilter, topics: &[(String, u32)]) -> Result<Self, CliError> {
        let dir = &args.store.dir;
        let topic = args.topic.as_str();
        let count = match topics.iter().find(|(t, _)| t == topic) {
            None => return Err(CliError::Input(format!("{}: topic {topic:?} does not exist", dir.display()))),
            Some((_, count)) => *count,
        };
        let queues = match args.queue {
            Some(queue) if queue >= count => {
                return Err(CliError::Input(format!(
                    "{}: topic {topic:?} has {count} queues; queue {queue} does not exist",
                    dir.display()
                )))
            }
            Some(queue) => vec![queue],
            None => (0..count).collect(),
        };
        if args.from.is_some() && queues.len() != 1 {
            return Err(CliError::Usage(format!("--from needs one queue: topic {topic:?} has {count}; pass --queue")));
        }
        Ok(Reading { args, filter, with_queue: args.queue.is_none() && count > 1, queues })
    }

    /// Refuses `--from` past the queue's end `end` (its next message's
    /// offset): a usage error (exit 2), with or without `--follow`.
    fn check_from(&self, end: u64) -> Result<(), CliError> {
        match self.args.from {
            Some(from) if from > end => Err(CliError::Usage(format!("--from {from} is past the queue's end {end}"))),
            _ => Ok(()),
        }
    }

    /// One message as `receive` prints it: `OFFSET<TAB>BODY` (with the queue
    /// first when several are read), or a JSON line.
    fn print(&self, out: &mut impl Write, message: &message_store::StoredMessage) -> std::io::Result<()> {
        if self.args.json {
            return writeln!(out, "{}", message_json(message));
        }
        if self.with_queue {
            write!(out, "{}\t", message.queue_id)?;
        }
        write!(out, "{}\t", message.queue_offset)
            .and_then(|()| out.write_all(&message.body))
            .and_then(|()| out.write_all(b"\n"))
    }
}

/// Prints the topic's queues (every one, or `--queue`) from the group's
/// offsets to their ends (`OFFSET<TAB>BODY`, or JSON lines), committing the
/// group's offsets as it goes; with `--follow`, read-only and on until Ctrl-C.
pub fn receive(args: ReceiveArgs) -> Result<(), CliError> {
    message_store::validate_group(&args.group).map_err(|e| CliError::Usage(e.to_string()))?;
    let filter = TagFilter::parse(&args.tags).map_err(|e| CliError::Usage(format!("--tags: {e}")))?;
    let dir = &args.store.dir;
    super::existing_store(dir)?;
    if args.follow {
        // Read-only: the registry must be readable to follow a queue.
        let reading = Reading::new(&args, filter, &inspect::topics(dir)?)?;
        if let [queue] = reading.queues[..] {
            reading.check_from(inspect::queue(dir, &args.topic, queue)?.max_offset)?;
        }
        let stop = crate::stop_on_ctrl_c()?;
        return read_files(&reading, Some(&stop));
    }
    let before_open = match inspect::topics(dir) {
        // Refused before the store is opened (an open writes its abort marker).
        Ok(topics) => Some(Reading::new(&args, filter.clone(), &topics)?),
        // The registry is damaged: the open repairs it, then the queues are known.
        Err(_) => None,
    };
    let store = match args.store.open_existing() {
        Ok(store) => store,
        Err(err) if is_out_of_space(&err) => return read_without_committing(&args, filter, &err),
        Err(err) => return Err(err),
    };
    let result = match before_open {
        Some(reading) => receive_messages(&store, &reading),
        None => Reading::new(&args, filter, &store.topics()).and_then(|reading| receive_messages(&store, &reading)),
    };
    let shutdown = store.shutdown().map_err(CliError::from);
    result.and(shutdown)
}

fn receive_messages(store: &MessageStore, reading: &Reading<'_>) -> Result<(), CliError> {
    let args = reading.args;
    let topic = &args.topic;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut left = args.max.unwrap_or(usize::MAX);
    for &queue in &reading.queues {
        let range = store.queue_range(topic, queue)?;
        reading.check_from(range.end)?;
        let committed = store.committed_offset(&args.group, topic, queue)?;
        let mut offset = args.from.or(committed).unwrap_or(range.start);
        while left > 0 {
            let got = store.get_messages(
                &GetRequest::new(topic, queue, offset)
                    .max_count(left.min(256))
                    .max_bytes(4 << 20)
                    .filter(reading.filter.clone())
                    .group(&args.group),
            )?;
            use message_store::GetStatus as S;
            match got.status {
                S::Found | S::NoMatchedMessage => {}
                S::OffsetTooSmall => {
                    eprintln!(
                        "commitlog: warning: queue {queue}: offsets before {} expired; going on from there",
                        got.next_offset
                    );
                }
                S::NoMessageInQueue | S::NoNewMessage => break,
                S::OffsetOverflow => {
                    return Err(CliError::Usage(format!(
                        "queue {queue}: offset {offset} is past the queue's end {}",
                        got.max_offset
                    )))
                }
                _ => {} // a status of a later version: go on from next_offset
            }
            for message in &got.messages {
                reading.print(&mut out, message).map_err(io("writing to stdout"))?;
            }
            left = left.saturating_sub(got.messages.len());
            offset = got.next_offset;
            out.flush().map_err(io("writing to stdout"))?;
            // Committed once printed: a reader that dies re-reads, never skips.
            if !args.peek {
                store.commit_offset(&args.group, topic, queue, offset)?;
            }
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
/// offsets): the queues are printed from the files, read-only, as `--follow`
/// reads them, up to what is durable; the group's offsets are not committed,
/// which is the error it ends with.
fn read_without_committing(args: &ReceiveArgs, filter: TagFilter, why: &CliError) -> Result<(), CliError> {
    eprintln!("commitlog: warning: cannot open the store to commit ({why}); reading it without committing");
    read_files(&Reading::new(args, filter, &inspect::topics(&args.store.dir)?)?, None)?;
    Err(CliError::Input(format!(
        "group {}'s offsets were not committed (the disk is full; they stay where they were, the next receive reads these again)",
        args.group
    )))
}

/// Prints the queues from the files (`inspect::read_queue`), each from
/// `--from`, else the group's committed offset, else the queue's first, up to
/// `--max` in all: to their durable ends, or, with `stop` (`--follow`), on
/// every 100 ms until `stop` is raised. A damaged entry ends it with exit 3.
fn read_files(reading: &Reading<'_>, stop: Option<&std::sync::atomic::AtomicBool>) -> Result<(), CliError> {
    let args = reading.args;
    let (dir, topic) = (args.store.dir.as_path(), args.topic.as_str());
    let committed = inspect::consumer_offsets(dir)?;
    let mut offsets = Vec::with_capacity(reading.queues.len());
    for &queue in &reading.queues {
        let offset = match args.from {
            Some(from) => from,
            None => match committed.iter().find(|g| g.group == args.group && g.topic == topic && g.queue_id == queue) {
                Some(g) => g.offset,
                None => inspect::queue(dir, topic, queue)?.min_offset,
            },
        };
        offsets.push((queue, offset));
    }
    let mut left = args.max.unwrap_or(usize::MAX);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    while left > 0 && !stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst)) {
        let mut moved = false;
        for (queue, offset) in &mut offsets {
            if left == 0 {
                break;
            }
            moved |= read_some(reading, dir, *queue, offset, &mut left, &mut out)?;
        }
        if !moved {
            if stop.is_none() {
                break;
            }
            std::thread::sleep(FOLLOW_POLL);
        }
    }
    out.flush().map_err(io("writing to stdout"))
}

/// Prints what the files hold of `queue` from `offset` (up to `left` messages,
/// and 256 at a time) and moves both on; true if the offset moved.
fn read_some(
    reading: &Reading<'_>,
    dir: &Path,
    queue: u32,
    offset: &mut u64,
    left: &mut usize,
    out: &mut impl Write,
) -> Result<bool, CliError> {
    let topic = reading.args.topic.as_str();
    let read = inspect::read_queue(dir, topic, queue, *offset, (*left).min(256), &reading.filter)?;
    if let Some(first) = read.skipped_to {
        eprintln!("commitlog: warning: queue {queue}: offsets before {first} expired; going on from there");
    }
    for message in &read.messages {
        reading.print(out, message).map_err(io("writing to stdout"))?;
    }
    out.flush().map_err(io("writing to stdout"))?;
    if let Some(damage) = read.damaged {
        return Err(damaged_queue(topic, queue, damage));
    }
    *left = left.saturating_sub(read.messages.len());
    let moved = read.next_offset != *offset;
    *offset = read.next_offset;
    Ok(moved)
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
