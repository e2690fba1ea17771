//! A flush policy from outside the crates reaches the log through its config.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use commitlog::{
    CommitLog, CommitLogConfig, Decision, FlushConfig, FlushDiskType, FlushPolicy, PolicyChoice, PolicyFactory,
    PolicyInput,
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
