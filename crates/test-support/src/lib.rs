//! What the workspace's tests and crash suite share, written once: a seedable
//! generator, a directory copy (what a killed process leaves, or a crash image on
//! a real disk), and the wall clock in milliseconds. Unpublished; only dev
//! dependencies and the crash suite use it.

#![forbid(unsafe_code)]

use std::path::Path;

/// SplitMix64: small, deterministic, seedable; the simulation's own generator
/// (`store_io::sim::SplitMix64`), so a seed means the same everywhere.
pub use store_io::sim::SplitMix64 as Rng;

/// Copies a directory tree (lock files included: they are only names here).
///
/// # Panics
/// On any I/O error: it is a test helper.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    for entry in std::fs::read_dir(from).expect("read the directory") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy a file");
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    store_io::epoch_ms(std::time::SystemTime::now())
}
