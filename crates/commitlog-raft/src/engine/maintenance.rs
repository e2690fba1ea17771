//! The engine's upkeep, on its maintenance thread: the groups' committed ids,
//! the dispatch checkpoint, and reclaim rounds (rewrite lagging groups forward,
//! then delete the log's segments below every group's first live entry).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use openraft::RaftTypeConfig;
use serde::{Deserialize, Serialize};

use super::{write_json, Engine};
use crate::error::RaftStoreError;
use crate::group::Group;
use crate::layout::{DISPATCHED_FILE, RAFT_DIR};
use crate::meta::COMMITTED_INTERVAL;
use crate::record::{Header, Kind};

/// What the engine's purge has done since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimStats {
    /// Reclaim rounds run.
    pub rounds: u64,
    /// Entries copied forward (rewritten) out of segments about to go.
    pub rewritten_entries: u64,
    /// Bytes of those entries' records.
    pub rewritten_bytes: u64,
    /// Log segments deleted.
    pub segments_deleted: u64,
}

/// The dispatch checkpoint's file: every record below `offset` is in its
/// group's index on disk.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(super) struct Dispatched {
    pub(super) offset: u64,
}

/// What the maintenance thread is asked to do.
#[derive(Default)]
pub(super) struct Maintenance {
    pub(super) stop: bool,
    /// A purge asked for a reclaim round.
    pub(super) reclaim_wanted: bool,
}

/// The maintenance thread: committed ids every [`COMMITTED_INTERVAL`], a
/// checkpoint and a reclaim round every `checkpoint_interval_ms` or when a
/// purge asks for one.
pub(super) fn maintain<C: RaftTypeConfig>(engine: &Engine<C>) {
    let mut next_round = Instant::now();
    loop {
        let reclaim = {
            let (state, changed) = &engine.wake;
            let mut state = state.lock();
            if !state.stop && !state.reclaim_wanted {
                let until = (Instant::now() + COMMITTED_INTERVAL).min(next_round.max(Instant::now()));
                changed.wait_until(&mut state, until);
            }
            if state.stop {
                return;
            }
            std::mem::take(&mut state.reclaim_wanted) || Instant::now() >= next_round
        };
        engine.write_committed();
        if reclaim {
            next_round = Instant::now() + Duration::from_millis(engine.config.groups.checkpoint_interval_ms);
            if let Err(err) = engine.reclaim() {
                tracing::warn!(%err, "raft log engine: checkpoint or reclaim failed; retrying next round");
            }
        }
    }
}

impl<C: RaftTypeConfig> Engine<C> {
    pub(crate) fn wake_maintenance(&self, reclaim: bool) {
        let (state, changed) = &self.wake;
        state.lock().reclaim_wanted |= reclaim;
        changed.notify_all();
    }

    pub(super) fn write_committed(&self) {
        for group in self.live_groups() {
            if let Err(err) = group.meta.write_committed() {
                tracing::warn!(%err, group = group.id, "writing the committed log id failed; retrying with the next change");
            }
        }
    }

    pub(crate) fn checkpoint(&self) -> Result<u64, RaftStoreError> {
        let mut dispatched = self.dispatched.lock();
        // Every record below `end` is in its group's index, but those of an
        // operation between its append and its index update.
        let end = self.log.max_offset();
        let indexed = self.in_flight.min_start().map_or(end, |start| start.min(end));
        for group in self.live_groups() {
            group.index.flush()?;
        }
        // And the checkpoint never passes what the log holds durably.
        let offset = indexed.min(self.log.flushed_offset());
        if offset > *dispatched {
            let path = self.dir.join(RAFT_DIR).join(DISPATCHED_FILE);
            write_json(&*self.storage, &path, &Dispatched { offset })?;
            *dispatched = offset;
        }
        Ok(*dispatched)
    }

    /// The log offset of the group's first live entry (above its purged id),
    /// if it has one.
    fn first_live_offset(group: &Group<C>) -> Result<Option<u64>, RaftStoreError> {
        let from = group.live_from();
        if from >= group.index.next_index() {
            return Ok(None);
        }
        Ok(group.index.get(from)?.map(|e| e.offset))
    }

    pub(crate) fn reclaim(&self) -> Result<ReclaimStats, RaftStoreError> {
        let mut stats = self.reclaiming.lock();
        stats.rounds += 1;
        let segment = self.log.config().mapped_file_size_commit_log as u64;
        let end = self.log.max_offset();
        // The first segment that must stay for its live entries, without rewrites.
        let lag = self.config.groups.rewrite_lag_bytes;
        for group in self.live_groups() {
            let Some(first) = Self::first_live_offset(&group)? else { continue };
            // Only a group in a segment that could otherwise go is worth copying.
            if end.saturating_sub(first) < lag || first / segment == end / segment {
                continue;
            }
            let (entries, bytes) = self.rewrite(&group)?;
            stats.rewritten_entries += entries;
            stats.rewritten_bytes += bytes;
        }
        let dispatched = self.checkpoint()?;
        let mut keep = dispatched;
        for group in self.live_groups() {
            if let Some(first) = Self::first_live_offset(&group)? {
                keep = keep.min(first);
            }
        }
        stats.segments_deleted += self.log.delete_segments_before(keep, usize::MAX)? as u64;
        Ok(*stats)
    }

    /// Copies the group's live entries to the log's end and moves its index to
    /// the copies; returns the entries and bytes copied.
    fn rewrite(&self, group: &Group<C>) -> Result<(u64, u64), RaftStoreError> {
        let _write = group.write.blocking_lock();
        if group.dropped.load(Ordering::Acquire) {
            return Ok((0, 0));
        }
        let from = group.live_from();
        let next = group.index.next_index();
        let mut bodies = Vec::with_capacity(usize::try_from(next.saturating_sub(from)).unwrap_or(0));
        let mut bytes = 0u64;
        for i in from..next {
            let Some(at) = group.index.get(i)? else { break };
            let record = self.log.read(at.offset)?;
            let (header, payload) = Header::parse(&record.body, at.offset)?;
            bodies.push(Header { kind: Kind::Rewritten, ..header }.encode(payload));
            bytes += record.size;
        }
        if bodies.is_empty() {
            return Ok((0, 0));
        }
        let _in_flight = self.in_flight();
        let (positions, durable) = self.write_records(group, from, &bodies, false)?;
        // The index moves to the copies only once they are all durable: until
        // then (and after a crash before it) it names the originals, which stay.
        #[cfg(planted_bugs)]
        let awaited = !crate::planted::is_active(crate::planted::Bug::RewriteNotAwaited);
        #[cfg(not(planted_bugs))]
        let awaited = true;
        if awaited {
            durable.wait()?;
        }
        {
            let _view = group.view.write();
            group.index.truncate_from(from)?;
            group.index.put_batch(from, &positions)?;
        }
        tracing::debug!(group = group.id, entries = bodies.len(), bytes, "raft group rewritten forward");
        Ok((bodies.len() as u64, bytes))
    }
}
