//! A run file: the entries of one log range, grouped by queue.
//!
//! ```text
//! header    64 bytes: magic "QIRUN001" | log_from u64 | log_to u64 | queues u32 |
//!           entries u64 | body crc32c u32 | flags u32 | reserved | header crc32c u32
//!           (last 4 bytes)
//! directory queues × 24 bytes, ascending by queue: queue u64 | first offset u64 |
//!           count u32 (bit 31: [`RESTART`]) | first entry u32 (index into the entries)
//! entries   entries × 20 bytes: log offset u64 | size u32 | tag u64
//! ```
//!
//! Little-endian. The body CRC covers the directory and the entries; the
//! header's covers the header's first 60 bytes. Flags: bit 0 ([`CUTS`]) says
//! some queue's row starts below the end its queue had before it (a
//! truncation, or entries written again: see `QueueIndex::truncate`); runs
//! written before truncations existed hold zeros there, as the bit means. In
//! such a run, bit 31 of a row's count says the cut left its queue with no
//! entry: nothing below the row's first offset is the queue's any more.
//!
//! A run is written whole under a temporary name (its name and `.tmp`),
//! synced, and renamed to its name (durably) before anything relies on it:
//! a file under a run's name was complete when it got the name, so one that
//! fails either CRC was damaged since (or torn by a crash inside a seal of a
//! version that wrote runs in place). A crash before the rename leaves the
//! temporary file, which the next open deletes.

use std::path::Path;

use mapped_file::{Bytes, MappedFile, Storage};

use crate::entry::Entry;
use crate::error::IndexError;

const MAGIC: &[u8; 8] = b"QIRUN001";
/// Header bytes.
pub(crate) const HEADER: usize = 64;
/// Directory bytes per queue.
const DIR_ENTRY: usize = 24;
/// Bytes per entry.
pub(crate) const ENTRY: usize = 20;
/// The flag of a run holding rows that cut their queue.
pub(crate) const CUTS: u32 = 1;
/// The bit of a row's count saying its cut emptied the queue (in a run with [`CUTS`]).
pub(crate) const RESTART: u32 = 1 << 31;

/// One queue's entries, to be written in a run.
#[derive(Debug)]
pub(crate) struct Row<'a> {
    pub(crate) queue: u64,
    pub(crate) first: u64,
    pub(crate) entries: &'a [Entry],
    /// A cut emptied the queue before `first`.
    pub(crate) restart: bool,
}

/// One queue's entries in a run: its first queue offset and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) first: u64,
    pub(crate) count: u32,
    /// Index of its first entry among the run's entries.
    start: u32,
    /// A cut emptied the queue before `first` ([`RESTART`]).
    pub(crate) restart: bool,
}

impl Span {
    /// One past its last queue offset.
    pub(crate) fn end(&self) -> u64 {
        self.first.saturating_add(u64::from(self.count))
    }
}

/// The bytes of a run of the log range `[log_from, log_to)` holding `rows`,
/// ascending by queue; `flags` as the header says.
pub(crate) fn encode(log_from: u64, log_to: u64, flags: u32, rows: &[Row<'_>]) -> Vec<u8> {
    let entries: usize = rows.iter().map(|r| r.entries.len()).sum();
    let mut bytes = vec![0u8; HEADER];
    bytes.reserve(rows.len() * DIR_ENTRY + entries * ENTRY);
    let mut start = 0u32;
    for row in rows {
        let count = row.entries.len() as u32 | if row.restart && flags & CUTS != 0 { RESTART } else { 0 };
        bytes.extend_from_slice(&row.queue.to_le_bytes());
        bytes.extend_from_slice(&row.first.to_le_bytes());
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&start.to_le_bytes());
        start = start.saturating_add(row.entries.len() as u32);
    }
    for row in rows {
        for entry in row.entries {
            bytes.extend_from_slice(&entry.log_offset.to_le_bytes());
            bytes.extend_from_slice(&entry.size.to_le_bytes());
            bytes.extend_from_slice(&entry.tag.to_le_bytes());
        }
    }
    let body_crc = crc32c::crc32c(&bytes[HEADER..]);
    let h = &mut bytes[..HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&log_from.to_le_bytes());
    h[16..24].copy_from_slice(&log_to.to_le_bytes());
    h[24..28].copy_from_slice(&(rows.len() as u32).to_le_bytes());
    h[28..36].copy_from_slice(&(entries as u64).to_le_bytes());
    h[36..40].copy_from_slice(&body_crc.to_le_bytes());
    h[40..44].copy_from_slice(&flags.to_le_bytes());
    let header_crc = crc32c::crc32c(&h[..HEADER - 4]);
    h[HEADER - 4..].copy_from_slice(&header_crc.to_le_bytes());
    bytes
}

/// Deletes the file at `path`, saying so if it cannot (a file a failed seal
/// leaves, which the next open deletes or drops).
fn remove_or_warn(storage: &dyn Storage, path: &Path) {
    if let Err(err) = storage.remove(path) {
        tracing::warn!(path = %path.display(), %err, "a run that failed to write was not deleted");
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

/// A sealed run, mapped.
#[derive(Debug)]
pub(crate) struct Run {
    file: MappedFile,
    bytes: Bytes,
    pub(crate) log_from: u64,
    pub(crate) log_to: u64,
    queues: usize,
    /// Some row cuts its queue ([`CUTS`]).
    pub(crate) cuts: bool,
}

impl Run {
    /// Writes the run `bytes` (from [`encode`]) to `dir` and syncs it: under
    /// a temporary name first ([`mapped_file::temporary_file_name`]), renamed
    /// to the run's name once whole and synced, so that a reader beside the
    /// index (a tool, a copy for backup) or an open after a crash never finds
    /// the run's name on a file not written yet. The rename is durable (the
    /// directory is synced: [`Storage::rename`]) before this returns.
    pub(crate) fn write(storage: &dyn Storage, dir: &Path, bytes: &[u8]) -> Result<Run, IndexError> {
        let log_from = u64_at(bytes, 8);
        let file = MappedFile::create_temporary(storage, dir, log_from, bytes.len())?;
        let temporary = file.path().to_path_buf();
        if let Err(err) = file.append_bytes(0, bytes).and_then(|_| file.flush(0)) {
            // No half-written file stays: the next seal takes the same name.
            if let Err(gone) = file.destroy() {
                tracing::warn!(path = %temporary.display(), %gone, "a run that failed to write was not deleted");
            }
            return Err(err.into());
        }
        // Unmapped before it moves: it is opened again under its name.
        drop(file);
        let path = dir.join(mapped_file::file_name(log_from));
        if let Err(source) = storage.rename(&temporary, &path) {
            remove_or_warn(storage, &temporary);
            return Err(IndexError::Io { path, source });
        }
        let file = MappedFile::open(storage, &path, bytes.len()).and_then(|file| {
            file.set_positions(bytes.len())?;
            Ok(file)
        });
        match file {
            Ok(file) => Self::from_file(file),
            Err(err) => {
                // Not a run of the index: it must not stay under the name
                // the next seal takes.
                remove_or_warn(storage, &path);
                Err(err.into())
            }
        }
    }

    /// Opens the run file at `path` of `len` bytes, checking both CRCs.
    pub(crate) fn open(storage: &dyn Storage, path: &Path, len: usize) -> Result<Run, IndexError> {
        let damaged = |reason: String| IndexError::DamagedRun { path: path.to_path_buf(), reason };
        if len < HEADER {
            return Err(damaged(format!("{len} bytes, shorter than a header")));
        }
        let file = MappedFile::open(storage, path, len)?;
        file.set_positions(len)?;
        let run = Self::from_file(file).map_err(|_| damaged("unreadable".into()))?;
        run.check().map_err(damaged)?;
        Ok(run)
    }

    fn from_file(file: MappedFile) -> Result<Run, IndexError> {
        let bytes = file.read(0, file.read_position())?;
        let (log_from, log_to) = (u64_at(&bytes, 8), u64_at(&bytes, 16));
        let queues = u32_at(&bytes, 24) as usize;
        let cuts = u32_at(&bytes, 40) & CUTS != 0;
        Ok(Run { file, bytes, log_from, log_to, queues, cuts })
    }

    fn check(&self) -> Result<(), String> {
        let b = &self.bytes;
        if &b[..8] != MAGIC {
            return Err("not a queue-index run (bad magic)".into());
        }
        if crc32c::crc32c(&b[..HEADER - 4]) != u32_at(b, HEADER - 4) {
            return Err("header CRC mismatch".into());
        }
        let entries = usize::try_from(u64_at(b, 28)).unwrap_or(usize::MAX);
        let want = self.queues.checked_mul(DIR_ENTRY).and_then(|d| entries.checked_mul(ENTRY).map(|e| (d, e)));
        match want {
            Some((d, e)) if HEADER + d + e == b.len() => {}
            _ => return Err(format!("{} bytes, not what {} queues and {entries} entries take", b.len(), self.queues)),
        }
        if crc32c::crc32c(&b[HEADER..]) != u32_at(b, 36) {
            return Err("body CRC mismatch".into());
        }
        if self.log_from >= self.log_to || self.file.file_from_offset() != self.log_from {
            return Err(format!("log range [{}, {}) does not fit its name", self.log_from, self.log_to));
        }
        Ok(())
    }

    fn dir_at(&self, i: usize) -> (u64, Span) {
        let at = HEADER + i * DIR_ENTRY;
        let b = &self.bytes;
        let count = u32_at(b, at + 16);
        let restart = self.cuts && count & RESTART != 0;
        let count = if self.cuts { count & !RESTART } else { count };
        (u64_at(b, at), Span { first: u64_at(b, at + 8), count, start: u32_at(b, at + 20), restart })
    }

    /// Queues with entries in the run.
    pub(crate) fn queue_count(&self) -> usize {
        self.queues
    }

    /// Every queue in the run with its span, ascending by queue.
    pub(crate) fn spans(&self) -> impl Iterator<Item = (u64, Span)> + '_ {
        (0..self.queues).map(|i| self.dir_at(i))
    }

    /// `queue`'s span in this run, if it has entries here.
    pub(crate) fn span(&self, queue: u64) -> Option<Span> {
        let (mut lo, mut hi) = (0, self.queues);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (q, span) = self.dir_at(mid);
            match q.cmp(&queue) {
                std::cmp::Ordering::Equal => return Some(span),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    /// The entry at `offset` of `span` (which must hold it).
    pub(crate) fn entry(&self, span: Span, offset: u64) -> Entry {
        let index = u64::from(span.start) + (offset - span.first);
        let at = HEADER + self.queues * DIR_ENTRY + usize::try_from(index).unwrap_or(usize::MAX) * ENTRY;
        let b = &self.bytes;
        Entry { log_offset: u64_at(b, at), size: u32_at(b, at + 8), tag: u64_at(b, at + 12) }
    }

    /// The first queue offset of `span` whose record lies at or after
    /// `log_offset` (`span.end()` if none does).
    pub(crate) fn first_at_or_after(&self, span: Span, log_offset: u64) -> u64 {
        let (mut lo, mut hi) = (span.first, span.end());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(span, mid).log_offset < log_offset {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Deletes the file (readers holding the run keep its mapping).
    pub(crate) fn destroy(&self) -> Result<(), IndexError> {
        Ok(self.file.destroy()?)
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        self.file.path()
    }
}
