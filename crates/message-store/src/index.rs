//! The index (RocketMQ's `IndexService`): messages found by key within a time
//! range. Built by dispatch, in log order, into fixed-size files in `index/`
//! (one [`SegmentQueue`] whose segments are the index files).
//!
//! An index file is written front to back and never rewritten, so it rides on
//! the segments' append-only protocol (no random writes, no `unsafe`):
//!
//! | bytes | what |
//! | --- | --- |
//! | 64 | header: magic `MSIDX001`, slot count u32, item capacity u32 |
//! | 28 × capacity | items, numbered from 1: key hash u64, log offset u64, store time u64, previous item of the same slot u32 (0: none) |
//! | 4 × slots | the slot table, written when the file is full: each slot's newest item |
//! | to the end | zeros, then a 64-byte footer: magic `MSIDXEND`, item count u32, first and last store time and log offset u64, CRC32C |
//!
//! The live (last) file's slot table is kept in memory and rebuilt at open from
//! its items, which are cut at the recovered dispatch point (dispatch adds them
//! again) and checked against the log. A key is `topic#key` hashed with 64-bit
//! FNV-1a; a lookup compares each candidate's topic and keys in the log record,
//! so a hash collision never returns another key's message (RocketMQ #3613 left
//! that to the client).

use std::path::Path;
use std::sync::Arc;

use mapped_file::{Appended, MappedFile};
use parking_lot::Mutex;
use segment_queue::{QueueConfig, SegmentQueue};
use store_io::Storage;

use crate::checkpoint::{IndexMark, IndexRecord};
use crate::error::StoreError;
use crate::message::decode_header;

const HEADER: usize = 64;
const ITEM: usize = 28;
const FOOTER: usize = 64;
const MAGIC: &[u8; 8] = b"MSIDX001";
const END_MAGIC: &[u8; 8] = b"MSIDXEND";

/// The index's shape: slots and items per file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct IndexConfig {
    /// Hash slots per file (RocketMQ's `maxHashSlotNum`, 5,000,000; here 200,000).
    pub hash_slots: u32,
    /// Items per file (RocketMQ's `maxIndexNum`, 20,000,000; here 800,000): a
    /// file is about 23 MiB.
    pub max_items: u32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig { hash_slots: 200_000, max_items: 800_000 }
    }
}

impl IndexConfig {
    /// `hash_slots` slots and `max_items` items per file.
    pub fn new(hash_slots: u32, max_items: u32) -> Self {
        IndexConfig { hash_slots, max_items }
    }

    /// Bytes of one index file.
    fn file_size(&self) -> usize {
        let raw = HEADER + ITEM * self.max_items as usize + 4 * self.hash_slots as usize + FOOTER;
        raw.div_ceil(4096) * 4096
    }

    fn slots_at(&self) -> usize {
        HEADER + ITEM * self.max_items as usize
    }
}

/// The hash of `topic#key`.
pub(crate) fn key_hash(topic: &str, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic.bytes().chain(std::iter::once(b'#')).chain(key.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    hash: u64,
    offset: u64,
    time: u64,
    prev: u32,
}

impl Item {
    fn encode(&self) -> [u8; ITEM] {
        let mut b = [0u8; ITEM];
        b[..8].copy_from_slice(&self.hash.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.time.to_le_bytes());
        b[24..].copy_from_slice(&self.prev.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Item {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Item {
            hash: u64_at(0),
            offset: u64_at(8),
            time: u64_at(16),
            prev: u32::from_le_bytes(b[24..28].try_into().unwrap_or_default()),
        }
    }
}

/// What a file holds (a sealed file's footer, or the live file's running figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    count: u32,
    first_time: u64,
    last_time: u64,
    first_offset: u64,
    last_offset: u64,
}

impl Span {
    fn add(&mut self, item: &Item) {
        if self.count == 0 {
            self.first_time = item.time;
            self.first_offset = item.offset;
        }
        self.count += 1;
        self.last_time = item.time;
        self.last_offset = item.offset;
    }

    fn footer(&self) -> [u8; FOOTER] {
        let mut b = [0u8; FOOTER];
        b[..8].copy_from_slice(END_MAGIC);
        b[8..12].copy_from_slice(&self.count.to_le_bytes());
        for (i, v) in [self.first_time, self.last_time, self.first_offset, self.last_offset].iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..48]);
        b[48..52].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn from_footer(b: &[u8]) -> Option<Span> {
        if b.len() < FOOTER || &b[..8] != END_MAGIC {
            return None;
        }
        let crc = u32::from_le_bytes(b[48..52].try_into().ok()?);
        if crc32c::crc32c(&b[..48]) != crc {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Some(Span {
            count: u32::from_le_bytes(b[8..12].try_into().ok()?),
            first_time: u64_at(16),
            last_time: u64_at(24),
            first_offset: u64_at(32),
            last_offset: u64_at(40),
        })
    }

    fn overlaps(&self, begin: u64, end: u64) -> bool {
        self.count > 0 && self.first_time <= end && self.last_time >= begin
    }
}

/// The live file: its segment, its span and its slot table.
#[derive(Debug)]
struct Live {
    file: Arc<MappedFile>,
    span: Span,
    slots: Vec<u32>,
}

/// The index of a store.
#[derive(Debug)]
pub(crate) struct Index {
    config: IndexConfig,
    queue: Arc<SegmentQueue>,
    /// Sealed files: their segment and span, oldest first.
    sealed: Mutex<Vec<(Arc<MappedFile>, Span)>>,
    live: Mutex<Option<Live>>,
}

impl Index {
    /// Opens the index in `root/index`, trusting of its files only what the
    /// dispatch checkpoint says was flushed: the sealed files before the
    /// recorded live file (header and footer intact), and the recorded live
    /// file's first items (checked for order, the last against the log);
    /// what was written after is cut, files made after are deleted. Anything
    /// else (files of another shape or damaged, nothing recorded, a recorded
    /// file missing, a file missing at the front while the log's front did not
    /// move, `log_front_moved` false) and the index is emptied: the second
    /// value is then true, and the caller indexes the log's messages below
    /// `point` again.
    pub(crate) fn open(
        storage: Arc<dyn Storage>,
        root: &Path,
        config: IndexConfig,
        recorded: Option<IndexRecord>,
        point: u64,
        log_front_moved: bool,
        log: &commitlog::CommitLog,
    ) -> Result<(Index, bool), StoreError> {
        let dir = root.join("index");
        let queue_config = QueueConfig { preallocate_next_segment: false, ..QueueConfig::new(config.file_size()) };
        let queue = match SegmentQueue::load(Arc::clone(&storage), &dir, queue_config.clone(), None) {
            Ok(queue) => queue,
            Err(err) => {
                tracing::warn!(dir = %dir.display(), %err, "index files damaged; rebuilding the index from the log");
                remove_segment_files(&*storage, &dir)?;
                SegmentQueue::load(storage, &dir, queue_config, None).map_err(commitlog::Error::from)?
            }
        };
        let index = Index { config, queue: Arc::new(queue), sealed: Mutex::new(Vec::new()), live: Mutex::new(None) };
        let rebuilt = match index.keep_recorded(recorded, point, log_front_moved, log)? {
            Ok(()) => false,
            Err(why) => {
                if !index.queue.segments().is_empty() || recorded.is_some_and(|r| r != IndexRecord::Empty) {
                    tracing::warn!(dir = %dir.display(), why, "key index not usable; rebuilding it from the log");
                }
                index.sealed.lock().clear();
                *index.live.lock() = None;
                index.queue.clear().map_err(commitlog::Error::from)?;
                true
            }
        };
        Ok((index, rebuilt))
    }

    /// Keeps what `recorded` says is durable (see [`open`](Self::open)), or
    /// says why the files cannot be used.
    fn keep_recorded(
        &self,
        recorded: Option<IndexRecord>,
        point: u64,
        log_front_moved: bool,
        log: &commitlog::CommitLog,
    ) -> Result<Result<(), &'static str>, StoreError> {
        let segments = self.queue.segments();
        let mark = match recorded {
            None => return Ok(Err("no dispatch checkpoint")),
            Some(IndexRecord::Off) => return Ok(Err("it was off when the dispatch point was recorded")),
            Some(IndexRecord::Empty) => {
                // Files made after the point hold only items past it: dispatch
                // adds them again.
                if !segments.is_empty() {
                    self.queue.clear().map_err(commitlog::Error::from)?;
                }
                return Ok(Ok(()));
            }
            Some(IndexRecord::Live(mark)) => mark,
        };
        let Some(live_at) = segments.iter().position(|f| f.file_from_offset() == mark.live_file) else {
            return Ok(Err("the recorded live file is missing"));
        };
        // Files before the first recorded go only with the log's front; any
        // other missing at the front is damage (its keys would be lost).
        let first = segments.first().map_or(mark.live_file, |f| f.file_from_offset());
        if first > mark.first_file && !log_front_moved {
            return Ok(Err("files at its front are missing"));
        }
        if mark.items > self.config.max_items {
            return Ok(Err("more items recorded than a file holds"));
        }
        for file in &segments[..=live_at] {
            let header = file.read(0, HEADER).map_err(commitlog::Error::from)?;
            if &header[..8] != MAGIC {
                return Ok(Err("a file's header is damaged"));
            }
            let slots = u32::from_le_bytes(header[8..12].try_into().unwrap_or_default());
            let items = u32::from_le_bytes(header[12..16].try_into().unwrap_or_default());
            if slots != self.config.hash_slots || items != self.config.max_items {
                return Ok(Err("its files were made with another hash_slots or max_items"));
            }
        }
        let mut sealed = Vec::new();
        for file in &segments[..live_at] {
            let footer = file.read(self.config.file_size() - FOOTER, FOOTER).map_err(commitlog::Error::from)?;
            match Span::from_footer(&footer) {
                Some(span) if span.count == self.config.max_items && span.last_offset < point => {
                    sealed.push((Arc::clone(file), span));
                }
                _ => return Ok(Err("a sealed file's footer is damaged")),
            }
        }
        let file = Arc::clone(&segments[live_at]);
        let bytes = file.read(HEADER, ITEM * mark.items as usize).map_err(commitlog::Error::from)?;
        let items: Vec<Item> = bytes.chunks_exact(ITEM).map(Item::decode).collect();
        drop(bytes);
        let floor = sealed.last().map_or(0, |(_, span): &(Arc<MappedFile>, Span)| span.last_offset);
        let mut previous = floor;
        for (n, item) in items.iter().enumerate() {
            // Items are in log order (several per message with several keys),
            // each chained only to an earlier one of its file.
            let zeros = item.hash == 0 && item.time == 0;
            if zeros || item.offset < previous || item.offset >= point || item.prev as usize > n {
                return Ok(Err("the live file's items are out of order"));
            }
            previous = item.offset;
        }
        // A last item whose record went with the log's front cannot be
        // checked against it, and names nothing a query returns.
        let unchecked = |last: &Item| last.offset < log.min_offset();
        if items.len() != mark.items as usize
            || items.last().is_some_and(|last| !unchecked(last) && !names_a_key(log, last))
        {
            return Ok(Err("the live file's last item does not name its message"));
        }
        // What was written after the point is cut; files made after, deleted.
        let end = file.file_from_offset() + (HEADER + ITEM * items.len()) as u64;
        self.queue.truncate_dirty_files(end).map_err(commitlog::Error::from)?;
        let mut span = Span::default();
        let mut slots = vec![0u32; self.config.hash_slots as usize];
        for (n, item) in items.iter().enumerate() {
            span.add(item);
            slots[(item.hash % u64::from(self.config.hash_slots)) as usize] = n as u32 + 1;
        }
        let file = self.queue.last_mapped_file().unwrap_or(file);
        *self.sealed.lock() = sealed;
        *self.live.lock() = Some(Live { file, span, slots });
        Ok(Ok(()))
    }

    /// Deletes every index file: the index holds nothing.
    pub(crate) fn clear(&self) -> Result<(), StoreError> {
        let mut live = self.live.lock();
        let mut sealed = self.sealed.lock();
        *live = None;
        sealed.clear();
        self.queue.clear().map_err(commitlog::Error::from)?;
        Ok(())
    }

    /// What the checkpoint records of the index now.
    pub(crate) fn record(&self) -> IndexRecord {
        match self.live.lock().as_ref() {
            Some(live) => {
                let live_file = live.file.file_from_offset();
                let first_file = self.sealed.lock().first().map_or(live_file, |(file, _)| file.file_from_offset());
                IndexRecord::Live(IndexMark { first_file, live_file, items: live.span.count })
            }
            None => IndexRecord::Empty,
        }
    }

    /// The log offset after the last indexed message.
    fn indexed_to(&self, live: &Option<Live>) -> u64 {
        match live {
            Some(live) if live.span.count > 0 => live.span.last_offset + 1,
            _ => self.sealed.lock().last().map_or(0, |(_, s)| s.last_offset + 1),
        }
    }

    /// Adds the `keys` of `topic`'s message at `offset`, unless its offset is
    /// below what is indexed (a re-dispatch after a restart).
    pub(crate) fn put(&self, topic: &str, keys: &[String], offset: u64, time: u64) -> Result<(), StoreError> {
        let mut live = self.live.lock();
        if keys.is_empty() || offset < self.indexed_to(&live) {
            return Ok(());
        }
        for key in keys {
            let hash = key_hash(topic, key);
            if live.as_ref().is_none_or(|l| l.span.count == self.config.max_items) {
                self.roll(&mut live)?;
            }
            let live = live.as_mut().expect("rolled above");
            let slot = (hash % u64::from(self.config.hash_slots)) as usize;
            let item = Item { hash, offset, time, prev: live.slots[slot] };
            match live.file.append_bytes(time, &item.encode()).map_err(commitlog::Error::from)? {
                Appended::Written { .. } => {}
                Appended::DoesNotFit { .. } => unreachable!("an item fits until the file holds max_items"),
            }
            live.span.add(&item);
            live.slots[slot] = live.span.count;
        }
        Ok(())
    }

    /// Seals the live file (slot table and footer) and starts the next.
    fn roll(&self, live: &mut Option<Live>) -> Result<(), StoreError> {
        if let Some(full) = live.take() {
            let mut tail = vec![0u8; self.config.file_size() - self.config.slots_at()];
            for (k, slot) in full.slots.iter().enumerate() {
                tail[4 * k..4 * k + 4].copy_from_slice(&slot.to_le_bytes());
            }
            let footer_at = tail.len() - FOOTER;
            tail[footer_at..].copy_from_slice(&full.span.footer());
            full.file.append_bytes(full.span.last_time, &tail).map_err(commitlog::Error::from)?;
            self.sealed.lock().push((Arc::clone(&full.file), full.span));
        }
        let start = self.queue.max_offset();
        let file = self.queue.roll_to_writable_segment(start).map_err(commitlog::Error::from)?;
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&self.config.hash_slots.to_le_bytes());
        header[12..16].copy_from_slice(&self.config.max_items.to_le_bytes());
        file.append_bytes(0, &header).map_err(commitlog::Error::from)?;
        *live = Some(Live { file, span: Span::default(), slots: vec![0; self.config.hash_slots as usize] });
        Ok(())
    }

    /// Log offsets of messages whose hash is `hash` stored within
    /// `[begin, end]` ms, newest first, at most `max`.
    pub(crate) fn candidates(&self, hash: u64, begin: u64, end: u64, max: usize) -> Result<Vec<u64>, StoreError> {
        let mut out = Vec::new();
        let slot = (hash % u64::from(self.config.hash_slots)) as usize;
        {
            let live = self.live.lock();
            if let Some(live) = live.as_ref().filter(|l| l.span.overlaps(begin, end)) {
                self.walk(&live.file, live.slots[slot], live.span.count, hash, begin, end, max, &mut out)?;
            }
        }
        let sealed = self.sealed.lock().clone();
        for (file, span) in sealed.iter().rev() {
            if out.len() >= max {
                break;
            }
            if !span.overlaps(begin, end) {
                continue;
            }
            let at = self.config.slots_at() + 4 * slot;
            let bytes = file.read(at, 4).map_err(commitlog::Error::from)?;
            let first = u32::from_le_bytes(bytes[..4].try_into().unwrap_or_default());
            self.walk(file, first, span.count, hash, begin, end, max, &mut out)?;
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        file: &MappedFile,
        mut n: u32,
        count: u32,
        hash: u64,
        begin: u64,
        end: u64,
        max: usize,
        out: &mut Vec<u64>,
    ) -> Result<(), StoreError> {
        // Items point only at earlier ones: a chain ends within `count` steps.
        let mut steps = 0;
        while n > 0 && n <= count && out.len() < max && steps < count {
            let bytes = file.read(HEADER + ITEM * (n as usize - 1), ITEM).map_err(commitlog::Error::from)?;
            let item = Item::decode(&bytes);
            if item.time < begin {
                break; // older still along the chain
            }
            if item.hash == hash && item.time <= end {
                out.push(item.offset);
            }
            if item.prev >= n {
                break;
            }
            n = item.prev;
            steps += 1;
        }
        Ok(())
    }

    /// Flushes what is written (at least `least_pages` pages; 0: all).
    pub(crate) fn flush(&self, least_pages: usize) -> Result<(), StoreError> {
        self.queue.flush(least_pages).map_err(commitlog::Error::from)?;
        Ok(())
    }

    /// Deletes the sealed files whose messages all lie below `log_min_offset`.
    pub(crate) fn delete_expired(&self, log_min_offset: u64) -> Result<usize, StoreError> {
        let mut sealed = self.sealed.lock();
        let gone = sealed.iter().take_while(|(_, span)| span.last_offset < log_min_offset).count();
        if gone == 0 {
            return Ok(0);
        }
        let boundary = sealed[gone - 1].0.file_end();
        let deleted = self.queue.delete_expired_file_by_offset(boundary, gone).map_err(commitlog::Error::from)?;
        sealed.drain(..deleted.min(gone));
        Ok(deleted)
    }

    /// Flushes and closes.
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        self.flush(0)?;
        self.queue.drop_segments();
        Ok(())
    }
}

/// An index item as (key hash, log offset).
pub(crate) type KeyItem = (u64, u64);

/// The items of an index file's `bytes` that a recovery would trust: all of
/// a sealed file's (its footer's count), or the first `live_items` of the
/// live one; as (key hash, log offset). An error says why the file is not an
/// index file of `config`'s shape.
pub(crate) fn file_items(
    bytes: &[u8],
    config: Option<IndexConfig>,
    live_items: Option<u32>,
) -> Result<(IndexConfig, Vec<KeyItem>), &'static str> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("not an index file (its header is damaged)");
    }
    let shape = IndexConfig {
        hash_slots: u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default()),
        max_items: u32::from_le_bytes(bytes[12..16].try_into().unwrap_or_default()),
    };
    if config.is_some_and(|c| c != shape) {
        return Err("its shape (hash slots, items) differs from the other files'");
    }
    if shape.hash_slots == 0 || shape.max_items == 0 || bytes.len() != shape.file_size() {
        return Err("its size does not match the shape its header gives");
    }
    let count = match live_items {
        Some(items) => items,
        None => Span::from_footer(&bytes[bytes.len() - FOOTER..]).ok_or("a sealed file's footer is damaged")?.count,
    };
    if count > shape.max_items {
        return Err("it claims more items than it holds");
    }
    let items = bytes[HEADER..HEADER + ITEM * count as usize].chunks_exact(ITEM).map(Item::decode);
    Ok((shape, items.map(|item| (item.hash, item.offset)).collect()))
}

/// True when `item` names a message of the log one of whose keys hashes to it.
fn names_a_key(log: &commitlog::CommitLog, item: &Item) -> bool {
    log.read(item.offset).ok().is_some_and(|record| {
        record.store_timestamp_ms == item.time
            && decode_header(&record.body).is_ok_and(|h| h.keys.iter().any(|k| key_hash(&h.topic, k) == item.hash))
    })
}

/// Removes the segment files (20-digit names) and left-over temporary files of
/// `dir`, derived data being rebuilt; returns how many.
pub(crate) fn remove_segment_files(storage: &dyn Storage, dir: &Path) -> Result<usize, StoreError> {
    let files = match storage.list(dir) {
        Ok(files) => files,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(StoreError::Io { path: dir.to_path_buf(), source }),
    };
    let mut removed = 0;
    for file in files {
        let segment = file.name.len() == 20 && file.name.bytes().all(|b| b.is_ascii_digit());
        if segment || file.name.ends_with(".tmp") {
            let path = dir.join(&file.name);
            storage.remove(&path).map_err(|source| StoreError::Io { path, source })?;
            removed += 1;
        }
    }
    Ok(removed)
}
