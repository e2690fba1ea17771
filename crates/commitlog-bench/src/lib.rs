//! Helpers for the criterion benchmarks in `benches/` (`cargo bench -p commitlog-bench`).

#![forbid(unsafe_code)]

use std::path::Path;

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};

/// A log with `segment`-byte segments and the given flush mode.
pub fn open(dir: &Path, segment: usize, flush: FlushDiskType, preallocate: bool, warm: bool) -> CommitLog {
    let config = CommitLogConfig::builder()
        .mapped_file_size_commit_log(segment)
        .max_message_size((segment / 4).min(4 << 20))
        .flush_disk_type(flush)
        .preallocate_next_segment(preallocate)
        .warm_mapped_file_enable(warm)
        .build()
        .expect("valid config");
    CommitLog::open(dir, config).expect("open")
}

/// Sorted latency percentile in microseconds.
pub fn percentile_us(sorted_nanos: &[u64], q: f64) -> f64 {
    if sorted_nanos.is_empty() {
        return 0.0;
    }
    sorted_nanos[((sorted_nanos.len() as f64 * q) as usize).min(sorted_nanos.len() - 1)] as f64 / 1000.0
}
