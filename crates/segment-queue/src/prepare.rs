//! Prepared segments: the preallocation thread writes zeros over a new segment
//! and syncs them before roll-over takes it, so the log's own syncs meet written
//! blocks, not unwritten extents the file system must convert first
//! ([`SegmentPreparation`]).
//!
//! Gently, because writing a whole segment of zeros at once competes with the
//! log's syncs for the disk (measured: a durable batch's p99 went from under 2 ms
//! to 3-4 ms): the file is prepared in steps of `preparation_chunk_bytes`, each
//! written and synced on its own, and a step starts only
//! - when no sync of the queue has been in flight for [`QUIET`] ([`SyncActivity`]):
//!   a log whose durable batches follow each other back to back gets no
//!   preparation at all, and rolls over onto an allocated segment as without it;
//! - within the bandwidth budget ([`Pace`]), and
//! - while no roll-over is waiting for the file: a roll-over that outruns the
//!   preparation takes the file as far as it got (its first part written, the
//!   rest allocated as in [`SegmentPreparation::Allocated`]) and the preparer
//!   stops, counted in [`PreparationStats::handed_over_early`].
//!
//! So one step (one write and one sync of `preparation_chunk_bytes`) is the most
//! preparation can add to a durable batch's wait or to a roll-over.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mapped_file::{MappedFile, MappedFileError};

use crate::SegmentPreparation;

/// How long a preparer waiting for the queue's syncs to pause sleeps at first;
/// the sleep doubles while they go on, up to [`LONGEST_NAP`], so a log syncing
/// back to back for minutes wakes it a few times a second, not thousands.
const FIRST_NAP: Duration = Duration::from_millis(1);

/// The longest sleep of a preparer waiting for the queue's syncs to pause.
const LONGEST_NAP: Duration = Duration::from_millis(50);

/// How long the queue's syncs must have been idle before a step starts. Longer
/// than the gap between two durable batches of a busy producer (tens of
/// microseconds), so a step never lands in the middle of a stream of them.
pub(crate) const QUIET: Duration = Duration::from_millis(1);

/// A bandwidth budget, as a virtual schedule (the generic cell rate algorithm):
/// each step may start once the time its predecessors' bytes cost at `rate`
/// has passed. So by any time `t` since the start, at most `rate * t` bytes have
/// been written, plus the step that started last.
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    /// Bytes per second; 0: no budget.
    rate: u64,
    /// When the next step may start, since the start of the preparation.
    next: Duration,
}

impl Pace {
    pub(crate) fn new(rate: u64) -> Self {
        Pace { rate, next: Duration::ZERO }
    }

    /// How long a step wanting to start at `now` must wait.
    pub(crate) fn delay(&self, now: Duration) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        self.next.saturating_sub(now)
    }

    /// A step of `bytes` started at `now`.
    pub(crate) fn spend(&mut self, now: Duration, bytes: u64) {
        if self.rate == 0 {
            return;
        }
        // `rate` is non-zero here, so the division cannot fail.
        let nanos = u128::from(bytes).saturating_mul(1_000_000_000).checked_div(u128::from(self.rate)).unwrap_or(0);
        let cost = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        self.next = self.next.max(now).saturating_add(cost);
    }
}

/// Syncs of a queue in flight, and when the last one ended, for the preparer to
/// stay out of their way.
#[derive(Debug)]
pub(crate) struct SyncActivity {
    in_flight: AtomicUsize,
    /// When the last sync ended, in nanoseconds since `epoch`.
    last_end: AtomicU64,
    epoch: Instant,
}

impl Default for SyncActivity {
    fn default() -> Self {
        SyncActivity { in_flight: AtomicUsize::new(0), last_end: AtomicU64::new(0), epoch: Instant::now() }
    }
}

impl SyncActivity {
    /// Marks a sync in flight until the guard drops.
    pub(crate) fn begin(&self) -> SyncInFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        SyncInFlight(self)
    }

    /// How long no sync has been in flight; `None` while one is.
    pub(crate) fn quiet_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = Duration::from_nanos(self.last_end.load(Ordering::Acquire));
        Some(self.epoch.elapsed().saturating_sub(since))
    }

    fn end(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_end.fetch_max(now, Ordering::AcqRel);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A sync in flight (see [`SyncActivity::begin`]).
pub(crate) struct SyncInFlight<'a>(&'a SyncActivity);

impl Drop for SyncInFlight<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// What segment preparation did since the queue was loaded
/// ([`SegmentQueue::preparation_stats`](crate::SegmentQueue::preparation_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PreparationStats {
    /// Segments whose blocks were all written and synced before roll-over took them.
    pub prepared: u64,
    /// Segments a roll-over took while their preparation was still under way: their
    /// blocks are written only as far as it got.
    pub handed_over_early: u64,
    /// Segments prepared whole by their owner before any append, unpaced
    /// ([`SegmentQueue::prepare_active_segment`](crate::SegmentQueue::prepare_active_segment):
    /// a new log's first segment, at its open).
    pub prepared_in_place: u64,
    /// Segments made without preparation while preparation is on: created in
    /// place by a roll-over (nothing prepared for it: the first segment of a new
    /// queue, or a preparation that failed). Segments made from spares do not count.
    pub made_unprepared: u64,
    /// Bytes of zeros written and synced.
    pub bytes_written: u64,
    /// Steps written and synced.
    pub steps: u64,
    /// Times a step waited because a sync of the queue was in flight or had
    /// ended less than a millisecond before.
    pub waits_for_syncs: u64,
}

/// The counters behind [`PreparationStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    prepared: AtomicU64,
    handed_over_early: AtomicU64,
    prepared_in_place: AtomicU64,
    pub(crate) made_unprepared: AtomicU64,
    bytes_written: AtomicU64,
    steps: AtomicU64,
    waits_for_syncs: AtomicU64,
}

impl Counters {
    /// One step of a preparation: zeros written and synced over `len` bytes
    /// of `file` from `pos` ([`MappedFile::prepare_range`]), counted when
    /// done; false (nothing written) once something was appended.
    fn step(&self, file: &MappedFile, pos: usize, len: usize) -> Result<bool, MappedFileError> {
        let done = file.prepare_range(pos, len)?;
        if done {
            bump(&self.steps, 1);
            bump(&self.bytes_written, len as u64);
        }
        Ok(done)
    }

    pub(crate) fn snapshot(&self) -> PreparationStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PreparationStats {
            prepared: get(&self.prepared),
            handed_over_early: get(&self.handed_over_early),
            prepared_in_place: get(&self.prepared_in_place),
            made_unprepared: get(&self.made_unprepared),
            bytes_written: get(&self.bytes_written),
            steps: get(&self.steps),
            waits_for_syncs: get(&self.waits_for_syncs),
        }
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// How the preallocation thread prepares new segments.
#[derive(Debug, Clone)]
pub(crate) struct Preparer {
    pub(crate) mode: SegmentPreparation,
    pub(crate) chunk: usize,
    pub(crate) rate: u64,
    pub(crate) activity: Arc<SyncActivity>,
    pub(crate) counters: Arc<Counters>,
}

/// Why a preparation stopped before the end of the file.
pub(crate) enum Interrupt {
    /// A roll-over is waiting for this file.
    HandOver,
    /// The thread is stopping.
    Stop,
}

impl Preparer {
    /// Writes and syncs zeros over `file` step by step. Between steps `wait`
    /// sleeps up to the duration given (woken early by a hand-over or a stop)
    /// and says whether to stop. A failed step deletes the file and returns the
    /// error; a stop returns the file as far as it got.
    pub(crate) fn prepare(
        &self,
        file: MappedFile,
        mut wait: impl FnMut(Duration) -> Option<Interrupt>,
    ) -> Result<MappedFile, MappedFileError> {
        let size = file.file_size();
        let chunk = self.chunk.clamp(1, size.max(1));
        let started = Instant::now();
        let mut pace = Pace::new(self.rate);
        let mut pos = 0usize;
        // True when the preparation must end now: a roll-over takes the file
        // (counted) or the queue stops.
        let mut interrupted = |nap| match wait(nap) {
            None => false,
            Some(Interrupt::HandOver) => {
                bump(&self.counters.handed_over_early, 1);
                true
            }
            Some(Interrupt::Stop) => true,
        };
        while pos < size {
            let mut waited_for_sync = false;
            let mut backoff = FIRST_NAP;
            loop {
                let delay = pace.delay(started.elapsed());
                // How much longer the queue's syncs must stay idle.
                let unquiet = self.activity.quiet_for().map_or(QUIET, |quiet| QUIET.saturating_sub(quiet));
                if delay.is_zero() && unquiet.is_zero() {
                    break;
                }
                if !unquiet.is_zero() && !waited_for_sync {
                    waited_for_sync = true;
                    bump(&self.counters.waits_for_syncs, 1);
                }
                let nap = if unquiet.is_zero() {
                    delay
                } else {
                    let nap = delay.max(unquiet).max(backoff);
                    backoff = backoff.saturating_mul(2).min(LONGEST_NAP);
                    nap
                };
                if interrupted(nap) {
                    return Ok(file);
                }
            }
            // Looked at once more right before the step: a roll-over waiting now
            // takes the file without waiting for one more step.
            if interrupted(Duration::ZERO) {
                return Ok(file);
            }
            let len = chunk.min(size.saturating_sub(pos)); // `pos < size`
            pace.spend(started.elapsed(), len as u64);
            match self.counters.step(&file, pos, len) {
                Ok(true) => {}
                // Only while nothing was appended, which holds until hand-over.
                Ok(false) => break,
                Err(err) => {
                    if let Err(remove) = file.destroy() {
                        tracing::error!(path = %file.path().display(), %remove, "could not delete a segment whose preparation failed");
                    }
                    return Err(err);
                }
            }
            pos = pos.saturating_add(len);
        }
        if self.mode == SegmentPreparation::WrittenAndFaulted {
            if let Err(err) = file.populate() {
                tracing::warn!(path = %file.path().display(), %err, "could not fault a prepared segment in");
            }
        }
        bump(&self.counters.prepared, 1);
        Ok(file)
    }
}

/// The step of a preparation in place: large, because nothing waits beside it
/// (one write and one sync per 8 MiB), at most the segment.
const IN_PLACE_STEP: usize = 8 << 20;

/// Writes and syncs zeros over the whole of `file`, unpaced, while nothing is
/// appended to it: the preparation of a segment its owner made before any
/// writer runs. Returns false, having written what it could, once an append
/// landed (zeros never go over appended bytes: each step checks, under the
/// segment's append lock, that nothing was appended). A failed step's sync
/// latches the segment's failure latch, as every failed sync does.
pub(crate) fn prepare_in_place(file: &MappedFile, chunk: usize, counters: &Counters) -> Result<bool, MappedFileError> {
    let size = file.file_size();
    let step = chunk.max(IN_PLACE_STEP).min(size).max(1);
    let mut pos = 0usize;
    while pos < size {
        let len = step.min(size.saturating_sub(pos));
        if !counters.step(file, pos, len)? {
            return Ok(false);
        }
        pos = pos.saturating_add(len);
    }
    bump(&counters.prepared_in_place, 1);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic clock: steps wanting to start at arbitrary times never
    /// get ahead of the budget by more than one step.
    #[test]
    fn the_pace_admits_no_more_than_its_rate_plus_one_step() {
        let rate = 1_000_000u64; // bytes per second
        let chunk = 4096u64;
        let mut pace = Pace::new(rate);
        let mut now = Duration::ZERO;
        let mut written = 0u64;
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..10_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Wake-ups at random moments, early or late.
            now += Duration::from_micros(seed % 3000);
            let delay = pace.delay(now);
            if delay.is_zero() {
                pace.spend(now, chunk);
                written += chunk;
                let allowed = u128::from(rate) * now.as_nanos() / 1_000_000_000 + u128::from(chunk);
                assert!(u128::from(written) <= allowed, "{written} bytes by {now:?}: budget {allowed}");
            } else {
                // Sleeping the delay always makes the step admissible.
                assert!(pace.delay(now + delay).is_zero());
            }
        }
        assert!(written > 0, "the budget admitted nothing");
    }

    #[test]
    fn no_budget_admits_at_once() {
        let mut pace = Pace::new(0);
        pace.spend(Duration::ZERO, u64::MAX);
        assert_eq!(pace.delay(Duration::ZERO), Duration::ZERO);
    }
}
