use super::*;
use flush_service::FlushError;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use store_io::sim::SimStorage;

const ROOT: &str = "/s";
const MIN: usize = 64 << 10;

fn load(storage: &dyn Storage) -> ConsumerOffsets {
    ConsumerOffsets::load(storage, Path::new(ROOT), MIN).unwrap()
}

fn commit(offsets: &ConsumerOffsets, storage: &dyn Storage, group: &str, queue: u32, offset: u64) {
    offsets.commit_many(storage, group, &[("t", queue, offset)]).unwrap();
}

fn journals(sim: &SimStorage) -> Vec<String> {
    let mut names: Vec<String> = sim.list(&offsets_dir(Path::new(ROOT))).unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    names
}

#[test]
fn a_commit_that_returned_survives_a_power_loss() {
    let sim = SimStorage::new();
    let offsets = load(&sim);
    commit(&offsets, &sim, "g", 0, 7);
    commit(&offsets, &sim, "g", 1, 9);
    commit(&offsets, &sim, "h", 0, 1);
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    assert_eq!(reloaded.get("g", "t", 0), Some(7));
    assert_eq!(reloaded.get("g", "t", 1), Some(9));
    assert_eq!(reloaded.get("h", "t", 0), Some(1));
    assert_eq!(reloaded.get("h", "t", 1), None);
}

#[test]
fn a_commit_costs_one_small_record_not_a_rewrite_of_the_table() {
    let sim = SimStorage::new();
    let offsets = load(&sim);
    let many: Vec<(&str, u32, u64)> = (0..1000).map(|q| ("t", q, 1)).collect();
    offsets.commit_many(&sim, "g", &many).unwrap();
    let dir = offsets_dir(Path::new(ROOT));
    let path = journal_path(&dir, offsets.inner.lock().journal.as_ref().unwrap().generation);
    let before = offsets.inner.lock().journal.as_ref().unwrap().file.wrote_position();
    commit(&offsets, &sim, "g", 500, 2);
    let after = offsets.inner.lock().journal.as_ref().unwrap().file.wrote_position();
    assert_eq!(after - before, journal::COMMIT_RECORD_LEN, "{}", path.display());
}

#[test]
fn concurrent_commits_all_land_and_share_syncs() {
    let sim = SimStorage::new();
    let offsets = Arc::new(load(&sim));
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let syncs_before = offsets.syncs();
    let threads: Vec<_> = (0..8u32)
        .map(|q| {
            let (offsets, storage) = (Arc::clone(&offsets), Arc::clone(&storage));
            std::thread::spawn(move || {
                for offset in 1..=200 {
                    commit(&offsets, &*storage, "g", q, offset);
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let syncs = offsets.syncs() - syncs_before;
    assert!(syncs <= 1600, "at most one sync per commit: {syncs}");
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    for q in 0..8 {
        assert_eq!(reloaded.get("g", "t", q), Some(200));
    }
}

#[test]
fn a_full_journal_is_compacted_into_the_next_generation_and_the_old_one_deleted() {
    let sim = SimStorage::new();
    let offsets = load(&sim);
    let first = offsets.inner.lock().journal.as_ref().unwrap().generation;
    // 64 KiB holds about 2,200 commit records.
    for i in 0..5_000u64 {
        commit(&offsets, &sim, "g", (i % 10) as u32, i);
    }
    let generation = offsets.inner.lock().journal.as_ref().unwrap().generation;
    assert!(generation > first + 1, "compacted at least twice: {generation}");
    assert_eq!(journals(&sim), vec![mapped_file::file_name(generation), "CURRENT".to_string()]);
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    for q in 0..10u32 {
        assert_eq!(reloaded.get("g", "t", q), Some(4990 + u64::from(q)));
    }
}

#[test]
fn a_crash_at_any_step_of_a_compaction_keeps_every_returned_commit() {
    // Every state the storage went through while commits filled and compacted
    // the journal three times, each crashed twice with unsynced sectors kept or
    // lost at random, checked as it comes against the commits that had
    // returned by then.
    let sim = SimStorage::new();
    let offsets = load(&sim);
    type Returned = Vec<(u64, BTreeMap<u32, u64>)>;
    let returned: Arc<parking_lot::Mutex<Returned>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::sync_channel::<store_io::sim::SimSnapshot>(16);
    let seen = Arc::clone(&returned);
    let checker = std::thread::spawn(move || {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut checked = 0u64;
        for snapshot in rx {
            let at = snapshot.event;
            let want = seen.lock().iter().rev().find(|(e, _)| *e <= at).map(|(_, w)| w.clone()).unwrap_or_default();
            for round in 0..2 {
                let image = snapshot.crash_image(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng & 1 == 1
                });
                let reloaded = ConsumerOffsets::load(&image, Path::new(ROOT), MIN)
                    .unwrap_or_else(|err| panic!("event {at}, round {round}: {err}"));
                for (q, o) in &want {
                    let got = reloaded.get("g", "t", *q).unwrap_or(0);
                    assert!(got >= *o, "event {at}, round {round}: queue {q} at {got}, {o} returned");
                }
                checked += 1;
            }
        }
        checked
    });
    sim.set_snapshot_sink(Some(tx));
    let mut now = BTreeMap::new();
    let generation = offsets.inner.lock().journal.as_ref().unwrap().generation;
    for i in 0..7_000u64 {
        let q = (i % 50) as u32;
        commit(&offsets, &sim, "g", q, i);
        now.insert(q, i);
        returned.lock().push((sim.event_count(), now.clone()));
    }
    let compactions = offsets.inner.lock().journal.as_ref().unwrap().generation - generation;
    sim.set_snapshot_sink(None);
    let checked = checker.join().unwrap();
    assert!(compactions >= 3, "{compactions}");
    assert!(checked > 20_000, "{checked}");
}

#[test]
fn a_torn_tail_is_erased_so_no_stale_record_follows_a_new_one() {
    let sim = SimStorage::new();
    let offsets = load(&sim);
    commit(&offsets, &sim, "g", 0, 1);
    let (file, end) = {
        let inner = offsets.inner.lock();
        (
            inner.journal.as_ref().unwrap().file.path().to_path_buf(),
            inner.journal.as_ref().unwrap().file.wrote_position(),
        )
    };
    // Two later records reached the disk but their sync never returned; the
    // first of them is torn.
    let mut later = Encoder::at(offsets.inner.lock().journal.as_ref().unwrap().generation, end);
    later.change(Change::Commit((0, 0, 0), 2));
    let first_len = later.bytes.len();
    later.change(Change::Commit((0, 0, 0), 9));
    let mut bytes = later.bytes.clone();
    bytes[3] ^= 1;
    drop(offsets);
    assert!(sim.patch_file(&file, end, &bytes));
    let reloaded = load(&sim);
    assert_eq!(reloaded.get("g", "t", 0), Some(1));
    // A new commit of the same size lands where the torn one was: the stale
    // valid record after it must not come back.
    commit(&reloaded, &sim, "g", 0, 3);
    assert_eq!(reloaded.inner.lock().journal.as_ref().unwrap().file.wrote_position(), end + first_len);
    sim.crash_losing_unsynced();
    assert_eq!(load(&sim).get("g", "t", 0), Some(3));
}

#[test]
fn removals_are_durable() {
    let sim = SimStorage::new();
    let offsets = load(&sim);
    for group in ["a", "b"] {
        offsets.commit_many(&sim, group, &[("t", 0, 1), ("t", 1, 2), ("u", 0, 3)]).unwrap();
    }
    assert_eq!(offsets.remove(&sim, Removal::GroupTopic("a", "t")).unwrap(), 2);
    assert_eq!(offsets.remove(&sim, Removal::Topic("u")).unwrap(), 2);
    assert_eq!(offsets.remove(&sim, Removal::Group("nobody")).unwrap(), 0);
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    let all: Vec<_> = reloaded.all().into_iter().map(|((g, t, q), o)| (g, t, q, o)).collect();
    assert_eq!(all, vec![("b".into(), "t".into(), 0, 1), ("b".into(), "t".into(), 1, 2)]);
    assert_eq!(reloaded.remove(&sim, Removal::Group("b")).unwrap(), 2);
    sim.crash_losing_unsynced();
    assert!(load(&sim).all().is_empty());
}

#[test]
fn the_text_file_of_an_older_store_is_converted_once() {
    let sim = SimStorage::new();
    let text = format!("{LEGACY_HEADER}\ng t 0 7\ng t 1 9\n");
    sim.write_file(&legacy_path(Path::new(ROOT)), text.as_bytes());
    let offsets = load(&sim);
    assert_eq!(offsets.get("g", "t", 1), Some(9));
    assert!(sim.file_bytes(&legacy_path(Path::new(ROOT))).is_none(), "the text file goes once converted");
    commit(&offsets, &sim, "g", 1, 10);
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    assert_eq!((reloaded.get("g", "t", 0), reloaded.get("g", "t", 1)), (Some(7), Some(10)));
}

#[test]
fn a_damaged_journal_or_current_is_an_error_naming_it() {
    let store = || {
        let sim = SimStorage::new();
        let offsets = load(&sim);
        commit(&offsets, &sim, "g", 0, 7);
        let path = offsets.inner.lock().journal.as_ref().unwrap().file.path().to_path_buf();
        (sim, path)
    };
    let (sim, path) = store();
    assert!(sim.patch_file(&path, journal::HEADER_LEN + 9, &[0xff]));
    let err = ConsumerOffsets::load(&sim, Path::new(ROOT), MIN).unwrap_err();
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");

    let (sim, _) = store();
    sim.write_file(&current_path(&offsets_dir(Path::new(ROOT))), b"nonsense\n");
    let err = ConsumerOffsets::load(&sim, Path::new(ROOT), MIN).unwrap_err();
    assert!(err.to_string().contains("CURRENT"), "{err}");

    let (sim, path) = store();
    sim.remove(&path).unwrap();
    let err = ConsumerOffsets::load(&sim, Path::new(ROOT), MIN).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");

    let legacy = SimStorage::new();
    legacy.write_file(&legacy_path(Path::new(ROOT)), b"garbage\n");
    let err = ConsumerOffsets::load(&legacy, Path::new(ROOT), MIN).unwrap_err();
    assert!(err.to_string().contains("consumer_offsets"), "{err}");
}

/// Fills the journal with commits of `filler` until it compacts once.
fn until_compacted(offsets: &ConsumerOffsets, storage: &dyn Storage, filler: &str) {
    let generation = |o: &ConsumerOffsets| o.inner.lock().journal.as_ref().unwrap().generation;
    let before = generation(offsets);
    let mut i = 0;
    while generation(offsets) == before {
        commit(offsets, storage, filler, 0, i);
        i += 1;
    }
}

#[test]
fn names_whose_offsets_went_are_named_again_when_used_after_a_compaction() {
    // Group "g" removed, topic "u" cleaned: the compaction's snapshot names
    // neither, so a later commit of either must name it again in the journal,
    // or the next load finds a record of a name it never read.
    let sim = SimStorage::new();
    let offsets = load(&sim);
    commit(&offsets, &sim, "g", 0, 1);
    offsets.commit_many(&sim, "h", &[("u", 0, 4)]).unwrap();
    assert_eq!(offsets.remove(&sim, Removal::Group("g")).unwrap(), 1);
    assert_eq!(offsets.remove(&sim, Removal::Topic("u")).unwrap(), 1);
    until_compacted(&offsets, &sim, "filler");
    commit(&offsets, &sim, "g", 0, 2);
    offsets.commit_many(&sim, "h", &[("u", 1, 5)]).unwrap();
    sim.crash_losing_unsynced();
    let reloaded = ConsumerOffsets::load(&sim, Path::new(ROOT), MIN).expect("the journal loads");
    assert_eq!(reloaded.get("g", "t", 0), Some(2));
    assert_eq!(reloaded.get("h", "u", 1), Some(5));
    assert_eq!(reloaded.get("h", "u", 0), None);
    // The names no offset holds are dropped from memory at the compaction.
    until_compacted(&reloaded, &sim, "filler");
    reloaded.remove(&sim, Removal::Group("g")).unwrap();
    until_compacted(&reloaded, &sim, "filler");
    assert_eq!(reloaded.inner.lock().table.groups.id("g"), None, "a name no offset holds is forgotten");
}

#[test]
fn a_commit_whose_records_cannot_be_written_leaves_the_table_as_it_was() {
    // The journal full, its compaction fails (no sync succeeds): the commit
    // fails, and neither its offset nor its new names stay in memory, so
    // `get` never shows a value the journal does not hold, and a later commit
    // of the same names writes their records.
    let sim = SimStorage::new();
    let offsets = load(&sim);
    commit(&offsets, &sim, "g", 0, 1);
    let position = |o: &ConsumerOffsets| o.inner.lock().journal.as_ref().unwrap().file.wrote_position();
    let size = offsets.inner.lock().journal.as_ref().unwrap().file.file_size();
    let mut i = 0;
    while position(&offsets) + 2 * journal::COMMIT_RECORD_LEN < size {
        commit(&offsets, &sim, "g", 0, i);
        i += 1;
    }
    commit(&offsets, &sim, "g", 0, 7);
    sim.fail_all_syncs(true);
    let failed = (0..4).find_map(|n| {
        offsets.commit_many(&sim, &format!("new{n}"), &[("fresh", 0, 9), ("t", 0, 3)]).err().map(|e| (n, e))
    });
    let (n, _) = failed.expect("a commit that needs a compaction fails while no sync succeeds");
    assert_eq!(offsets.get(&format!("new{n}"), "fresh", 0), None, "the failed commit's offset is not shown");
    assert_eq!(offsets.get("g", "t", 0), Some(7));
    assert!(offsets.inner.lock().table.groups.id(&format!("new{n}")).is_none(), "its new name is forgotten");
    sim.fail_all_syncs(false);
    offsets.commit_many(&sim, &format!("new{n}"), &[("fresh", 0, 9)]).unwrap();
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    assert_eq!(reloaded.get(&format!("new{n}"), "fresh", 0), Some(9));
}

#[test]
fn a_failed_compaction_forgets_no_name_the_old_journal_still_holds() {
    // A compaction drops the names no offset holds from memory before it
    // writes the new generation. When that write fails they come back with
    // the old journal: else a later change that fits in the old journal
    // interns a dropped name again under a new id and writes a name record
    // the old journal contradicts (it named the group under another id), and
    // the next load refuses the journal.
    let sim = SimStorage::new();
    let offsets = load(&sim);
    commit(&offsets, &sim, "old", 0, 1); // group "old": id 0
    assert_eq!(offsets.remove(&sim, Removal::Group("old")).unwrap(), 1); // no offset holds it; its name stays
    let position = |o: &ConsumerOffsets| o.inner.lock().journal.as_ref().unwrap().file.wrote_position();
    let size = offsets.inner.lock().journal.as_ref().unwrap().file.file_size();
    // Room left for a name record (16 bytes for "old") and a commit record,
    // but not for a commit of eight queues.
    let mut i = 0;
    while position(&offsets) + 45 + journal::COMMIT_RECORD_LEN < size {
        commit(&offsets, &sim, "g", 0, i);
        i += 1;
    }
    let generation = offsets.inner.lock().journal.as_ref().unwrap().generation;
    sim.fail_all_syncs(true);
    let big: Vec<(&str, u32, u64)> = (0..8).map(|q| ("t", q, 9)).collect();
    assert!(offsets.commit_many(&sim, "g", &big).is_err(), "the compaction fails while no sync succeeds");
    sim.fail_all_syncs(false);
    // "old" used again: its records fit the old journal, no compaction.
    commit(&offsets, &sim, "old", 0, 2);
    assert_eq!(offsets.inner.lock().journal.as_ref().unwrap().generation, generation, "still the old journal");
    sim.crash_losing_unsynced();
    let reloaded = ConsumerOffsets::load(&sim, Path::new(ROOT), MIN).expect("the journal loads");
    assert_eq!(reloaded.get("old", "t", 0), Some(2));
}

/// Counts its wakes.
#[derive(Default)]
struct Wakes(std::sync::atomic::AtomicU32);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Wakes {
    fn count(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Runs the sync service on a thread of its own until the returned
/// function stops it.
fn serve(offsets: &Arc<ConsumerOffsets>) -> impl FnOnce() {
    let state = Arc::clone(offsets.sync_wake());
    let service = Arc::clone(offsets);
    let thread = std::thread::spawn(move || service.serve(&Arc::clone(service.sync_wake())));
    move || {
        state.stop();
        thread.join().unwrap();
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn a_commit_waiting_asynchronously_is_synced_by_the_service_never_by_its_poll() {
    let sim = SimStorage::new();
    let offsets = Arc::new(load(&sim));
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    let staged: Vec<Staged> =
        (0..100u32).map(|q| offsets.stage_commits(&sim, "g", &[("t", q, u64::from(q) + 1)]).unwrap()).collect();
    assert_eq!(offsets.get("g", "t", 99), Some(100), "the table shows a staged commit at once");
    let syncs = sim.sync_count();
    for (token, staged) in staged.iter().enumerate() {
        for _ in 0..3 {
            assert!(offsets.poll_durable(staged, token as u64, &mut cx).is_pending());
        }
    }
    assert_eq!(sim.sync_count(), syncs, "polling syncs nothing");
    assert_eq!(offsets.syncs.lock().waiters.len(), 100, "one registration per waiter, however often polled");
    let stop = serve(&offsets);
    wait_for("every waiter woken", || wakes.count() >= 100);
    for (token, staged) in staged.iter().enumerate() {
        assert!(matches!(offsets.poll_durable(staged, token as u64, &mut cx), Poll::Ready(Ok(()))));
    }
    assert_eq!(offsets.syncs.lock().waiters.len(), 0);
    stop();
    assert!(sim.sync_count() - syncs <= 2, "one sync for the hundred: {}", sim.sync_count() - syncs);
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    assert_eq!(reloaded.get("g", "t", 99), Some(100));
}

#[test]
fn a_failed_sync_fails_the_commit_waiting_on_it_and_the_next_commit_starts_a_new_journal() {
    let sim = SimStorage::new();
    let offsets = Arc::new(load(&sim));
    let stop = serve(&offsets);
    let generation = offsets.inner.lock().journal.as_ref().unwrap().generation;
    sim.fail_all_syncs(true);
    let staged = offsets.stage_commits(&sim, "g", &[("t", 0, 5)]).unwrap();
    let failed = block_on(offsets.durable(staged));
    assert!(matches!(failed, Err(StoreError::Durability(FlushError::Failed { .. }))), "{failed:?}");
    sim.fail_all_syncs(false);
    let staged = offsets.stage_commits(&sim, "g", &[("t", 1, 6)]).unwrap();
    block_on(offsets.durable(staged)).unwrap();
    assert!(offsets.inner.lock().journal.as_ref().unwrap().generation > generation, "compacted past the failed file");
    stop();
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    assert_eq!(reloaded.get("g", "t", 1), Some(6));
    assert_eq!(reloaded.get("g", "t", 0), Some(5), "the table, written whole, holds the failed one too");
}

#[test]
fn closing_syncs_what_waits_asynchronously_and_a_dropped_wait_leaves_nothing() {
    let sim = SimStorage::new();
    let offsets = load(&sim);
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    {
        let staged = offsets.stage_commits(&sim, "g", &[("t", 0, 3)]).unwrap();
        let mut dropped = std::pin::pin!(offsets.durable(staged));
        assert!(dropped.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(offsets.syncs.lock().waiters.len(), 0, "a dropped wait takes its registration back");
    let staged = offsets.stage_commits(&sim, "g", &[("t", 1, 4)]).unwrap();
    assert!(offsets.poll_durable(&staged, 1, &mut cx).is_pending());
    // No service runs: the close's last sync covers it, and wakes it.
    offsets.close();
    assert_eq!(wakes.count(), 1);
    assert!(matches!(offsets.poll_durable(&staged, 1, &mut cx), Poll::Ready(Ok(()))));
    let late = Staged { ticket: u64::MAX, file: None };
    assert!(matches!(offsets.poll_durable(&late, 2, &mut cx), Poll::Ready(Err(StoreError::Shutdown))));
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    assert_eq!(reloaded.get("g", "t", 1), Some(4));
}

/// Runs `future` on this thread, parking while it is pending.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(crate::poll::ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(100));
    }
}

#[test]
/// Threads that stage commits and wait for them, blocking or as futures,
/// through several compactions: every wait ends, none is left registered,
/// and every value is durable.
fn blocking_and_async_waits_across_compactions_all_finish_and_hold() {
    let sim = SimStorage::new();
    let offsets = Arc::new(load(&sim));
    let stop = serve(&offsets);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let generation = offsets.inner.lock().journal.as_ref().unwrap().generation;
    let threads: Vec<_> = (0..6u32)
        .map(|q| {
            let offsets = Arc::clone(&offsets);
            let storage = Arc::clone(&storage);
            std::thread::spawn(move || {
                for i in 1..=3000u64 {
                    let staged = offsets.stage_commits(&*storage, "g", &[("t", q, i)]).unwrap();
                    if (i + u64::from(q)) % 3 == 0 {
                        offsets.wait_staged(staged).unwrap();
                    } else {
                        block_on(offsets.durable(staged)).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(offsets.inner.lock().journal.as_ref().unwrap().generation > generation + 2, "compacted several times");
    assert!(offsets.syncs.lock().waiters.is_empty());
    stop();
    sim.crash_losing_unsynced();
    let reloaded = load(&sim);
    for q in 0..6 {
        assert_eq!(reloaded.get("g", "t", q), Some(3000));
    }
}

#[test]
/// Syncs that fail now and then (a failure at a different commit per seed):
/// no commit a future reported durable is lost by a power loss after.
fn async_waits_beside_failing_syncs_never_report_a_lost_commit_durable() {
    for seed in 0..20u64 {
        let sim = SimStorage::new();
        let offsets = Arc::new(load(&sim));
        let stop = serve(&offsets);
        let mut acked = BTreeMap::new();
        for i in 1..=400u64 {
            if i % 37 == seed % 37 {
                sim.fail_nth_sync(1);
            }
            let q = (i % 5) as u32;
            let Ok(staged) = offsets.stage_commits(&sim, "g", &[("t", q, i)]) else { continue };
            if block_on(offsets.durable(staged)).is_ok() {
                acked.insert(q, i);
            }
        }
        stop();
        sim.crash_losing_unsynced();
        let reloaded = load(&sim);
        for (q, i) in acked {
            let got = reloaded.get("g", "t", q).unwrap_or(0);
            assert!(got >= i, "seed {seed}: queue {q} acked {i}, reloaded {got}");
        }
    }
}
