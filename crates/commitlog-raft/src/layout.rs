//! Where a raft store directory keeps what: the names of its files and
//! directories (the layout is drawn in the crate's documentation).

/// The commit log's directory inside a raft store directory.
pub const LOG_DIR: &str = "log";
/// The raft state's directory (the queue index and the state file) inside a
/// raft store directory.
pub const RAFT_DIR: &str = "raft";
/// The queue index's directory (every group's entries), in the raft directory.
pub const QUEUE_INDEX_DIR: &str = "queueindex";
/// The state file (every group's vote, committed and purged ids), in the raft
/// directory.
pub const STATE_FILE: &str = "state";
/// The group [`RaftLogStore::open`](crate::RaftLogStore::open) opens: a store directory with one raft group.
pub const SINGLE_GROUP: u64 = 0;
