//! What an operator watches of a message store, through the [`metrics`]
//! facade (the log's own, `commitlog_*`, come from the log): whichever
//! recorder the application installs receives them; without one they cost a
//! check of the global recorder once per flush of the derived data. Puts and
//! reads are counted with a relaxed atomic each on their paths and handed to
//! the recorder with the rest, by the flush service
//! (`flush_interval_consume_queue_ms`, 1 s; the consumer lag at each thorough
//! flush, `flush_consume_queue_thorough_interval_ms`, 10 s).
//!
//! | name | kind | what |
//! |---|---|---|
//! | `message_store_put_messages_total` | counter | messages put |
//! | `message_store_read_messages_total` | counter | messages `get_messages` returned (consumers' reads) |
//! | `message_store_dispatch_lag_bytes` | gauge | how far dispatch is behind what it may read (the log's written or durable end) |
//! | `message_store_queue_index_runs` | gauge | sealed runs of the queue index (a file each) |
//! | `message_store_queue_index_active_entries` | gauge | entries in memory, not sealed yet |
//! | `message_store_queue_index_heap_bytes` | gauge | heap bytes of the queue index's tables |
//! | `message_store_queues_in_use` | gauge | queues with a put lock and a wait signal in memory |
//! | `message_store_consumer_offsets` | gauge | committed offsets ((group, topic, queue) triples) |
//! | `message_store_offsets_journal_syncs_total` | counter | syncs of the consumer-offsets journal |
//! | `message_store_consumer_lag_messages` | gauge, label `group` | messages the group has not committed past, over every queue it has an offset in |

use std::collections::{BTreeMap, BTreeSet};

use crate::store::{Core, StoreStats};

pub(crate) const PUT_MESSAGES: &str = "message_store_put_messages_total";
pub(crate) const READ_MESSAGES: &str = "message_store_read_messages_total";
pub(crate) const DISPATCH_LAG: &str = "message_store_dispatch_lag_bytes";
pub(crate) const INDEX_RUNS: &str = "message_store_queue_index_runs";
pub(crate) const INDEX_ACTIVE: &str = "message_store_queue_index_active_entries";
pub(crate) const INDEX_HEAP: &str = "message_store_queue_index_heap_bytes";
pub(crate) const QUEUES_IN_USE: &str = "message_store_queues_in_use";
pub(crate) const CONSUMER_OFFSETS: &str = "message_store_consumer_offsets";
pub(crate) const OFFSET_SYNCS: &str = "message_store_offsets_journal_syncs_total";
pub(crate) const CONSUMER_LAG: &str = "message_store_consumer_lag_messages";

/// What one store handed the recorder's counters so far: they go up by the
/// difference, so a store reopened in the same process (its counts start at
/// 0 again), or two stores in one process, add up instead of hiding behind
/// the larger count.
#[derive(Debug, Default)]
pub(crate) struct Exported {
    puts: u64,
    reads: u64,
    syncs: u64,
}

/// Hands the store's counts to the recorder.
pub(crate) fn export(stats: &StoreStats, exported: &mut Exported) {
    let add = |name: &'static str, now: u64, before: &mut u64| {
        metrics::counter!(name).increment(now.saturating_sub(*before));
        *before = now;
    };
    add(PUT_MESSAGES, stats.messages_put, &mut exported.puts);
    add(READ_MESSAGES, stats.messages_read, &mut exported.reads);
    add(OFFSET_SYNCS, stats.consumer_offset_syncs, &mut exported.syncs);
    metrics::gauge!(DISPATCH_LAG).set(stats.dispatch_limit.saturating_sub(stats.dispatch_point) as f64);
    metrics::gauge!(INDEX_RUNS).set(stats.index_runs as f64);
    metrics::gauge!(INDEX_ACTIVE).set(stats.index_active_entries as f64);
    metrics::gauge!(INDEX_HEAP).set(stats.index_heap_bytes as f64);
    metrics::gauge!(QUEUES_IN_USE).set(stats.queues_in_use as f64);
    metrics::gauge!(CONSUMER_OFFSETS).set(stats.consumer_offsets as f64);
}

/// Each group's lag: what it has not committed past, summed over the queues it
/// has an offset in. `known` are the groups exported before: one whose
/// offsets are all gone is set to 0 once and forgotten.
pub(crate) fn export_lag(core: &Core, known: &mut BTreeSet<String>) {
    let mut lags: BTreeMap<String, u64> = BTreeMap::new();
    for ((group, topic, queue), offset) in core.offsets.all() {
        let end = core
            .queues
            .key(&topic, queue)
            .ok()
            .and_then(|key| core.dispatcher.queue_index.extent(key))
            .map_or(0, |(_, end)| end);
        *lags.entry(group).or_default() += end.saturating_sub(offset);
    }
    for gone in known.iter().filter(|g| !lags.contains_key(*g)) {
        metrics::gauge!(CONSUMER_LAG, "group" => gone.clone()).set(0.0);
    }
    for (group, lag) in &lags {
        metrics::gauge!(CONSUMER_LAG, "group" => group.clone()).set(*lag as f64);
    }
    *known = lags.into_keys().collect();
}
