//! Where a raft store directory keeps what: the names of its files and
//! directories (the layout is drawn in the crate's documentation).

use std::path::{Path, PathBuf};

/// The commit log's directory inside a raft store directory.
pub const LOG_DIR: &str = "log";
/// The raft state's directory (the groups' indexes and meta files) inside a
/// raft store directory.
pub const RAFT_DIR: &str = "raft";
/// The index's directory inside a group's directory ([`group_dir`]).
pub const INDEX_DIR: &str = "index";
/// The group [`RaftLogStore::open`](crate::RaftLogStore::open) opens: a store directory with one raft group.
pub const SINGLE_GROUP: u64 = 0;

/// The registry of groups, in the raft directory.
pub const GROUPS_FILE: &str = "groups.json";
/// The dispatch checkpoint, in the raft directory.
pub const DISPATCHED_FILE: &str = "dispatched";
/// The directory of the groups' own directories, in the raft directory.
pub const GROUPS_DIR: &str = "groups";

/// The directory of group `group`'s index and meta file in the store directory `dir`.
pub fn group_dir(dir: &Path, group: u64) -> PathBuf {
    dir.join(RAFT_DIR).join(GROUPS_DIR).join(group.to_string())
}
