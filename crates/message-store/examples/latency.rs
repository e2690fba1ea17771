//! Dispatch lag and end-to-end latency on a real disk: 4 producers put 1 KiB
//! messages on 4 queues (one each) at a fixed total rate, 4 consumers long-poll
//! them; each body carries the instant its put began. Prints, per flush mode:
//!
//! - async flush at `--rate` messages/s (100,000): the lag from the start of a
//!   put until a long-polling consumer has the message (dispatch lag plus the
//!   wake-up), p50/p99/max, and the put's own p99;
//! - sync flush with producers as fast as acknowledgements allow: the ack
//!   latency (put until durable) and the end-to-end latency (put until a
//!   consumer has it), p50/p99, and their p99 ratio.
//!
//! `cargo xtask latency` runs it; docs/message-store.md quotes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commitlog::{CommitLogConfig, FlushDiskType};
use message_store::{GetRequest, Message, MessageStore, MessageStoreConfig};

const QUEUES: u32 = 4;

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    if v.is_empty() {
        return (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.5), at(0.99), v[v.len() - 1])
}

/// What one run measured: put (async) or ack (sync) latencies, put-to-consumer
/// latencies, and the messages sent.
type Measured = (Vec<Duration>, Vec<Duration>, u64);

/// One run.
fn run(flush: FlushDiskType, rate: Option<u64>, seconds: u64) -> Result<Measured, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = CommitLogConfig::builder().mapped_file_size_commit_log(256 << 20).flush_disk_type(flush).build()?;
    let store = MessageStore::open(dir.path(), MessageStoreConfig::new(log))?;
    store.create_topic("t", QUEUES)?;
    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let e2e: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let consumers: Vec<_> = (0..QUEUES)
        .map(|queue| {
            let (store, stop, e2e) = (store.clone(), Arc::clone(&stop), Arc::clone(&e2e));
            std::thread::spawn(move || -> Result<(), message_store::StoreError> {
                let mut next = 0u64;
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if !store.wait_for("t", queue, next, Duration::from_millis(100))?.arrived() {
                        continue;
                    }
                    let got =
                        store.get_messages(&GetRequest::new("t", queue, next).max_count(256).max_bytes(u64::MAX))?;
                    let now = base.elapsed();
                    for m in &got.messages {
                        let sent = u64::from_le_bytes(m.body[..8].try_into().unwrap_or_default());
                        seen.push(now.saturating_sub(Duration::from_nanos(sent)));
                    }
                    next = got.next_offset;
                }
                e2e.lock().expect("e2e").extend(seen);
                Ok(())
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let producers: Vec<_> = (0..QUEUES)
        .map(|queue| {
            let store = store.clone();
            let interval = rate.map(|r| Duration::from_secs_f64(f64::from(QUEUES) / r as f64));
            std::thread::spawn(move || -> Result<(Vec<Duration>, u64), message_store::StoreError> {
                let mut acks = Vec::new();
                let mut sent = 0u64;
                let mut body = vec![0u8; 1024];
                let mut due = Instant::now();
                while Instant::now() < deadline {
                    if let Some(interval) = interval {
                        // Paced by sleeping whenever a millisecond ahead (no
                        // spinning: on two cores it would starve dispatch).
                        let now = Instant::now();
                        if due > now + Duration::from_millis(1) {
                            std::thread::sleep(due - now);
                        }
                        due += interval;
                    }
                    let started = base.elapsed();
                    body[..8].copy_from_slice(&(started.as_nanos() as u64).to_le_bytes());
                    let put = store.put_message(&Message::new("t", queue, body.clone()))?;
                    // Async: how long the put itself took; sync: until durable.
                    if flush == FlushDiskType::SyncFlush {
                        put.durability.wait().map_err(commitlog::Error::from)?;
                    }
                    acks.push(base.elapsed().saturating_sub(started));
                    sent += 1;
                }
                Ok((acks, sent))
            })
        })
        .collect();
    let mut acks = Vec::new();
    let mut sent = 0;
    for p in producers {
        let (a, n) = p.join().map_err(|_| "producer panicked")??;
        acks.extend(a);
        sent += n;
    }
    std::thread::sleep(Duration::from_millis(300)); // the consumers catch up
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.join().map_err(|_| "consumer panicked")??;
    }
    store.shutdown()?;
    let e2e = std::mem::take(&mut *e2e.lock().expect("e2e"));
    if (e2e.len() as u64) < sent {
        return Err(format!("{} of {sent} messages consumed", e2e.len()).into());
    }
    Ok((acks, e2e, sent))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rate = arg(&args, "--rate", 100_000);
    let seconds = arg(&args, "--seconds", 3);
    let (puts, lag, sent) = run(FlushDiskType::AsyncFlush, Some(rate), seconds)?;
    let (p50, p99, max) = percentiles(lag);
    let (_, put99, put_max) = percentiles(puts);
    println!(
        "async flush, {} msgs/s offered ({sent} in {seconds}s): put to consumer p50 {p50:?}, p99 {p99:?}, max {max:?} (target p99 <= 1 ms: {:.2}x of it); the put alone p99 {put99:?}, max {put_max:?}",
        rate,
        p99.as_secs_f64() / 1e-3
    );
    let (acks, e2e, sent) = run(FlushDiskType::SyncFlush, None, seconds)?;
    let (a50, a99, _) = percentiles(acks);
    let (e50, e99, _) = percentiles(e2e);
    println!(
        "sync flush, 4 producers as fast as acks allow ({sent} in {seconds}s): ack p50 {a50:?}, p99 {a99:?}; put to consumer p50 {e50:?}, p99 {e99:?}; end-to-end p99 / ack p99 = {:.2} (target <= 2)",
        e99.as_secs_f64() / a99.as_secs_f64().max(1e-9)
    );
    Ok(())
}
