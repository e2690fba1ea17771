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
/// A file or directory that goes while it is copied (a live store deleting a
/// segment, or replacing a small file by a rename) is left out, as a crash at
/// that moment would leave it out: the copy is what a killed process leaves.
///
/// # Panics
/// On any other I/O error: it is a test helper.
pub fn copy_dir(from: &Path, to: &Path) {
    let gone = |err: &std::io::Error| err.kind() == std::io::ErrorKind::NotFound;
    std::fs::create_dir_all(to).expect("create the copy's directory");
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(err) if gone(&err) => return,
        Err(err) => panic!("read the directory {}: {err}", from.display()),
    };
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => copy_dir(&entry.path(), &target),
            Ok(_) => match std::fs::copy(entry.path(), &target) {
                Ok(_) => {}
                Err(err) if gone(&err) => {}
                Err(err) => panic!("copy {}: {err}", entry.path().display()),
            },
            Err(err) if gone(&err) => {}
            Err(err) => panic!("the type of {}: {err}", entry.path().display()),
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    store_io::epoch_ms(std::time::SystemTime::now())
}
