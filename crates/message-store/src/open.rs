//! Opening a store: the log recovered first, then the dispatch checkpoint
//! weighed, the topic registry recovered if lost, the queue index opened (or
//! rebuilt whole, or converted from the consume-queue layout), the log past it
//! dispatched again before the first put, the ends of expired queues kept, the
//! consumer offsets checked against what the log still holds, and the
//! services started.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog::{CommitLog, Storage};
use flush_service::{ServiceState, ServiceThread};
use parking_lot::Mutex;
use queue_index::QueueIndex;
use store_io::remove_files;

use crate::checkpoint::{self, Loaded, Recorded};
use crate::config::{DispatchLimit, MessageStoreConfig};
use crate::dispatch::Dispatcher;
use crate::error::StoreError;
use crate::index::Index;
use crate::offsets::{ConsumerOffsets, Removal};
use crate::queues::Queues;
use crate::store::{queue_index_dir, Core, Life, MessageStore, OpenReport};
use crate::topic::{queue_key, Found, Registry};

/// How long dispatch waits for a wake-up when it found nothing to read (or
/// failed: a failure is retried at least this often).
const DISPATCH_IDLE_WAIT_MS: u64 = 100;

/// The most records a dispatch round may find and still nap after it: more
/// means dispatch runs behind the puts (a 100 µs nap gathers some tens of
/// puts), and a nap would only let the backlog grow.
const NAP_MOST_RECORDS: u64 = 256;

impl MessageStore {
    /// Opens the store over its opened log, on the log's storage.
    pub(crate) fn open_over(log: CommitLog, config: MessageStoreConfig) -> Result<Self, StoreError> {
        let root = log.dir().to_path_buf();
        let storage = Arc::clone(log.storage());
        let limit = config.effective_dispatch_limit();
        if limit == DispatchLimit::Durable {
            log.flush_all()?; // what recovery found is durable before it is dispatched
        }
        let (recorded, checkpoint_unusable) = Self::trusted_checkpoint(&*storage, &root, &log)?;
        // Loaded before the registry's recovery, which makes again the topics
        // only offsets name (a topic made after the checkpoint, with no
        // message in the log yet), in the same write as the rest.
        let offsets = ConsumerOffsets::load(&*storage, &root, config.consumer_offsets_journal_size)?;
        let recovery = recover_registry(&*storage, &root, recorded.as_ref(), &log, &offsets)?;
        let registry = recovery.registry;
        let queues = Arc::new(Queues::default());
        for (topic, entry) in registry.topics() {
            queues.add_topic(topic, entry);
        }
        // The queue index, rebuilt whole where its queues' keys cannot be
        // trusted: a store of the consume-queue layout (converted here), or
        // topic ids lost with the registry.
        let dir = queue_index_dir(&root);
        let converting =
            recovery.first_version || recorded.as_ref().is_some_and(|r| r.topics.values().any(|t| t.id.is_none()));
        let mut rebuilt_all = if converting {
            Some("the store is of the consume-queue layout: converted, its queue index built from the log".to_string())
        } else if recovery.ids_lost {
            Some("topic ids were lost with the topic registry".to_string())
        } else {
            None
        };
        if let Some(why) = &rebuilt_all {
            tracing::warn!(why, "rebuilding the whole queue index from the log");
            remove_files(&*storage, &dir, |path, source| StoreError::Io { path, source })?;
        }
        // Dispatch by the written end: each put indexes its own message (under
        // its queue's put lock, so queues are appended to out of log order).
        let index_on_put = limit == DispatchLimit::Written;
        // Naps between busy rounds, where puts would wake dispatch (by the
        // written end); by the durable end a flush wakes it.
        let dispatch_naps = limit == DispatchLimit::Written && config.dispatch_nap_us > 0;
        // Naps after rounds whose puts indexed their own messages; with naps
        // after every busy round, those take their place (every put then
        // leaves a napping dispatch asleep, so a nap of these would hold
        // puts of queues no one tails too).
        let dispatch_tailed_naps = index_on_put && config.dispatch_tailed_nap_us > 0 && !dispatch_naps;
        let index_config = if index_on_put {
            queue_index::IndexConfig::concurrent_appends()
        } else {
            queue_index::IndexConfig::default()
        };
        let (mut queue_index, mut index_report) = QueueIndex::open_with(&*storage, &dir, index_config.clone())?;
        #[cfg(planted_bugs)]
        let trust_ahead = crate::planted::is_active(crate::planted::Bug::IndexBeforeRecords);
        #[cfg(not(planted_bugs))]
        let trust_ahead = false;
        let ahead = index_report.replay_from > log.max_offset() && !trust_ahead;
        let front_lost = queue_index.covers_from() > log.min_offset() && log.max_offset() > log.min_offset();
        // The ends the queue table held when the index did not use it (runs
        // it covered were dropped), and those kept by an open a crash cut
        // short: a queue whose messages all went with the log's front is
        // known by nothing else, and keeps its end (given after the replay,
        // to queues the replay left without a live entry). The index keeps
        // them on disk until then.
        let mut kept_ends = if ahead { Vec::new() } else { std::mem::take(&mut index_report.table_ends) };
        if ahead || front_lost {
            // Sealed past what the log holds (never done: a seal waits for the
            // log's flush), or runs lost at the front (deleted, not expired):
            // rebuilt whole, as entries cannot go before later runs'.
            let why = if ahead {
                format!(
                    "the queue index covers the log up to {}, past its end {}",
                    index_report.replay_from,
                    log.max_offset()
                )
            } else {
                format!(
                    "the queue index covers the log from {} only, above the log's first offset {}",
                    queue_index.covers_from(),
                    log.min_offset()
                )
            };
            tracing::warn!(why, "rebuilding the whole queue index from the log");
            if !ahead {
                // A queue whose records all went with the log's front keeps
                // the end the runs and table kept know (given after the replay).
                kept_ends.extend(queue_index.ends());
            }
            drop(queue_index);
            // The ends are written before the files go, and the open reports
            // them again: a crash before they are seeded loses none.
            QueueIndex::remove_keeping_ends(&*storage, &dir, kept_ends)?;
            (queue_index, index_report) = QueueIndex::open_with(&*storage, &dir, index_config)?;
            kept_ends = std::mem::take(&mut index_report.table_ends);
            rebuilt_all = Some(why);
        }
        #[cfg(planted_bugs)]
        let kept = crate::planted::is_active(crate::planted::Bug::IndexKeptAfterSegment);
        #[cfg(not(planted_bugs))]
        let kept = false;
        if !kept {
            queue_index.expire(&*storage, log.min_offset())?;
        }
        // Room for every queue of every topic, and for the queues in use.
        let queue_count: usize = registry.topics().map(|(_, e)| e.queues as usize).sum();
        queue_index.reserve(queue_count.saturating_sub(queue_index.queue_count()));
        queues.reserve(queue_count);
        let queue_index = Arc::new(queue_index);
        // The key index keeps what the checkpoint says was flushed below its
        // point; dispatch starts at the lower of that point and the queue
        // index's end (each skips what it holds).
        let key_point = recorded.as_ref().map_or(0, |r| r.point).max(log.min_offset());
        let (index, index_rebuilt) = if config.message_index_enable {
            let (index, rebuilt) = Index::open(
                Arc::clone(&storage),
                &root,
                config.index,
                recorded.as_ref().map(|r| r.index),
                key_point,
                recorded.as_ref().is_some_and(|r| log.min_offset() > r.log_min),
                &log,
            )?;
            (Some(Arc::new(index)), rebuilt)
        } else {
            (None, false)
        };
        let key_from = if index.is_none() {
            u64::MAX
        } else if index_rebuilt {
            log.min_offset()
        } else {
            key_point
        };
        #[cfg(planted_bugs)]
        let queue_from = if crate::planted::is_active(crate::planted::Bug::CheckpointBeforeIndex) {
            key_point.max(index_report.replay_from)
        } else {
            index_report.replay_from
        };
        #[cfg(not(planted_bugs))]
        let queue_from = index_report.replay_from;
        let recovered_from = key_from.min(queue_from).max(log.min_offset());
        let dispatcher = Arc::new(Dispatcher::new(
            log.clone(),
            Arc::clone(&queues),
            Arc::clone(&queue_index),
            limit,
            recovered_from,
            index,
        ));
        #[cfg(planted_bugs)]
        let replay = !crate::planted::is_active(crate::planted::Bug::ReplayLeftToBackground);
        #[cfg(not(planted_bugs))]
        let replay = true;
        // Every message of the log dispatched before the first put: a put
        // takes its queue's end from the index.
        let redispatched = if replay { dispatcher.dispatch_up_to(log.max_offset())? } else { 0 };
        if converting {
            convert_consume_queue_layout(&*storage, &root, recorded.as_ref(), &registry, &queue_index)?;
        }
        // Always: the ends a crashed open kept on disk are seeded (and their
        // file removed) even when none is given here.
        let seeded = queue_index.seed_ends(&*storage, kept_ends)?;
        if seeded > 0 {
            tracing::warn!(seeded, "queues whose messages all expired keep the ends the old queue index knew");
        }
        // Queues of topics no longer in the registry (deleted, with a crash
        // before the index's table was written without them, or seeded from
        // kept ends): never read nor appended to again, so forgotten now.
        let live_ids: std::collections::HashSet<u64> = registry.topics().map(|(_, e)| u64::from(e.id)).collect();
        let orphans = queue_index.forget(&*storage, |key| !live_ids.contains(&(key >> 32)))?;
        if orphans > 0 {
            tracing::info!(queues = orphans, "queues of deleted topics forgotten by the queue index");
        }
        let core = Arc::new(Core {
            root,
            offsets,
            config,
            storage,
            log,
            queues,
            registry: Mutex::new(registry),
            dispatcher,
            expired_to: AtomicU64::new(0),
            sealing: Mutex::new(()),
            sealed_mark: Arc::new(AtomicU64::new(queue_index.sealed_to())),
            dispatch_wake: ServiceState::new(),
            dispatch_naps,
            dispatch_tailed_naps,
            dispatch_idle_wait_ms: AtomicU64::new(DISPATCH_IDLE_WAIT_MS),
            shut_down: AtomicBool::new(false),
            index_on_put,
            indexed_on_put: AtomicU64::new(0),
            groups: crate::group::PutGroups::default(),
            consumer_groups: crate::consumer::ConsumerGroups::default(),
            put_messages: AtomicU64::new(0),
            read_messages: AtomicU64::new(0),
            topic_life: parking_lot::RwLock::new(()),
            #[cfg(test)]
            commit_checked: crate::pause::Pause::default(),
            #[cfg(test)]
            commit_waiting: crate::pause::Pause::default(),
            #[cfg(test)]
            queue_looked_up: crate::pause::Pause::default(),
        });
        // The log keeps the records whose queue-index entries are not sealed
        // yet: were they deleted with the entries still in memory, a crash
        // would lose the end of a queue whose messages were all there.
        #[cfg(planted_bugs)]
        let hold = !crate::planted::is_active(crate::planted::Bug::FrontPastUnsealedEntries);
        #[cfg(not(planted_bugs))]
        let hold = true;
        if hold {
            let sealed = Arc::clone(&core.sealed_mark);
            core.log.set_front_hold(move || sealed.load(Ordering::Acquire));
        }
        if recovery.first_version {
            core.registry.lock().persist(&*core.storage)?; // with the ids the index now uses
        }
        core.flush_derived(true)?;
        if converting {
            remove_consume_queue_files(&*core.storage, &core.root, &core.registry.lock())?;
        }
        Self::remove_offsets_of_deleted_topics(&core)?;
        // Offsets lowered only to an end the log itself holds. Only after a
        // crash, after a clean shutdown whose log lost records since (its
        // recovery cut some, or the queue index covers more than the log now
        // holds: a damaged tail whose checkpoint is gone), or for offsets
        // just converted from an older store's file. Otherwise the log is
        // whole (a clean shutdown flushed it, and a commit is never beyond
        // its queue's end when it is made).
        let log_recovery = core.log.recovery_report();
        let clean = log_recovery.clean_shutdown && !log_recovery.cut_anything() && !ahead && !core.offsets.converted();
        let offsets_lowered = if clean { 0 } else { Self::lower_offsets(&core)? };
        if checkpoint_unusable.is_some() && rebuilt_all.is_none() && index_rebuilt {
            tracing::warn!(
                why = checkpoint_unusable.as_deref(),
                "dispatch checkpoint not usable: the key index was rebuilt from the log"
            );
        }
        let report = OpenReport {
            recovered_from,
            redispatched,
            offsets_lowered,
            rebuilt_all,
            topics_recovered: recovery.recovered,
            index_runs_dropped: index_report
                .dropped
                .iter()
                .map(|(path, why)| format!("{}: {why}", path.display()))
                .collect(),
            index_rebuilt,
        };
        let store = MessageStore {
            life: Arc::new(Life { core: Arc::clone(&core), services: Mutex::new(Vec::new()) }),
            report,
            core,
        };
        store.start_services()?;
        tracing::info!(root = %store.core.root.display(), recovered_from, redispatched, "message store open");
        Ok(store)
    }

    /// The dispatch checkpoint if recovery can trust it, else why not (then
    /// the key index is rebuilt from the log, and a lost topic registry
    /// recovered from the log alone; said loudly unless the store is new).
    fn trusted_checkpoint(
        storage: &dyn Storage,
        root: &Path,
        log: &CommitLog,
    ) -> Result<(Option<Recorded>, Option<String>), StoreError> {
        let why = match checkpoint::load(storage, root)? {
            Loaded::Recorded(recorded) if recorded.point <= log.max_offset() => return Ok((Some(recorded), None)),
            Loaded::Recorded(recorded) => {
                format!("its dispatch point {} is past the log's end {}", recorded.point, log.max_offset())
            }
            Loaded::PointOnly(_) => "it is of the first version, without the queues' ends".to_string(),
            Loaded::Damaged(why) => why,
            Loaded::Missing if log.max_offset() == log.min_offset() => return Ok((None, None)),
            Loaded::Missing => "it is missing".to_string(),
        };
        tracing::warn!(path = %checkpoint::checkpoint_path(root).display(), why, "dispatch checkpoint not usable; the key index is rebuilt from the log");
        Ok((None, Some(why)))
    }

    /// Starts dispatch, the flush service of the derived data and the sync
    /// service of offset commits waiting asynchronously.
    fn start_services(&self) -> Result<(), StoreError> {
        let io = |source| StoreError::Io { path: self.core.root.clone(), source };
        let wake_dispatch = || {
            let wake = Arc::downgrade(&self.core.dispatch_wake);
            Arc::new(move |_| {
                if let Some(wake) = wake.upgrade() {
                    wake.wakeup();
                }
            })
        };
        if self.core.dispatcher_limit() == DispatchLimit::Durable {
            self.core.log.on_flushed(wake_dispatch());
        }
        // With the write-buffer pool, records become readable when the commit
        // service commits them, after the put's own wake-up found nothing.
        if self.core.log.config().transient_store_pool_enable {
            self.core.log.on_committed(wake_dispatch());
        }
        let core = Arc::clone(&self.core);
        let dispatch =
            ServiceThread::spawn("ReputMessageService", Arc::clone(&self.core.dispatch_wake), move |state| {
                let nap = Duration::from_micros(core.config.dispatch_nap_us);
                let tailed_nap = Duration::from_micros(core.config.dispatch_tailed_nap_us);
                loop {
                    // A failure is kept (`dispatch_error`) and retried: on the next
                    // wake-up, or within 100 ms.
                    let round = core.dispatcher.dispatch_round().unwrap_or_default();
                    if state.is_stopped() {
                        return;
                    }
                    let found = round.records;
                    // Busy, and caught up: puts leave it to wake by itself
                    // after a nap. A lone record says puts come sparsely (a nap
                    // would only add an empty round and a timer's wake-up per
                    // put); more than a few naps' worth, that it runs behind
                    // the puts: either way it does not nap.
                    if core.dispatch_naps && (2..=NAP_MOST_RECORDS).contains(&found) {
                        state.nap(nap);
                        continue;
                    }
                    // Every record's consumers had it from its put: puts that
                    // index their own leave it to wake by itself (any other
                    // put wakes it, nap or not).
                    if core.dispatch_tailed_naps && found >= 2 && round.indexed_by_puts == found {
                        state.nap(tailed_nap);
                        continue;
                    }
                    // Puts during a nap did not wake it: one more look first.
                    if state.end_nap() {
                        continue;
                    }
                    let idle = core.dispatch_idle_wait_ms.load(Ordering::Relaxed);
                    state.wait_for_running(Duration::from_millis(idle), || {});
                }
            })
            .map_err(io)?;
        let core = Arc::clone(&self.core);
        let interval = Duration::from_millis(self.core.config.flush_interval_consume_queue_ms);
        let thorough = Duration::from_millis(self.core.config.flush_consume_queue_thorough_interval_ms);
        let mut last_thorough = Instant::now();
        let mut lagging = std::collections::BTreeSet::new();
        let mut exported = crate::metrics::Exported::default();
        let flush = ServiceThread::spawn_every("FlushConsumeQueueService", interval, move || {
            let is_thorough = last_thorough.elapsed() >= thorough;
            match core.flush_derived(is_thorough) {
                Ok(()) if is_thorough => last_thorough = Instant::now(),
                Ok(()) => {}
                Err(err) => tracing::error!(%err, "queue index or key index flush failed; retrying"),
            }
            crate::metrics::export(&core.stats(), &mut exported);
            if is_thorough {
                crate::metrics::export_lag(&core, &mut lagging);
            }
        })
        .map_err(io)?;
        let core = Arc::clone(&self.core);
        let offsets_sync = ServiceThread::spawn(
            "ConsumerOffsetsSyncService",
            Arc::clone(self.core.offsets.sync_wake()),
            move |state| core.offsets.serve(state),
        )
        .map_err(io)?;
        self.life.services.lock().extend([dispatch, flush, offsets_sync]);
        Ok(())
    }

    /// Removes the committed offsets of topics the registry does not have: a
    /// deletion a crash interrupted after the registry was written (a topic
    /// made again under the name must not start with them). A registry whose
    /// file was missing or damaged has every topic the offsets name, made
    /// again by its recovery ([`recover_registry`]): no offset is removed on
    /// a guess.
    fn remove_offsets_of_deleted_topics(core: &Core) -> Result<(), StoreError> {
        let stale: Vec<String> = {
            let registry = core.registry.lock();
            core.offsets.topics().into_iter().filter(|t| registry.get(t).is_none()).collect()
        };
        for topic in &stale {
            core.offsets.remove(&*core.storage, Removal::Topic(topic))?;
        }
        if !stale.is_empty() {
            tracing::warn!(topics = ?stale, "consumer offsets of topics the registry no longer has removed");
        }
        Ok(())
    }

    /// Lowers consumer offsets beyond their queue's end (after a crash, or
    /// damage to the log, that took messages back); returns how many moved.
    fn lower_offsets(core: &Core) -> Result<usize, StoreError> {
        let index = &core.dispatcher.queue_index;
        core.offsets.clamp(&*core.storage, |(_, topic, queue)| {
            let key = core.queues.key(topic, *queue).ok()?;
            Some(index.extent(key).map_or(0, |(_, end)| end))
        })
    }
}

/// What [`recover_registry`] found.
struct RegistryRecovery {
    registry: Registry,
    /// Missing or damaged, and recovered.
    recovered: bool,
    /// Of the first version (ids given at this open).
    first_version: bool,
    /// Recovered with topics whose ids no record kept: the queue index's
    /// keys cannot be trusted.
    ids_lost: bool,
}

/// The topic registry of the store in `root`, recovered if its file is
/// missing while the store holds messages, or damaged: the topics the dispatch
/// checkpoint recorded, with their queue counts and ids, and those of the
/// log's messages past its point (or all of them, with no checkpoint), each
/// with one queue past the highest it used and a new id (the queue index is
/// then rebuilt). A topic the checkpoint knows and the file lacks is added
/// back. Said loudly; the recovered registry is written at once.
fn recover_registry(
    storage: &dyn Storage,
    root: &Path,
    recorded: Option<&Recorded>,
    log: &CommitLog,
    offsets: &ConsumerOffsets,
) -> Result<RegistryRecovery, StoreError> {
    let (mut registry, found) = Registry::load_or_empty(storage, root)?;
    let first_version = found == Found::FirstVersion;
    let mut added = 0usize;
    let mut ids_lost = false;
    let lost = matches!(found, Found::Lost(_));
    #[cfg(planted_bugs)]
    let lost = lost || crate::planted::is_active(crate::planted::Bug::DeletionUndoneByCheckpoint);
    if let Some(recorded) = recorded {
        registry.raise_next_id(recorded.next_id);
        // A topic the checkpoint names and a registry file read whole lacks
        // was deleted since (the file is written before a topic is used);
        // only a lost file is made up from the checkpoint.
        let known: std::collections::HashSet<String> = registry.topics().map(|(t, _)| t.to_string()).collect();
        for (topic, entry) in recorded.topics.iter().filter(|_| lost) {
            if !known.contains(topic) && registry.add_at_least(topic, entry.queues, entry.id, entry.since) {
                added += 1;
                ids_lost |= entry.id.is_none();
            }
        }
    }
    #[cfg(planted_bugs)]
    let lowered = if crate::planted::is_active(crate::planted::Bug::TopicMadePastDurableLog) {
        0
    } else {
        registry.lower_since(log.max_offset())
    };
    #[cfg(not(planted_bugs))]
    let lowered = registry.lower_since(log.max_offset());
    if lowered > 0 && added == 0 && found != Found::FirstVersion {
        tracing::warn!(
            topics = lowered,
            end = log.max_offset(),
            "topics made past the log's recovered end start at it"
        );
        registry.persist(storage)?;
    }
    if matches!(found, Found::Lost(_)) {
        // Topics made after the checkpoint (or with none) are known only by
        // their messages, which lie past its point.
        let from = recorded.map_or(log.min_offset(), |r| r.point).max(log.min_offset());
        for record in log.iter_from(from) {
            let record = record?;
            let Ok(header) = crate::message::decode_header(&record.body) else { continue };
            if registry.add_at_least(&header.topic, header.queue_id.saturating_add(1), None, 0) {
                added += 1;
                ids_lost = true;
            }
        }
        // Topics made after the checkpoint with no message in the log yet are
        // known only by their committed offsets, which cannot be told from a
        // deleted topic's: made again with the queues they name, from the
        // log's end (no record of theirs lies in the log), so that no offset
        // is lost on a guess.
        let mut from_offsets: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
        for ((_, topic, queue), _) in offsets.all() {
            let queues = from_offsets.entry(topic).or_insert(1);
            *queues = (*queues).max(queue.saturating_add(1));
        }
        for (topic, queues) in &from_offsets {
            if registry.add_at_least(topic, *queues, None, log.max_offset()) {
                tracing::warn!(topic, queues, "a topic only consumer offsets name made again with the registry");
                added += 1;
            }
        }
    }
    if added == 0 {
        return Ok(RegistryRecovery { registry, recovered: false, first_version, ids_lost });
    }
    let why = match &found {
        Found::Lost(why) => why.as_str(),
        _ => "topics missing from it",
    };
    tracing::warn!(path = %registry.path().display(), why, topics = added, "topic registry recovered from the dispatch checkpoint and the log");
    registry.persist(storage)?;
    Ok(RegistryRecovery { registry, recovered: true, first_version, ids_lost })
}

/// A store of the consume-queue layout, its queue index just built from the
/// log: each queue whose messages all expired keeps the end its format-2
/// checkpoint recorded (the log no longer shows it), so that no offset given
/// before is given again.
fn convert_consume_queue_layout(
    storage: &dyn Storage,
    root: &Path,
    recorded: Option<&Recorded>,
    registry: &Registry,
    index: &QueueIndex,
) -> Result<(), StoreError> {
    let mut ends = Vec::new();
    for (topic, recorded_topic) in recorded.iter().flat_map(|r| &r.topics) {
        let Some(entry) = registry.get(topic) else { continue };
        for (&queue_id, &(_, end)) in &recorded_topic.extents {
            ends.push((queue_key(entry.id, queue_id), end));
        }
    }
    let seeded = index.seed_ends(storage, ends)?;
    tracing::warn!(root = %root.display(), seeded, "consume-queue layout converted: the queue index was built from the log");
    Ok(())
}

/// Deletes the files of the consume-queue layout (`consumequeue/<topic>/<queue>/`)
/// once the store is converted and its checkpoint rewritten (the empty
/// directories stay).
fn remove_consume_queue_files(storage: &dyn Storage, root: &Path, registry: &Registry) -> Result<(), StoreError> {
    let dir = root.join("consumequeue");
    let mut removed = 0;
    for (topic, entry) in registry.topics() {
        for queue_id in 0..entry.queues {
            let queue_dir = dir.join(topic).join(queue_id.to_string());
            removed += remove_files(storage, &queue_dir, |path, source| StoreError::Io { path, source })?;
        }
    }
    if removed > 0 {
        tracing::info!(dir = %dir.display(), removed, "consume-queue files of the converted store deleted");
    }
    Ok(())
}
