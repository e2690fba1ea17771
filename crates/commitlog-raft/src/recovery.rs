//! Recovery: the log replayed, in one pass, into every group's queue of the
//! index (from where the index's sealed runs end) and into the groups' state
//! (from the state file's point).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::{LogId, RaftTypeConfig, Vote};
use queue_index::{Entry as IndexEntry, QueueIndex};

use crate::error::RaftStoreError;
use crate::group::Group;
use crate::record::{Header, Kind};
use crate::state::GroupState;

/// What recovery found at open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineRecovery {
    /// Groups opened.
    pub groups: usize,
    /// The log offset replay started at: the lower of where the queue
    /// index's sealed runs end and the state file's point.
    pub replayed_from: u64,
    /// Records read by the replay.
    pub records_replayed: u64,
    /// The queue index was rebuilt from the log: its runs covered more than
    /// the log holds, or runs were lost whose records the log no longer holds
    /// whole.
    pub index_rebuilt: bool,
    /// The state file was damaged and the groups' state rebuilt from the
    /// log's records (possible while the log holds every record it ever had:
    /// the committed ids are then forgotten).
    pub state_rebuilt: bool,
    /// The directory was of the file-per-group layout and was converted.
    pub converted: bool,
    /// Time the whole open took.
    pub elapsed: Duration,
}

/// The replay's state: the index, the groups as the replay has them, the key
/// the next created group takes, and gaps found (by group).
pub(crate) struct Replay<'a, C: RaftTypeConfig> {
    pub(crate) index: &'a QueueIndex,
    pub(crate) groups: HashMap<u64, Arc<Group<C>>>,
    pub(crate) next_key: u64,
    pub(crate) gaps: HashMap<u64, Option<(u64, u64)>>,
}

/// Applies one record of the log: to the index if `to_index` (it lies past
/// the index's sealed runs), to the groups' state if `to_state` (past the
/// state file's point).
///
/// A group's entries replay as they were made: an entry replaces whatever the
/// group holds from its index on (a new leader's entry after a conflict, as
/// raft does), a truncation cuts. A jump past the group's end is a gap,
/// unless everything the group held is purged (a snapshot past its last
/// entry: it starts over there), and must be closed by a later cut at or below
/// it; one still open at the end of the replay is damage
/// ([`RaftStoreError::IndexGap`]).
pub(crate) fn replay<C: RaftTypeConfig>(
    run: &mut Replay<'_, C>,
    header: Header,
    payload: &[u8],
    at: IndexEntry,
    to_index: bool,
    to_state: bool,
) -> Result<(), RaftStoreError> {
    let offset = at.log_offset;
    let decode = |reason: &'static str| RaftStoreError::Format { offset, reason };
    match header.kind {
        Kind::Created => {
            if to_state && run.groups.get(&header.group).is_none_or(|g| g.key != header.index) {
                let group = Group::new(header.group, header.index, offset, GroupState::default());
                run.groups.insert(header.group, Arc::new(group));
            }
            run.next_key = run.next_key.max(header.index + 1);
            return Ok(());
        }
        Kind::Dropped => {
            if to_state && run.groups.get(&header.group).is_some_and(|g| g.key == header.index) {
                run.groups.remove(&header.group);
            }
            return Ok(());
        }
        _ => {}
    }
    let Some(group) = run.groups.get(&header.group) else { return Ok(()) }; // dropped
    if offset < group.created {
        return Ok(()); // an earlier group of this id
    }
    match header.kind {
        Kind::Vote => {
            if to_state {
                let vote: Vote<C::NodeId> = serde_json::from_slice(payload).map_err(|_| decode("a bad vote"))?;
                group.state.lock().saved.vote = Some(vote);
            }
            return Ok(());
        }
        Kind::Purged => {
            let purged: LogId<C::NodeId> = serde_json::from_slice(payload).map_err(|_| decode("a bad purged id"))?;
            if to_index {
                // Purged past its last entry: the queue was emptied here.
                let (min, end) = run.index.extent(group.key).unwrap_or_default();
                if end > min && purged.index.saturating_add(1) >= end {
                    run.index.truncate(group.key, 0, offset)?;
                }
            }
            if to_state {
                group.state.lock().saved.purged = Some(purged);
            }
            return Ok(());
        }
        _ => {}
    }
    if !to_index {
        return Ok(());
    }
    let (index, key, i) = (run.index, group.key, header.index);
    let wanted_from = group.after_purged();
    let gap = run.gaps.entry(header.group).or_default();
    let cut = |from: u64, gap: &mut Option<(u64, u64)>| -> Result<(), RaftStoreError> {
        if gap.is_some_and(|(start, _)| from <= start) {
            *gap = None;
        }
        cut_from(index, key, from, offset)
    };
    let put = |gap: &mut Option<(u64, u64)>| -> Result<(), RaftStoreError> {
        let (min, end) = index.extent(key).unwrap_or_default();
        if end > min && i > end {
            if end <= wanted_from {
                // Everything the queue holds is purged (a snapshot past its
                // last entry): it starts over here.
                index.truncate(key, 0, offset)?;
            } else if gap.is_none() {
                *gap = Some((end, i));
            }
        }
        // A new leader's entry replaces the suffix from its index on.
        cut(i, gap)?;
        if gap.is_none() {
            index.append(key, i, at)?;
        }
        Ok(())
    };
    match header.kind {
        Kind::Truncation => cut(i.max(wanted_from), gap)?,
        // Entries at or below the purged id are not wanted: the index keeps
        // those it has while their segments last (reads start above it), but
        // never takes them back, so records far below a snapshot installed
        // beyond the log's end cost an open nothing.
        _ if i < wanted_from => {}
        Kind::Entry => put(gap)?,
        // An entry the index still holds elsewhere stays there: the rewrite
        // moved the index only once all its copies were durable, so an index
        // that did not move holds the originals, which are still in the log.
        Kind::Rewritten if !index.get(key, i, 1).is_empty() => {}
        Kind::Rewritten => put(gap)?,
        Kind::Vote | Kind::Purged | Kind::Created | Kind::Dropped => {}
    }
    Ok(())
}

/// Cuts the group's queue from raft index `i` on, by the record at `at_log`;
/// at or below its first entry the queue is emptied (it takes any index next).
pub(crate) fn cut_from(index: &QueueIndex, key: u64, i: u64, at_log: u64) -> Result<(), RaftStoreError> {
    let (min, _) = index.extent(key).unwrap_or_default();
    index.truncate(key, if i <= min { 0 } else { i }, at_log)?;
    Ok(())
}
