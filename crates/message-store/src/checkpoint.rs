//! The dispatch checkpoint, `config/dispatch`: a dispatch point below which
//! every key-index item was flushed when it was recorded, how far the key
//! index's live file went, and the topic registry as it was (names, queue
//! counts, ids: what recovers a lost `config/topics`). The queue index keeps
//! its own record of what it made durable (its runs and table,
//! `queue-index`): dispatch after an open starts at the lower of the two.
//!
//! Format 3 (little-endian), replaced atomically:
//!
//! | bytes | what |
//! | --- | --- |
//! | 8 | magic `MSDISP03` |
//! | 8 | the dispatch point |
//! | 8 | the log's first offset when it was recorded |
//! | 1 + 8 + 8 + 4 | the key index: 0 off, 1 no file yet, 2 files (the first one's start position, the live one's, and its items) |
//! | 4 | the next topic id |
//! | 4 | topics, then per topic: name (u8 length), queue count u32, id u32, the log offset it was created at u64 |
//! | 4 | CRC32C of everything before |
//!
//! Format 2 (`MSDISP02`, the consume-queue layout) recorded each queue's
//! first offset and end instead of the ids: a store that has one is
//! converted at its first open, its queue ends taken from it. The first
//! version (`MSDISP01`: magic, point, CRC) recorded only the point.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use store_io::Storage;

use crate::error::{io_err, StoreError};

/// The checkpoint file's first bytes.
const MAGIC: &[u8; 8] = b"MSDISP03";
/// Format 2's magic (each queue's extent, no topic ids).
const MAGIC_V2: &[u8; 8] = b"MSDISP02";
/// The first version's magic (the point only).
const MAGIC_V1: &[u8; 8] = b"MSDISP01";

/// Where the dispatch checkpoint of the store in `root` is.
pub(crate) fn checkpoint_path(root: &Path) -> PathBuf {
    root.join("config").join("dispatch")
}

/// A queue's extent: its first offset and its end (the offset its next message gets).
pub(crate) type Extent = (u64, u64);

/// The key index's files: where they start, and how far the live one went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexMark {
    /// The first file's start position in the index's segment queue (files
    /// before it expired with the log).
    pub(crate) first_file: u64,
    /// The live file's start position in the index's segment queue.
    pub(crate) live_file: u64,
    /// Its items.
    pub(crate) items: u32,
}

/// The key index as recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum IndexRecord {
    /// Not built (`message_index_enable` off): messages below the point have no items.
    #[default]
    Off,
    /// Built, with no file yet (no message had a key).
    Empty,
    /// Built: the live file and its items.
    Live(IndexMark),
}

/// A topic as recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecordedTopic {
    /// Its queue count.
    pub(crate) queues: u32,
    /// Its id (`None` in format 2).
    pub(crate) id: Option<u32>,
    /// The log offset it was created at (0 in format 2).
    pub(crate) since: u64,
    /// Format 2 only: the queues that held entries, with their extents.
    pub(crate) extents: BTreeMap<u32, Extent>,
}

/// What the checkpoint records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The dispatch point: every message below it had its entry and index items.
    pub(crate) point: u64,
    /// The log's first offset then.
    pub(crate) log_min: u64,
    /// Every topic.
    pub(crate) topics: BTreeMap<String, RecordedTopic>,
    /// The id the next topic was to get (0 in format 2).
    pub(crate) next_id: u32,
    /// The key index then.
    pub(crate) index: IndexRecord,
}

impl Recorded {
    /// Format 2: the recorded extent of `topic`'s queue (`(0, 0)`: no entry then).
    #[cfg(test)]
    pub(crate) fn extent(&self, topic: &str, queue_id: u32) -> Extent {
        self.topics.get(topic).and_then(|t| t.extents.get(&queue_id)).copied().unwrap_or((0, 0))
    }

    /// The bytes of the file.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.point.to_le_bytes());
        b.extend_from_slice(&self.log_min.to_le_bytes());
        let (kind, first, live, items) = match self.index {
            IndexRecord::Off => (0u8, 0, 0, 0),
            IndexRecord::Empty => (1, 0, 0, 0),
            IndexRecord::Live(mark) => (2, mark.first_file, mark.live_file, mark.items),
        };
        b.push(kind);
        b.extend_from_slice(&first.to_le_bytes());
        b.extend_from_slice(&live.to_le_bytes());
        b.extend_from_slice(&items.to_le_bytes());
        b.extend_from_slice(&self.next_id.to_le_bytes());
        b.extend_from_slice(&u32::try_from(self.topics.len()).unwrap_or(u32::MAX).to_le_bytes());
        for (name, topic) in &self.topics {
            // Topic names are at most 127 bytes (`validate_topic`).
            b.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&topic.queues.to_le_bytes());
            b.extend_from_slice(&topic.id.unwrap_or(u32::MAX).to_le_bytes());
            b.extend_from_slice(&topic.since.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }
}

/// What the file held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Loaded {
    /// No checkpoint: nothing derived was ever recorded durable.
    Missing,
    /// A checkpoint of the first version: a point without extents.
    PointOnly(u64),
    /// A checkpoint that does not parse: why.
    Damaged(String),
    /// The checkpoint.
    Recorded(Recorded),
}

/// Parses the checkpoint's bytes.
pub(crate) fn parse(bytes: &[u8]) -> Loaded {
    if bytes.len() == 20 && &bytes[..8] == MAGIC_V1 {
        let crc = u32::from_le_bytes(bytes[16..20].try_into().unwrap_or_default());
        if crc32c::crc32c(&bytes[..16]) != crc {
            return Loaded::Damaged("checksum mismatch".into());
        }
        return Loaded::PointOnly(u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default()));
    }
    let v2 = bytes.len() >= 8 && &bytes[..8] == MAGIC_V2;
    if bytes.len() < 8 + 8 + 8 + 21 + 4 + 4 || !(v2 || &bytes[..8] == MAGIC) {
        return Loaded::Damaged("not a dispatch checkpoint of this version".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap_or_default()) {
        return Loaded::Damaged("checksum mismatch".into());
    }
    match decode(&body[8..], v2) {
        Some(recorded) => Loaded::Recorded(recorded),
        None => Loaded::Damaged("its contents do not parse".into()),
    }
}

/// Decodes what follows the magic, of format 2 if `v2` (`None`: malformed).
fn decode(mut b: &[u8], v2: bool) -> Option<Recorded> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = b.split_at_checked(n)?;
        *b = tail;
        Some(head)
    }
    let u64_of = |b: &mut &[u8]| take(b, 8).map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
    let u32_of = |b: &mut &[u8]| take(b, 4).map(|s| u32::from_le_bytes(s.try_into().unwrap_or_default()));
    let point = u64_of(&mut b)?;
    let log_min = u64_of(&mut b)?;
    let kind = *take(&mut b, 1)?.first()?;
    let first = u64_of(&mut b)?;
    let live = u64_of(&mut b)?;
    let items = u32_of(&mut b)?;
    let index = match kind {
        0 => IndexRecord::Off,
        1 => IndexRecord::Empty,
        2 if first <= live => IndexRecord::Live(IndexMark { first_file: first, live_file: live, items }),
        _ => return None,
    };
    let next_id = if v2 { 0 } else { u32_of(&mut b)? };
    let count = u32_of(&mut b)?;
    let mut topics = BTreeMap::new();
    for _ in 0..count {
        let len = usize::from(*take(&mut b, 1)?.first()?);
        let name = std::str::from_utf8(take(&mut b, len)?).ok()?.to_string();
        crate::topic::validate_topic(&name).ok()?;
        let queues = u32_of(&mut b)?;
        let mut extents = BTreeMap::new();
        let mut since = 0;
        let id = if v2 {
            let with_entries = u32_of(&mut b)?;
            for _ in 0..with_entries {
                let queue = u32_of(&mut b)?;
                let (min, end) = (u64_of(&mut b)?, u64_of(&mut b)?);
                if queue >= queues || min > end {
                    return None;
                }
                extents.insert(queue, (min, end));
            }
            None
        } else {
            let id = u32_of(&mut b)?;
            since = u64_of(&mut b)?;
            Some(id).filter(|&id| id < next_id)
        };
        if !v2 && id.is_none() {
            return None;
        }
        topics.insert(name, RecordedTopic { queues, id, since, extents });
    }
    b.is_empty().then_some(Recorded { point, log_min, topics, next_id, index })
}

/// The checkpoint of the store in `root`, read through `storage`.
pub(crate) fn load(storage: &dyn Storage, root: &Path) -> Result<Loaded, StoreError> {
    let path = checkpoint_path(root);
    Ok(match storage.read_small(&path).map_err(io_err(&path))? {
        Some(bytes) => parse(&bytes),
        None => Loaded::Missing,
    })
}

/// Records `recorded` (atomically: a crash leaves the old checkpoint or this one).
pub(crate) fn store(storage: &dyn Storage, root: &Path, recorded: &Recorded) -> Result<(), StoreError> {
    let path = checkpoint_path(root);
    let dir = path.parent().unwrap_or(&path);
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    storage.replace_small(&path, &recorded.encode()).map_err(io_err(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Recorded {
        let mut topics = BTreeMap::new();
        topics
            .insert("orders".to_string(), RecordedTopic { queues: 4, id: Some(0), since: 0, extents: BTreeMap::new() });
        topics.insert(
            "empty".to_string(),
            RecordedTopic { queues: 2, id: Some(3), since: 900, extents: BTreeMap::new() },
        );
        Recorded {
            point: 4096,
            log_min: 0,
            topics,
            next_id: 5,
            index: IndexRecord::Live(IndexMark { first_file: 0, live_file: 0, items: 17 }),
        }
    }

    #[test]
    fn a_checkpoint_round_trips() {
        let recorded = sample();
        assert_eq!(parse(&recorded.encode()), Loaded::Recorded(recorded.clone()));
        let none = Recorded { index: IndexRecord::Empty, ..Recorded::default() };
        assert_eq!(parse(&none.encode()), Loaded::Recorded(none));
    }

    #[test]
    fn every_damaged_byte_and_every_cut_is_seen() {
        let bytes = sample().encode();
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(matches!(parse(&damaged), Loaded::Damaged(_)), "byte {at}");
            assert!(matches!(parse(&bytes[..at]), Loaded::Damaged(_)), "cut at {at}");
        }
    }

    #[test]
    fn format_2_gives_each_queues_extent() {
        let mut b = MAGIC_V2.to_vec();
        b.extend_from_slice(&100u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.push(0);
        b.extend_from_slice(&[0; 20]);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(1);
        b.push(b'q');
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let Loaded::Recorded(recorded) = parse(&b) else { panic!("format 2 parses") };
        assert_eq!((recorded.extent("q", 3), recorded.extent("q", 1)), ((7, 9), (0, 0)));
        assert_eq!(recorded.topics["q"].id, None);
    }

    #[test]
    fn the_first_version_gives_its_point_only() {
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&77u64.to_le_bytes());
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(parse(&v1), Loaded::PointOnly(77));
    }
}
