//! Recovery: every group's index cut at the dispatch checkpoint, then the
//! log replayed from it into every index in one pass.

use std::time::Duration;

use consume_queue::{ConsumeQueue, CqEntry};
use openraft::RaftTypeConfig;

use crate::error::RaftStoreError;
use crate::group::Group;
use crate::record::{Header, Kind};

/// What recovery found at open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineRecovery {
    /// Groups opened.
    pub groups: usize,
    /// The log offset replay started at (the dispatch checkpoint).
    pub replayed_from: u64,
    /// Records read by the replay.
    pub records_replayed: u64,
    /// Index entries found past the checkpoint and cut before the replay.
    pub entries_cut: u64,
    /// Time the whole open took.
    pub elapsed: Duration,
}

/// Applies one record of the log to its group's index at recovery.
///
/// The index on disk may be ahead of the checkpoint in one way: a truncation is
/// cut into the index (durably) when it happens, so entries replayed from
/// before its record can land past the index's end. Such a gap is noted in
/// `gap` (where it starts) and must be closed by a later cut at or below it
/// (that truncation's record, or an entry replacing the suffix); one still
/// open at the end of the replay is damage ([`RaftStoreError::IndexGap`]).
pub(crate) fn replay<C: RaftTypeConfig>(
    group: &Group<C>,
    header: Header,
    at: CqEntry,
    gap: &mut Option<(u64, u64)>,
) -> Result<(), RaftStoreError> {
    let index = &group.index;
    let i = header.index;
    let wanted_from = group.after_purged();
    let cut = |index: &ConsumeQueue, from: u64, gap: &mut Option<(u64, u64)>| {
        if gap.is_some_and(|(start, _)| from <= start) {
            *gap = None;
        }
        cut_from(index, from)
    };
    let put = |index: &ConsumeQueue, gap: &mut Option<(u64, u64)>| -> Result<(), RaftStoreError> {
        let next = index.next_index();
        if !index.is_empty() && i > next {
            if next <= wanted_from {
                // Everything the index holds is purged (a snapshot past the
                // last entry): it starts over here.
                index.clear()?;
            } else if gap.is_none() {
                *gap = Some((next, i));
            }
        }
        // A new leader's entry replaces the suffix from its index on.
        cut(index, i, gap)?;
        index.put(i, at)?;
        Ok(())
    };
    match header.kind {
        Kind::Truncation => cut(index, i.max(wanted_from), gap)?,
        // Entries at or below the purged id are not wanted: the index keeps
        // those it has while their segments last (reads start above it), but
        // never takes them back, so records far below a snapshot installed
        // beyond the log's end cost an open nothing.
        _ if i < wanted_from => {}
        Kind::Entry => put(index, gap)?,
        // An entry the index still holds elsewhere stays there: the rewrite
        // moved the index only once all its copies were durable, so an index
        // that did not move holds the originals, which are still in the log.
        Kind::Rewritten if index.get(i)?.is_some() => {}
        Kind::Rewritten => put(index, gap)?,
    }
    Ok(())
}

/// Drops the index's entries from `i` on; an index left without entries
/// starts over (it takes any index next).
pub(crate) fn cut_from(index: &ConsumeQueue, i: u64) -> Result<(), RaftStoreError> {
    if i <= index.min_index() {
        if index.next_index() != i || !index.is_empty() {
            index.clear()?;
        }
    } else {
        index.truncate_from(i)?;
    }
    Ok(())
}
