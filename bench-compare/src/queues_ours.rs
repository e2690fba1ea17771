//! Workload (d) on this project's message store.

use std::time::Duration;

use commitlog::{CommitLogConfig, FlushDiskType};
use message_store::{GetRequest, Message, MessageStore, MessageStoreConfig};

use crate::queues::{drive, resources, wait_until, DLine, Flush, QueueSystem, Target};
use crate::{scratch, SEGMENT};

const TOPIC: &str = "bench";

/// The message store with its defaults (key index on, 512 open queues).
pub const MESSAGE_STORE: QueueSystem = QueueSystem { name: "message-store (this project)", ours: true, run };

/// The message store with write groups off (the former default): every put
/// appends alone.
pub const MESSAGE_STORE_ALONE: QueueSystem =
    QueueSystem { name: "message-store, puts alone (write groups off)", ours: false, run: run_alone };

struct Ours {
    store: MessageStore,
    sync: bool,
}

impl Target for Ours {
    fn put(&self, _producer: usize, queue: u32, body: &[u8]) -> Result<u64, String> {
        let put = self.store.put_message(&Message::new(TOPIC, queue, body.to_vec())).map_err(|e| e.to_string())?;
        if self.sync {
            put.durability.wait().map_err(|e| e.to_string())?;
        }
        Ok(put.queue_offset)
    }

    fn dispatches(&self) -> bool {
        true
    }

    fn consume(&self, queue: u32, offset: u64) -> Result<(), String> {
        let err = |e: message_store::StoreError| e.to_string();
        if !self.store.wait_for(TOPIC, queue, offset, Duration::from_secs(60)).map_err(err)?.arrived() {
            return Err(format!("queue {queue} offset {offset} not dispatched within 60 s"));
        }
        let got = self
            .store
            .get_messages(&GetRequest::new(TOPIC, queue, offset).max_count(1).max_bytes(u64::MAX))
            .map_err(err)?;
        if got.messages.len() != 1 {
            return Err(format!("queue {queue} offset {offset}: {:?}", got.status));
        }
        Ok(())
    }

    fn tails(&self) -> bool {
        true
    }

    fn tail(&self, queue: u32, offset: u64, max: usize) -> Result<u64, String> {
        let err = |e: message_store::StoreError| e.to_string();
        if !self.store.wait_for(TOPIC, queue, offset, Duration::from_secs(60)).map_err(err)?.arrived() {
            return Err(format!("queue {queue} offset {offset} not dispatched within 60 s"));
        }
        let got = self
            .store
            .get_messages(&GetRequest::new(TOPIC, queue, offset).max_count(max).max_bytes(u64::MAX))
            .map_err(err)?;
        match got.messages.first() {
            Some(m) if m.queue_offset == offset => Ok(got.messages.len() as u64),
            _ => Err(format!("queue {queue} offset {offset}: {:?}", got.status)),
        }
    }

    fn drain(&self) -> Result<(), String> {
        wait_until(Duration::from_secs(300), || {
            let stats = self.store.stats();
            if let Some(e) = stats.dispatch_error {
                return Err(e);
            }
            Ok(stats.dispatch_point >= stats.log_max_offset)
        })
    }
}

fn run(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String> {
    run_with(queues, flush, per_producer, true)
}

fn run_alone(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String> {
    run_with(queues, flush, per_producer, false)
}

fn run_with(queues: u32, flush: Flush, per_producer: usize, write_groups: bool) -> Result<DLine, String> {
    let dir = scratch();
    let before = resources();
    let log = CommitLogConfig::builder()
        .mapped_file_size_commit_log(SEGMENT)
        .flush_disk_type(if flush == Flush::Sync { FlushDiskType::SyncFlush } else { FlushDiskType::AsyncFlush })
        .build()
        .map_err(|e| e.to_string())?;
    let mut config = MessageStoreConfig::new(log);
    config.max_queues_per_topic = config.max_queues_per_topic.max(queues);
    // `BENCH_NO_KEY_INDEX=1`: the key index off (`message_index_enable`), to
    // see what dispatch costs the producers without it.
    config.message_index_enable = std::env::var_os("BENCH_NO_KEY_INDEX").is_none();
    config.write_groups = write_groups;
    let store = MessageStore::open(dir.path(), config).map_err(|e| e.to_string())?;
    store.create_topic(TOPIC, queues).map_err(|e| e.to_string())?;
    let ours = Ours { store, sync: flush == Flush::Sync };
    let line = drive(&ours, queues, per_producer, before);
    ours.store.shutdown().map_err(|e| e.to_string())?;
    line
}
