//! An entry's format: 20 bytes naming a record of the log, and the arithmetic
//! from an index to its byte position.

use crate::error::CqError;

/// Bytes per entry (RocketMQ's `CQ_STORE_UNIT_SIZE`): offset (8), size (4), tag (8),
/// little-endian.
pub const CQ_STORE_UNIT_SIZE: usize = 20;

/// Entries per segment must be a multiple of this, so that a segment (entries × 20
/// bytes) is a whole number of 4 KiB pages and no entry straddles two segments.
pub const ENTRIES_PER_SEGMENT_MULTIPLE: usize = 1024;

/// One entry: where a record of the queue is in the commit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEntry {
    /// The record's commit-log offset.
    pub offset: u64,
    /// The record's size in the log (header included); never 0 (zeros mark "no entry").
    pub size: u32,
    /// A tag (RocketMQ's tags hash code), for filtering without reading the log.
    pub tag: u64,
}

impl CqEntry {
    /// Where the record ends in the log.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.size))
    }

    pub(crate) fn encode(&self) -> [u8; CQ_STORE_UNIT_SIZE] {
        let mut bytes = [0u8; CQ_STORE_UNIT_SIZE];
        bytes[..8].copy_from_slice(&self.offset.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.size.to_le_bytes());
        bytes[12..].copy_from_slice(&self.tag.to_le_bytes());
        bytes
    }

    /// The entry in `bytes` (its first 20), or `None` for "no entry" (size 0,
    /// or fewer than 20 bytes): how a reader of the files decodes them.
    pub fn decode(bytes: &[u8]) -> Option<CqEntry> {
        let word = |range: std::ops::Range<usize>| bytes.get(range).unwrap_or(&[]);
        let offset = u64::from_le_bytes(word(0..8).try_into().ok()?);
        let size = u32::from_le_bytes(word(8..12).try_into().ok()?);
        let tag = u64::from_le_bytes(word(12..20).try_into().ok()?);
        (size > 0).then_some(CqEntry { offset, size, tag })
    }
}

/// The byte position of entry `index`.
pub(crate) fn position(index: u64) -> Result<u64, CqError> {
    index.checked_mul(CQ_STORE_UNIT_SIZE as u64).ok_or(CqError::IndexOverflow { index })
}

/// The index of the entry at byte `position` (a multiple of 20).
pub(crate) fn index_at(position: u64) -> u64 {
    const UNIT: std::num::NonZeroU64 = std::num::NonZeroU64::new(CQ_STORE_UNIT_SIZE as u64).expect("20");
    position / UNIT
}
