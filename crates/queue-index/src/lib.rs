//! The index of many queues over one commit log, without a file per queue.
//!
//! Each queue (named by a `u64` its owner assigns: a message store's topic and
//! queue, a raft group) is a dense sequence of [`Entry`]s at queue offsets 0,
//! 1, 2, … in log order. The owner dispatches the log's records in order and
//! [`append`](QueueIndex::append)s each one's entry; the entries of the log's
//! newest records stay in memory (the active run). When the log range they
//! cover is durable and dispatched, the owner [`seal`](QueueIndex::seal)s it:
//! the active run is written as one run file, its queues in ascending order
//! and each queue's entries together, and synced. When the log deletes its
//! front, [`expire`](QueueIndex::expire) deletes the runs wholly below it.
//!
//! What that buys, against a consume-queue directory and file per queue:
//! - a new queue is a row in a hash table (no file, mapping or system call);
//!   open files and mappings are one per run (per sealed log range), however
//!   many queues there are;
//! - each entry is written once, in one sequential file with the other
//!   queues' entries of the same log range; expiry is a file deletion;
//! - recovery reads the runs' headers and directories and re-dispatches only
//!   the log after the last run ([`OpenReport::replay_from`]): the unsealed
//!   tail, not the retention;
//! - a run found damaged (a CRC mismatch: torn by a crash before its sync
//!   returned, or damaged since), or missing between two others, is dropped
//!   with every later run, and the log is re-dispatched from its start: the
//!   index is derived data, rebuilt from the log, never cut.
//!
//! Reads find a queue's entries in the active run or by looking the queue up
//! in each run's directory (a binary search over mapped memory), newest run
//! first; a consumer near a queue's end reads the active run or the last run.
//!
//! A queue can also be cut back ([`truncate`](QueueIndex::truncate)): a raft
//! group's conflicting suffix, or entries written again at new log offsets.
//! The cut is made by a record of the log; it is sealed with the run holding
//! that record, and from then on each offset reads from the newest row that
//! holds it. Owners that index what they wrote as they write it, from many
//! threads, open the index with [`IndexConfig::concurrent_appends`]: each
//! queue's entries still follow one another, and the owner seals only below
//! the first record whose entry may still be coming.
//!
//! ```
//! use std::path::Path;
//! use queue_index::{Entry, QueueIndex};
//! use mapped_file::SimStorage;
//!
//! let storage = SimStorage::new();
//! let (index, report) = QueueIndex::open(&storage, Path::new("/store/queueindex")).unwrap();
//! assert_eq!(report.replay_from, 0);
//! // Queue 7 gets the records at log offsets 0 and 100; queue 9 the one at 50.
//! index.append(7, 0, Entry { log_offset: 0, size: 50, tag: 1 }).unwrap();
//! index.append(9, 0, Entry { log_offset: 50, size: 50, tag: 2 }).unwrap();
//! index.append(7, 1, Entry { log_offset: 100, size: 50, tag: 1 }).unwrap();
//! // Everything below log offset 150 is durable and dispatched: seal it.
//! index.seal(&storage, 150).unwrap();
//! assert_eq!(index.get(7, 1, 10)[0].log_offset, 100);
//! assert_eq!(index.extent(9), Some((0, 1)));
//! drop(index);
//! let (index, report) = QueueIndex::open(&storage, Path::new("/store/queueindex")).unwrap();
//! assert_eq!((report.runs, report.replay_from), (1, 150));
//! assert_eq!(index.extent(7), Some((0, 2)));
//! ```

#![forbid(unsafe_code)]

mod active;
mod append;
mod config;
mod ends;
mod entry;
mod error;
mod expire;
mod index;
mod open;
mod read;
mod report;
mod run;
mod seal;
mod table;

pub use config::IndexConfig;
pub use entry::Entry;
pub use error::IndexError;
pub use index::QueueIndex;
pub use report::OpenReport;
