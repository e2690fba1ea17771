//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use commitlog::{CommitLog, CommitLogConfig, FlushConfig, FlushDiskType};

pub const SEGMENT: usize = 64 * 1024;

/// The write path these tests run on: the default one, or the one named by
/// `COMMITLOG_TEST_WRITE_WITHOUT_MMAP` (`1`: pwrite, `0`: through the mapping).
/// `cargo xtask test` runs the suite once per path.
pub fn write_without_mmap() -> bool {
    match std::env::var("COMMITLOG_TEST_WRITE_WITHOUT_MMAP").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        Ok(other) => panic!("COMMITLOG_TEST_WRITE_WITHOUT_MMAP must be 0 or 1, not {other:?}"),
        Err(_) => CommitLogConfig::default().write_without_mmap,
    }
}

/// A simulated storage writing segments the way [`write_without_mmap`] says.
pub fn sim() -> mapped_file::SimStorage {
    let sim = mapped_file::SimStorage::new();
    sim.set_write_without_mmap(write_without_mmap());
    sim
}

/// Small segments, fast async flushes, no preallocation thread unless asked,
/// and no disk-space rule: the tests must not depend on how full the machine's
/// disk is (RocketMQ's ratios would delete segments past 85 % and refuse appends
/// past 90 %). The tests of the guard and the cleaning service put RocketMQ's
/// ratios back with [`rocketmq_disk_ratios`].
pub fn config(flush_disk_type: FlushDiskType) -> CommitLogConfig {
    let config = CommitLogConfig::builder()
        .write_without_mmap(write_without_mmap())
        .mapped_file_size_commit_log(SEGMENT)
        .max_message_size(16 * 1024)
        .flush_disk_type(flush_disk_type)
        .flush(FlushConfig {
            flush_interval_commit_log_ms: 20,
            commit_interval_commit_log_ms: 10,
            ..FlushConfig::default()
        })
        .checkpoint_interval_ms(50)
        .build()
        .unwrap();
    without_disk_rules(config)
}

/// `config` with no disk-space rule: appends refused only on a full disk, and
/// nothing deleted because space runs short.
pub fn without_disk_rules(config: CommitLogConfig) -> CommitLogConfig {
    CommitLogConfig {
        disk_space_warning_level_ratio: 100,
        disk_max_used_space_ratio: 100,
        clean_file_forcibly_enable: false,
        ..config
    }
}

/// `config` with RocketMQ's disk-space ratios and cleaning (the library's
/// defaults), for tests on simulated disk space.
pub fn rocketmq_disk_ratios(config: CommitLogConfig) -> CommitLogConfig {
    let defaults = CommitLogConfig::default();
    CommitLogConfig {
        disk_space_warning_level_ratio: defaults.disk_space_warning_level_ratio,
        disk_max_used_space_ratio: defaults.disk_max_used_space_ratio,
        disk_space_clean_forcibly_ratio: defaults.disk_space_clean_forcibly_ratio,
        clean_file_forcibly_enable: defaults.clean_file_forcibly_enable,
        ..config
    }
}

/// A body that says who wrote it, so any mix-up shows.
pub fn body(producer: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(len.max(8));
    b.extend_from_slice(&producer.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    while b.len() < len {
        b.push((seq as usize + b.len()) as u8);
    }
    b
}

/// All record bodies from the start of the log.
pub fn bodies(log: &CommitLog) -> Vec<Vec<u8>> {
    log.iter_from(log.min_offset()).map(|r| r.unwrap().body.to_vec()).collect()
}

/// Copies a store directory, as a crash would leave it (abort marker included).
#[allow(unused_imports)] // not every test copies a store
pub use test_support::copy_dir;

/// Overwrites bytes of a file in place.
pub fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, offset).unwrap();
}

/// The path of the segment holding `offset`.
pub fn segment_path(dir: &Path, offset: u64) -> std::path::PathBuf {
    let start = offset - offset % SEGMENT as u64;
    dir.join(commitlog::SEGMENT_DIR).join(format!("{start:020}"))
}

/// A disk of 100 GiB whose used share is `used_percent` (exactly, as
/// `DiskSpace::used_percent` computes it): big beside the tests' segments, so
/// a new segment's look before its creation changes the share by nothing.
pub fn disk_at(used_percent: u64) -> Option<mapped_file::DiskSpace> {
    const GIB: u64 = 1 << 30;
    let free = (100 - used_percent) * GIB;
    Some(mapped_file::DiskSpace { total: 100 * GIB, free, available: free })
}
