//! The metrics of a store reopened in the same process add up: a recorder
//! with metrics' own atomic counters (whose `absolute` keeps the larger
//! value, as the Prometheus exporter's does) sees the puts of both opens.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commitlog::FlushDiskType;
use common::{config, open};
use message_store::Message;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use store_io::sim::SimStorage;

#[derive(Clone, Default)]
struct Counters(Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>);

impl Counters {
    fn get(&self, name: &str) -> u64 {
        self.0.lock().unwrap().get(name).map_or(0, |c| c.load(Ordering::SeqCst))
    }
}

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::clone(self.0.lock().unwrap().entry(key.name().to_string()).or_default()))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn put(store: &message_store::MessageStore, n: usize) {
    for i in 0..n {
        store.put_message(&Message::new("t", 0, format!("m{i}"))).unwrap().durability.wait().unwrap();
    }
}

#[test]
fn puts_after_a_reopen_in_the_same_process_are_counted() {
    let counters = Counters::default();
    assert!(metrics::set_global_recorder(counters.clone()).is_ok());
    const PUTS: &str = "message_store_put_messages_total";

    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    put(&store, 10);
    let deadline = Instant::now() + Duration::from_secs(10);
    while counters.get(PUTS) != 10 {
        assert!(Instant::now() < deadline, "first export: {}", counters.get(PUTS));
        std::thread::sleep(Duration::from_millis(5));
    }
    store.shutdown().unwrap();
    drop(store);

    let store = open(&sim, config(FlushDiskType::SyncFlush));
    put(&store, 5);
    assert_eq!(store.stats().messages_put, 5);
    // The flush service exports every 10 ms here.
    let deadline = Instant::now() + Duration::from_secs(30);
    while counters.get(PUTS) < 15 {
        assert!(Instant::now() < deadline, "15 messages were put in this process: {}", counters.get(PUTS));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(counters.get(PUTS), 15, "15 messages were put in this process");
    store.shutdown().unwrap();
}
