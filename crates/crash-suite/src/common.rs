//! Shared pieces: a deterministic generator, record bodies, configs, the checks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use commitlog::{CommitLog, CommitLogConfig, FlushConfig, FlushDiskType};
use mapped_file::sim::SimSnapshot;
use mapped_file::SimStorage;

pub use test_support::{copy_dir, Rng};

/// A body that names its producer and sequence number, of a given length.
pub fn body(producer: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(len.max(12));
    b.extend_from_slice(&producer.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    while b.len() < len {
        b.push((seq as usize).wrapping_mul(31).wrapping_add(b.len()) as u8);
    }
    b
}

/// Small segments so runs roll over often.
pub fn config(segment: usize, flush: FlushDiskType) -> CommitLogConfig {
    CommitLogConfig::builder()
        .mapped_file_size_commit_log(segment)
        .max_message_size(segment / 4)
        .flush_disk_type(flush)
        .preallocate_next_segment(false)
        .flush(FlushConfig { flush_interval_commit_log_ms: 3_600_000, ..FlushConfig::default() })
        .checkpoint_interval_ms(3_600_000)
        .build()
        .expect("valid config")
}

/// A scratch directory, on tmpfs when there is one (crash states are many).
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temporary directory")
}

/// What a recovered log held, checked against what was written.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Records recovered.
    pub records: usize,
    /// Records whose bytes were never written at their offset.
    pub garbage: usize,
    /// Acknowledged records missing.
    pub lost: usize,
    /// An error ended iteration (e.g. a damaged record in an old segment).
    pub iteration_error: Option<String>,
}

/// True if `bytes` is exactly a body made by [`body`] (it names its producer and
/// sequence number, and its length is its own).
pub fn is_self_consistent(bytes: &[u8]) -> bool {
    if bytes.len() < 12 {
        return false;
    }
    let producer = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let seq = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
    bytes == body(producer, seq, bytes.len()).as_slice()
}

/// Iterates the whole log: every record must satisfy `valid(offset, body)`, and
/// every offset in `acked` must be there.
pub fn check_with(log: &CommitLog, valid: impl Fn(u64, &[u8]) -> bool, acked: &[u64]) -> Outcome {
    let mut out = Outcome::default();
    let mut seen = std::collections::HashSet::new();
    for record in log.iter_from(log.min_offset()) {
        match record {
            Ok(r) => {
                out.records += 1;
                if !valid(r.offset, &r.body) {
                    out.garbage += 1;
                }
                seen.insert(r.offset);
            }
            Err(e) => {
                out.iteration_error = Some(e.to_string());
                break;
            }
        }
    }
    out.lost = acked.iter().filter(|o| !seen.contains(o)).count();
    out
}

/// Iterates the whole log and compares with `written` (offset → body) and `acked`.
pub fn check(log: &CommitLog, written: &HashMap<u64, Vec<u8>>, acked: &[u64]) -> Outcome {
    check_with(log, |offset, body| written.get(&offset).map(|b| &b[..]) == Some(body), acked)
}

/// The segment file holding `offset`.
pub fn segment_path(dir: &Path, segment: usize, offset: u64) -> PathBuf {
    let start = offset - offset % segment as u64;
    dir.join(commitlog::SEGMENT_DIR).join(format!("{start:020}"))
}

/// Overwrites bytes of a file in place.
pub fn patch(path: &Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).expect("open");
    file.write_all_at(bytes, at).expect("write");
}

/// The store directory of the simulated layers. Every file of the store (segments,
/// checkpoint, abort marker) lives in the `SimStorage`; nothing touches the disk.
pub const SIM_STORE: &str = "/sim-store";

/// The write path a run with this seed uses: the layers alternate between
/// `pwrite` (write without mmap) and writes through the mapping, so both face
/// every kind of crash.
pub fn write_without_mmap(seed: u64) -> bool {
    seed.is_multiple_of(2)
}

/// An empty simulated storage writing segments the given way.
pub fn sim_storage(write_without_mmap: bool) -> SimStorage {
    let sim = SimStorage::new();
    sim.set_write_without_mmap(write_without_mmap);
    sim
}

/// A crash image of `snapshot`: each dirty sector is kept by a bit of `mask` (by a
/// generator seeded with it when there are more than 64). Every file keeps its
/// path, the checkpoint and abort marker as they stood at that point. The
/// recovered store writes the way `write_without_mmap` says.
pub fn crash_image(snapshot: &SimSnapshot, mask: u64, write_without_mmap: bool) -> SimStorage {
    let image = if snapshot.dirty_sectors() <= 64 {
        snapshot.crash_image(|n| mask >> n & 1 == 1)
    } else {
        let mut r = Rng(mask);
        snapshot.crash_image(|_| r.next() & 1 == 1)
    };
    image.set_write_without_mmap(write_without_mmap);
    image
}
