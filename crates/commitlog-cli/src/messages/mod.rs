//! The message-store commands, a file each: `send` (stdin lines to a topic's
//! queues), `receive` (a queue as a consumer group, committing its offset, or
//! peeking), `query` (messages by key), `topics` (topics, queues, dispatch lag
//! and each group's lag, read-only; `topics delete`) and `offsets` (`reset`,
//! `remove`); and what they share: the store's arguments and its opening, a
//! message as JSON.

mod groups;
mod offsets;
mod query;
mod receive;
mod send;
mod topics;

use std::path::PathBuf;

use base64::Engine as _;
use clap::Args;
use message_store::{inspect, MessageStore, MessageStoreConfig};

use commitlog::FlushDiskType;

use crate::{io, log_config, CliError, FlushArg};

pub use groups::{groups, GroupsCommand};
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
    /// The store's configuration, a TOML file of `MessageStoreConfig` (every
    /// key optional, the log's under `[log]`; docs/operations.md shows one).
    /// An existing store keeps the shapes its files show (segment size, key
    /// index, segment directories).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// How `send` writes: options of the writing command only.
#[derive(Args)]
pub struct WriteArgs {
    /// When a message counts as acknowledged (default: the configuration's
    /// `log.flush_disk_type`, else sync).
    #[arg(long, value_enum)]
    flush: Option<FlushArg>,
    /// Segment size for a new store (an existing one keeps its own).
    #[arg(long, value_name = "BYTES", value_parser = crate::args::segment_size)]
    segment_size: Option<usize>,
}

impl StoreArgs {
    /// Opens the store, which must exist: a command that reads never creates one.
    fn open_existing(&self) -> Result<MessageStore, CliError> {
        existing_store(&self.dir)?;
        open_store(&self.dir, self.config.as_deref(), None, None)
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

/// Opens the message store in `dir` with the configuration in `file` (else
/// the defaults), `flush` and `segment_size` over it: a new one with those
/// segments, an existing one with its own segment size and segment
/// directories, and the key index's shape and the queue counts its files
/// show (a program may have configured others than the defaults; a file of
/// an unexpected size would be taken for damage).
pub(crate) fn open_store(
    dir: &std::path::Path,
    file: Option<&std::path::Path>,
    flush: Option<FlushArg>,
    segment_size: Option<usize>,
) -> Result<MessageStore, CliError> {
    let from_file = file.map(read_config).transpose()?;
    let flush = flush.unwrap_or(match from_file.as_ref().map(|c| c.log.flush_disk_type) {
        Some(FlushDiskType::AsyncFlush) => FlushArg::Async,
        _ => FlushArg::Sync,
    });
    // The file's segment size and directories shape a new store only: an
    // existing one keeps its own (a flag that disagrees is refused).
    let new_store = commitlog::inspect::check_store_dir(dir).is_err();
    let file_log = from_file.as_ref().map(|c| &c.log).filter(|_| new_store);
    let segment_size = segment_size.or(file_log.map(|log| log.mapped_file_size_commit_log));
    let paths = crate::SegmentPathArgs {
        store_path_commit_log: file_log.map(|log| log.store_path_commit_log.clone()).unwrap_or_default(),
        read_only_commit_log_store_paths: file_log
            .map(|log| log.read_only_commit_log_store_paths.clone())
            .unwrap_or_default(),
    };
    let shapes = log_config(dir, flush, false, segment_size, &paths)?;
    let config = match from_file {
        None => MessageStoreConfig::new(shapes),
        Some(mut config) => {
            // The file's knobs, with the shapes the directory has (or the
            // flags give) and records that fit its segments; the file's
            // message limits kept where they fit them.
            config.log.mapped_file_size_commit_log = shapes.mapped_file_size_commit_log;
            config.log.store_path_commit_log = shapes.store_path_commit_log;
            config.log.read_only_commit_log_store_paths = shapes.read_only_commit_log_store_paths;
            config.log.flush_disk_type = shapes.flush_disk_type;
            config.log.max_message_size = config.log.max_message_size.min(shapes.max_message_size);
            let need = config.limits.max_body_size.saturating_add(config.limits.max_properties_size);
            if need > config.log.max_message_size {
                config.limits = message_store::MessageLimits::within(config.log.max_message_size);
            }
            config
        }
    };
    let config = if dir.join("config").is_dir() || dir.join("consumequeue").is_dir() {
        inspect::with_existing_shapes(dir, config)?
    } else {
        config
    };
    Ok(MessageStore::open(dir, config)?)
}

/// Reads a configuration file (TOML of `MessageStoreConfig`).
fn read_config(path: &std::path::Path) -> Result<MessageStoreConfig, CliError> {
    let text = std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    let config: MessageStoreConfig =
        toml::from_str(&text).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
    config.validate().map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
    Ok(config)
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
