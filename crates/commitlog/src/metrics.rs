//! What a broker operator watches, through the [`metrics`] facade: the log records
//! them, and whichever recorder (exporter) the application installs receives
//! them; without one they cost a check of the global recorder and nothing else.
//!
//! | name | kind | what |
//! |---|---|---|
//! | `commitlog_put_latency_seconds` | histogram | time an append spends placing its record(s), the put lock's wait included (RocketMQ's putMessageDistributeTime) |
//! | `commitlog_appended_bytes_total` | counter | bytes appended, headers included |
//! | `commitlog_appended_records_total` | counter | records appended |
//! | `commitlog_flush_latency_seconds` | histogram | each flush of the segment queue: the sync (`fdatasync` or `msync`) |
//! | `commitlog_flushed_bytes_total` | counter | bytes a flush made durable |
//! | `commitlog_commit_latency_seconds` | histogram | each commit of write buffers into the segments (with the pool) |
//! | `commitlog_group_commit_records_per_round` | histogram | durability requests one group-commit sync answered |
//! | `commitlog_disk_used_percent` | gauge | the disk's used share at the cleaning service's last look |
//! | `commitlog_pool_buffers_available` | gauge | write buffers left in the pool (with the pool) |
//! | `commitlog_segments` | gauge | segments in the log |
//! | `commitlog_segments_deleted_total` | counter | segments the cleaning service deleted, label `reason`: `expired` or `space` |

use std::time::Duration;

pub(crate) const PUT_LATENCY: &str = "commitlog_put_latency_seconds";
pub(crate) const APPENDED_BYTES: &str = "commitlog_appended_bytes_total";
pub(crate) const APPENDED_RECORDS: &str = "commitlog_appended_records_total";
pub(crate) const FLUSH_LATENCY: &str = "commitlog_flush_latency_seconds";
pub(crate) const FLUSHED_BYTES: &str = "commitlog_flushed_bytes_total";
pub(crate) const COMMIT_LATENCY: &str = "commitlog_commit_latency_seconds";
pub(crate) const RECORDS_PER_ROUND: &str = "commitlog_group_commit_records_per_round";
pub(crate) const DISK_USED: &str = "commitlog_disk_used_percent";
pub(crate) const POOL_AVAILABLE: &str = "commitlog_pool_buffers_available";
pub(crate) const SEGMENTS: &str = "commitlog_segments";
pub(crate) const SEGMENTS_DELETED: &str = "commitlog_segments_deleted_total";

/// An append placed `records` records of `bytes` bytes in `took`.
pub(crate) fn appended(records: usize, bytes: usize, took: Duration) {
    metrics::histogram!(PUT_LATENCY).record(took);
    metrics::counter!(APPENDED_BYTES).increment(bytes as u64);
    metrics::counter!(APPENDED_RECORDS).increment(records as u64);
}

/// A flush made `bytes` durable in `took`.
pub(crate) fn flushed(bytes: u64, took: Duration) {
    metrics::histogram!(FLUSH_LATENCY).record(took);
    metrics::counter!(FLUSHED_BYTES).increment(bytes);
}

/// A commit of write buffers took `took`.
pub(crate) fn committed(took: Duration) {
    metrics::histogram!(COMMIT_LATENCY).record(took);
}

/// A group-commit round answered `requests` durability requests.
pub(crate) fn round(requests: usize) {
    metrics::histogram!(RECORDS_PER_ROUND).record(requests as f64);
}

/// The cleaning service's look at the log and its disk.
pub(crate) fn state(disk_used_percent: Option<f64>, pool_available: Option<usize>, segments: usize) {
    if let Some(used) = disk_used_percent {
        metrics::gauge!(DISK_USED).set(used);
    }
    if let Some(available) = pool_available {
        metrics::gauge!(POOL_AVAILABLE).set(available as f64);
    }
    metrics::gauge!(SEGMENTS).set(segments as f64);
}

/// The cleaning service deleted `segments` segments for `reason`.
pub(crate) fn deleted(segments: usize, reason: &'static str) {
    metrics::counter!(SEGMENTS_DELETED, "reason" => reason).increment(segments as u64);
}
