//! Property test: any sequence of puts (random queues, bodies, tags, keys,
//! properties, single or batched) reads back exactly as a model of the queues
//! says — every message whole at its dense offset, every filtered read
//! returning the model's matching messages and never passing over one — and
//! the same after a clean reopen and after a power cut that keeps only what was
//! synced (sync flush: everything acknowledged; consume queues and index are
//! rebuilt from the log where they were behind).

mod common;

use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open};
use message_store::{GetRequest, GetStatus, Message, MessageStore, TagFilter};
use proptest::prelude::*;
use store_io::sim::SimStorage;

const QUEUES: u32 = 3;
const TAGS: [&str; 3] = ["a", "b", "c"];

/// One message as the model keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Put {
    queue: u32,
    body: Vec<u8>,
    tag: Option<usize>,
    key: Option<String>,
    property: Option<(String, String)>,
}

impl Put {
    fn message(&self) -> Message {
        let mut m = Message::new("p", self.queue, self.body.clone());
        if let Some(t) = self.tag {
            m = m.with_tags(TAGS[t]);
        }
        if let Some(k) = &self.key {
            m = m.with_key(k.clone());
        }
        if let Some((n, v)) = &self.property {
            m = m.with_property(n.clone(), v.clone());
        }
        m
    }
}

fn put() -> impl Strategy<Value = Put> {
    (
        0..QUEUES,
        prop::collection::vec(any::<u8>(), 0..48),
        prop::option::of(0..TAGS.len()),
        prop::option::of("[a-z]{1,6}"),
        prop::option::of(("[a-z]{1,4}", "[ -~]{0,8}")),
    )
        .prop_map(|(queue, body, tag, key, property)| Put { queue, body, tag, key, property })
}

/// A read: queue, offset, most messages, filter (`None`: all).
fn read() -> impl Strategy<Value = (u32, u64, usize, Option<usize>)> {
    (0..QUEUES, 0u64..24, 1usize..8, prop::option::of(0..TAGS.len()))
}

/// Case count: `PROPTEST_CASES` if set (as `cargo xtask proptest --cases N` does), else 32.
fn proptest_config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct(
            "proptest-regressions/store_model.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// Checks every queue and every read against the model.
fn check(store: &MessageStore, model: &[Vec<Put>], reads: &[(u32, u64, usize, Option<usize>)]) {
    for (queue, puts) in model.iter().enumerate() {
        let queue = queue as u32;
        if !puts.is_empty() {
            assert!(store.wait_for("p", queue, puts.len() as u64 - 1, Duration::from_secs(10)).unwrap().arrived());
        }
        assert_eq!(store.queue_range("p", queue).unwrap(), 0..puts.len() as u64, "queue {queue}");
        let got = store.get_messages(&GetRequest::new("p", queue, 0).max_count(1000).max_bytes(u64::MAX)).unwrap();
        assert_eq!(got.messages.len(), puts.len());
        for (i, (m, p)) in got.messages.iter().zip(puts).enumerate() {
            assert_eq!((m.queue_offset, &m.body[..]), (i as u64, &p.body[..]));
            assert_eq!(m.tags.as_deref(), p.tag.map(|t| TAGS[t]));
            assert_eq!(m.keys, p.key.iter().cloned().collect::<Vec<_>>());
            assert_eq!(m.properties, p.property.iter().cloned().collect::<Vec<_>>());
        }
    }
    for &(queue, offset, max, tag) in reads {
        let puts = &model[queue as usize];
        let end = puts.len() as u64;
        let filter = tag.map_or(TagFilter::All, |t| TagFilter::Tags(vec![TAGS[t].to_string()]));
        let got = store
            .get_messages(
                &GetRequest::new("p", queue, offset).max_count(max).max_bytes(u64::MAX).filter(filter.clone()),
            )
            .unwrap();
        if end == 0 {
            assert_eq!(got.status, GetStatus::NoMessageInQueue);
            continue;
        }
        if offset >= end {
            assert!(got.messages.is_empty());
            assert_eq!(got.next_offset, end);
            continue;
        }
        let matching: Vec<u64> =
            (offset..end).filter(|&i| tag.is_none() || puts[i as usize].tag == tag).take(max).collect();
        let returned: Vec<u64> = got.messages.iter().map(|m| m.queue_offset).collect();
        assert_eq!(returned, matching, "queue {queue} from {offset}, at most {max}, tag {tag:?}");
        // Nothing matching is passed over: what lies below next_offset and was
        // not returned does not match.
        let next = if returned.len() == max { returned[max - 1] + 1 } else { end };
        assert_eq!(got.next_offset, next);
    }
    for puts in model {
        for p in puts.iter().filter(|p| p.key.is_some()) {
            let key = p.key.as_deref().unwrap_or_default();
            let found = store.query_by_key("p", key, 0, u64::MAX, 1000).unwrap();
            assert!(found.iter().any(|m| m.body[..] == p.body[..] && m.queue_id == p.queue), "key {key}");
            assert!(found.iter().all(|m| m.keys.iter().any(|k| k == key)), "another key's message for {key}");
        }
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn prop_queues_read_back_as_the_model_says(
        puts in prop::collection::vec(put(), 0..40),
        batch_every in 0usize..5,
        reads in prop::collection::vec(read(), 1..12),
    ) {
        let sim = SimStorage::new();
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        store.create_topic("p", QUEUES).unwrap();
        let mut model: Vec<Vec<Put>> = vec![Vec::new(); QUEUES as usize];
        let mut i = 0;
        while i < puts.len() {
            // Every so often a batch: the run of following puts to the same queue.
            let run = if batch_every > 0 && i % (batch_every + 1) == 0 {
                puts[i..].iter().take_while(|p| p.queue == puts[i].queue).count().min(4)
            } else {
                1
            };
            if run > 1 {
                let messages: Vec<Message> = puts[i..i + run].iter().map(Put::message).collect();
                let result = store.put_messages(&messages).unwrap();
                prop_assert_eq!(result.first_queue_offset, model[puts[i].queue as usize].len() as u64);
                result.durability.wait().unwrap();
            } else {
                let result = store.put_message(&puts[i].message()).unwrap();
                prop_assert_eq!(result.queue_offset, model[puts[i].queue as usize].len() as u64);
                result.durability.wait().unwrap();
            }
            for p in &puts[i..i + run] {
                model[p.queue as usize].push(p.clone());
            }
            i += run;
        }
        check(&store, &model, &reads);
        // A power cut now, keeping nothing unsynced (consume queues and index
        // may be behind): every put was acknowledged durable, so recovery
        // finds all of it.
        let snapshot = sim.snapshot();
        store.shutdown().unwrap();

        let reopened = open(&sim, config(FlushDiskType::SyncFlush));
        check(&reopened, &model, &reads);
        reopened.shutdown().unwrap();
        let image = snapshot.crash_image(|_| false);
        let recovered = open(&image, config(FlushDiskType::SyncFlush));
        check(&recovered, &model, &reads);
        recovered.shutdown().unwrap();
    }
}
