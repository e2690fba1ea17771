//! The configuration reads from TOML with the `serde` feature: every key
//! optional, the defaults filling in, the message limits following the log's
//! `max_message_size` unless given; an unknown key is an error that names it.
#![cfg(feature = "serde")]

use message_store::{DispatchLimit, FlushDiskType, MessageLimits, MessageStoreConfig};

#[test]
fn a_config_file_reads_with_defaults_and_limits_that_follow_the_log() {
    let text = r#"
        auto_create_topics = true
        dispatch_limit = "durable"
        default_topic_queue_nums = 4

        dispatch_nap_us = 0
        dispatch_tailed_nap_us = 500

        [log]
        mapped_file_size_commit_log = 1048576
        max_message_size = 262144
        flush_disk_type = "sync_flush"

        [index]
        hash_slots = 64
    "#;
    let config: MessageStoreConfig = toml::from_str(text).unwrap();
    config.validate().unwrap();
    assert!(config.auto_create_topics);
    assert_eq!(config.dispatch_limit, Some(DispatchLimit::Durable));
    assert_eq!(config.default_topic_queue_nums, 4);
    assert_eq!(config.log.flush_disk_type, FlushDiskType::SyncFlush);
    assert_eq!(config.limits, MessageLimits::within(262_144), "the limits follow the log's records");
    assert_eq!((config.index.hash_slots, config.index.max_items), (64, 800_000), "a key left out keeps its default");
    assert_eq!(config.write_groups, MessageStoreConfig::default().write_groups);
    assert_eq!(config.dispatch_nap_us, 0, "dispatch's naps off");
    assert_eq!(config.dispatch_tailed_nap_us, 500);
    let back: MessageStoreConfig = toml::from_str(&toml::to_string(&config).unwrap()).unwrap();
    assert_eq!(back, config, "written and read back");

    let empty: MessageStoreConfig = toml::from_str("").unwrap();
    assert_eq!(empty, MessageStoreConfig::default());
    let given: MessageStoreConfig =
        toml::from_str("[limits]\nmax_body_size = 1000\nmax_properties_size = 100\n").unwrap();
    assert_eq!((given.limits.max_body_size, given.limits.max_properties_size), (1000, 100));
    let unknown = toml::from_str::<MessageStoreConfig>("auto_create_topic = true\n").unwrap_err();
    assert!(unknown.to_string().contains("auto_create_topic"), "{unknown}");
}
