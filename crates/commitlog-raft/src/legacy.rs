//! The earlier layout (a consume queue and a meta file per group), read once
//! to convert a directory to the queue index and the state file:
//!
//! ```text
//! <dir>/raft/groups.json          the groups, each with the log offset it was created at
//! <dir>/raft/dispatched           the dispatch checkpoint
//! <dir>/raft/groups/<id>/index/   a group's consume queue
//! <dir>/raft/groups/<id>/meta     a group's vote, committed and last purged log id (JSON)
//! ```
//!
//! The groups' state comes from `groups.json` and the meta files; their
//! entries from the log (the engine builds the index from it). Records of
//! that layout are kinds 1 to 3, which this version reads as it writes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mapped_file::Storage;
use openraft::NodeId;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use store_io::remove_files;

use crate::error::{io_err, io_error, RaftStoreError};
use crate::layout::RAFT_DIR;
use crate::state::{GroupState, Saved, SavedGroup};

const GROUPS_FILE: &str = "groups.json";
const DISPATCHED_FILE: &str = "dispatched";
const GROUPS_DIR: &str = "groups";
const INDEX_DIR: &str = "index";
const META_FILE: &str = "meta";

#[derive(Debug, Default, Deserialize)]
struct Registry {
    groups: BTreeMap<u64, u64>,
    #[serde(default)]
    dropping: Vec<u64>,
}

fn group_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join(RAFT_DIR).join(GROUPS_DIR).join(id.to_string())
}

fn read_json<T: DeserializeOwned>(storage: &dyn Storage, path: &Path) -> Result<Option<T>, RaftStoreError> {
    match storage.read_small(path).map_err(io_err(path))? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| RaftStoreError::Meta { path: path.to_path_buf(), reason: source.to_string() }),
        None => Ok(None),
    }
}

/// The state of a directory of the earlier layout in `dir`, as of `point`
/// (no state record lies in such a log: the replay from there finds none);
/// `None` if it is not one.
pub(crate) fn read<NID: NodeId>(
    storage: &dyn Storage,
    dir: &Path,
    point: u64,
) -> Result<Option<Saved<NID>>, RaftStoreError> {
    let Some(registry) = read_json::<Registry>(storage, &dir.join(RAFT_DIR).join(GROUPS_FILE))? else {
        return Ok(None);
    };
    let mut groups = Vec::with_capacity(registry.groups.len());
    for (key, (&id, &created)) in registry.groups.iter().enumerate() {
        let meta: GroupState<NID> = read_json(storage, &group_dir(dir, id).join(META_FILE))?.unwrap_or_default();
        groups.push(SavedGroup { id, key: key as u64, created, state: meta });
    }
    Ok(Some(Saved { point, next_key: groups.len() as u64, groups }))
}

/// Whether files of the earlier layout are in `dir`.
pub(crate) fn present(storage: &dyn Storage, dir: &Path) -> Result<bool, RaftStoreError> {
    let path = dir.join(RAFT_DIR).join(GROUPS_FILE);
    Ok(storage.read_small(&path).map_err(io_err(&path))?.is_some())
}

/// Deletes the earlier layout's files (its directories stay, empty), once the
/// state file holds what they said.
pub(crate) fn remove(storage: &dyn Storage, dir: &Path) -> Result<(), RaftStoreError> {
    let raft = dir.join(RAFT_DIR);
    let registry = read_json::<Registry>(storage, &raft.join(GROUPS_FILE))?.unwrap_or_default();
    for id in registry.groups.keys().chain(&registry.dropping) {
        let group = group_dir(dir, *id);
        remove_files(storage, &group.join(INDEX_DIR), io_error)?;
        remove_files(storage, &group, io_error)?;
    }
    for name in [DISPATCHED_FILE, GROUPS_FILE] {
        let path = raft.join(name);
        match storage.remove(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(io_err(&path)(err)),
            _ => {}
        }
    }
    Ok(())
}
