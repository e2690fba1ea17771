//! `send`: stdin lines to a topic's queue, or its queues.

use std::io::Write;
use std::sync::mpsc;

use clap::Args;
use message_store::{Message, MessageStore};

use super::QueueArgs;
use crate::{io, CliError};

/// Messages waiting for their acknowledgement at once.
const IN_FLIGHT: usize = 4096;

/// `send`'s arguments.
#[derive(Args)]
pub struct SendArgs {
    #[command(flatten)]
    queue: QueueArgs,
    #[command(flatten)]
    write: super::WriteArgs,
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
    let store = &args.queue.store;
    let store = super::open_store(&store.dir, store.config.as_deref(), args.write.flush, args.write.segment_size)?;
    let result = send_lines(&store, &args);
    let shutdown = store.shutdown().map_err(CliError::from);
    result.and(shutdown)
}

fn send_lines(store: &MessageStore, args: &SendArgs) -> Result<(), CliError> {
    let topic = &args.queue.topic;
    if let Some(queues) = args.create_queues {
        store.create_topic(topic, queues)?;
    }
    let exists = |store: &MessageStore| store.topics().into_iter().find(|(t, _)| t == topic).map(|(_, n)| n);
    if exists(store).is_none() && store.config().auto_create_topics {
        store.create_topic(topic, store.config().default_topic_queue_nums)?;
    }
    let queues = exists(store);
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
    for (number, line) in crate::stdin_lines::StdinLines::read()?.enumerate() {
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
