//! Walking a segment's bytes record by record: shared by recovery (over the
//! mapping) and inspection (over a plain file read).

use crate::format::{advance, parse, Invalid, Parsed, HEADER_SIZE};

/// What a segment holds, from its first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// Valid records.
    pub records: u64,
    /// Offset of the first valid record.
    pub first_offset: Option<u64>,
    /// Offset of the last valid record.
    pub last_offset: Option<u64>,
    /// Where the valid data ends.
    pub end_offset: u64,
    /// True if the segment ends with a valid blank (the log continues in the next).
    pub ends_with_blank: bool,
    /// The invalid record that stopped the scan, if any.
    pub invalid: Option<(u64, Invalid)>,
}

/// Calls `visit(offset, timestamp_ms, body)` for each valid record of a segment's
/// bytes from `from` (a file-relative record start), and reports where it stopped.
pub fn scan_segment(bytes: &[u8], start_offset: u64, from: usize, visit: impl FnMut(u64, u64, &[u8])) -> SegmentScan {
    scan_segment_checked(bytes, start_offset, from, true, visit)
}

/// [`scan_segment`] with the CRC check as a parameter (recovery's planted-bug switch).
pub(crate) fn scan_segment_checked(
    bytes: &[u8],
    start_offset: u64,
    from: usize,
    check_crc: bool,
    mut visit: impl FnMut(u64, u64, &[u8]),
) -> SegmentScan {
    let mut out = SegmentScan {
        records: 0,
        first_offset: None,
        last_offset: None,
        end_offset: advance(start_offset, from),
        ends_with_blank: false,
        invalid: None,
    };
    let mut pos = from;
    while pos < bytes.len() {
        let offset = advance(start_offset, pos);
        match parse(&bytes[pos..], offset, check_crc) {
            Parsed::Record { total, timestamp_ms } => {
                // `parse` checked `HEADER_SIZE <= total <= bytes.len() - pos`.
                let record = &bytes[pos..][..total];
                visit(offset, timestamp_ms, &record[HEADER_SIZE..]);
                out.records = out.records.saturating_add(1);
                out.first_offset.get_or_insert(offset);
                out.last_offset = Some(offset);
                pos = pos.saturating_add(total); // at most `bytes.len()`, as above
            }
            Parsed::Blank => {
                out.ends_with_blank = true;
                out.end_offset = advance(start_offset, bytes.len());
                return out;
            }
            Parsed::End => break,
            Parsed::Invalid(reason) => {
                out.invalid = Some((offset, reason));
                break;
            }
        }
    }
    out.end_offset = advance(start_offset, pos);
    out
}
