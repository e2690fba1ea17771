//! A small replicated key-value state machine over openraft: the one openraft's
//! storage suite runs with, and the `raft-node` example's.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, RaftTypeConfig, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::RwLock;

/// A store configuration for tests: small segments, so a few hundred entries
/// span several of them, and no disk-space rule (the tests must not depend on
/// how full the machine's disk is).
pub fn small_config(segment_bytes: usize) -> commitlog_raft::RaftStoreConfig {
    let mut config = commitlog_raft::RaftStoreConfig::default();
    config.log.disk_space_warning_level_ratio = 100;
    config.log.disk_max_used_space_ratio = 100;
    config.log.clean_file_forcibly_enable = false;
    config.log.mapped_file_size_commit_log = segment_bytes;
    config.log.max_message_size = 16 << 10;
    config
}

/// A write: set `key` to `value`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub key: String,
    pub value: String,
}

/// What a write answers: the value now stored.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub value: Option<String>,
}

openraft::declare_raft_types!(
    /// The type configuration of the key-value example.
    pub TypeConfig:
        D = Request,
        R = Response,
);

pub type NodeId = u64;

/// The state machine's data.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
pub struct Data {
    pub last_applied: Option<LogId<NodeId>>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub kv: BTreeMap<String, String>,
}

#[derive(Debug)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

/// The state machine, in memory (a snapshot rebuilds it). With a directory
/// ([`StateMachine::open`]) its snapshots are also saved there, durably, before
/// openraft is told of them (openraft purges the log up to a snapshot it was
/// told of), and a restart starts from the last one.
#[derive(Debug, Default)]
pub struct StateMachine {
    pub data: RwLock<Data>,
    snapshot: RwLock<Option<StoredSnapshot>>,
    snapshot_idx: std::sync::atomic::AtomicU64,
    dir: Option<PathBuf>,
}

/// The file a saved snapshot lives in, in the state machine's directory.
pub const SNAPSHOT_FILE: &str = "snapshot.json";

/// The file counting the snapshots installed from a leader, in the state
/// machine's directory (for tests that must know the install path ran).
pub const INSTALLS_FILE: &str = "installs";

/// How many snapshots the state machine saved in `dir` was installed from a leader.
pub fn installs(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join(INSTALLS_FILE)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// A snapshot as saved: its meta and the state machine's data.
#[derive(Serialize, Deserialize)]
struct SavedSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Data,
}

impl StateMachine {
    /// A state machine whose snapshots are saved in `dir` (created if missing),
    /// starting from the last one saved there, if any.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut sm = StateMachine { dir: Some(dir.to_path_buf()), ..StateMachine::default() };
        match std::fs::read(dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => {
                let saved: SavedSnapshot = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
                let data = serde_json::to_vec(&saved.data).map_err(std::io::Error::other)?;
                sm.data = RwLock::new(saved.data);
                sm.snapshot = RwLock::new(Some(StoredSnapshot { meta: saved.meta, data }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(sm)
    }

    /// Saves a snapshot durably (temporary file, fsync, rename, directory
    /// fsync), if the state machine has a directory.
    fn save(&self, meta: &SnapshotMeta<NodeId, BasicNode>, data: &Data) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let bytes = serde_json::to_vec(&SavedSnapshot { meta: meta.clone(), data: data.clone() })
            .map_err(std::io::Error::other)?;
        let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(SNAPSHOT_FILE))?;
        std::fs::File::open(dir)?.sync_all()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Arc<StateMachine> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let data = self.data.read().await;
        let bytes = serde_json::to_vec(&*data).map_err(|e| StorageIOError::read_state_machine(&e))?;
        let idx = self.snapshot_idx.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let snapshot_id = match &data.last_applied {
            Some(last) => format!("{}-{}-{idx}", last.leader_id, last.index),
            None => format!("--{idx}"),
        };
        let meta =
            SnapshotMeta { last_log_id: data.last_applied, last_membership: data.last_membership.clone(), snapshot_id };
        self.save(&meta, &data).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        drop(data);
        *self.snapshot.write().await = Some(StoredSnapshot { meta: meta.clone(), data: bytes.clone() });
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TypeConfig> for Arc<StateMachine> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        let data = self.data.read().await;
        Ok((data.last_applied, data.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let mut data = self.data.write().await;
        let mut out = Vec::new();
        for entry in entries {
            data.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => out.push(Response { value: None }),
                EntryPayload::Normal(req) => {
                    data.kv.insert(req.key, req.value.clone());
                    out.push(Response { value: Some(req.value) });
                }
                EntryPayload::Membership(m) => {
                    data.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    out.push(Response { value: None });
                }
            }
        }
        Ok(out)
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<<TypeConfig as RaftTypeConfig>::SnapshotData>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<<TypeConfig as RaftTypeConfig>::SnapshotData>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let data: Data =
            serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let data = Data { last_applied: meta.last_log_id, last_membership: meta.last_membership.clone(), kv: data.kv };
        self.save(meta, &data).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        if let Some(dir) = &self.dir {
            // A count for tests, not state: written plainly.
            let _ = std::fs::write(dir.join(INSTALLS_FILE), (installs(dir) + 1).to_string());
        }
        *self.data.write().await = data;
        *self.snapshot.write().await = Some(StoredSnapshot { meta: meta.clone(), data: bytes });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .snapshot
            .read()
            .await
            .as_ref()
            .map(|s| Snapshot { meta: s.meta.clone(), snapshot: Box::new(Cursor::new(s.data.clone())) }))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }
}
