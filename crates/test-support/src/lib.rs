//! What the workspace's tests and crash suite share, written once: a seedable
//! generator, a directory copy (what a killed process leaves, or a crash image on
//! a real disk), and the wall clock in milliseconds. Unpublished; only dev
//! dependencies and the crash suite use it.

#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// SplitMix64: small, deterministic, seedable; the simulation's own generator
/// (`store_io::sim::SplitMix64`), so a seed means the same everywhere.
pub use store_io::sim::SplitMix64 as Rng;

/// Copies a directory tree (lock files included: they are only names here) as
/// it stood at one moment: what a killed process leaves.
///
/// A live store changes its files while they are copied (a cleaner records a
/// new front, then deletes the segments before it; a small file is replaced by
/// a rename), and a file-by-file copy could take the old front from one moment
/// and the missing segments from a later one: a state no crash leaves. So the
/// tree's names, inodes, sizes and modification times are read before and after each
/// copy, and the copy is taken again (into an emptied `to`) until nothing
/// changed meanwhile. Bytes written through a mapping need not move a file's
/// modification time; they are what a crash may or may not keep anyway. A
/// same-size rewrite in place within one timestamp tick also goes unseen
/// where the file system's times are coarse (before Linux 6.13, about a
/// scheduler tick); a file replaced by a rename is seen by its new inode.
///
/// `to` must be empty or absent: it is emptied before each new attempt.
///
/// # Panics
/// On an I/O error other than a file that goes while it is read (it is a test
/// helper), or if the tree kept changing through 1,000 copies.
pub fn copy_dir(from: &Path, to: &Path) {
    const ATTEMPTS: usize = 1000;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::fs::remove_dir_all(to).expect("empty the copy's directory");
        }
        let before = fingerprint(from);
        copy_tree(from, to);
        if fingerprint(from) == before {
            return;
        }
    }
    panic!("{} kept changing through {ATTEMPTS} copies", from.display());
}

fn gone(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::NotFound
}

/// The entries of `dir`, or none if it went.
fn entries_or_gone(dir: &Path) -> Option<std::fs::ReadDir> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Some(entries),
        Err(err) if gone(&err) => None,
        Err(err) => panic!("read the directory {}: {err}", dir.display()),
    }
}

/// What [`fingerprint`] notes of an entry: its path, whether it is a
/// directory, its inode, its length and its modification time.
type Noted = (PathBuf, bool, u64, u64, Option<SystemTime>);

/// Every entry under `dir`, as [`Noted`], sorted.
fn fingerprint(dir: &Path) -> Vec<Noted> {
    fn walk(dir: &Path, out: &mut Vec<Noted>) {
        let Some(entries) = entries_or_gone(dir) else { return };
        for entry in entries {
            let entry = entry.expect("a directory entry");
            let path = entry.path();
            match std::fs::symlink_metadata(&path) {
                Ok(meta) => {
                    out.push((path.clone(), meta.is_dir(), meta.ino(), meta.len(), meta.modified().ok()));
                    if meta.is_dir() {
                        walk(&path, out);
                    }
                }
                Err(err) if gone(&err) => {}
                Err(err) => panic!("the metadata of {}: {err}", path.display()),
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// One file-by-file copy; a file or directory that goes meanwhile is left out.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    let Some(entries) = entries_or_gone(from) else { return };
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => copy_tree(&entry.path(), &target),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that records a new front and then deletes the file before it,
    /// as a log's cleaner does: every copy must hold every file from its
    /// recorded front on (a file-by-file copy could take an old front and miss
    /// the files deleted after it).
    #[test]
    fn a_copy_of_a_changing_tree_is_the_tree_at_one_moment() {
        const FILES: usize = 400;
        let live = tempfile::tempdir().unwrap();
        let file = |k: usize| live.path().join(format!("seg{k:04}"));
        for k in 0..FILES {
            std::fs::write(file(k), [0u8; 64]).unwrap();
        }
        std::fs::write(live.path().join("front"), "0").unwrap();
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                for k in 1..FILES {
                    let staged = live.path().join("front.tmp");
                    std::fs::write(&staged, k.to_string()).unwrap();
                    std::fs::rename(&staged, live.path().join("front")).unwrap();
                    std::fs::remove_file(file(k - 1)).unwrap();
                }
            });
            let mut copies = 0;
            while !writer.is_finished() || copies == 0 {
                let copy = tempfile::tempdir().unwrap();
                copy_dir(live.path(), copy.path());
                let front: usize = std::fs::read_to_string(copy.path().join("front")).unwrap().parse().unwrap();
                for k in front..FILES {
                    assert!(
                        copy.path().join(format!("seg{k:04}")).exists(),
                        "copy {copies}: front {front}, seg{k:04} missing"
                    );
                }
                copies += 1;
            }
        });
    }
}
