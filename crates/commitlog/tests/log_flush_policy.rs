//! Flush and gather policies from outside the crates reach the log through its config.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use commitlog::{
    CommitLog, CommitLogConfig, Decision, FlushConfig, FlushDiskType, FlushPolicy, GatherChoice, GatherDecision,
    GatherInput, GatherPolicy, GatherPolicyFactory, GroupCommitConfig, PolicyChoice, PolicyFactory, PolicyInput,
    RoundReport,
};

/// Skips until asked `after` times, then flushes everything once bytes are
/// pending: a policy no built-in choice behaves like, so the test can tell it is
/// the one running. The service asks again only after the flush it ordered ran,
/// so that next question is reported on `flushed`.
struct EveryNth {
    asked: Arc<AtomicU64>,
    after: u64,
    ran: bool,
    flushed: mpsc::Sender<()>,
}

impl FlushPolicy for EveryNth {
    fn decide(&mut self, input: &PolicyInput) -> Decision {
        if self.ran {
            let _ = self.flushed.send(());
        }
        if self.asked.fetch_add(1, Ordering::AcqRel) + 1 >= self.after && input.pending_bytes > 0 {
            self.ran = true;
            Decision::Run { least_pages: 0 }
        } else {
            Decision::Skip
        }
    }
}

#[derive(Debug)]
struct Factory {
    flush_asked: Arc<AtomicU64>,
    made: AtomicU64,
    flushed: Mutex<mpsc::Sender<()>>,
}

impl PolicyFactory for Factory {
    fn flush_policy(&self, _: &FlushConfig) -> Box<dyn FlushPolicy> {
        self.made.fetch_add(1, Ordering::AcqRel);
        let flushed = self.flushed.lock().unwrap().clone();
        Box::new(EveryNth { asked: Arc::clone(&self.flush_asked), after: 3, ran: false, flushed })
    }
    fn commit_policy(&self, config: &FlushConfig) -> Box<dyn FlushPolicy> {
        PolicyChoice::RocketMq.commit_policy(config)
    }
}

#[test]
fn a_custom_policy_in_the_config_decides_when_the_log_flushes() {
    let (flushed, flush_done) = mpsc::channel();
    let factory =
        Arc::new(Factory { flush_asked: Arc::default(), made: AtomicU64::new(0), flushed: Mutex::new(flushed) });
    let flush = FlushConfig {
        flush_interval_commit_log_ms: 5,
        policy: PolicyChoice::Custom(factory.clone()),
        ..FlushConfig::default()
    };
    let config = common::without_disk_rules(
        CommitLogConfig::builder()
            .write_without_mmap(common::write_without_mmap())
            .mapped_file_size_commit_log(1 << 20)
            .max_message_size(4096)
            .flush_disk_type(FlushDiskType::AsyncFlush)
            .flush(flush)
            .build()
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config).unwrap();
    assert_eq!(factory.made.load(Ordering::Acquire), 1, "the log asked the factory for its flush policy");
    let end = log.append(b"flushed by the custom policy").unwrap().next_offset();
    flush_done.recv_timeout(Duration::from_secs(30)).expect("the custom policy never had the log flushed");
    assert!(log.flushed_offset() >= end, "the flush the policy ordered covered the record");
    assert!(factory.flush_asked.load(Ordering::Acquire) >= 3, "flushed only once the policy said so");
    log.shutdown().unwrap();
}

/// Never waits, counts what it is told, and makes every waiter spin a little: a
/// policy no built-in choice behaves like.
struct Counting {
    before: Arc<AtomicU64>,
    acknowledged: Arc<AtomicU64>,
}

impl GatherPolicy for Counting {
    fn before_sync(&mut self, _: &GatherInput) -> GatherDecision {
        self.before.fetch_add(1, Ordering::AcqRel);
        GatherDecision::Go
    }
    fn after_round(&mut self, report: &RoundReport) -> Duration {
        self.acknowledged.fetch_add(report.acknowledged as u64, Ordering::AcqRel);
        Duration::from_micros(20)
    }
}

#[derive(Debug, Default)]
struct GatherFactory {
    before: Arc<AtomicU64>,
    acknowledged: Arc<AtomicU64>,
    made: AtomicU64,
}

impl GatherPolicyFactory for GatherFactory {
    fn gather_policy(&self, _: &GroupCommitConfig) -> Box<dyn GatherPolicy> {
        self.made.fetch_add(1, Ordering::AcqRel);
        Box::new(Counting { before: Arc::clone(&self.before), acknowledged: Arc::clone(&self.acknowledged) })
    }
}

#[test]
fn a_custom_gather_policy_in_the_config_runs_every_group_commit_round() {
    let factory = Arc::new(GatherFactory::default());
    let mut config = common::config(FlushDiskType::SyncFlush);
    config.flush.gather_policy = GatherChoice::Custom(factory.clone());
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config.clone()).unwrap();
    assert_eq!(factory.made.load(Ordering::Acquire), 1, "made once, when the service started");
    for seq in 0..50u32 {
        log.append(&common::body(1, seq, 100)).unwrap().durability.wait().unwrap();
    }
    // Every acknowledged append went through a round the policy was told about
    // (rounds answer before they report, so allow the last one a moment).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while factory.acknowledged.load(Ordering::Acquire) < 50 {
        assert!(std::time::Instant::now() < deadline, "the policy was not told of every round");
        std::thread::yield_now();
    }
    assert!(factory.before.load(Ordering::Acquire) > 0, "asked before the syncs");
    log.shutdown().unwrap();
    // The built-in choices come from the config too.
    for choice in [GatherChoice::ProducersBack, GatherChoice::Adaptive] {
        let dir = tempfile::tempdir().unwrap();
        let config =
            CommitLogConfig { flush: FlushConfig { gather_policy: choice, ..config.flush.clone() }, ..config.clone() };
        let log = CommitLog::open(dir.path(), config).unwrap();
        for seq in 0..20u32 {
            log.append(&common::body(2, seq, 100)).unwrap().durability.wait().unwrap();
        }
        assert_eq!(common::bodies(&log).len(), 20);
        log.shutdown().unwrap();
    }
}
