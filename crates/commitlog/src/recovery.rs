//! Recovery: scan segments with CRC checks, stop at the first invalid record,
//! truncate a torn tail, report damage below the durable offset as corruption.

use segment_queue::SegmentQueue;

use crate::format::Invalid;
use crate::inspect::scan_segment_checked;
use crate::Error;

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// True when the last run shut down cleanly (no abort marker): normal recovery.
    pub clean_shutdown: bool,
    /// Durable offset from the checkpoint (0 without one).
    pub durable_offset: u64,
    /// Offset the scan started at (start of the checkpoint's segment).
    pub scanned_from: u64,
    /// Valid records scanned.
    pub records_recovered: u64,
    /// Non-zero bytes dropped after the last valid record in its segment (a torn
    /// or damaged tail); later segments are counted in `segments_deleted`.
    pub bytes_truncated: u64,
    /// Segments deleted because they lay wholly after the last valid record.
    pub segments_deleted: usize,
    /// End of the recovered log: the next record goes here.
    pub end_offset: u64,
    /// Why the scan stopped before the end of the last segment, if it did.
    pub stopped_at: Option<(u64, Invalid)>,
    /// Store timestamp of the last valid record scanned.
    pub last_timestamp_ms: u64,
}

/// Where the scan of a log ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanEnd {
    /// Offset after the last valid record.
    pub end_offset: u64,
    /// Valid records seen.
    pub records: u64,
    /// The invalid record that stopped the scan, if any (zeros are not invalid).
    pub invalid: Option<(u64, Invalid)>,
    /// Store timestamp of the last valid record.
    pub last_timestamp_ms: u64,
    /// Non-zero bytes after the end in the segment where the scan stopped (the torn
    /// or damaged tail).
    pub garbage_bytes: u64,
}

/// Always true, except when the crash suite plants "recovery without CRC".
fn check_crc() -> bool {
    #[cfg(feature = "planted-bugs")]
    if mapped_file::planted::is_active(mapped_file::planted::Bug::RecoveryWithoutCrc) {
        return false;
    }
    true
}

/// Scans the segments of `queue` from the one holding `from` (or the first) with CRC
/// checks. Read-only.
pub fn scan(queue: &SegmentQueue, from: u64) -> Result<ScanEnd, Error> {
    let segments = queue.segments();
    let size = queue.mapped_file_size() as u64;
    let start =
        segments.iter().position(|f| f.file_from_offset() <= from && from < f.file_from_offset() + size).unwrap_or(0);
    let mut out = ScanEnd { end_offset: segments.get(start).map_or(0, |f| f.file_from_offset()), ..ScanEnd::default() };
    for file in &segments[start..] {
        let base = file.file_from_offset();
        let data = file.read(0, file.read_position())?;
        let seg = scan_segment_checked(&data, base, 0, check_crc(), |_, timestamp_ms, _| {
            out.last_timestamp_ms = timestamp_ms
        });
        out.records += seg.records;
        out.end_offset = seg.end_offset;
        if let Some((offset, reason)) = seg.invalid {
            let pos = (offset - base) as usize;
            let last_nonzero = data.iter().rposition(|&b| b != 0).map_or(pos, |i| i + 1);
            out.invalid = Some((offset, reason));
            out.garbage_bytes = last_nonzero.saturating_sub(pos) as u64;
            break;
        }
        // Go on only past a segment whose records reach its end (a blank does).
        if seg.end_offset < base + file.file_size() as u64 {
            break;
        }
    }
    Ok(out)
}

/// Overwrites the dropped bytes after `end` with zeros and syncs them. Left in
/// place, they could be read again: once new records end exactly where an old,
/// valid-at-its-offset record starts, a later scan would bring it back (the hazard
/// RocketMQ PR #10816 closes with a truncation marker).
fn erase_tail(queue: &SegmentQueue, end: u64, len: usize) -> Result<(), Error> {
    let Some(file) = queue.find_mapped_file_by_offset(end, false) else { return Ok(()) };
    let pos = (end - file.file_from_offset()) as usize;
    let len = len.min(file.file_size() - pos);
    file.append_with(file.store_timestamp(), |_, tail| {
        tail[..len].fill(0);
        mapped_file::AppendStatus::Written { bytes: len, value: () }
    })?;
    file.flush(0)?;
    file.set_positions(pos)?;
    Ok(())
}

/// Recovers `queue` in place (see the module docs). `durable_offset` comes from the
/// checkpoint: anything invalid below it is corruption.
pub(crate) fn recover(
    queue: &SegmentQueue,
    durable_offset: u64,
    clean_shutdown: bool,
) -> Result<RecoveryReport, Error> {
    let mut report = RecoveryReport { clean_shutdown, durable_offset, ..RecoveryReport::default() };
    if queue.segment_count() == 0 {
        if durable_offset > 0 {
            return Err(Error::Corrupt {
                path: queue.dir().to_path_buf(),
                offset: 0,
                durable_offset,
                reason: Invalid::UnexpectedEnd,
            });
        }
        return Ok(report);
    }
    let scan_from = durable_offset.max(queue.min_offset());
    let end = scan(queue, scan_from)?;
    report.scanned_from = queue.find_mapped_file_by_offset(scan_from, true).map_or(0, |f| f.file_from_offset());
    report.records_recovered = end.records;
    report.last_timestamp_ms = end.last_timestamp_ms;
    report.stopped_at = end.invalid;
    if end.end_offset < durable_offset {
        let file = queue.find_mapped_file_by_offset(end.end_offset, true).expect("segments exist");
        return Err(Error::Corrupt {
            path: file.path().to_path_buf(),
            offset: end.end_offset,
            durable_offset,
            reason: end.invalid.map_or(Invalid::UnexpectedEnd, |(_, r)| r),
        });
    }
    let truncated = queue.truncate_dirty_files(end.end_offset)?;
    report.segments_deleted = truncated.segments_deleted;
    report.bytes_truncated = end.garbage_bytes;
    if end.garbage_bytes > 0 {
        erase_tail(queue, end.end_offset, end.garbage_bytes as usize)?;
    }
    report.end_offset = end.end_offset;
    // Recovered bytes above the checkpoint may be only in the page cache (a killed
    // process, not a power cut): make them durable before anything is appended
    // after them, or a later power cut could punch a hole under new records.
    queue.force_from(durable_offset)?;
    queue.set_committed_where(end.end_offset);
    if let Some((offset, reason)) = end.invalid {
        tracing::warn!(offset, %reason, truncated = report.bytes_truncated, "recovery truncated an invalid tail");
    }
    tracing::info!(
        clean_shutdown,
        records = report.records_recovered,
        end = report.end_offset,
        truncated = report.bytes_truncated,
        "commit log recovered"
    );
    Ok(report)
}
