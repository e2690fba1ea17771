//! Finding segments and offsets: lookup by offset, the ends of the data, reads.

use std::sync::Arc;

use mapped_file::{Bytes, MappedFile};

use crate::{size_u64, QueueError, SegmentQueue};

impl SegmentQueue {
    /// The segment holding `offset` (RocketMQ's `findMappedFileByOffset`): computed by arithmetic,
    /// verified, with a linear scan as fallback
    /// ([ROCKETMQ-332](https://issues.apache.org/jira/browse/ROCKETMQ-332)). With
    /// `return_first_on_not_found`, an offset out of range yields the first segment.
    pub fn find_mapped_file_by_offset(&self, offset: u64, return_first_on_not_found: bool) -> Option<Arc<MappedFile>> {
        let files = self.files.read();
        let first = files.first()?;
        let last = files.last()?;
        let size = size_u64(self.config.mapped_file_size);
        if offset < first.file_from_offset() || offset >= last.file_end() {
            return return_first_on_not_found.then(|| Arc::clone(first));
        }
        // In range, so `offset >= first`: the quotient difference does not underflow.
        let index =
            usize::try_from((offset / size).saturating_sub(first.file_from_offset() / size)).unwrap_or(usize::MAX);
        if let Some(file) = files.get(index).filter(|f| f.holds(offset)) {
            return Some(Arc::clone(file));
        }
        tracing::warn!(offset, index, "segment lookup by arithmetic missed; scanning");
        files.iter().find(|f| f.holds(offset)).cloned().or_else(|| return_first_on_not_found.then(|| Arc::clone(first)))
    }

    /// First stored offset (0 with no segments).
    pub fn min_offset(&self) -> u64 {
        self.files.read().first().map_or(0, |f| f.file_from_offset())
    }

    /// End of readable data. RocketMQ takes the last segment's start plus its read
    /// position, which overstates it right after a roll while the previous segment's
    /// write buffer is not yet committed. Here it is the end of the newest segment
    /// with any readable byte: commits run in segment order, and rolling to a segment
    /// without a buffer commits what came before first, so every segment before
    /// that one is fully readable.
    pub fn max_offset(&self) -> u64 {
        let files = self.files.read();
        for file in files.iter().rev() {
            let read = file.read_position();
            if read > 0 {
                return file.offset_at(read);
            }
        }
        files.first().map_or(0, |f| f.file_from_offset())
    }

    /// End of appended data (may be ahead of [`max_offset`](Self::max_offset) while
    /// a write buffer holds uncommitted bytes).
    pub fn max_wrote_position(&self) -> u64 {
        self.files.read().last().map_or(0, |f| f.offset_at(f.wrote_position()))
    }

    /// Reads `[offset, offset + len)`, which must lie within one segment and below
    /// its read position.
    pub fn read(&self, offset: u64, len: usize) -> Result<Bytes, QueueError> {
        let file = self.find_mapped_file_by_offset(offset, false).ok_or(QueueError::OffsetOutOfRange {
            offset,
            min: self.min_offset(),
            max: self.max_offset(),
        })?;
        let pos = file.position_of(offset).expect("the file holds the offset");
        Ok(file.read(pos, len)?)
    }
}
