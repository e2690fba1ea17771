//! The whole store's life against a plain model (see `store_life.rs`): the
//! steps, the model, and the checks after every step. Shared by the property
//! test and the crash suite's `store-life` layer (which runs it from seeds,
//! with the planted bugs it must catch); a failed check panics with what it
//! saw.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use commitlog::{FlushDiskType, Storage};
use message_store::{
    GetRequest, GetStatus, Message, MessageStore, MessageStoreConfig, OpenReport, ResetTo, StoreError, Waited,
};
use store_io::sim::SimStorage;

#[path = "../common/mod.rs"]
mod common;

use common::ROOT;

/// The store's configuration: [`common::config`] (64 KiB log segments, a
/// 64 KiB offsets journal, a small key index, fast flushes of the derived
/// data) with the log's write-buffer pool on or off.
pub(crate) fn config(flush: FlushDiskType, pool: bool) -> MessageStoreConfig {
    let mut config = common::config(flush);
    config.log.transient_store_pool_enable = pool;
    config.log.transient_store_pool_size = 4;
    config
}

/// Topic names: few, so that topics are deleted and made again under a name.
pub(crate) const TOPICS: [&str; 2] = ["t0", "t1"];
/// Queues of every topic.
pub(crate) const QUEUES: u32 = 2;
/// Consumer groups.
pub(crate) const GROUPS: [&str; 2] = ["g0", "g1"];
/// Message keys: few, so that a key is shared by the incarnations of a topic.
pub(crate) const KEYS: [&str; 3] = ["k0", "k1", "k2"];
/// Messages of one [`Op::Fill`]: with [`FILL_BODY`], three quarters of a 64 KiB
/// log segment.
const FILL_MESSAGES: usize = 24;
/// Body bytes of each message of a fill.
const FILL_BODY: usize = 2000;
/// Commits of one [`Op::CommitBurst`]: each changes the offset and costs a
/// 29-byte journal record, so every burst overflows a 64 KiB journal (the
/// offsets are compacted into the next generation in its midst).
const BURST: usize = 2400;
/// Bound of every wait for dispatch (never reached unless dispatch is stuck).
const WAIT: Duration = Duration::from_secs(5);

/// One step of a store's life. Topic, group and key fields index [`TOPICS`],
/// [`GROUPS`] and [`KEYS`]; `at` fields choose an offset relative to the
/// queue's end when the step runs (see [`offset_at`]).
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// `create_topic` (no change if it exists).
    Create(usize),
    /// `delete_topic`.
    Delete(usize),
    /// `clean_unused_topics`, retaining the topics whose bit is set.
    CleanUnused(u8),
    /// `put_message` of a body of `len` bytes after the serial.
    Put { topic: usize, queue: u32, key: Option<usize>, len: usize },
    /// `put_messages` of `n` messages, each with `key`.
    PutBatch { topic: usize, queue: u32, n: usize, key: Option<usize> },
    /// `put_messages` of [`FILL_MESSAGES`] large messages without keys: the
    /// log fills segments, so that its front can move.
    Fill { topic: usize, queue: u32 },
    /// `get_messages` of at most `max` from an offset chosen by `at`.
    Get { topic: usize, queue: u32, at: u64, max: usize },
    /// `wait_for` the queue's end with no timeout: the queue becomes tailed
    /// (under async flush its puts then index their own messages).
    Tail { topic: usize, queue: u32 },
    /// `commit_offset`.
    Commit { group: usize, topic: usize, queue: u32, at: u64 },
    /// `commit_offsets` of several (all or none taken).
    CommitMany { group: usize, commits: Vec<(usize, u32, u64)> },
    /// [`BURST`] commits in one `commit_offsets`, alternating between the
    /// queue's end and the offset before it, ending at the end.
    CommitBurst { group: usize, topic: usize, queue: u32 },
    /// `remove_consumer_offsets` in one topic or all.
    Remove { group: usize, topic: Option<usize> },
    /// `reset_consumer_offsets` of one queue or all.
    Reset { group: usize, topic: usize, queue: Option<u32>, to: Reset },
    /// `seal_index`.
    SealIndex,
    /// The log's cleaning: `delete_segments_before` the log's end.
    MoveFront,
    /// `log().flush_all()`: everything durable.
    Flush,
    /// A clean shutdown, then open again.
    Reopen,
    /// A power cut keeping only what was synced, then open.
    PowerLoss,
    /// `clean_offsets_by_topic`: every group's offsets in the topic.
    CleanOffsets(usize),
}

/// Where [`Op::Reset`] moves offsets (a time is not modelled: store times
/// come from the clock).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reset {
    Earliest,
    Latest,
    Offset(u64),
}

/// One message as the model keeps it.
#[derive(Debug, Clone)]
struct Msg {
    /// Its serial number (the first 8 bytes of its body): unique in a run.
    serial: u64,
    body: Vec<u8>,
    key: Option<usize>,
    log_offset: u64,
    /// Known durable: a power cut cannot take it back.
    durable: bool,
}

/// A model of the store: the live topics (each queue's messages, dense from
/// offset 0), the committed offsets, and what is known of the log.
#[derive(Debug)]
struct Model {
    flush: FlushDiskType,
    /// Live topics: each queue's messages, at their offsets.
    topics: BTreeMap<usize, Vec<Vec<Msg>>>,
    /// Committed offsets by (group, topic, queue).
    offsets: BTreeMap<(usize, usize, u32), u64>,
    /// The log's first offset when last seen: messages below it are expired.
    front: u64,
    /// The next message's serial number.
    serial: u64,
}

impl Model {
    fn new(flush: FlushDiskType) -> Self {
        Model { flush, topics: BTreeMap::new(), offsets: BTreeMap::new(), front: 0, serial: 0 }
    }

    fn sync(&self) -> bool {
        self.flush == FlushDiskType::SyncFlush
    }

    /// The queue's messages, if its topic is live.
    fn queue(&self, topic: usize, queue: u32) -> Option<&Vec<Msg>> {
        self.topics.get(&topic).map(|q| &q[queue as usize])
    }

    /// The queue's end (0 for a topic that is not live).
    fn end(&self, topic: usize, queue: u32) -> u64 {
        self.queue(topic, queue).map_or(0, |m| m.len() as u64)
    }

    /// A new message's body: its serial, then `len` bytes derived from it.
    fn body(&mut self, len: usize) -> (u64, Vec<u8>) {
        let serial = self.serial;
        self.serial += 1;
        let mut body = serial.to_le_bytes().to_vec();
        body.extend((0..len).map(|i| (serial as usize).wrapping_mul(31).wrapping_add(i) as u8));
        (serial, body)
    }

    /// Every message now durable (a flush of the whole log, a clean shutdown).
    fn all_durable(&mut self) {
        for queue in self.topics.values_mut().flatten() {
            queue.iter_mut().for_each(|m| m.durable = true);
        }
    }

    /// Removes `topic` and every group's offsets in it.
    fn delete(&mut self, topic: usize) -> bool {
        self.offsets.retain(|&(_, t, _), _| t != topic);
        self.topics.remove(&topic).is_some()
    }
}

/// The offset `at` chooses in a queue whose end is `end`: anywhere from 0 to
/// one past the end (beyond the queue, to be refused).
fn offset_at(at: u64, end: u64) -> u64 {
    at % (end + 2)
}

/// Opens the store on `sim`; failing to open is a failure of the test.
fn open(sim: &SimStorage, config: &MessageStoreConfig) -> MessageStore {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    match MessageStore::open_with_storage(ROOT, config.clone(), storage) {
        Ok(store) => store,
        Err(err) => panic!("the store does not open: {err}"),
    }
}

/// Checks what an open after a clean shutdown or a power cut repaired: the
/// registry, the checkpoint and every sealed run of the queue index are made
/// durable (replaced atomically or synced before they count), so none needs
/// repair; offsets are lowered only where `lowered` says.
fn check_open_report(report: &OpenReport, lowered: usize) {
    assert_eq!(report.rebuilt_all, None, "{report:?}");
    assert!(!report.topics_recovered, "the topic registry needed recovery: {report:?}");
    assert!(report.index_runs_dropped.is_empty(), "sealed runs dropped: {report:?}");
    assert!(!report.index_rebuilt, "the key index was rebuilt: {report:?}");
    assert_eq!(report.offsets_lowered, lowered, "offsets lowered: {report:?}");
}

/// The messages of `topic`'s queue read from `from` to its end.
fn read_all(store: &MessageStore, topic: &str, queue: u32, from: u64) -> Vec<message_store::StoredMessage> {
    let mut offset = from;
    let mut out = Vec::new();
    loop {
        let got = store
            .get_messages(&GetRequest::new(topic, queue, offset).max_count(64).max_bytes(u64::MAX))
            .unwrap_or_else(|err| panic!("{topic}/{queue} from {offset}: {err}"));
        if got.messages.is_empty() && got.next_offset == offset {
            return out;
        }
        assert!(got.next_offset > offset, "{topic}/{queue}: next offset {} from {offset}", got.next_offset);
        offset = got.next_offset;
        out.extend(got.messages);
    }
}

/// Checks the whole store against the model.
fn check(store: &MessageStore, model: &mut Model) {
    let front = store.log().min_offset();
    assert!(front >= model.front, "the log's front moved back from {} to {front}", model.front);
    model.front = front;
    let topics: Vec<(String, u32)> = model.topics.keys().map(|&t| (TOPICS[t].to_string(), QUEUES)).collect();
    let mut listed = store.topics();
    listed.sort();
    assert_eq!(listed, topics, "topics");
    // Dispatch what the log holds (up to its flushed end under sync flush,
    // where every put waited for it); a queue still short waits for it.
    store.dispatch_now().unwrap();
    for (t, name) in TOPICS.iter().enumerate() {
        let Some(queues) = model.topics.get(&t) else {
            assert!(store.queue_range(name, 0).is_err(), "deleted topic {name} has a queue");
            for key in KEYS {
                let found = store.query_by_key(name, key, 0, u64::MAX, 1000);
                assert!(
                    matches!(found, Err(StoreError::UnknownTopic { .. })),
                    "key {key} of deleted topic {name} finds {:?}",
                    found.map(|f| serials(&f))
                );
            }
            continue;
        };
        for (queue, msgs) in queues.iter().enumerate() {
            let queue = queue as u32;
            let end = msgs.len() as u64;
            if end > 0 && store.queue_range(name, queue).unwrap().end < end {
                assert_eq!(store.wait_for(name, queue, end - 1, WAIT).unwrap(), Waited::Arrived, "{name}/{queue}");
            }
            let range = store.queue_range(name, queue).unwrap();
            assert_eq!(range.end, end, "{name}/{queue}: the queue's end");
            let live = msgs.iter().position(|m| m.log_offset >= front).unwrap_or(msgs.len()) as u64;
            assert!(
                range.start <= live,
                "{name}/{queue}: first offset {} past the first live message {live}",
                range.start
            );
            let got = read_all(store, name, queue, range.start);
            let want: Vec<&Msg> = msgs[range.start as usize..].iter().filter(|m| m.log_offset >= front).collect();
            let got_serials: Vec<u64> = got.iter().map(serial).collect();
            let want_serials: Vec<u64> = want.iter().map(|m| m.serial).collect();
            assert_eq!(got_serials, want_serials, "{name}/{queue}: messages read from {}", range.start);
            for (m, w) in got.iter().zip(&want) {
                let offset = msgs.iter().position(|x| x.serial == w.serial).unwrap() as u64;
                assert_eq!((m.topic.as_str(), m.queue_id, m.queue_offset), (*name, queue, offset));
                assert_eq!(&m.body[..], &w.body[..], "{name}/{queue} at {offset}");
                assert_eq!(m.keys, w.key.iter().map(|&k| KEYS[k].to_string()).collect::<Vec<_>>());
            }
        }
        for (k, key) in KEYS.iter().enumerate() {
            let found = store.query_by_key(name, key, 0, u64::MAX, 1000).unwrap();
            let mut got: Vec<u64> = found.iter().map(serial).collect();
            got.sort_unstable();
            let mut want: Vec<u64> = queues
                .iter()
                .flatten()
                .filter(|m| m.key == Some(k) && m.log_offset >= front)
                .map(|m| m.serial)
                .collect();
            want.sort_unstable();
            assert_eq!(got, want, "query_by_key({name}, {key})");
            for m in &found {
                let at = queues[m.queue_id as usize].iter().position(|x| x.serial == serial(m));
                assert_eq!(at, Some(m.queue_offset as usize), "{name}, {key}: a message at the wrong offset");
            }
        }
    }
    let mut committed: Vec<(String, String, u32, u64)> =
        store.committed_offsets().into_iter().map(|c| (c.group, c.topic, c.queue_id, c.offset)).collect();
    committed.sort();
    let want: Vec<(String, String, u32, u64)> =
        model.offsets.iter().map(|(&(g, t, q), &o)| (GROUPS[g].to_string(), TOPICS[t].to_string(), q, o)).collect();
    assert_eq!(committed, want, "committed offsets");
    for (&(g, t, q), &o) in &model.offsets {
        assert!(o <= model.end(t, q), "{}'s offset {o} in {}/{q} past its end", GROUPS[g], TOPICS[t]);
    }
}

/// A stored message's serial number.
fn serial(m: &message_store::StoredMessage) -> u64 {
    u64::from_le_bytes(m.body[..8].try_into().unwrap())
}

/// The serial numbers of `found`.
fn serials(found: &[message_store::StoredMessage]) -> Vec<u64> {
    found.iter().map(serial).collect()
}

/// After a power cut: learns from the reopened store which prefix of each
/// queue survived (all of it under sync flush), checks it keeps every durable
/// message and nothing that was never put, and lowers the model's offsets
/// past their queue's new end, as the open must have. Returns how many were
/// lowered.
fn learn_after_power_loss(store: &MessageStore, model: &mut Model) -> usize {
    let sync = model.sync();
    for (&t, queues) in model.topics.iter_mut() {
        for (queue, msgs) in queues.iter_mut().enumerate() {
            let name = TOPICS[t];
            let end = store.queue_range(name, queue as u32).unwrap().end;
            let durable = msgs.iter().rposition(|m| m.durable).map_or(0, |i| i + 1) as u64;
            let put = msgs.len() as u64;
            if sync {
                assert_eq!(end, put, "{name}/{queue}: sync flush, every put was durable");
            }
            assert!(end >= durable, "{name}/{queue}: end {end} below the durable messages' {durable}");
            assert!(end <= put, "{name}/{queue}: end {end} past the {put} messages put");
            msgs.truncate(end as usize);
        }
    }
    let mut lowered = 0;
    let ends: BTreeMap<(usize, u32), u64> = model
        .topics
        .iter()
        .flat_map(|(&t, qs)| qs.iter().enumerate().map(move |(q, m)| ((t, q as u32), m.len() as u64)))
        .collect();
    for (&(_, t, q), offset) in model.offsets.iter_mut() {
        let end = ends[&(t, q)];
        if *offset > end {
            *offset = end;
            lowered += 1;
        }
    }
    lowered
}

/// Runs `ops` on a new store of `config` on a simulated disk, checking it
/// against the model after each; panics at the first check that fails.
pub(crate) fn run(config: &MessageStoreConfig, ops: &[Op]) {
    let (config, flush) = (config.clone(), config.log.flush_disk_type);
    let mut sim = SimStorage::new();
    let mut store = open(&sim, &config);
    let mut model = Model::new(flush);
    // Both topics live at the start, so that most steps act on one.
    for t in 0..TOPICS.len() {
        apply(&mut sim, &mut store, &config, &mut model, &Op::Create(t));
    }
    for op in ops {
        apply(&mut sim, &mut store, &config, &mut model, op);
        check(&store, &mut model);
    }
    store.shutdown().unwrap();
}

/// Runs one step on the store and the model.
fn apply(sim: &mut SimStorage, store: &mut MessageStore, config: &MessageStoreConfig, model: &mut Model, op: &Op) {
    match *op {
        Op::Create(t) => {
            store.create_topic(TOPICS[t], QUEUES).unwrap();
            model.topics.entry(t).or_insert_with(|| vec![Vec::new(); QUEUES as usize]);
        }
        Op::Delete(t) => {
            assert_eq!(store.delete_topic(TOPICS[t]).unwrap(), model.delete(t), "delete_topic({})", TOPICS[t]);
        }
        Op::CleanUnused(mask) => {
            let retain: Vec<&str> = (0..TOPICS.len()).filter(|t| mask & (1 << t) != 0).map(|t| TOPICS[t]).collect();
            let mut deleted = store.clean_unused_topics(&retain).unwrap();
            deleted.sort();
            let gone: Vec<usize> = model.topics.keys().copied().filter(|&t| mask & (1 << t) == 0).collect();
            let want: Vec<String> = gone.iter().map(|&t| TOPICS[t].to_string()).collect();
            gone.into_iter().for_each(|t| {
                model.delete(t);
            });
            assert_eq!(deleted, want, "clean_unused_topics({retain:?})");
        }
        Op::Put { topic, queue, key, len } => {
            let (serial, body) = model.body(len);
            let mut message = Message::new(TOPICS[topic], queue, body.clone());
            if let Some(k) = key {
                message = message.with_key(KEYS[k]);
            }
            let result = store.put_message(&message);
            let Some(end) = model.queue(topic, queue).map(|m| m.len() as u64) else {
                assert!(result.is_err(), "a put to deleted topic {} taken", TOPICS[topic]);
                return;
            };
            let result = result.unwrap();
            assert_eq!(result.queue_offset, end, "put to {}/{queue}", TOPICS[topic]);
            result.durability.wait().unwrap();
            let durable = model.sync();
            let msg = Msg { serial, body, key, log_offset: result.log_offset, durable };
            model.topics.get_mut(&topic).unwrap()[queue as usize].push(msg);
        }
        Op::PutBatch { topic, queue, n, key } => put_batch(store, model, topic, queue, n, key, 0..8),
        Op::Fill { topic, queue } => {
            put_batch(store, model, topic, queue, FILL_MESSAGES, None, FILL_BODY..FILL_BODY + 1);
        }
        Op::Get { topic, queue, at, max } => get(store, model, topic, queue, at, max),
        Op::Tail { topic, queue } => {
            let waited = store.wait_for(TOPICS[topic], queue, model.end(topic, queue), Duration::ZERO);
            match model.queue(topic, queue) {
                Some(_) => assert_eq!(waited.unwrap(), Waited::TimedOut),
                None => assert!(waited.is_err(), "deleted topic {} waited on", TOPICS[topic]),
            }
        }
        Op::Commit { group, topic, queue, at } => {
            let end = model.end(topic, queue);
            let offset = offset_at(at, end);
            let result = store.commit_offset(GROUPS[group], TOPICS[topic], queue, offset);
            if model.queue(topic, queue).is_some() && offset <= end {
                result.unwrap();
                model.offsets.insert((group, topic, queue), offset);
            } else {
                assert!(result.is_err(), "commit of {offset} in {}/{queue} (end {end}) taken", TOPICS[topic]);
            }
        }
        Op::CommitMany { group, ref commits } => {
            let chosen: Vec<(usize, u32, u64)> =
                commits.iter().map(|&(t, q, at)| (t, q, offset_at(at, model.end(t, q)))).collect();
            let named: Vec<(&str, u32, u64)> = chosen.iter().map(|&(t, q, o)| (TOPICS[t], q, o)).collect();
            let result = store.commit_offsets(GROUPS[group], &named);
            if chosen.iter().all(|&(t, q, o)| model.queue(t, q).is_some() && o <= model.end(t, q)) {
                result.unwrap();
                for (t, q, o) in chosen {
                    model.offsets.insert((group, t, q), o);
                }
            } else {
                assert!(result.is_err(), "commits {named:?} taken");
            }
        }
        Op::CommitBurst { group, topic, queue } => {
            let end = model.end(topic, queue);
            if model.queue(topic, queue).is_none() || end == 0 {
                return;
            }
            let burst: Vec<(&str, u32, u64)> =
                (0..BURST).map(|i| (TOPICS[topic], queue, end - (BURST - 1 - i) as u64 % 2)).collect();
            store.commit_offsets(GROUPS[group], &burst).unwrap();
            model.offsets.insert((group, topic, queue), end);
        }
        Op::Remove { group, topic } => {
            let removed = store.remove_consumer_offsets(GROUPS[group], topic.map(|t| TOPICS[t])).unwrap();
            let before = model.offsets.len();
            model.offsets.retain(|&(g, t, _), _| g != group || topic.is_some_and(|topic| topic != t));
            assert_eq!(removed, before - model.offsets.len(), "remove_consumer_offsets");
        }
        Op::CleanOffsets(topic) => {
            let removed = store.clean_offsets_by_topic(TOPICS[topic]).unwrap();
            let before = model.offsets.len();
            model.offsets.retain(|&(_, t, _), _| t != topic);
            assert_eq!(removed, before - model.offsets.len(), "clean_offsets_by_topic({})", TOPICS[topic]);
        }
        Op::Reset { group, topic, queue, to } => {
            let reset = match to {
                Reset::Earliest => ResetTo::Earliest,
                Reset::Latest => ResetTo::Latest,
                Reset::Offset(o) => ResetTo::Offset(o),
            };
            let name = TOPICS[topic];
            let starts: Vec<u64> = (0..QUEUES).map(|q| store.queue_range(name, q).map_or(0, |r| r.start)).collect();
            let result = store.reset_consumer_offsets(GROUPS[group], name, queue, reset);
            if model.queue(topic, 0).is_none() {
                assert!(result.is_err(), "reset in deleted topic {name} taken");
                return;
            }
            let ids: Vec<u32> = queue.map_or_else(|| (0..QUEUES).collect(), |q| vec![q]);
            let want: Vec<(u32, u64)> = ids
                .iter()
                .map(|&q| {
                    let (start, end) = (starts[q as usize], model.end(topic, q));
                    let offset = match to {
                        Reset::Earliest => start,
                        Reset::Latest => end,
                        Reset::Offset(o) => o.clamp(start, end),
                    };
                    (q, offset)
                })
                .collect();
            assert_eq!(result.unwrap(), want, "reset of {} in {name} to {to:?}", GROUPS[group]);
            for (q, offset) in want {
                model.offsets.insert((group, topic, q), offset);
            }
        }
        Op::SealIndex => store.seal_index().unwrap(),
        Op::MoveFront => {
            store.log().delete_segments_before(store.log().max_offset(), usize::MAX).unwrap();
            // Deleted segments were durable: what lies below the front is.
            let front = store.log().min_offset();
            for queue in model.topics.values_mut().flatten() {
                queue.iter_mut().filter(|m| m.log_offset < front).for_each(|m| m.durable = true);
            }
        }
        Op::Flush => {
            store.log().flush_all().unwrap();
            model.all_durable();
        }
        Op::Reopen => {
            store.shutdown().unwrap();
            *store = open(sim, config);
            model.all_durable();
            check_open_report(&store.open_report(), 0);
        }
        Op::PowerLoss => {
            // What the log had flushed before the cut is durable: read first,
            // so that everything below it is in the snapshot.
            let flushed = store.log().flushed_offset();
            let snapshot = sim.snapshot();
            for queue in model.topics.values_mut().flatten() {
                queue.iter_mut().filter(|m| m.log_offset < flushed).for_each(|m| m.durable = true);
            }
            store.shutdown().unwrap();
            *sim = snapshot.crash_image(|_| false);
            *store = open(sim, config);
            let lowered = learn_after_power_loss(store, model);
            check_open_report(&store.open_report(), lowered);
        }
    }
}

/// [`Op::PutBatch`] and [`Op::Fill`]: `n` messages with `key`, bodies of a
/// length in `len`.
fn put_batch(
    store: &MessageStore,
    model: &mut Model,
    topic: usize,
    queue: u32,
    n: usize,
    key: Option<usize>,
    len: std::ops::Range<usize>,
) {
    let bodies: Vec<(u64, Vec<u8>)> = (0..n).map(|i| model.body(len.start + i % len.len())).collect();
    let messages: Vec<Message> = bodies
        .iter()
        .map(|(_, body)| {
            let m = Message::new(TOPICS[topic], queue, body.clone());
            match key {
                Some(k) => m.with_key(KEYS[k]),
                None => m,
            }
        })
        .collect();
    let result = store.put_messages(&messages);
    let Some(end) = model.queue(topic, queue).map(|m| m.len() as u64) else {
        assert!(result.is_err(), "a batch put to deleted topic {} taken", TOPICS[topic]);
        return;
    };
    let result = result.unwrap();
    assert_eq!(result.first_queue_offset, end, "batch put to {}/{queue}", TOPICS[topic]);
    result.durability.wait().unwrap();
    let durable = model.sync();
    let msgs = &mut model.topics.get_mut(&topic).unwrap()[queue as usize];
    for ((serial, body), &log_offset) in bodies.into_iter().zip(&result.log_offsets) {
        msgs.push(Msg { serial, body, key, log_offset, durable });
    }
}

/// [`Op::Get`]: one read, its status and messages as the model says.
fn get(store: &MessageStore, model: &Model, topic: usize, queue: u32, at: u64, max: usize) {
    let name = TOPICS[topic];
    let end = model.end(topic, queue);
    let offset = offset_at(at, end);
    let request = GetRequest::new(name, queue, offset).max_count(max).max_bytes(u64::MAX).group(GROUPS[0]);
    let result = store.get_messages(&request);
    let Some(msgs) = model.queue(topic, queue) else {
        assert!(result.is_err(), "a read of deleted topic {name}");
        return;
    };
    let got = result.unwrap();
    let start = store.queue_range(name, queue).unwrap().start;
    let (status, next) = if end == 0 {
        (GetStatus::NoMessageInQueue, 0)
    } else if offset < start {
        (GetStatus::OffsetTooSmall, start)
    } else if offset == end {
        (GetStatus::NoNewMessage, end)
    } else if offset > end {
        (GetStatus::OffsetOverflow, end)
    } else {
        let want: Vec<u64> = (offset..end).filter(|&o| msgs[o as usize].log_offset >= model.front).take(max).collect();
        let returned: Vec<u64> = got.messages.iter().map(|m| m.queue_offset).collect();
        assert_eq!(returned, want, "{name}/{queue} from {offset}, at most {max}");
        let next = if want.len() == max { want[max - 1] + 1 } else { end };
        let status = if want.is_empty() { GetStatus::NoMatchedMessage } else { GetStatus::Found };
        (status, next)
    };
    assert_eq!((got.status, got.next_offset), (status, next), "{name}/{queue} from {offset}, at most {max}");
    for m in &got.messages {
        assert_eq!(&m.body[..], &msgs[m.queue_offset as usize].body[..]);
    }
}
