//! What the log holds at an offset: a [`Record`], a blank, or the end of data
//! ([`Slot`]), as the read path and the tails find it.

use bytes::Bytes;

/// A record read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset.
    pub offset: u64,
    /// Encoded size, header included.
    pub size: u64,
    /// Store timestamp, ms since the Unix epoch.
    pub store_timestamp_ms: u64,
    /// The body: a zero-copy view of the mapping, valid while held.
    pub body: Bytes,
}

impl Record {
    /// Offset of the next record (or blank) after this one.
    pub fn next_offset(&self) -> u64 {
        // A record lies inside one segment, inside the offset space.
        self.offset.saturating_add(self.size)
    }
}

/// What lies at an offset.
pub(crate) enum Slot {
    Record(Record),
    /// A blank: the segment continues at the next segment.
    Blank,
    /// End of data.
    End,
}
