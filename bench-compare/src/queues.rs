//! Workload (d): many queues on one store. 1 KiB messages, 4 producers spread
//! round-robin over N queues (producer `p`'s `i`-th message goes to queue
//! `(p + 4 i) mod N`; one in four instead goes to one of the [`HOT`] first
//! queues, round-robin over them), under async flush (a put returns when written) and sync
//! flush (it returns when durable, every producer waiting for its own message).
//!
//! Measured per run: messages/s (messages over the time until the last put
//! returned), put (ack) latency; for systems that build queues in the
//! background from one log, the dispatch lag (a put's return until its queue
//! shows it) and the end-to-end latency (a put's start until a consumer has the
//! message), sampled on every 8th message of producer 0 by one consumer thread,
//! and the drain (the last put's return until every message is in its queue);
//! a consumer tailing the hot queues (the first [`HOT`]): every message put on
//! them, from a put's start until the consumer has read it, reading up to 64 at
//! a time as a tailing consumer does; the growth of resident memory, open files
//! and mappings while the system was open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::RECORD;

/// The queue counts of workload (d).
pub const QUEUE_COUNTS: [u32; 6] = [1, 64, 1_024, 16_384, 50_000, 200_000];
/// Producers of workload (d).
pub const PRODUCERS: usize = 4;
/// Every how many messages of producer 0 one is sampled for the lag.
const SAMPLE_EVERY: usize = 8;
/// The hot queues: the first this many (all of them below this count),
/// which a tailing consumer follows.
pub const HOT: u32 = 128;
/// One message in this many goes to a hot queue.
pub const HOT_SHARE: usize = 4;
/// Messages a tailing consumer reads at a time.
const TAIL_BATCH: usize = 64;

/// The flush mode of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// A put returns once written; flushed in the background.
    Async,
    /// A put returns once durable (group commit).
    Sync,
}

impl Flush {
    pub const ALL: [Flush; 2] = [Flush::Async, Flush::Sync];
    pub fn name(self) -> &'static str {
        match self {
            Flush::Async => "async flush",
            Flush::Sync => "sync flush",
        }
    }
}

/// Messages per producer per run.
#[derive(Clone, Copy, Debug)]
pub struct DSizes {
    pub async_per_producer: usize,
    pub sync_per_producer: usize,
}

impl DSizes {
    pub fn per_producer(&self, flush: Flush) -> usize {
        match flush {
            Flush::Async => self.async_per_producer,
            Flush::Sync => self.sync_per_producer,
        }
    }
}

/// One measured run of workload (d).
#[derive(Clone, Debug, Default)]
pub struct DLine {
    pub messages: u64,
    pub seconds: f64,
    /// Put latencies (until written, or durable under sync flush), ns, sorted.
    pub acks: Vec<u64>,
    /// A put's return until its queue shows it, ns, sorted (empty: no dispatch).
    pub lag: Vec<u64>,
    /// A put's start until a consumer has the message, ns, sorted.
    pub e2e: Vec<u64>,
    /// Every message of the hot queues: a put's start until the tailing
    /// consumer read it, ns, sorted (empty: the system has no tailing reader).
    pub tail: Vec<u64>,
    /// The tailing consumer's time in the system's reads (waits included),
    /// per message read, ns.
    pub tail_read_ns: f64,
    /// The last put's return until every message was in its queue (s).
    pub drain: Option<f64>,
    /// Growth of the process's resident memory while the system was open (MiB).
    pub rss_mib: f64,
    /// Files the system held open at the end of the puts.
    pub files: usize,
    /// Mappings the system held at the end of the puts.
    pub maps: usize,
    /// The process's CPU time (every thread: the system's, the producers',
    /// the consumers') from the first put until every message was in its
    /// queue, per message, µs.
    pub cpu_us_per_message: f64,
}

impl DLine {
    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.seconds
    }
}

/// The `q` quantile of sorted ns values, in µs.
pub fn pct_us(values: &[u64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let i = ((values.len() as f64 * q) as usize).min(values.len() - 1);
    values[i] as f64 / 1000.0
}

/// A system under workload (d).
pub trait Target: Sync {
    /// Puts one message on `queue`; returns when the flush mode says it is
    /// acknowledged, with its offset in the queue.
    fn put(&self, producer: usize, queue: u32, body: &[u8]) -> Result<u64, String>;
    /// Whether queues are built from the log in the background (else, by
    /// default, a message is readable when its put returns: no lag, and the
    /// two methods below are never called).
    fn dispatches(&self) -> bool {
        false
    }
    /// Blocks until a consumer has message `offset` of `queue`.
    fn consume(&self, _queue: u32, _offset: u64) -> Result<(), String> {
        Ok(())
    }
    /// Blocks until every message put is in its queue.
    fn drain(&self) -> Result<(), String> {
        Ok(())
    }
    /// Whether [`tail`](Self::tail) is there.
    fn tails(&self) -> bool {
        false
    }
    /// Blocks until `queue` holds message `offset`, then reads it and up to
    /// `max - 1` messages after it; returns how many it read.
    fn tail(&self, _queue: u32, _offset: u64, _max: usize) -> Result<u64, String> {
        Err("no tailing reader".into())
    }
}

/// The queue of producer `p`'s `i`-th message: one in [`HOT_SHARE`] goes to
/// one of the `hot` queues (round-robin over them), the others round-robin
/// over all `queues`.
fn queue_of(p: usize, i: usize, queues: u32, hot: u32) -> u32 {
    if i % HOT_SHARE == HOT_SHARE - 1 {
        ((p + PRODUCERS * (i / HOT_SHARE)) % hot as usize) as u32
    } else {
        ((p + PRODUCERS * i) % queues as usize) as u32
    }
}

/// The tailing consumer: reads every message of the hot queues as it comes
/// (told of each by its producer), up to [`TAIL_BATCH`] at a time; returns
/// each message's put start to read, ns.
fn tail_consumer(
    target: &dyn Target,
    base: Instant,
    rx: mpsc::Receiver<(u32, u64, u64)>,
) -> Result<(Vec<u64>, f64), String> {
    let mut latencies = Vec::new();
    let (mut reading, mut read) = (Duration::ZERO, 0u64);
    // Per queue: read up to here, and when each message read ahead was read.
    let mut read_to: HashMap<u32, u64> = HashMap::new();
    let mut read_at: HashMap<(u32, u64), u64> = HashMap::new();
    for (queue, offset, started) in rx {
        let at = match read_at.remove(&(queue, offset)) {
            Some(at) => at,
            None => {
                let fresh = offset >= read_to.get(&queue).copied().unwrap_or(0);
                let began = Instant::now();
                let n = target.tail(queue, offset, if fresh { TAIL_BATCH } else { 1 })?;
                reading += began.elapsed();
                read += n;
                let now = base.elapsed().as_nanos() as u64;
                if fresh {
                    for k in 1..n {
                        read_at.insert((queue, offset + k), now);
                    }
                    read_to.insert(queue, offset + n);
                }
                now
            }
        };
        latencies.push(at.saturating_sub(started));
    }
    Ok((latencies, reading.as_nanos() as f64 / read.max(1) as f64))
}

/// A system of workload (d): its name and how to run it.
pub struct QueueSystem {
    pub name: &'static str,
    pub ours: bool,
    pub run: fn(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String>,
}

/// What the process holds now: resident KiB, open files, mappings.
pub fn resources() -> (u64, usize, usize) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0);
    let files = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let maps = std::fs::read_to_string("/proc/self/maps").map_or(0, |s| s.lines().count());
    (rss, files, maps)
}

/// Runs the producers (and the sampling consumer) against `target`; `before`
/// is what the process held before the system opened.
pub fn drive(
    target: &dyn Target,
    queues: u32,
    per_producer: usize,
    before: (u64, usize, usize),
) -> Result<DLine, String> {
    let base = Instant::now();
    let cpu_before = crate::process_cpu_seconds();
    let (tx, rx) = mpsc::channel::<(u32, u64, u64, u64)>();
    let (hot_tx, hot_rx) = mpsc::channel::<(u32, u64, u64)>();
    let hot = HOT.min(queues);
    let last_ack = AtomicU64::new(0);
    let outcome = std::thread::scope(|scope| -> Result<DLine, String> {
        let consumer = scope.spawn(move || -> Result<(Vec<u64>, Vec<u64>), String> {
            let (mut lag, mut e2e) = (Vec::new(), Vec::new());
            for (queue, offset, started, acked) in rx {
                target.consume(queue, offset)?;
                let now = base.elapsed().as_nanos() as u64;
                lag.push(now.saturating_sub(acked));
                e2e.push(now.saturating_sub(started));
            }
            Ok((lag, e2e))
        });
        let tailing = target.tails().then(|| scope.spawn(move || tail_consumer(target, base, hot_rx)));
        let started = Instant::now();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let tx = (p == 0 && target.dispatches()).then(|| tx.clone());
                let hot_tx = target.tails().then(|| hot_tx.clone());
                let last_ack = &last_ack;
                scope.spawn(move || -> Result<Vec<u64>, String> {
                    let mut body = vec![p as u8; RECORD];
                    let mut acks = Vec::with_capacity(per_producer);
                    for i in 0..per_producer {
                        let queue = queue_of(p, i, queues, hot);
                        body[..8].copy_from_slice(&(i as u64).to_le_bytes());
                        let t = base.elapsed().as_nanos() as u64;
                        let offset = target.put(p, queue, &body)?;
                        let done = base.elapsed().as_nanos() as u64;
                        acks.push(done - t);
                        last_ack.fetch_max(done, Ordering::Relaxed);
                        if let Some(tx) = &tx {
                            if i % SAMPLE_EVERY == 0 {
                                let _ = tx.send((queue, offset, t, done));
                            }
                        }
                        if let Some(hot_tx) = hot_tx.as_ref().filter(|_| queue < hot) {
                            let _ = hot_tx.send((queue, offset, t));
                        }
                    }
                    Ok(acks)
                })
            })
            .collect();
        drop(tx);
        drop(hot_tx);
        let mut acks = Vec::new();
        let mut failed = None;
        for p in producers {
            match p.join().map_err(|_| "producer panicked".to_string()).and_then(|r| r) {
                Ok(a) => acks.extend(a),
                Err(e) => failed = Some(e),
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let now = resources();
        let (lag, e2e) = consumer.join().map_err(|_| "consumer panicked".to_string())??;
        let (mut tail, tail_read_ns) = match tailing {
            Some(t) => t.join().map_err(|_| "tailing consumer panicked".to_string())??,
            None => (Vec::new(), f64::NAN),
        };
        tail.sort_unstable();
        if let Some(e) = failed {
            return Err(e);
        }
        let drain = if target.dispatches() {
            target.drain()?;
            let last = Duration::from_nanos(last_ack.load(Ordering::Relaxed));
            Some(base.elapsed().saturating_sub(last).as_secs_f64())
        } else {
            None
        };
        let cpu = match (cpu_before, crate::process_cpu_seconds()) {
            (Some(before), Some(after)) => (after - before) * 1e6 / acks.len().max(1) as f64,
            _ => f64::NAN,
        };
        acks.sort_unstable();
        let (mut lag, mut e2e) = (lag, e2e);
        lag.sort_unstable();
        e2e.sort_unstable();
        Ok(DLine {
            messages: acks.len() as u64,
            seconds,
            acks,
            lag,
            e2e,
            tail,
            tail_read_ns,
            drain,
            rss_mib: now.0.saturating_sub(before.0) as f64 / 1024.0,
            files: now.1.saturating_sub(before.1),
            maps: now.2.saturating_sub(before.2),
            cpu_us_per_message: cpu,
        })
    });
    outcome
}

/// Waits with growing sleeps until `done` says so, at most `limit`.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> Result<bool, String>) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut nap = Duration::from_micros(20);
    while !done()? {
        if Instant::now() > deadline {
            return Err(format!("not done after {limit:?}"));
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(1));
    }
    Ok(())
}

/// A polling consumer's wait for a message: looks every 20 µs until `there`
/// says it is, for at most 60 s (then an error naming `what`).
pub fn poll_until(mut there: impl FnMut() -> Result<bool, String>, what: impl Fn() -> String) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !there()? {
        if Instant::now() > deadline {
            return Err(format!("{} not there within 60 s", what()));
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    Ok(())
}
