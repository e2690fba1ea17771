//! Recovery: scan segments with CRC checks, stop at the first invalid record,
//! truncate a torn tail, report damage below the durable offset as corruption.

use segment_queue::SegmentQueue;

use crate::format::Invalid;
use crate::scan::scan_segment_checked;
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
    /// Bytes cut after the end of the recovered log in its last segment: from the
    /// end to the last non-zero byte, whatever stopped the scan (a torn record, a
    /// lost header, damage). They are erased and synced, so they can never be read
    /// again. Later segments are counted in `segments_deleted`.
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

impl RecoveryReport {
    /// True when recovery cut anything after the end of the recovered log:
    /// bytes erased in its last segment ([`bytes_truncated`](Self::bytes_truncated))
    /// or later segments deleted ([`segments_deleted`](Self::segments_deleted)).
    /// Records that were there before the open may then be gone even after a
    /// clean shutdown (a damaged last record, its checkpoint lost), so whatever
    /// was derived from them must be checked against the log's new end. False
    /// says only that nothing was cut: a record wholly zeroed reads as the end
    /// of data and is not counted.
    pub fn cut_anything(&self) -> bool {
        self.bytes_truncated > 0 || self.segments_deleted > 0
    }
}

/// Where the scan of a log ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanEnd {
    /// Where the scan started: the start of the segment holding the offset asked
    /// for (the last segment for an offset at or past its end, the first for one
    /// below the log).
    pub scanned_from: u64,
    /// Offset after the last valid record.
    pub end_offset: u64,
    /// Valid records seen.
    pub records: u64,
    /// The invalid record that stopped the scan, if any (zeros are not invalid).
    pub invalid: Option<(u64, Invalid)>,
    /// Store timestamp of the last valid record.
    pub last_timestamp_ms: u64,
}

/// Always true, except when the crash suite plants "recovery without CRC".
fn check_crc() -> bool {
    #[cfg(planted_bugs)]
    if crate::planted::is_active(crate::planted::Bug::RecoveryWithoutCrc) {
        return false;
    }
    true
}

/// Scans the segments of `queue` from the one holding `from` (or the first) with CRC
/// checks. Read-only. [`CommitLog::scan`](crate::CommitLog::scan) on an open log.
pub fn scan(queue: &SegmentQueue, from: u64) -> Result<ScanEnd, Error> {
    let segments = queue.segments();
    let start = match segments.iter().position(|f| f.holds(from)) {
        Some(index) => index,
        // At or past the end of the last segment (a checkpoint exactly at its end,
        // no next segment yet): only the last one can hold the end of data.
        None if segments.last().is_some_and(|last| from >= last.file_end()) => segments.len().saturating_sub(1),
        None => 0,
    };
    let begin = segments.get(start).map_or(0, |f| f.file_from_offset());
    let mut out = ScanEnd { scanned_from: begin, end_offset: begin, ..ScanEnd::default() };
    for file in &segments[start..] {
        let base = file.file_from_offset();
        let data = file.read(0, file.read_position())?;
        let seg = scan_segment_checked(&data, base, 0, check_crc(), |_, timestamp_ms, _| {
            out.last_timestamp_ms = timestamp_ms
        });
        out.records = out.records.saturating_add(seg.records);
        out.end_offset = seg.end_offset;
        if seg.invalid.is_some() {
            out.invalid = seg.invalid;
            break;
        }
        // Go on only past a segment whose records reach its end (a blank does).
        if seg.end_offset < file.file_end() {
            break;
        }
    }
    Ok(out)
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
    report.scanned_from = end.scanned_from;
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
    // Cut everything after the end, whatever stopped the scan: bytes left there
    // (records behind a lost header, say) would be valid again at their own offsets
    // as soon as new records end exactly where one of them starts.
    let truncated = queue.truncate_dirty_files(end.end_offset)?;
    report.segments_deleted = truncated.segments_deleted;
    report.bytes_truncated = truncated.bytes_dropped_in_place;
    report.end_offset = end.end_offset;
    // Recovered bytes above the checkpoint may be only in the page cache (a killed
    // process, not a power cut): make them durable before anything is appended
    // after them, or a later power cut could punch a hole under new records.
    queue.force_from(durable_offset)?;
    queue.set_committed_where(end.end_offset);
    if let Some((offset, reason)) = end.invalid {
        tracing::warn!(offset, %reason, truncated = report.bytes_truncated, "recovery truncated an invalid tail");
    } else if report.bytes_truncated > 0 {
        tracing::warn!(
            offset = report.end_offset,
            truncated = report.bytes_truncated,
            "recovery erased bytes after the end of data"
        );
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
