//! Property test: bad bytes in any one of the store's own files (the topic
//! registry, the consumer-offsets journal and the file naming it, the
//! dispatch checkpoint, the queue index's table and runs, the key index)
//! never make an open panic or hang, and never lose what the log holds. A
//! small store (two topics, keyed messages, committed offsets, a queue index
//! sealed into a few runs, closed cleanly or cut by a power loss) has one
//! such file replaced by random bytes of a random length, cut at a random
//! point, replaced by another of its files, or given a flipped bit. The open
//! then either
//!
//! - succeeds with every message of the log at its (topic, queue, offset),
//!   every key found, and every committed offset kept (or lowered and said
//!   so: the journal is not derived, its damage is never silently a loss),
//!   and a clean reopen after it needs no repair; or
//! - fails with an error that names the damaged file.
//!
//! Each open runs on its own thread, bounded by [`OPEN_TIMEOUT`].

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Once};
use std::time::Duration;

use commitlog::{FlushDiskType, Storage};
use message_store::{GetRequest, Message, MessageStore, MessageStoreConfig, OpenReport, StoreError};
use proptest::prelude::*;
use proptest::sample::Index;
use store_io::sim::SimStorage;

use common::ROOT;

/// The topics and their queue counts.
const TOPICS: [(&str, u32); 2] = [("a", 2), ("b", 3)];
/// The consumer groups that commit.
const GROUPS: [&str; 2] = ["g0", "g1"];
/// An open that takes longer has hung.
const OPEN_TIMEOUT: Duration = Duration::from_secs(20);
/// The longest wait for dispatch to reach a message while the store is built.
const DISPATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Case count: `PROPTEST_CASES` if set (as `cargo xtask proptest --cases N` does), else 256.
fn proptest_config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct(
            "proptest-regressions/store_bad_bytes.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// The tests' small store ([`common::config`]), its background flush of the
/// derived data turned off: the queue index and the key index reach the disk
/// only at the seals and at shutdown the test asks for, so the files a power
/// loss leaves depend on the case alone, not on a timer.
fn config() -> MessageStoreConfig {
    let mut config = common::config(FlushDiskType::SyncFlush);
    config.flush_interval_consume_queue_ms = 3_600_000;
    config.flush_consume_queue_thorough_interval_ms = 3_600_000;
    config
}

/// One message put: topic (index into [`TOPICS`]), queue (taken modulo the
/// topic's queue count), and whether it carries a key.
type Put = (usize, u32, bool);

/// One commit: group (index into [`GROUPS`]), topic, queue (modulo), the
/// offset picked from the queue's extent then, and the seal point after
/// which it is made.
type Commit = (usize, usize, u32, Index, Index);

/// How the chosen file is damaged.
#[derive(Debug, Clone)]
enum Damage {
    /// Replaced by bytes from a PRNG seeded with `seed`, of a length picked
    /// from 0..64 (`short`) or from 0..=twice the file's.
    Random { seed: u64, len: Index, short: bool },
    /// Cut at a point picked within the file, or (`in_content`) within its
    /// bytes up to the last one that is not zero (a mapped file's content,
    /// not its zero padding).
    Truncate { at: Index, in_content: bool },
    /// Replaced by the bytes of another of the store's own files.
    Foreign { other: Index },
    /// One bit flipped, at a byte picked as for [`Damage::Truncate`].
    BitFlip { at: Index, bit: u8, in_content: bool },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<u64>(), any::<Index>(), any::<bool>()).prop_map(|(seed, len, short)| Damage::Random {
            seed,
            len,
            short
        }),
        (any::<Index>(), any::<bool>()).prop_map(|(at, in_content)| Damage::Truncate { at, in_content }),
        any::<Index>().prop_map(|other| Damage::Foreign { other }),
        (any::<Index>(), 0u8..8, any::<bool>()).prop_map(|(at, bit, in_content)| Damage::BitFlip {
            at,
            bit,
            in_content
        }),
    ]
}

/// A store to build, the file to damage and how.
#[derive(Debug, Clone)]
struct Plan {
    puts: Vec<Put>,
    /// The queue index is sealed after every this many puts.
    seal_every: usize,
    commits: Vec<Commit>,
    /// `Some(seed)`: a power loss instead of a clean shutdown, each sector
    /// not yet durable kept or lost as a PRNG seeded with `seed` says.
    power_loss: Option<u64>,
    /// Which of the store's own files (sorted by path) is damaged.
    target: Index,
    damage: Damage,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        prop::collection::vec((0..TOPICS.len(), 0u32..3, any::<bool>()), 6..30),
        2usize..8,
        prop::collection::vec((0..GROUPS.len(), 0..TOPICS.len(), 0u32..3, any::<Index>(), any::<Index>()), 1..8),
        prop::option::weighted(0.3, any::<u64>()),
        any::<Index>(),
        damage(),
    )
        .prop_map(|(puts, seal_every, commits, power_loss, target, damage)| Plan {
            puts,
            seal_every,
            commits,
            power_loss,
            target,
            damage,
        })
}

/// splitmix64: the test's own deterministic byte source.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A message as the model keeps it: where the log holds it.
#[derive(Debug, Clone)]
struct Stored {
    topic: &'static str,
    queue: u32,
    offset: u64,
    body: Vec<u8>,
    key: Option<String>,
}

/// What the store must still hold after any damage to its own files.
#[derive(Debug, Default)]
struct Model {
    messages: Vec<Stored>,
    /// (group, topic, queue) → the last offset committed.
    offsets: BTreeMap<(String, String, u32), u64>,
}

impl Model {
    /// Messages in `topic`'s `queue` so far.
    fn queue_len(&self, topic: &str, queue: u32) -> u64 {
        self.messages.iter().filter(|m| m.topic == topic && m.queue == queue).count() as u64
    }
}

/// Waits until dispatch has indexed every message of `model`, then has it
/// dispatch what else is durable.
fn settle(store: &MessageStore, model: &Model) {
    for &(topic, queues) in &TOPICS {
        for queue in 0..queues {
            let len = model.queue_len(topic, queue);
            if len > 0 {
                assert!(store.wait_for(topic, queue, len - 1, DISPATCH_TIMEOUT).unwrap().arrived());
            }
        }
    }
    store.dispatch_now().unwrap();
}

/// Makes the commits of `plan` due at seal point `point` of `points`.
fn commit_due(store: &MessageStore, plan: &Plan, model: &mut Model, point: usize, points: usize) {
    for (group, topic, queue, offset, when) in &plan.commits {
        if when.index(points) != point {
            continue;
        }
        let (topic, queues) = TOPICS[*topic];
        let queue = queue % queues;
        let offset = offset.index(model.queue_len(topic, queue) as usize + 1) as u64;
        store.commit_offset(GROUPS[*group], topic, queue, offset).unwrap();
        model.offsets.insert((GROUPS[*group].to_string(), topic.to_string(), queue), offset);
    }
}

/// Builds the store of `plan` on a new simulated disk: both topics, its puts
/// (sealing the queue index every `seal_every`), its commits, then a clean
/// shutdown or a power loss. Returns the disk as the store left it, and the
/// model of what it holds.
fn build(plan: &Plan) -> (SimStorage, Model) {
    let sim = SimStorage::new();
    let store = common::open(&sim, config());
    for (topic, queues) in TOPICS {
        store.create_topic(topic, queues).unwrap();
    }
    let mut model = Model::default();
    let points = plan.puts.len() / plan.seal_every + 1;
    for (i, &(topic, queue, keyed)) in plan.puts.iter().enumerate() {
        let (topic, queues) = TOPICS[topic];
        let queue = queue % queues;
        let offset = model.queue_len(topic, queue);
        let body = format!("message {i} of {topic}/{queue}").into_bytes().repeat(1 + i % 4);
        let key = keyed.then(|| format!("k{i}"));
        let mut message = Message::new(topic, queue, body.clone());
        if let Some(key) = &key {
            message = message.with_key(key.clone());
        }
        let put = store.put_message(&message).unwrap();
        put.durability.wait().unwrap();
        assert_eq!(put.queue_offset, offset);
        model.messages.push(Stored { topic, queue, offset, body, key });
        if (i + 1) % plan.seal_every == 0 {
            settle(&store, &model);
            store.seal_index().unwrap();
            commit_due(&store, plan, &mut model, (i + 1) / plan.seal_every - 1, points);
        }
    }
    settle(&store, &model);
    commit_due(&store, plan, &mut model, points - 1, points);
    match plan.power_loss {
        None => {
            store.shutdown().unwrap();
            (sim, model)
        }
        Some(seed) => {
            let state = sim.snapshot();
            store.shutdown().unwrap();
            let mut random = seed;
            (state.crash_image(|_| next_random(&mut random) & 1 == 1), model)
        }
    }
}

/// The store's own files: everything but the commit log's, sorted.
fn own_files(sim: &SimStorage) -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut files: Vec<PathBuf> = sim
        .snapshot()
        .files
        .into_iter()
        .map(|f| f.path)
        .filter(|p| ["config", "queueindex", "index"].iter().any(|dir| p.starts_with(root.join(dir))))
        .collect();
    files.sort();
    files
}

/// Bytes up to the last that is not zero.
fn content_len(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |last| last + 1)
}

/// A position picked by `at` within `bytes` (or their content): `None` for
/// no bytes.
fn pick_position(bytes: &[u8], at: &Index, in_content: bool) -> Option<usize> {
    let within = if in_content { content_len(bytes) } else { bytes.len() };
    (within > 0).then(|| at.index(within))
}

/// Applies `damage` to `path` on `sim`; returns what it did, for messages.
fn apply(sim: &SimStorage, files: &[PathBuf], path: &Path, damage: &Damage) -> String {
    let bytes = sim.file_bytes(path).unwrap();
    match damage {
        Damage::Random { seed, len, short } => {
            let len = if *short { len.index(64) } else { len.index(2 * bytes.len() + 1) };
            let mut state = *seed;
            let random: Vec<u8> = (0..len).map(|_| next_random(&mut state) as u8).collect();
            sim.write_file(path, &random);
            format!("replaced by {len} random bytes (was {})", bytes.len())
        }
        Damage::Truncate { at, in_content } => match pick_position(&bytes, at, *in_content) {
            Some(at) => {
                sim.write_file(path, &bytes[..at]);
                format!("cut at {at} of {}", bytes.len())
            }
            None => "left alone (nothing to cut)".to_string(),
        },
        Damage::Foreign { other } => {
            let others: Vec<&PathBuf> = files.iter().filter(|f| f.as_path() != path).collect();
            let other = others[other.index(others.len())];
            sim.write_file(path, &sim.file_bytes(other).unwrap());
            format!("replaced by the bytes of {}", other.display())
        }
        Damage::BitFlip { at, bit, in_content } => match pick_position(&bytes, at, *in_content) {
            Some(at) => {
                assert!(sim.patch_file(path, at, &[bytes[at] ^ (1 << bit)]));
                format!("bit {bit} of byte {at} of {} flipped", bytes.len())
            }
            None => "left alone (no byte to flip)".to_string(),
        },
    }
}

/// Panics seen on any thread (the store's services too) since the hook went in.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts every panic in [`PANICS`], then reports it as before.
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// Opens the store on `sim` on a thread of its own: its result, or a panic
/// if the open panicked or took longer than [`OPEN_TIMEOUT`].
fn open_bounded(sim: &SimStorage, what: &str) -> Result<MessageStore, StoreError> {
    let (tx, rx) = mpsc::channel();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    std::thread::spawn(move || {
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            MessageStore::open_with_storage(ROOT, config(), storage)
        }));
        // The receiver is gone only after a timeout, which already failed the case.
        let _ = tx.send(opened);
    });
    match rx.recv_timeout(OPEN_TIMEOUT) {
        Ok(Ok(opened)) => opened,
        Ok(Err(panic)) => {
            let message =
                panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("{what}: the open panicked: {message:?}")
        }
        Err(RecvTimeoutError::Timeout) => panic!("{what}: the open took more than {OPEN_TIMEOUT:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("{what}: the open's thread ended without a result"),
    }
}

/// Damage the store cannot yet tell from a valid file, found by this test
/// and not fixed (the formats lack what would tell them apart). For a file
/// it names, a loss after an open that succeeded is printed as a known
/// defect instead of failing the case; a panic, a hang, or an error that does
/// not name the file still fails it.
///
/// - The consumer-offsets journal: a damaged record among the changes (past
///   the snapshot) reads as a torn tail, so the open silently drops that
///   commit and every later one, and erases them: an offset vanishes, or
///   goes back to an earlier commit's (higher, after a reset below it:
///   messages skipped). Telling it from a tail a power loss tore needs a
///   record of the acknowledged end.
/// - The key index: the live file's hash slots carry no checksum. A flipped bit in a
///   slot points the key's chain elsewhere, and the open does not see it:
///   the key's messages are no longer found by key (still read by queue).
///   Only key lookups are excused for it.
///
/// (The topic registry was a third: a text file without a checksum, cut at a
/// line's end it read as a registry without the topics after it. It ends
/// with a CRC line now, and this test found the class first.)
fn known_defect(path: &Path, keys_only: bool) -> Option<&'static str> {
    if path.starts_with(Path::new(ROOT).join("index")) {
        return keys_only.then_some("the key index's hash slots have no checksum");
    }
    let offsets = Path::new(ROOT).join("config/offsets");
    if path.parent() == Some(offsets.as_path()) && path.file_name().is_some_and(|n| n != "CURRENT") {
        Some("damage among the offsets journal's changes reads as a torn tail")
    } else {
        None
    }
}

/// Every message of `model` at its (topic, queue, offset), each queue ending
/// with its last, and every committed offset kept (or
/// lowered, with the open saying so).
fn check_whole(store: &MessageStore, model: &Model, what: &str) {
    for &(topic, queues) in &TOPICS {
        for queue in 0..queues {
            let expected: Vec<&Stored> =
                model.messages.iter().filter(|m| m.topic == topic && m.queue == queue).collect();
            if expected.is_empty() {
                continue; // a topic recovered from the log alone has only the queues it used
            }
            let range = store.queue_range(topic, queue).unwrap_or_else(|e| panic!("{what}: {topic}/{queue}: {e}"));
            assert_eq!(range, 0..expected.len() as u64, "{what}: {topic}/{queue} as long as its log");
            let got = store
                .get_messages(&GetRequest::new(topic, queue, 0).max_count(1000).max_bytes(u64::MAX))
                .unwrap_or_else(|e| panic!("{what}: {topic}/{queue}: {e}"));
            let got: Vec<(u64, &[u8])> = got.messages.iter().map(|m| (m.queue_offset, &m.body[..])).collect();
            let want: Vec<(u64, &[u8])> = expected.iter().map(|m| (m.offset, &m.body[..])).collect();
            assert_eq!(got, want, "{what}: {topic}/{queue}: every message at its offset");
        }
    }
    let lowered = store.open_report().offsets_lowered;
    let held: BTreeMap<(String, String, u32), u64> =
        store.committed_offsets().into_iter().map(|c| ((c.group, c.topic, c.queue_id), c.offset)).collect();
    for (key, &offset) in &model.offsets {
        match held.get(key) {
            Some(&kept) if kept == offset => {}
            Some(&lower) if lower < offset && lowered > 0 => {}
            other => {
                panic!("{what}: committed offset {key:?} = {offset} silently became {other:?} (lowered: {lowered})")
            }
        }
    }
    assert!(held.keys().all(|k| model.offsets.contains_key(k)), "{what}: offsets never committed: {held:?}");
}

/// Every key of `model` finds its message.
fn check_keys(store: &MessageStore, model: &Model, what: &str) {
    for m in &model.messages {
        let Some(key) = &m.key else { continue };
        let found = store.query_by_key(m.topic, key, 0, u64::MAX, 4).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            found.iter().any(|f| f.queue_id == m.queue && f.queue_offset == m.offset),
            "{what}: key {key} of {}/{} at {} found",
            m.topic,
            m.queue,
            m.offset
        );
    }
}

/// True when the open repaired nothing.
fn quiet(report: &OpenReport) -> bool {
    report.rebuilt_all.is_none()
        && report.index_runs_dropped.is_empty()
        && !report.topics_recovered
        && !report.index_rebuilt
        && report.offsets_lowered == 0
}

/// Builds the store of `plan`, damages one of its files, opens it, and
/// checks the outcome (see the file's doc).
fn run(plan: &Plan) {
    count_panics();
    let panics_before = PANICS.load(Ordering::SeqCst);
    let (sim, model) = build(plan);
    let files = own_files(&sim);
    // A power loss before the first seal leaves no queue index, and the key
    // index's files only if they were synced; the config files are always there.
    assert!(files.len() >= 3, "{files:?}");
    let path = files[plan.target.index(files.len())].clone();
    let did = apply(&sim, &files, &path, &plan.damage);
    let what = format!("{} {did}", path.display());
    match open_bounded(&sim, &what) {
        Ok(store) => {
            let check = |store: &MessageStore, what: &str| {
                let whole = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_whole(store, &model, what)));
                let keys = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_keys(store, &model, what)));
                (whole, keys)
            };
            let (checked, keys_checked) = check(&store, &what);
            let first = store.open_report();
            store.shutdown().unwrap();
            let again = open_bounded(&sim, &format!("{what}, reopened"))
                .unwrap_or_else(|e| panic!("{what}: the open after a successful one fails: {e}"));
            let (rechecked, keys_rechecked) = check(&again, &format!("{what}, reopened"));
            let report = again.open_report();
            again.shutdown().unwrap();
            let keys = keys_checked.and(keys_rechecked);
            let outcome = match checked.and(rechecked) {
                Ok(()) => keys.map_err(|loss| (loss, known_defect(&path, true))),
                Err(loss) => Err((loss, known_defect(&path, false))),
            };
            match outcome {
                Ok(()) => {
                    assert!(quiet(&report), "{what}: the reopen after {first:?} repairs again: {report:?}");
                }
                Err((_, Some(defect))) => {
                    println!("{what}: known defect ({defect}): a loss after a successful open");
                    return;
                }
                Err((loss, None)) => std::panic::resume_unwind(loss),
            }
        }
        Err(err) => {
            let shown = err.to_string();
            assert!(shown.contains(&path.display().to_string()), "{what}: the error does not name the file: {shown}");
        }
    }
    assert_eq!(PANICS.load(Ordering::SeqCst), panics_before, "{what}: a thread panicked");
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn prop_bad_bytes_in_a_store_file_never_panic_hang_or_lose_the_log(plan in plan()) {
        run(&plan);
    }
}
