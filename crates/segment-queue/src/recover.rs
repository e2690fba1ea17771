//! The caller's recovery after `load`, with the record format as a callback,
//! and sealing the segment being written.

use crate::{QueueError, SegmentQueue};

/// What a record parser finds at a position (see [`SegmentQueue::recover_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// A whole, valid record of this many bytes (at least 1) starts here.
    Record(usize),
    /// This segment's data ends here, and the log goes on in the next segment
    /// (the segment was sealed, or ends with a filler the format knows). In
    /// the last segment it ends the data, as [`End`](Self::End): zeros after the
    /// last record there are the unwritten rest, so a format may answer
    /// `SegmentEnd` for zeros wherever it finds them.
    SegmentEnd,
    /// The data ends here: what follows is a torn tail or never written.
    End,
}

impl SegmentQueue {
    /// Recovery for a caller with its own record format. [`load`](Self::load)
    /// marks every loaded segment full (it knows no format); this walks the
    /// segments from the first, asking `parse` what starts at each position
    /// (given the bytes from there to the segment's end), goes on to the next
    /// segment at a [`Scan::SegmentEnd`], stops at the first [`Scan::End`] (or
    /// at a record that would cross the segment's end: a torn one, or at a
    /// `SegmentEnd` in the last segment), cuts everything from there for good
    /// ([`truncate_dirty_files`](Self::truncate_dirty_files)), and returns that
    /// end offset: appends go on from it. A record never spans two segments.
    ///
    /// It reads every loaded byte once; a format with a checkpoint may instead
    /// scan from a later segment and call `truncate_dirty_files` itself.
    pub fn recover_with(&self, mut parse: impl FnMut(&[u8]) -> Scan) -> Result<u64, QueueError> {
        let segments = self.segments();
        let mut end = self.min_offset();
        let last_start = segments.last().map(|f| f.file_from_offset());
        'segments: for file in &segments {
            let last = Some(file.file_from_offset()) == last_start;
            let bytes = file.read(0, file.wrote_position())?;
            let mut pos = 0usize;
            end = file.file_from_offset();
            while pos < bytes.len() {
                match parse(&bytes[pos..]) {
                    Scan::Record(len) if len > 0 && len <= bytes.len().saturating_sub(pos) => {
                        pos = pos.saturating_add(len); // at most bytes.len(), checked above
                        end = file.offset_at(pos);
                    }
                    // The data goes on in the next segment, if there is one.
                    Scan::SegmentEnd if !last => continue 'segments,
                    Scan::SegmentEnd | Scan::Record(_) | Scan::End => break 'segments,
                }
            }
            end = file.file_end(); // the segment is full of records
        }
        // Also lowers flushed_where (load put it at the files' end) to `end`.
        self.truncate_dirty_files(end)?;
        Ok(end)
    }

    /// Ends the segment being written where its data ends: the next
    /// [`roll_to_writable_segment`](Self::roll_to_writable_segment) starts a new
    /// one at the next segment boundary. The rest of the sealed segment stays
    /// zeros and counts as data (offsets skip over it), so a reader's format must
    /// know zeros as "the segment ends here" (for [`recover_with`](Self::recover_with):
    /// [`Scan::SegmentEnd`]). Returns the start of the next segment, or `None`
    /// when there is no segment yet. Write buffers are committed first.
    pub fn seal(&self) -> Result<Option<u64>, QueueError> {
        let _roll = self.roll_lock.lock();
        self.commit(0)?;
        let Some(last) = self.last_mapped_file() else { return Ok(None) };
        last.set_positions(last.file_size())?;
        Ok(Some(last.file_end()))
    }
}
