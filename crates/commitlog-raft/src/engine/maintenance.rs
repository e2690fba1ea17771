//! The engine's upkeep, on its maintenance thread: checkpoints (the queue
//! index sealed, the state file written) and reclaim rounds (rewrite lagging
//! groups forward, then delete the log's segments below every group's first
//! live entry, and the index's runs with them).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use openraft::RaftTypeConfig;

use super::Engine;
use crate::error::RaftStoreError;
use crate::group::Group;
use crate::record::{Header, Kind};
use crate::state;

/// What the engine's purge has done since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReclaimStats {
    /// Reclaim rounds run.
    pub rounds: u64,
    /// Entries copied forward (rewritten) out of segments about to go.
    pub rewritten_entries: u64,
    /// Bytes of those entries' records.
    pub rewritten_bytes: u64,
    /// Log segments deleted.
    pub segments_deleted: u64,
    /// Queue-index runs deleted with them.
    pub index_runs_deleted: u64,
}

/// What the maintenance thread is asked to do.
#[derive(Default)]
pub(crate) struct Maintenance {
    pub(crate) stop: bool,
    /// A purge asked for a reclaim round.
    pub(crate) reclaim_wanted: bool,
}

/// The maintenance thread: a checkpoint and a reclaim round every
/// `checkpoint_interval_ms`, or when a purge asks for one.
pub(super) fn maintain<C: RaftTypeConfig>(engine: &Engine<C>) {
    let mut next_round = Instant::now() + Duration::from_millis(engine.config.groups.checkpoint_interval_ms);
    loop {
        {
            let (state, changed) = engine.maintenance_state();
            let mut state = state.lock();
            if !state.stop && !state.reclaim_wanted {
                changed.wait_until(&mut state, next_round.max(Instant::now()));
            }
            if state.stop {
                return;
            }
            if !std::mem::take(&mut state.reclaim_wanted) && Instant::now() < next_round {
                continue;
            }
        }
        next_round = Instant::now() + Duration::from_millis(engine.config.groups.checkpoint_interval_ms);
        if let Err(err) = engine.reclaim() {
            tracing::warn!(%err, "raft log engine: checkpoint or reclaim failed; retrying next round");
        }
    }
}

impl<C: RaftTypeConfig> Engine<C> {
    /// Seals the index and writes the state file (see
    /// [`RaftLogEngine::checkpoint`](crate::RaftLogEngine::checkpoint));
    /// `force`: the index sealed to everything durable and indexed, and the
    /// state written, whatever changed (a shutdown, a conversion). Returns
    /// the log offset an open would replay from.
    pub(crate) fn checkpoint(&self, force: bool) -> Result<u64, RaftStoreError> {
        let mut point = self.state_point.lock();
        // Every record below `safe` is durable and applied to the index and
        // the groups' state: those of an operation between its append and
        // its update lie at or past its start.
        let end = self.log.max_offset();
        let safe = self.in_flight.min_start().map_or(end, |start| start.min(end)).min(self.log.flushed_offset());
        let segment = self.log.config().mapped_file_size_commit_log as u64;
        let sealed = self.index.sealed_to();
        let to = if force || self.index.active_entries() >= self.config.groups.seal_entries {
            safe
        } else {
            safe / segment * segment // a run per log segment
        };
        #[cfg(planted_bugs)]
        let to = if crate::planted::is_active(crate::planted::Bug::SealPastDurable) { end } else { to };
        if to > sealed {
            self.index.seal(&*self.storage, to)?;
            // A cut made by a record past `to` (a truncation, or a purge
            // emptying a queue) holds the seal back at the first entry it
            // dropped, until a seal passes the cutting record: without this,
            // a purge's segments would stay until the log fills the segment
            // after it. Sealing everything durable passes every durable cut.
            if self.index.sealed_to() < to && safe > to {
                self.index.seal(&*self.storage, safe)?;
            }
        }
        // Changes made before this swap are in the state read below.
        let mut changed = self.state_dirty.swap(false, Ordering::AcqRel);
        for group in self.live_groups() {
            changed |= group.settle_committed();
        }
        if force || changed || safe.saturating_sub(*point) >= segment {
            let at = safe.max(*point);
            if let Err(err) = state::write(&*self.storage, &self.state_path(), &self.saved(at)) {
                self.state_dirty.store(true, Ordering::Release);
                return Err(err);
            }
            *point = at;
        }
        Ok(self.index.sealed_to().min(*point))
    }

    /// The log offset of the group's first live entry (above its purged id),
    /// if it has one.
    fn first_live_offset(&self, group: &Group<C>) -> Option<u64> {
        let (min, end) = self.index.extent(group.key)?;
        let from = group.after_purged().max(min);
        if from >= end {
            return None;
        }
        self.index.get(group.key, from, 1).first().map(|e| e.log_offset)
    }

    pub(crate) fn reclaim(&self) -> Result<ReclaimStats, RaftStoreError> {
        let mut stats = self.reclaiming.lock();
        stats.rounds += 1;
        let segment = self.log.config().mapped_file_size_commit_log as u64;
        let end = self.log.max_offset();
        // The first segment that must stay for its live entries, without rewrites.
        let lag = self.config.groups.rewrite_lag_bytes;
        for group in self.live_groups() {
            let Some(first) = self.first_live_offset(&group) else { continue };
            // Only a group in a segment that could otherwise go is worth copying.
            if end.saturating_sub(first) < lag || first / segment == end / segment {
                continue;
            }
            let (entries, bytes) = self.rewrite(&group)?;
            stats.rewritten_entries += entries;
            stats.rewritten_bytes += bytes;
        }
        let mut keep = self.checkpoint(false)?;
        for group in self.live_groups() {
            if let Some(first) = self.first_live_offset(&group) {
                keep = keep.min(first);
            }
        }
        stats.segments_deleted += self.log.delete_segments_before(keep, usize::MAX)? as u64;
        stats.index_runs_deleted += self.index.expire(&*self.storage, self.log.min_offset())? as u64;
        Ok(*stats)
    }

    /// Copies the group's live entries to the log's end and moves its queue
    /// to the copies; returns the entries and bytes copied.
    fn rewrite(&self, group: &Group<C>) -> Result<(u64, u64), RaftStoreError> {
        let _write = group.write.blocking_lock();
        if group.dropped.load(Ordering::Acquire) {
            return Ok((0, 0));
        }
        let Some((min, next)) = self.index.extent(group.key) else { return Ok((0, 0)) };
        let from = group.after_purged().max(min);
        let mut bodies = Vec::with_capacity(usize::try_from(next.saturating_sub(from)).unwrap_or(0));
        let mut bytes = 0u64;
        for at in self.index.get(group.key, from, usize::try_from(next.saturating_sub(from)).unwrap_or(usize::MAX)) {
            let record = self.log.read(at.log_offset)?;
            let (header, payload) = Header::parse(&record.body, at.log_offset)?;
            bodies.push(Header { kind: Kind::Rewritten, ..header }.encode(payload));
            bytes += record.size;
        }
        if bodies.is_empty() {
            return Ok((0, 0));
        }
        let _in_flight = self.in_flight();
        let (positions, durable) = self.write_records(group, from, &bodies, false)?;
        // The queue moves to the copies only once they are all durable: until
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
            self.index.truncate(group.key, from, positions[0].log_offset)?;
            for (k, at) in positions.iter().enumerate() {
                self.index.append(group.key, from + k as u64, *at)?;
            }
        }
        tracing::debug!(group = group.id, entries = bodies.len(), bytes, "raft group rewritten forward");
        Ok((bodies.len() as u64, bytes))
    }
}
