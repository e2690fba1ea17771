//! Every metric the crate documents (the table in `src/metrics.rs`) reaches a
//! Prometheus scrape under its documented name and kind, through
//! `metrics-exporter-prometheus` as the `prometheus` example installs it: the
//! names operators build dashboards on cannot drift from the documentation.

mod common;

use std::time::{Duration, Instant};

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// (name, kind) of each row of the crate's metrics table.
fn documented() -> Vec<(String, String)> {
    include_str!("../src/metrics.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .map(|l| {
            let mut cells = l.split('|');
            let name = cells.next().unwrap().trim().trim_end_matches('`').to_string();
            (name, cells.next().unwrap().trim().to_string())
        })
        .collect()
}

#[test]
fn every_documented_metric_is_scraped_with_its_kind() {
    let documented = documented();
    assert!(documented.len() >= 11, "the table was not found: {documented:?}");
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &[1e-4, 1e-3, 1e-2, 1e-1, 1.0])
        .unwrap()
        .install_recorder()
        .expect("the only recorder of this test binary");

    let dir = tempfile::tempdir().unwrap();
    // Sync flush: appends, flushes, group-commit rounds.
    let sync = common::config(FlushDiskType::SyncFlush);
    let log = CommitLog::open(dir.path().join("sync"), sync).unwrap();
    for i in 0..20u32 {
        log.append(&common::body(1, i, 100)).unwrap().durability.wait().unwrap();
    }
    log.shutdown().unwrap();
    // The write-buffer pool: commits and the pool gauge; the cleaning service
    // with every hour a deletion hour and nothing kept: segments deleted.
    let pool = CommitLogConfig {
        transient_store_pool_enable: true,
        transient_store_pool_size: 2,
        clean_resource_interval_ms: 5,
        file_reserved_time_ms: 0,
        delete_when: (0..24).map(|h| format!("{h:02}")).collect::<Vec<_>>().join(";"),
        ..common::config(FlushDiskType::AsyncFlush)
    };
    let log = CommitLog::open(dir.path().join("pool"), pool).unwrap();
    let body = common::body(2, 0, 8 << 10);
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        for _ in 0..64 {
            log.append(&body).unwrap();
        }
        let text = handle.render();
        let missing: Vec<&String> =
            documented.iter().map(|(name, _)| name).filter(|name| !text.contains(name.as_str())).collect();
        if missing.is_empty() {
            break text;
        }
        assert!(Instant::now() < deadline, "never scraped: {missing:?}\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    log.shutdown().unwrap();

    for (name, kind) in &documented {
        let prom_type = match kind.as_str() {
            "counter" => "counter",
            "gauge" => "gauge",
            "histogram" => "histogram",
            other => panic!("{name}: unknown kind {other}"),
        };
        // Histograms whose name has no bucket set render as summaries: the
        // example sets buckets for every *_seconds metric and the rounds.
        let expected = if prom_type == "histogram" && !name.ends_with("_seconds") { "summary" } else { prom_type };
        assert!(text.contains(&format!("# TYPE {name} {expected}")), "{name} as {expected}:\n{text}");
    }
    assert!(text.contains("commitlog_segments_deleted_total{reason=\"expired\"}"), "{text}");
    assert!(text.contains("commitlog_put_latency_seconds_bucket{le=\"0.001\"}"), "{text}");
}
