//! The groups' raft state: each group's vote, last purged log id and committed
//! log id, kept in memory and made durable two ways.
//!
//! - **Records in the shared log.** A group's creation and drop, its vote and
//!   its purged id are records ([`crate::record`]) appended and synced before
//!   the call that changes them returns; group commit shares those syncs
//!   between groups, as it does the entries'.
//! - **The state file** (`raft/state`): every group's state as of a log
//!   offset, its *point*, written whole (atomically: temporary file, sync,
//!   rename, directory sync) by the engine's maintenance thread at its
//!   checkpoints. An open reads it and applies the state records of the log
//!   from its point on; the engine never deletes a log segment at or past it.
//!
//! The committed id has no record: it is written with the state file, at most
//! a checkpoint interval after it changed, and never above the last entry this
//! node has made durable. After a crash it may be older than the last one
//! saved (openraft then re-applies from there, which is safe), never ahead of
//! the local log.
//!
//! ```text
//! "RAFTST01" | crc32c of the JSON u32 LE | the JSON of `Saved`
//! ```

use std::path::Path;

use mapped_file::Storage;
use openraft::{LogId, NodeId, Vote};
use serde::{Deserialize, Serialize};

use crate::error::RaftStoreError;

const MAGIC: &[u8; 8] = b"RAFTST01";

/// One group's raft state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct GroupState<NID: NodeId> {
    pub(crate) vote: Option<Vote<NID>>,
    pub(crate) purged: Option<LogId<NID>>,
    /// The committed id the state file holds (or will, once written).
    pub(crate) committed: Option<LogId<NID>>,
}

impl<NID: NodeId> Default for GroupState<NID> {
    fn default() -> Self {
        GroupState { vote: None, purged: None, committed: None }
    }
}

/// A group as the state file keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct SavedGroup<NID: NodeId> {
    /// The group's id (openraft's, the caller's).
    pub(crate) id: u64,
    /// Its queue in the queue index (never given to another group).
    pub(crate) key: u64,
    /// The log offset of its creation record: its records lie past it.
    pub(crate) created: u64,
    #[serde(flatten)]
    pub(crate) state: GroupState<NID>,
}

/// What the state file holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct Saved<NID: NodeId> {
    /// Every state record of the log below this offset is in here.
    pub(crate) point: u64,
    /// The queue key the next created group takes.
    pub(crate) next_key: u64,
    pub(crate) groups: Vec<SavedGroup<NID>>,
}

impl<NID: NodeId> Default for Saved<NID> {
    fn default() -> Self {
        Saved { point: 0, next_key: 0, groups: Vec::new() }
    }
}

/// Reads the state file at `path`: `None` if there is none.
pub(crate) fn read<NID: NodeId>(storage: &dyn Storage, path: &Path) -> Result<Option<Saved<NID>>, RaftStoreError> {
    let damaged = |reason: String| RaftStoreError::Meta { path: path.to_path_buf(), reason };
    let Some(bytes) =
        storage.read_small(path).map_err(|source| RaftStoreError::Io { path: path.to_path_buf(), source })?
    else {
        return Ok(None);
    };
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err(damaged("not a raft state file (bad header)".into()));
    }
    let crc = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
    if crc32c::crc32c(&bytes[12..]) != crc {
        return Err(damaged("CRC mismatch".into()));
    }
    serde_json::from_slice(&bytes[12..]).map(Some).map_err(|err| damaged(err.to_string()))
}

/// Writes `saved` to `path`, durably, replacing what was there.
pub(crate) fn write<NID: NodeId>(storage: &dyn Storage, path: &Path, saved: &Saved<NID>) -> Result<(), RaftStoreError> {
    let json = serde_json::to_vec(saved).map_err(RaftStoreError::Encode)?;
    let mut bytes = Vec::with_capacity(12 + json.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    bytes.extend_from_slice(&json);
    storage.replace_small(path, &bytes).map_err(|source| RaftStoreError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mapped_file::SimStorage;
    use openraft::CommittedLeaderId;

    #[test]
    fn a_state_file_reads_back_and_damage_is_named() {
        let sim = SimStorage::new();
        let path = Path::new("/s/state");
        sim.create_dir_all(Path::new("/s")).unwrap();
        assert!(read::<u64>(&sim, path).unwrap().is_none());
        let state = GroupState {
            vote: Some(Vote::new(3, 1)),
            purged: Some(LogId::new(CommittedLeaderId::new(2, 1), 40)),
            committed: None,
        };
        let saved = Saved { point: 4096, next_key: 8, groups: vec![SavedGroup { id: 7, key: 5, created: 100, state }] };
        write(&sim, path, &saved).unwrap();
        let back: Saved<u64> = read(&sim, path).unwrap().unwrap();
        assert_eq!((back.point, back.next_key, back.groups.len()), (4096, 8, 1));
        assert_eq!(back.groups[0].state.vote, Some(Vote::new(3, 1)));
        let bytes = sim.file_bytes(path).unwrap();
        assert!(sim.patch_file(path, bytes.len() - 2, b"#"));
        let err = read::<u64>(&sim, path).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
    }
}
