//! The message-store commands, a file each: `send` (stdin lines to a topic's
//! queues), `receive` (a queue as a consumer group, committing its offset, or
//! peeking), `query` (messages by key), `topics` (topics, queues, dispatch lag
//! and each group's lag, read-only; `topics delete`) and `offsets` (`reset`,
//! `remove`); and what they share: the store's arguments and its opening, a
//! message as JSON.

mod offsets;
mod query;
mod receive;
mod send;
mod topics;

use std::path::PathBuf;

use base64::Engine as _;
use clap::Args;
use message_store::{inspect, MessageStore, MessageStoreConfig};

use crate::{log_config, CliError, FlushArg};

pub use offsets::{offsets, OffsetsCommand};
pub use query::{query, QueryArgs};
pub use receive::{receive, ReceiveArgs};
pub use send::{send, SendArgs};
pub use topics::{topics_command, TopicsCommand};

/// Where the store is and how to open it.
#[derive(Args)]
pub struct StoreArgs {
    /// The store's directory (recovered if it was not closed cleanly; only
    /// `send` creates one).
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
        existing_store(&self.dir)?;
        self.open()
    }
}

/// Refuses a `dir` that is not a message store: missing, without a log
/// (`commitlog/`), or a plain commit log (a log without the store's `config/`
/// or index, which `commitlog stat` and `consume` read).
pub(crate) fn existing_store(dir: &std::path::Path) -> Result<(), CliError> {
    crate::existing_dir(dir)?;
    commitlog::inspect::check_store_dir(dir)
        .map_err(|_| CliError::Input(format!("{} is not a message store (no commitlog/ in it)", dir.display())))?;
    if ["config", "queueindex", "consumequeue"].iter().any(|d| dir.join(d).is_dir()) {
        Ok(())
    } else {
        Err(CliError::Input(format!(
            "{} is a commit log, not a message store (no config/ or queueindex/ in it): `commitlog stat` and `commitlog consume` read it",
            dir.display()
        )))
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

/// Opens the existing store of `store`, runs `work` on it, and shuts it down
/// (reporting the first error).
fn with_store(store: &StoreArgs, work: impl FnOnce(&MessageStore) -> Result<(), CliError>) -> Result<(), CliError> {
    let store = store.open_existing()?;
    let result = work(&store);
    let shutdown = store.shutdown().map_err(CliError::from);
    result.and(shutdown)
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
