//! The metrics a broker operator watches reach whichever recorder the application
//! installs (here metrics-util's debugging recorder, for the whole test binary).

mod common;

use std::time::{Duration, Instant};

use commitlog::{CommitLog, FlushDiskType};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// One snapshot (taking one drains the debugging recorder's histograms and
/// counters, so every check reads the same one).
struct Metrics(Vec<(metrics_util::CompositeKey, DebugValue)>);

impl Metrics {
    fn take(snapshotter: &Snapshotter) -> Self {
        Metrics(snapshotter.snapshot().into_vec().into_iter().map(|(key, _, _, value)| (key, value)).collect())
    }

    fn value(&self, kind: MetricKind, name: &str) -> Option<&DebugValue> {
        self.0.iter().find(|(key, _)| key.kind() == kind && key.key().name() == name).map(|(_, value)| value)
    }

    fn counter(&self, name: &str) -> u64 {
        match self.value(MetricKind::Counter, name) {
            Some(DebugValue::Counter(v)) => *v,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn histogram(&self, name: &str) -> Vec<f64> {
        match self.value(MetricKind::Histogram, name) {
            Some(DebugValue::Histogram(v)) => v.iter().map(|f| f.into_inner()).collect(),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn appends_flushes_rounds_and_the_cleaning_service_are_measured() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");

    let dir = tempfile::tempdir().unwrap();
    let config =
        commitlog::CommitLogConfig { clean_resource_interval_ms: 5, ..common::config(FlushDiskType::SyncFlush) };
    let log = CommitLog::open(dir.path(), config.clone()).unwrap();
    for i in 0..10u32 {
        log.append(&common::body(1, i, 100)).unwrap().durability.wait().unwrap();
    }
    log.append_batch(&[b"a".as_slice(), b"b", b"c"]).unwrap().durability.wait().unwrap();
    // A round reports after it answers its waiters: shut down (joining the
    // services) before reading, or the last round may not be recorded yet.
    log.shutdown().unwrap();
    drop(log);

    let m = Metrics::take(&snapshotter);
    assert_eq!(m.counter("commitlog_appended_records_total"), 13);
    assert_eq!(m.counter("commitlog_appended_bytes_total"), 10 * 132 + 3 * 33);
    let puts = m.histogram("commitlog_put_latency_seconds");
    assert_eq!(puts.len(), 11, "one per append or batch");
    assert!(puts.iter().all(|&s| s > 0.0 && s < 10.0), "{puts:?}");
    assert!(m.counter("commitlog_flushed_bytes_total") >= 10 * 132 + 3 * 33, "every durable byte");
    assert!(!m.histogram("commitlog_flush_latency_seconds").is_empty());
    let rounds = m.histogram("commitlog_group_commit_records_per_round");
    assert_eq!(rounds.iter().sum::<f64>(), 11.0, "each request answered by one round: {rounds:?}");

    // The cleaning service publishes the log's state on each run.
    let log = CommitLog::open(dir.path(), config).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let m = loop {
        let m = Metrics::take(&snapshotter);
        if m.value(MetricKind::Gauge, "commitlog_segments").is_some() {
            break m;
        }
        assert!(Instant::now() < deadline, "the cleaning service published nothing");
        std::thread::yield_now();
    };
    match m.value(MetricKind::Gauge, "commitlog_disk_used_percent") {
        Some(DebugValue::Gauge(used)) => assert!((0.0..=100.0).contains(&used.into_inner())),
        other => panic!("disk used: {other:?}"),
    }
    log.shutdown().unwrap();
}
