//! openraft's own storage test suite (`openraft::testing::Suite::test_all`) over
//! the commit-log store, with the small key-value state machine in `kv/`.

mod kv;

use std::sync::Arc;

use commitlog_raft::{RaftLogStore, RaftStoreConfig};
use kv::{NodeId, StateMachine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

/// Each test gets a fresh store in its own temporary directory (kept alive by
/// the guard openraft hands back).
struct Builder;

fn config() -> RaftStoreConfig {
    kv::small_config(1 << 20)
}

impl StoreBuilder<TypeConfig, RaftLogStore<TypeConfig>, Arc<StateMachine>, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, RaftLogStore<TypeConfig>, Arc<StateMachine>), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = RaftLogStore::open(dir.path(), config()).expect("open the store");
        Ok((dir, store, Arc::new(StateMachine::default())))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    if let Err(err) = Suite::test_all(Builder) {
        panic!("openraft's storage suite failed: {err}");
    }
}
