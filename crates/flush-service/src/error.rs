//! Errors of this crate.

use std::error::Error;
use std::sync::Arc;

/// The error a [`FlushTarget`](crate::FlushTarget) reports, shared by every request
/// one failed flush covers.
pub type TargetError = Arc<dyn Error + Send + Sync + 'static>;

/// Why a durability request did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// The offset was not durable by the deadline (`FLUSH_DISK_TIMEOUT`). The bytes
    /// may still become durable later; they were not acknowledged.
    #[error("bytes below offset {offset} were not flushed within {timeout_ms} ms")]
    Timeout {
        /// The offset that had to be durable.
        offset: u64,
        /// The deadline that passed.
        timeout_ms: u64,
    },
    /// The flush (or commit) failed. After a sync error nothing is acknowledged
    /// again: the store refuses further writes.
    #[error("flush needed for offset {offset} failed: {source}")]
    Failed {
        /// The offset that had to be durable.
        offset: u64,
        /// The storage error.
        #[source]
        source: TargetError,
    },
    /// The service is stopped (or stopping) and takes no new requests.
    #[error("flush service is stopped; offset {offset} was not acknowledged")]
    Stopped {
        /// The offset that had to be durable.
        offset: u64,
    },
}

/// Starting a service failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The OS could not spawn a thread.
    #[error("cannot spawn service thread {name}: {source}")]
    Spawn {
        /// The thread's name.
        name: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
