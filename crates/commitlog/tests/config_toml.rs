//! The configuration reads from TOML with the `serde` feature; missing keys keep
//! RocketMQ's defaults.
#![cfg(feature = "serde")]

use commitlog::{CommitLogConfig, FlushDiskType};

#[test]
fn config_reads_from_toml_with_defaults_for_missing_keys() {
    let text = r#"
        mapped_file_size_commit_log = 1048576
        max_message_size = 65536
        flush_disk_type = "sync_flush"
        transient_store_pool_enable = true
        store_path_commit_log = ["/disk1/commitlog", "/disk2/commitlog"]
        read_only_commit_log_store_paths = ["/old/commitlog"]

        [flush]
        sync_flush_timeout_ms = 2000
    "#;
    let config: CommitLogConfig = toml::from_str(text).unwrap();
    config.validate().unwrap();
    assert_eq!(config.flush_disk_type, FlushDiskType::SyncFlush);
    assert_eq!(config.flush.sync_flush_timeout_ms, 2000);
    assert_eq!(config.flush.flush_interval_commit_log_ms, 500, "default kept");
    assert_eq!(config.transient_store_pool_size, 5, "default kept");
    assert_eq!(config.store_path_commit_log.len(), 2);
    assert_eq!(config.read_only_commit_log_store_paths, [std::path::PathBuf::from("/old/commitlog")]);
    let back: CommitLogConfig = toml::from_str(&toml::to_string(&config).unwrap()).unwrap();
    assert_eq!(back, config);
}

#[test]
fn the_flush_policy_is_chosen_in_the_config() {
    use commitlog::PolicyChoice;
    let text = r#"
        [flush.policy]
        kind = "dirty_bytes_or_age"
        max_dirty_bytes = 8388608
        max_age_ms = 200
    "#;
    let config: CommitLogConfig = toml::from_str(text).unwrap();
    assert_eq!(config.flush.policy, PolicyChoice::DirtyBytesOrAge { max_dirty_bytes: 8 << 20, max_age_ms: 200 });
    let back: CommitLogConfig = toml::from_str(&toml::to_string(&config).unwrap()).unwrap();
    assert_eq!(back, config);
    let default: CommitLogConfig = toml::from_str("").unwrap();
    assert_eq!(default.flush.policy, PolicyChoice::RocketMq);
}

#[test]
fn segment_preparation_is_chosen_in_the_config_and_checked() {
    use commitlog::SegmentPreparation;
    let text = r#"
        segment_preparation = "allocated"
        preparation_chunk_bytes = 262144
        preparation_bytes_per_sec = 0
    "#;
    let config: CommitLogConfig = toml::from_str(text).unwrap();
    config.validate().unwrap();
    assert_eq!(config.segment_preparation, SegmentPreparation::Allocated, "the old behaviour one setting away");
    assert_eq!((config.preparation_chunk_bytes, config.preparation_bytes_per_sec), (262_144, 0));
    let default: CommitLogConfig = toml::from_str("").unwrap();
    assert_eq!(default.segment_preparation, SegmentPreparation::Written, "prepared by default");
    let bad: CommitLogConfig = toml::from_str(
        r#"
        segment_preparation = "written_and_faulted"
        preparation_chunk_bytes = 1000
    "#,
    )
    .unwrap();
    let err = bad.validate().unwrap_err().to_string();
    assert!(err.contains("preparation_chunk_bytes 1000"), "{err}");
}
