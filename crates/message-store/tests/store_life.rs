//! Property test of the whole store's life against a plain model: random
//! sequences of topic creation and deletion (and creation again under the
//! same name), puts (single, batched, and batches that fill log segments),
//! reads, long-poll registrations, commits (single, batched, and bursts that
//! make the consumer-offsets journal compact), removals and resets of offsets,
//! every group's offsets in a topic cleaned,
//! `clean_unused_topics`, seals of the queue index, the log's front moving,
//! flushes, clean reopens and power cuts that keep only what was synced —
//! under sync and async flush, with the log's write-buffer pool on and off.
//!
//! After every step the whole store is checked against the model:
//!
//! - the store opens (after a clean shutdown and after a power cut), and its
//!   `open_report` shows no repair of something it had made durable;
//! - the topics are the model's, each queue's range ends at the model's end
//!   and starts no later than its first message the log still holds; every
//!   message the log still holds reads back at its offset, with its body and
//!   key, and `query_by_key` finds exactly the topic's messages with the key;
//! - a deleted topic's queues, messages, keys and offsets are never seen
//!   again, and a topic made again under its name starts empty;
//! - the committed offsets are exactly the model's (a commit is durable when
//!   it returns), each no further than its queue's end.
//!
//! Under sync flush every put whose durability handle resolved is durable.
//! Under async flush only what the log had flushed before the power cut is
//! (plus what a flush, a clean shutdown or the log's cleaning covered): the
//! model keeps, of each queue, the prefix the reopened store holds, and checks
//! it is a prefix no shorter than the durable messages and no longer than what
//! was put; committed offsets past their queue's new end are lowered to it.
//! Every message's body starts with a serial number, so a message of a deleted
//! topic can never pass for one of the topic made again under its name.

#[path = "store_life/model.rs"]
mod model;

use commitlog::FlushDiskType;
use model::{Op, Reset, GROUPS, KEYS, QUEUES, TOPICS};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let topic = || 0..TOPICS.len();
    let group = || 0..GROUPS.len();
    let queue = || 0..QUEUES;
    prop_oneof![
        3 => topic().prop_map(Op::Create),
        2 => topic().prop_map(Op::Delete),
        1 => (0u8..4).prop_map(Op::CleanUnused),
        8 => (topic(), queue(), prop::option::of(0..KEYS.len()), 0usize..64)
            .prop_map(|(topic, queue, key, len)| Op::Put { topic, queue, key, len }),
        3 => (topic(), queue(), 1usize..5, prop::option::of(0..KEYS.len()))
            .prop_map(|(topic, queue, n, key)| Op::PutBatch { topic, queue, n, key }),
        5 => (topic(), queue()).prop_map(|(topic, queue)| Op::Fill { topic, queue }),
        2 => (topic(), queue(), any::<u64>(), 1usize..6)
            .prop_map(|(topic, queue, at, max)| Op::Get { topic, queue, at, max }),
        1 => (topic(), queue()).prop_map(|(topic, queue)| Op::Tail { topic, queue }),
        4 => (group(), topic(), queue(), any::<u64>())
            .prop_map(|(group, topic, queue, at)| Op::Commit { group, topic, queue, at }),
        2 => (group(), prop::collection::vec((topic(), queue(), any::<u64>()), 1..4))
            .prop_map(|(group, commits)| Op::CommitMany { group, commits }),
        2 => (group(), topic(), queue()).prop_map(|(group, topic, queue)| Op::CommitBurst { group, topic, queue }),
        2 => (group(), prop::option::of(topic())).prop_map(|(group, topic)| Op::Remove { group, topic }),
        2 => (
            group(),
            topic(),
            prop::option::of(queue()),
            prop_oneof![Just(Reset::Earliest), Just(Reset::Latest), (0u64..40).prop_map(Reset::Offset)],
        )
            .prop_map(|(group, topic, queue, to)| Op::Reset { group, topic, queue, to }),
        1 => Just(Op::SealIndex),
        3 => Just(Op::MoveFront),
        1 => Just(Op::Flush),
        2 => Just(Op::Reopen),
        3 => Just(Op::PowerLoss),
        1 => topic().prop_map(Op::CleanOffsets),
    ]
}

/// Case count: `PROPTEST_CASES` if set (as `cargo xtask proptest --cases N` does), else 48.
fn proptest_config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct(
            "proptest-regressions/store_life.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn prop_the_store_lives_as_the_model_says(
        sync in any::<bool>(),
        pool in any::<bool>(),
        ops in prop::collection::vec(op(), 1..44),
    ) {
        let flush = if sync { FlushDiskType::SyncFlush } else { FlushDiskType::AsyncFlush };
        model::run(&model::config(flush, pool), &ops);
    }
}
