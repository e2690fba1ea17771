//! The store's metrics reach whichever recorder the application installs
//! (here metrics-util's debugging recorder, for the whole test binary): puts,
//! reads, dispatch, the queue index, the offsets journal and each group's lag.

mod common;

use std::time::{Duration, Instant};

use commitlog::FlushDiskType;
use common::{config, open};
use message_store::{GetRequest, Message};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use store_io::sim::SimStorage;

/// Every metric the snapshot holds: (kind, name, labels) → value as f64.
fn values(snapshotter: &metrics_util::debugging::Snapshotter) -> Vec<(MetricKind, String, Vec<String>, f64)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let labels = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            let value = match value {
                DebugValue::Counter(v) => v as f64,
                DebugValue::Gauge(v) => v.into_inner(),
                DebugValue::Histogram(v) => v.len() as f64,
            };
            (key.kind(), key.key().name().to_string(), labels, value)
        })
        .collect()
}

#[test]
fn puts_reads_dispatch_the_index_offsets_and_consumer_lag_are_measured() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");

    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    for i in 0..10u32 {
        store.put_message(&Message::new("t", i % 2, format!("m{i}"))).unwrap().durability.wait().unwrap();
    }
    store.put_messages(&[Message::new("t", 0, "a"), Message::new("t", 0, "b")]).unwrap().durability.wait().unwrap();
    store.dispatch_now().unwrap();
    let got = store.get_messages(&GetRequest::new("t", 0, 0).max_count(4)).unwrap();
    assert_eq!(got.messages.len(), 4);
    store.commit_offset("g", "t", 0, 4).unwrap();
    store.commit_offset("g", "t", 1, 5).unwrap();
    drop(got);

    // The flush service hands them over every 10 ms, the lag every 50 ms.
    let wanted = |all: &[(MetricKind, String, Vec<String>, f64)]| {
        let find = |name: &str, labels: &[&str]| {
            all.iter().find(|(_, n, l, _)| n == name && l.iter().map(String::as_str).eq(labels.iter().copied()))
        };
        find("message_store_put_messages_total", &[]).is_some_and(|m| m.3 == 12.0)
            && find("message_store_read_messages_total", &[]).is_some_and(|m| m.3 == 4.0)
            && find("message_store_consumer_lag_messages", &["group=g"]).is_some_and(|m| m.3 == 3.0)
            && find("message_store_offsets_journal_syncs_total", &[]).is_some_and(|m| m.3 >= 1.0)
            && find("message_store_consumer_offsets", &[]).is_some_and(|m| m.3 == 2.0)
            && find("message_store_dispatch_lag_bytes", &[]).is_some_and(|m| m.3 == 0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        // A snapshot drains counters (what was added since the last one):
        // add them up; a gauge is its last value.
        for metric in values(&snapshotter) {
            let before = seen
                .iter()
                .position(|m: &(MetricKind, String, Vec<String>, f64)| (&m.1, &m.2) == (&metric.1, &metric.2))
                .map(|at| seen.remove(at));
            let value = match (&before, metric.0) {
                (Some(before), MetricKind::Counter) => before.3 + metric.3,
                _ => metric.3,
            };
            seen.push((metric.0, metric.1, metric.2, value));
        }
        if wanted(&seen) {
            break;
        }
        assert!(Instant::now() < deadline, "not measured in time: {seen:#?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    for name in [
        "message_store_queue_index_runs",
        "message_store_queue_index_active_entries",
        "message_store_queue_index_heap_bytes",
        "message_store_queues_in_use",
    ] {
        assert!(seen.iter().any(|m| m.0 == MetricKind::Gauge && m.1 == name), "{name}: {seen:#?}");
    }
    let stats = store.stats();
    assert_eq!((stats.messages_put, stats.messages_read), (12, 4));
    store.shutdown().unwrap();
}
