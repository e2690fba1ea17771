//! Layer 2c: simulated power loss under the replicated log's store
//! (`commitlog-raft`). The store's commit log, queue index and state file all
//! live on one `SimStorage`; a writer appends entries through openraft's interface
//! (`blocking_append`: an append counts once its durability callback fired),
//! saves a vote, purges a prefix now and then, and now and then truncates a
//! suffix and goes on in a new term (a follower that meets a new leader). After
//! every write and sync the storage sends a snapshot; crash images of it are
//! opened as a restarted node would open its store and checked: the vote saved;
//! the entries contiguous, each the one written for its own term and index, their
//! terms never decreasing (no truncated entry after a newer one: a cut that came
//! back); and every entry acknowledged by then and not truncated since (above the
//! purged id) present with the term it was acknowledged in.
//!
//! A second group shares the log: it appends between the first one's rounds and
//! never purges, so it lags, and the engine (a checkpoint and reclaim round
//! every fifth round and after each purge, rewriting groups three segments
//! behind) copies its entries forward again and again while the first group's
//! purges free segments. Every entry of it acknowledged by a crash must be there too.
//! A third group is created, takes entries and is dropped midway: once its
//! drop returned, it never comes back (created again, it is empty). Each new
//! leader saves its vote: a crash keeps the last vote saved, or a later one.

use std::io::Cursor;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use commitlog::FlushConfig;
use commitlog_raft::{RaftLogStore, RaftStoreConfig};
use mapped_file::sim::SimSnapshot;
use mapped_file::Storage;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, Vote};

use crate::common::*;

openraft::declare_raft_types!(
    /// Entries carry a string naming their own term and index.
    pub TypeConfig:
        D = String,
        R = (),
);

const STORE: &str = "/sim-raft";

/// The power-loss layer's tally: states, acknowledged, lost, garbage, failed opens.
pub use crate::power_loss::Tally;

fn config() -> RaftStoreConfig {
    let mut config = RaftStoreConfig::default();
    config.log.mapped_file_size_commit_log = 16 * 1024;
    config.log.max_message_size = 2048;
    config.log.preallocate_next_segment = false;
    config.log.checkpoint_interval_ms = 1;
    config.log.flush = FlushConfig { flush_interval_commit_log_ms: 3_600_000, ..FlushConfig::default() };
    // Checkpoints and reclaims come from the run itself (and after each purge),
    // at the same points whatever the machine's speed.
    config.groups.checkpoint_interval_ms = 3_600_000;
    config.groups.rewrite_lag_bytes = 3 * 16 * 1024;
    config
}

/// The group that shares the log and never purges.
const LAGGING: u64 = 9;
/// The group created and dropped midway.
const EPHEMERAL: u64 = 11;

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// The payload written for (term, index): checkable after recovery.
fn payload(term: u64, index: u64, len: usize) -> String {
    let mut s = format!("{term}:{index}:");
    while s.len() < len {
        s.push(char::from(b'a' + (index as u8 + s.len() as u8) % 26));
    }
    s
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

/// A write the store acknowledged.
#[derive(Clone, Copy)]
enum Op {
    /// Entries `first..=last` of `term`, durable.
    Appended { first: u64, last: u64, term: u64 },
    /// Entries from `at` on removed (not necessarily durable); recorded with the
    /// truncation's first event.
    Truncated { at: u64 },
}

/// What was acknowledged, with the storage event count when it was.
#[derive(Default)]
struct Acked {
    /// In order, each with the event count when it returned.
    ops: Vec<(Op, u64)>,
    /// Votes saved (their terms), each with the event count when it returned.
    votes: Vec<(u64, u64)>,
    /// The dropped group's last acknowledged index, with the event count then.
    ephemeral: Vec<(u64, u64)>,
    /// Events at which the dropped group's drop began and returned.
    dropped: (Option<u64>, Option<u64>),
    /// The lagging group's last acknowledged index, with the event count then.
    lagging: Vec<(u64, u64)>,
}

impl Acked {
    /// The term each index must hold in a crash image of `event`: what was
    /// appended by then, less what was truncated by then.
    fn expected_at(&self, event: u64) -> std::collections::BTreeMap<u64, u64> {
        let mut expected = std::collections::BTreeMap::new();
        for (op, _) in self.ops.iter().filter(|(_, e)| *e <= event) {
            match *op {
                Op::Appended { first, last, term } => expected.extend((first..=last).map(|i| (i, term))),
                Op::Truncated { at } => drop(expected.split_off(&at)),
            }
        }
        expected
    }

    /// The lagging group's entries owed in a crash image of `event`.
    fn lagging_at(&self, event: u64) -> u64 {
        self.lagging.iter().filter(|(_, e)| *e <= event).map(|(last, _)| *last).max().unwrap_or(0)
    }

    /// The term of the last vote saved by `event`.
    fn vote_at(&self, event: u64) -> Option<u64> {
        self.votes.iter().filter(|(_, e)| *e <= event).map(|(term, _)| *term).max()
    }

    /// What the dropped group owes in a crash image of `event`: `None` once
    /// its drop returned (it must be gone), else its entries `1..=n`.
    /// (Between the two, it may be gone or whole: `Some` with `true`.)
    fn ephemeral_at(&self, event: u64) -> Option<(u64, bool)> {
        if self.dropped.1.is_some_and(|e| e <= event) {
            return None;
        }
        let dropping = self.dropped.0.is_some_and(|e| e <= event);
        Some((self.ephemeral.iter().filter(|(_, e)| *e <= event).map(|(last, _)| *last).max().unwrap_or(0), dropping))
    }

    fn entries_acked(&self) -> u64 {
        self.ops
            .iter()
            .map(|(op, _)| if let Op::Appended { first, last, .. } = op { last - first + 1 } else { 0 })
            .sum()
    }
}

/// One run under one seed. `stop_at_first` ends at the first violation.
pub fn run_seed(seed: u64, images_per_point: usize, stop_at_first: bool) -> Tally {
    let mut rng = Rng(seed);
    let path = write_without_mmap(seed);
    let sim = sim_storage(path);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let store =
        RaftLogStore::<TypeConfig>::open_with_storage(STORE, config(), Arc::clone(&storage), Arc::clone(&storage))
            .expect("open");
    let (tx, rx) = mpsc::sync_channel::<SimSnapshot>(256);
    let acked: Arc<Mutex<Acked>> = Arc::default();
    sim.set_snapshot_sink(Some(tx));

    let checker = {
        let acked = Arc::clone(&acked);
        let mut rng = Rng(seed ^ 0xBEEF);
        std::thread::spawn(move || {
            let rt = runtime();
            let mut tally = Tally::default();
            for snapshot in rx {
                if stop_at_first && tally.violations() > 0 {
                    continue; // drain so the writer never blocks
                }
                let (expected, vote, lagging, ephemeral) = {
                    let acked = acked.lock().expect("acked");
                    (
                        acked.expected_at(snapshot.event),
                        acked.vote_at(snapshot.event),
                        acked.lagging_at(snapshot.event),
                        acked.ephemeral_at(snapshot.event),
                    )
                };
                let owed = Owed { entries: &expected, vote, lagging, ephemeral };
                tally.add(crash_states(&rt, &snapshot, &owed, images_per_point, &mut rng, path));
            }
            tally
        })
    };

    let rt = runtime();
    let rewritten = rt.block_on(async {
        let mut store = store;
        let mut lagging = store.engine().open_group(LAGGING).expect("the lagging group");
        let mut lagging_next = 1u64;
        store.save_vote(&Vote::new(3, 1)).await.expect("vote");
        // The event count first: never ask the storage while holding `acked`
        // (a storage event may be waiting on the checker, which waits on `acked`).
        let event = sim.event_count();
        acked.lock().expect("acked").votes.push((3, event));
        let (mut next, mut term, mut purged) = (1u64, 3u64, 0u64);
        let mut ephemeral = None;
        let mut ephemeral_next = 1u64;
        for round in 0..40u64 {
            if round == 8 {
                ephemeral = Some(store.engine().open_group(EPHEMERAL).expect("the dropped group"));
            }
            if let Some(group) = ephemeral.as_mut().filter(|_| round < 24) {
                let entries = vec![Entry {
                    log_id: log_id(1, ephemeral_next),
                    payload: EntryPayload::Normal(payload(1, ephemeral_next, 100)),
                }];
                if group.blocking_append(entries).await.is_err() {
                    break;
                }
                let event = sim.event_count();
                acked.lock().expect("acked").ephemeral.push((ephemeral_next, event));
                ephemeral_next += 1;
            }
            if round == 24 {
                // From its first storage event on, a crash may find it gone.
                let event = sim.event_count() + 1;
                acked.lock().expect("acked").dropped.0 = Some(event);
                store.engine().drop_group(EPHEMERAL).await.expect("drop");
                let event = sim.event_count();
                acked.lock().expect("acked").dropped.1 = Some(event);
                ephemeral = None;
            }
            let n = rng.range(1, 9);
            let entries: Vec<Entry<TypeConfig>> = (next..next + n)
                .map(|i| Entry {
                    log_id: log_id(term, i),
                    payload: EntryPayload::Normal(payload(term, i, rng.range(10, 900) as usize)),
                })
                .collect();
            if store.blocking_append(entries).await.is_err() {
                break;
            }
            let op = Op::Appended { first: next, last: next + n - 1, term };
            next += n;
            let event = sim.event_count();
            acked.lock().expect("acked").ops.push((op, event));
            let n = rng.range(1, 3);
            let entries: Vec<Entry<TypeConfig>> = (lagging_next..lagging_next + n)
                .map(|i| Entry { log_id: log_id(1, i), payload: EntryPayload::Normal(payload(1, i, 200)) })
                .collect();
            let appended = if round % 5 == 3 {
                // A checkpoint and reclaim while these entries are written but
                // not yet durable: the index must not be sealed past them.
                let engine = store.engine();
                let (appended, reclaimed) = tokio::join!(
                    lagging.blocking_append(entries),
                    tokio::task::spawn_blocking(move || engine.reclaim())
                );
                reclaimed.expect("reclaim").expect("reclaim");
                appended
            } else {
                lagging.blocking_append(entries).await
            };
            if appended.is_err() {
                break;
            }
            lagging_next += n;
            let event = sim.event_count();
            acked.lock().expect("acked").lagging.push((lagging_next - 1, event));
            if round % 5 == 1 {
                let engine = store.engine();
                tokio::task::spawn_blocking(move || engine.reclaim()).await.expect("reclaim").expect("reclaim");
            }
            if round % 13 == 12 {
                purged = purged.max(next / 3);
                let purge_term = term_of(&mut store, purged).await;
                store.purge(log_id(purge_term, purged)).await.expect("purge");
            } else if round % 6 == 4 && next - 1 > purged + 1 {
                // A new leader: the last few entries go, the next ones are its term's.
                let at = rng.range((purged + 1).max(next.saturating_sub(12)), next);
                // From its first storage event on, a crash may find the cut made:
                // the entries from `at` on are no longer owed.
                let cut_term = term_of(&mut store, at).await;
                let event = sim.event_count() + 1;
                acked.lock().expect("acked").ops.push((Op::Truncated { at }, event));
                store.truncate(log_id(cut_term, at)).await.expect("truncate");
                next = at;
                term += 1;
                store.save_vote(&Vote::new(term, 1)).await.expect("vote");
                let event = sim.event_count();
                acked.lock().expect("acked").votes.push((term, event));
            }
        }
        let rewritten = store.engine().reclaim_stats().rewritten_entries;
        store.shutdown().expect("shutdown");
        rewritten
    });
    sim.set_snapshot_sink(None);
    let mut tally = checker.join().expect("checker");
    tally.rewritten = rewritten;
    let acked = acked.lock().expect("acked");
    tally.acked = acked.entries_acked() + acked.lagging.last().map_or(0, |(last, _)| *last);
    tally
}

/// The term of the entry at `index`, as the store holds it.
async fn term_of(store: &mut RaftLogStore<TypeConfig>, index: u64) -> u64 {
    let entries = store.try_get_log_entries(index..=index).await.expect("read an entry");
    entries.first().map(|e| e.log_id.leader_id.term).expect("the entry is there")
}

/// What a crash image must hold.
struct Owed<'a> {
    /// The first group's entries: index → term.
    entries: &'a std::collections::BTreeMap<u64, u64>,
    /// The term of the last vote saved (a later one may be there too).
    vote: Option<u64>,
    /// The lagging group's entries `1..=lagging`.
    lagging: u64,
    /// The dropped group's entries `1..=n` (or none at all, with `true`: its
    /// drop had begun), or `None`: it must be gone.
    ephemeral: Option<(u64, bool)>,
}

fn crash_states(
    rt: &tokio::runtime::Runtime,
    snapshot: &SimSnapshot,
    owed: &Owed<'_>,
    images: usize,
    rng: &mut Rng,
    path: bool,
) -> Tally {
    let dirty = snapshot.dirty_sectors();
    let masks: Vec<u64> = if dirty <= 4 {
        (0..1u64 << dirty).collect()
    } else {
        let mut m = vec![0, u64::MAX];
        m.extend((0..images).map(|_| rng.next()));
        m
    };
    let mut tally = Tally::default();
    for mask in masks {
        tally.states += 1;
        let image: Arc<dyn Storage> = Arc::new(crash_image(snapshot, mask, path));
        let mut store = match RaftLogStore::<TypeConfig>::open_with_storage(
            STORE,
            config(),
            Arc::clone(&image),
            Arc::clone(&image),
        ) {
            Ok(store) => store,
            Err(_) => {
                tally.open_errors += 1;
                continue;
            }
        };
        rt.block_on(async {
            let Ok(state) = store.get_log_state().await else {
                tally.open_errors += 1;
                return;
            };
            if let Some(term) = owed.vote {
                let held = store.read_vote().await.ok().flatten();
                if held.is_none_or(|v| v.leader_id().term < term || v.leader_id().node_id != 1) {
                    tally.lost += 1;
                }
            }
            let entries = match store.try_get_log_entries(0..u64::MAX).await {
                Ok(entries) => entries,
                Err(_) => {
                    tally.garbage += 1;
                    return;
                }
            };
            let first = state.last_purged_log_id.map_or(1, |p| p.index + 1);
            let mut last_term = 0;
            for (k, entry) in entries.iter().enumerate() {
                let want_index = first + k as u64;
                let term = entry.log_id.leader_id.term;
                let intact = entry.log_id == log_id(term, want_index)
                    && term >= last_term
                    && matches!(&entry.payload, EntryPayload::Normal(p) if p.starts_with(&format!("{term}:{want_index}:")));
                if !intact {
                    tally.garbage += 1;
                    return;
                }
                last_term = term;
            }
            for (index, term) in owed.entries.range(first..) {
                let held = entries.get((index - first) as usize).map(|e| e.log_id.leader_id.term);
                if held != Some(*term) {
                    tally.lost += 1;
                }
            }
            let Ok(mut lagging) = store.engine().open_group(LAGGING) else {
                tally.open_errors += 1;
                return;
            };
            let Ok(entries) = lagging.try_get_log_entries(0..u64::MAX).await else {
                tally.garbage += 1;
                return;
            };
            for (k, entry) in entries.iter().enumerate() {
                let want = k as u64 + 1;
                let intact = entry.log_id == log_id(1, want)
                    && matches!(&entry.payload, EntryPayload::Normal(p) if p.starts_with(&format!("1:{want}:")));
                if !intact {
                    tally.garbage += 1;
                    return;
                }
            }
            tally.lost += owed.lagging.saturating_sub(entries.len() as u64);
            // The dropped group: gone once its drop returned (created again
            // here, it must be empty), else every entry acknowledged there.
            let Ok(mut dropped) = store.engine().open_group(EPHEMERAL) else {
                tally.open_errors += 1;
                return;
            };
            let Ok(entries) = dropped.try_get_log_entries(0..u64::MAX).await else {
                tally.garbage += 1;
                return;
            };
            match owed.ephemeral {
                None if !entries.is_empty() => tally.garbage += 1,
                None => {}
                Some((_, true)) if entries.is_empty() => {}
                Some((owed, _)) => {
                    let intact = entries.iter().enumerate().all(|(k, e)| e.log_id == log_id(1, k as u64 + 1));
                    if !intact {
                        tally.garbage += 1;
                    }
                    tally.lost += owed.saturating_sub(entries.len() as u64);
                }
            }
        });
        drop(store);
    }
    tally
}
