//! Arbitrary store directories: random segment names (near the ends of the offset
//! space too), sizes, contents and checkpoints. Every public operation must return
//! within a bound, with a value or a typed error: no hang, no panic.

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use commitlog::format::{encode_record, HEADER_SIZE};
use commitlog::{inspect, Checkpoint, CommitLog, CommitLogConfig, FlushConfig, FlushDiskType, ABORT_FILE, SEGMENT_DIR};
use proptest::prelude::*;

const SEGMENT: u64 = 4096;
/// Generous: each case touches a few 4 KiB files.
const BOUND: Duration = Duration::from_secs(20);

/// Where a segment file starts: aligned, misaligned, or near the end of `u64`.
fn start_offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u64..8).prop_map(|i| i * SEGMENT),
        (1u64..4).prop_map(|i| u64::MAX - i * SEGMENT + 1),
        (1u64..4).prop_map(|i| (u64::MAX / SEGMENT - i) * SEGMENT),
        any::<u64>(),
    ]
}

#[derive(Debug, Clone)]
enum Content {
    Zeros,
    Random(Vec<u8>),
    /// Valid records at the file's own offsets, cut off after `keep` bytes.
    Records {
        bodies: Vec<usize>,
        keep: usize,
    },
}

#[derive(Debug, Clone)]
struct FileSpec {
    name: String,
    len: usize,
    content: Content,
}

fn file_spec() -> impl Strategy<Value = FileSpec> {
    let name = prop_oneof![
        4 => start_offset().prop_map(|o| format!("{o:020}")),
        1 => "[0-9]{1,19}",
        1 => "[a-z][a-z.]{0,7}",
    ];
    let len = prop_oneof![Just(4096usize), Just(4096), Just(0), Just(8192), 1usize..5000];
    let content = prop_oneof![
        Just(Content::Zeros),
        prop::collection::vec(any::<u8>(), 0..256).prop_map(Content::Random),
        (prop::collection::vec(0usize..900, 1..8), 0usize..4096)
            .prop_map(|(bodies, keep)| Content::Records { bodies, keep }),
    ];
    (name, len, content).prop_map(|(name, len, content)| FileSpec { name, len, content })
}

fn checkpoint() -> impl Strategy<Value = Option<Result<Checkpoint, Vec<u8>>>> {
    prop_oneof![
        Just(None),
        (any::<u64>(), prop::option::of(any::<u64>())).prop_map(|(flushed_offset, front_offset)| Some(Ok(
            Checkpoint { flushed_offset, physic_msg_timestamp: 1, front_offset }
        ))),
        (0u64..40_000, prop::option::of(0u64..40_000)).prop_map(|(flushed_offset, front_offset)| Some(Ok(
            Checkpoint { flushed_offset, physic_msg_timestamp: 1, front_offset }
        ))),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| Some(Err(b))),
    ]
}

fn write_store(dir: &Path, files: &[FileSpec], cp: &Option<Result<Checkpoint, Vec<u8>>>, abort: bool) {
    let segments = dir.join(SEGMENT_DIR);
    std::fs::create_dir_all(&segments).unwrap();
    for spec in files {
        let mut bytes = vec![0u8; spec.len];
        match &spec.content {
            Content::Zeros => {}
            Content::Random(random) => {
                let n = random.len().min(bytes.len());
                bytes[..n].copy_from_slice(&random[..n]);
            }
            Content::Records { bodies, keep } => {
                let base = spec.name.parse::<u64>().unwrap_or(0);
                let mut pos = 0usize;
                for &len in bodies {
                    let body = vec![0x5A; len];
                    if pos + HEADER_SIZE + len > bytes.len() {
                        break;
                    }
                    let offset = base.wrapping_add(pos as u64);
                    pos += encode_record(&mut bytes[pos..], offset, 7, &body, crc32c::crc32c(&body));
                }
                let cut = (*keep).min(bytes.len());
                bytes[cut..].fill(0);
            }
        }
        std::fs::write(segments.join(&spec.name), &bytes).unwrap();
    }
    match cp {
        Some(Ok(cp)) => std::fs::write(Checkpoint::path(dir), cp.encode()).unwrap(),
        Some(Err(garbage)) => std::fs::write(Checkpoint::path(dir), garbage).unwrap(),
        None => {}
    }
    if abort {
        std::fs::write(dir.join(ABORT_FILE), b"1").unwrap();
    }
}

/// Every public operation once, in a sensible order; errors are fine.
fn exercise(dir: &Path, segment_size: usize) {
    let listing = inspect::list_segments(dir);
    if let Ok(listing) = &listing {
        for segment in &listing.segments {
            if let Ok(bytes) = inspect::read_segment(segment) {
                inspect::scan_segment(&bytes, segment.start_offset, 0, |_, _, _| {});
            }
        }
    }
    let _ = inspect::store_files(dir);
    let config = common::without_disk_rules(
        CommitLogConfig::builder()
            .write_without_mmap(common::write_without_mmap())
            .mapped_file_size_commit_log(segment_size)
            .max_message_size(1024)
            .flush_disk_type(FlushDiskType::SyncFlush)
            .flush(FlushConfig { sync_flush_timeout_ms: 2000, ..FlushConfig::default() })
            .build()
            .unwrap(),
    );
    let Ok(log) = CommitLog::open(dir, config) else { return };
    for record in log.iter_from(log.min_offset()).take(10_000) {
        if record.is_err() {
            break;
        }
    }
    let _ = log.read(log.min_offset());
    let _ = log.read(u64::MAX);
    for len in [1usize, 500, 1024] {
        if let Ok(put) = log.append(&vec![1; len]) {
            let _ = put.durability.wait();
        }
    }
    if let Ok(batch) = log.append_batch(&[vec![2u8; 100], vec![3u8; 200]]) {
        let _ = batch.durability.wait();
    }
    let _ = log.flush_all();
    let _ = log.delete_segments_before(log.max_offset(), 2);
    let _ = log.shutdown();
    let _ = inspect::list_segments(dir);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn prop_arbitrary_directories_never_hang_or_panic(
        files in prop::collection::vec(file_spec(), 0..4),
        cp in checkpoint(),
        abort in any::<bool>(),
        big_segments in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        write_store(dir.path(), &files, &cp, abort);
        let segment_size = if big_segments { 8192 } else { 4096 };
        let (done, finished) = mpsc::channel();
        let path = dir.path().to_path_buf();
        let worker = std::thread::spawn(move || {
            exercise(&path, segment_size);
            let _ = done.send(());
        });
        match finished.recv_timeout(BOUND) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(TestCaseError::fail(format!("an operation did not return within {BOUND:?}")));
            }
            // The worker died without reporting: it panicked.
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        let joined = worker.join();
        prop_assert!(joined.is_ok(), "an operation panicked");
    }
}
