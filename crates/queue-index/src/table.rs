//! The queue table: every queue's extent as of a log offset (the end of a
//! run), so an open reads one file and the directories of the runs after it,
//! however long the retention, and a queue whose runs all expired keeps its
//! end.
//!
//! ```text
//! "QITABLE1" | point u64 | queues u64 | crc32c of what follows u32 | reserved u32
//! queues × 24 bytes, ascending: queue u64 | first offset u64 | end u64
//! ```
//!
//! The file `ends` (the ends kept for `QueueIndex::seed_ends` while a table
//! not used is replaced) has the same layout, at point 0, each queue's first
//! offset its end.

use std::path::{Path, PathBuf};

use crate::entry::{Extent, QueueMap};

const MAGIC: &[u8; 8] = b"QITABLE1";
const HEADER: usize = 32;
const ROW: usize = 24;

/// The queue table's file in the index's directory `dir`.
pub(crate) fn table_path(dir: &Path) -> PathBuf {
    dir.join("table")
}

/// The file's bytes: `extents` as of log offset `point`.
pub(crate) fn encode(point: u64, extents: &QueueMap<Extent>) -> Vec<u8> {
    let mut rows: Vec<(&u64, &Extent)> = extents.iter().collect();
    rows.sort_unstable_by_key(|(q, _)| **q);
    let mut bytes = vec![0u8; HEADER];
    bytes.reserve(rows.len() * ROW);
    for (queue, extent) in rows {
        bytes.extend_from_slice(&queue.to_le_bytes());
        bytes.extend_from_slice(&extent.min.to_le_bytes());
        bytes.extend_from_slice(&extent.end.to_le_bytes());
    }
    let crc = crc32c::crc32c(&bytes[HEADER..]);
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&point.to_le_bytes());
    let rows = ((bytes.len() - HEADER) / ROW) as u64;
    bytes[16..24].copy_from_slice(&rows.to_le_bytes());
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

/// The point and extents of a table file; `Err` says what is damaged.
pub(crate) fn decode(bytes: &[u8]) -> Result<(u64, QueueMap<Extent>), String> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("not a queue table (bad header)".into());
    }
    let rows = usize::try_from(u64_at(bytes, 16)).unwrap_or(usize::MAX);
    if rows.checked_mul(ROW).and_then(|r| r.checked_add(HEADER)) != Some(bytes.len()) {
        return Err(format!("{} bytes, not what {rows} queues take", bytes.len()));
    }
    let crc = u32::from_le_bytes(bytes[24..28].try_into().unwrap_or_default());
    if crc32c::crc32c(&bytes[HEADER..]) != crc {
        return Err("CRC mismatch".into());
    }
    let mut extents = QueueMap::with_capacity_and_hasher(rows, Default::default());
    for row in bytes[HEADER..].chunks_exact(ROW) {
        let extent = Extent { min: u64_at(row, 8), end: u64_at(row, 16) };
        if extent.min > extent.end {
            return Err(format!("queue {} from {} to {}", u64_at(row, 0), extent.min, extent.end));
        }
        extents.insert(u64_at(row, 0), extent);
    }
    Ok((u64_at(bytes, 8), extents))
}
