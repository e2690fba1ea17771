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

/// The message store with dispatch's naps on (`dispatch_nap_us = 100`):
/// puts leave a busy dispatch to wake by itself.
pub const MESSAGE_STORE_NAPS: QueueSystem = QueueSystem {
    name: "message-store, dispatch naps on (100 µs)",
    ours: false,
    run: |queues, flush, per_producer| run_with(queues, flush, per_producer, |config| config.dispatch_nap_us = 100),
};

/// The message store with dispatch's naps after rounds of tailed queues'
/// puts on (`dispatch_tailed_nap_us = 1000`): puts that index their own
/// messages leave a napping dispatch asleep.
pub const MESSAGE_STORE_TAILED_NAPS: QueueSystem = QueueSystem {
    name: "message-store, tailed naps on (1 ms)",
    ours: false,
    run: |queues, flush, per_producer| {
        run_with(queues, flush, per_producer, |config| config.dispatch_tailed_nap_us = 1000)
    },
};

/// The message store with the key index off (`message_index_enable`): what
/// dispatch's key index costs the producers.
pub const MESSAGE_STORE_NO_KEY_INDEX: QueueSystem = QueueSystem {
    name: "message-store, key index off",
    ours: false,
    run: |queues, flush, per_producer| {
        run_with(queues, flush, per_producer, |config| config.message_index_enable = false)
    },
};

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
    run_with(queues, flush, per_producer, |_| {})
}

fn run_alone(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String> {
    run_with(queues, flush, per_producer, |config| config.write_groups = false)
}

/// A run of the store with its defaults as `change` changes them.
fn run_with(
    queues: u32,
    flush: Flush,
    per_producer: usize,
    change: fn(&mut MessageStoreConfig),
) -> Result<DLine, String> {
    let dir = scratch();
    let before = resources();
    let log = CommitLogConfig::builder()
        .mapped_file_size_commit_log(SEGMENT)
        .flush_disk_type(if flush == Flush::Sync { FlushDiskType::SyncFlush } else { FlushDiskType::AsyncFlush })
        .build()
        .map_err(|e| e.to_string())?;
    let mut config = MessageStoreConfig::new(log);
    config.max_queues_per_topic = config.max_queues_per_topic.max(queues);
    change(&mut config);
    let store = MessageStore::open(dir.path(), config).map_err(|e| e.to_string())?;
    store.create_topic(TOPIC, queues).map_err(|e| e.to_string())?;
    let ours = Ours { store, sync: flush == Flush::Sync };
    let line = drive(&ours, queues, per_producer, before);
    ours.store.shutdown().map_err(|e| e.to_string())?;
    line
}
