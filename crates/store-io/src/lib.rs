//! The I/O layer under a commit log, as raft-engine's `env` sits under its pipe
//! log: everything that touches the file system, behind one seam.
//!
//! - [`Storage`] (a store's directory: segments and the small files beside them)
//!   and [`SegmentIo`] (one segment's durability and writes), with their contracts;
//! - [`MmapStorage`], the real one: files preallocated with `fallocate`, mapped
//!   shared (read-write, or read-only when segments are written with `pwrite`),
//!   directories held with an `flock`ed lock file, small files replaced atomically
//!   and durably, disk space from `statvfs`;
//! - [`SegmentMemory`], the bytes a segment lives in (a mapping, or heap memory),
//!   with the `unsafe` accessors whose contract `mapped-file`'s position protocol
//!   keeps;
//! - [`CopyStorage`], a directory read by a tool that must not disturb it:
//!   segments copied into memory, no lock taken, nothing on disk changed;
//! - `SimStorage` (feature `sim`), the same storage in memory: a page-cache image
//!   and a durable image per file, power cuts that keep any subset of dirty
//!   sectors, injected sync and write failures, disk sizes, directories that go
//!   missing. Tests and the crash suite turn the feature on; release builds do not
//!   contain it;
//! - `planted_switch!` (`--cfg planted_bugs` only), the on/off switch each crate
//!   above writes for its own planted bugs, which the crash suite turns on.
//!
//! It knows no record, no segment name, no thread.
//!
//! ```
//! use store_io::{MmapStorage, Storage};
//!
//! let dir = tempfile::tempdir()?;
//! let storage = MmapStorage::lock(dir.path())?;
//! storage.replace_small(&dir.path().join("marker"), b"1")?;
//! assert_eq!(storage.read_small(&dir.path().join("marker"))?, Some(b"1".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]
// Sizes and offsets: no silent wrap-around, no truncating casts.
#![warn(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

mod copy;
#[allow(unsafe_code)]
mod memory;
mod mmap;
#[cfg(planted_bugs)]
mod planted_switch;
#[cfg(feature = "sim")]
pub mod sim;
mod storage;

pub use copy::CopyStorage;
pub use memory::SegmentMemory;
pub use mmap::{first_overlap, sync_dir, LockError, MmapStorage, LOCK_FILE};
#[cfg(feature = "sim")]
pub use sim::SimStorage;
pub use storage::{epoch_ms, remove_files, DirEntry, DiskSpace, OpenedSegment, SegmentIo, Storage};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
