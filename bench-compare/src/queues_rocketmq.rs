//! Workload (d) on rocketmq-store's own message store (`LocalFileMessageStore`,
//! the Rust port of DefaultMessageStore with its ConsumeQueue, dispatch and
//! index), opened through its `StoreFactory` on a runtime of its own, every
//! producer putting through its shared write path.
//!
//! It has no long polling of its own (RocketMQ keeps that in the broker's
//! PullRequestHoldService), so its consumer here polls the queue's end every
//! 20 µs and then reads the message. Micro-batching of appends is off (see
//! `run`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cheetah_string::CheetahString;
use dashmap::DashMap;
use rocketmq_model::common::message::message_ext_broker_inner::MessageExtBrokerInner;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};
use rocketmq_store::{
    BrokerReadStore, BrokerStorePort, FlushDiskType, MessageStoreConfig, PutMessageStatus, StoreFactory,
    StoreFactoryConfig, StorePorts, StoreRuntimeConfig, StoreTelemetry,
};

use crate::queues::{drive, poll_until, resources, wait_until, DLine, Flush, QueueSystem, Target};
use crate::{scratch, SEGMENT};

/// rocketmq-store's message store.
pub const LOCAL_FILE_MESSAGE_STORE: QueueSystem =
    QueueSystem { name: "rocketmq-store 1.0.0 (LocalFileMessageStore)", ours: false, run };

/// Consume-queue file size, the same as this project's default (4,096
/// entries of 20 bytes; RocketMQ's 300,000 would take 6 MB per queue).
const CONSUME_QUEUE_FILE: usize = 4_096 * 20;

fn runtime() -> &'static RuntimeOwner {
    static OWNER: std::sync::OnceLock<RuntimeOwner> = std::sync::OnceLock::new();
    OWNER.get_or_init(|| {
        RuntimeOwner::plan(RuntimeConfig::server_default("rocketmq-store-bench"))
            .expect("runtime configuration")
            .build()
            .expect("runtime")
    })
}

struct Rmq {
    store: StorePorts,
    topic: CheetahString,
}

impl Target for Rmq {
    fn put(&self, _producer: usize, queue: u32, body: &[u8]) -> Result<u64, String> {
        let mut msg = MessageExtBrokerInner::default();
        msg.set_topic(self.topic.clone());
        msg.message_ext_inner.set_queue_id(queue as i32);
        msg.set_body(Bytes::copy_from_slice(body));
        let result = runtime().block_on(self.store.put_message_shared(msg));
        if result.put_message_status() != PutMessageStatus::PutOk {
            return Err(format!("put: {:?}", result.put_message_status()));
        }
        let offset = result.append_message_result().map_or(-1, |r| r.logics_offset);
        u64::try_from(offset).map_err(|_| format!("put returned queue offset {offset}"))
    }

    fn dispatches(&self) -> bool {
        true
    }

    fn consume(&self, queue: u32, offset: u64) -> Result<(), String> {
        let q = queue as i32;
        poll_until(
            || Ok(self.store.get_max_offset_in_queue(&self.topic, q) > offset as i64),
            || format!("queue {queue} offset {offset} (dispatched)"),
        )?;
        let group = CheetahString::from_static_str("bench");
        let got = runtime().block_on(self.store.get_message(&group, &self.topic, q, offset as i64, 1, None));
        match got {
            Some(r) if r.message_count() == 1 => Ok(()),
            Some(r) => Err(format!("queue {queue} offset {offset}: {:?}", r.status())),
            None => Err(format!("queue {queue} offset {offset}: no result")),
        }
    }

    fn drain(&self) -> Result<(), String> {
        // Its own count of the log bytes not yet dispatched: one call, where
        // summing 50,000 queue ends took the CPU its dispatcher needed.
        wait_until(Duration::from_secs(300), || Ok(self.store.dispatch_behind_bytes() <= 0))
    }
}

fn run(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String> {
    let dir = scratch();
    let before = resources();
    let config = MessageStoreConfig {
        store_path_root_dir: CheetahString::from_string(dir.path().to_string_lossy().into_owned()),
        mapped_file_size_commit_log: SEGMENT,
        mapped_file_size_consume_queue: CONSUME_QUEUE_FILE,
        flush_disk_type: if flush == Flush::Sync { FlushDiskType::SyncFlush } else { FlushDiskType::AsyncFlush },
        timer_wheel_enable: false,
        // Its default micro-batching waits up to 50 µs for 32 puts to gather;
        // 4 producers never fill a batch, and the wait on its runtime's 1 ms
        // timer made each put take 1.3 ms (3.1 k messages/s, async, 1 queue,
        // against 45 k without): off, as the better of its two set-ups here.
        commit_log_micro_batch_enabled: false,
        ..MessageStoreConfig::default()
    };
    let factory = StoreFactoryConfig::try_new(
        Arc::new(config),
        Arc::new(StoreRuntimeConfig::default()),
        Arc::new(DashMap::new()),
        None,
        false,
        StoreTelemetry::noop(),
    )
    .ok_or("rocketmq-store refused its configuration")?;
    let context = runtime().root_context().component("bench");
    let opened = StoreFactory::open(factory, context).map_err(|e| format!("open: {e:?}"))?;
    let (mut store, _timer) = opened.into_parts();
    runtime().block_on(async {
        store.init().await.map_err(|e| format!("init: {e:?}"))?;
        if !store.load().await {
            return Err("load failed".to_string());
        }
        store.start().await.map_err(|e| format!("start: {e:?}"))
    })?;
    let rmq = Rmq { store, topic: CheetahString::from_static_str("bench") };
    let line = drive(&rmq, queues, per_producer, before);
    let mut store = rmq.store;
    runtime().block_on(store.shutdown());
    drop(store);
    // Its files close in the background after `shutdown` returns: wait for
    // them, so the next system in this process starts with the same handles
    // free (once, 16,000 left open made raft-engine's next open fail).
    let _ = wait_until(Duration::from_secs(120), || Ok(resources().1 <= before.1 + 64));
    line
}
