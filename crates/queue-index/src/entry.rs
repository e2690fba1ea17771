//! What the index holds of each queue: its entries, its extent, and the
//! table keyed by queue that both live in.

use std::collections::HashMap;

/// A table keyed by queue: `u64` keys under foldhash (fast and seeded per
/// table; std's SipHash took about twice as long per lookup here, and a
/// growing table rehashes every queue it holds on the path of an append).
pub(crate) type QueueMap<V> = HashMap<u64, V, foldhash::fast::RandomState>;

/// One record of a queue: where it is in the log and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The record's log offset.
    pub log_offset: u64,
    /// The record's size in the log.
    pub size: u32,
    /// A tag (a message's tags hash code), for filtering without reading the log.
    pub tag: u64,
}

/// A queue's extent: its first offset still indexed and its end (the offset
/// its next entry takes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) min: u64,
    pub(crate) end: u64,
}
