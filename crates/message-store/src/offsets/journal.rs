//! The consumer offsets' journal format: one file per generation, a header,
//! a snapshot of the whole table ended by a marker, then one record per change.
//!
//! ```text
//! header   "MSOFFJ02" | generation u64
//! record   payload length u32 | crc32c(generation, position, payload) u32 | payload
//! payload  1 group name   id u32 | name
//!          2 topic name   id u32 | name
//!          3 commit       group u32 | topic u32 | queue u32 | offset u64
//!          4 remove group group u32
//!          5 remove       group u32 | topic u32     (a group's offsets in a topic)
//!          6 remove topic topic u32                 (every group's offsets in it)
//!          7 snapshot end entries u64
//! ```
//!
//! All integers little-endian. The CRC covers the record's generation and
//! position, so neither a record of another file nor one moved within this one
//! reads as valid. A scan stops at the first record that is not valid: past
//! the snapshot that is the journal's end (a record torn by a crash was never
//! acknowledged); inside the snapshot it is damage.

use std::collections::{BTreeMap, HashMap};

use crate::topic::{validate_group, validate_topic};

const MAGIC: &[u8; 8] = b"MSOFFJ02";
/// Header bytes: the magic and the generation.
pub(crate) const HEADER_LEN: usize = 16;
/// Length and CRC before each payload.
const RECORD_HEAD: usize = 8;
/// The largest payload a record carries (a name record of the longest name).
const MAX_PAYLOAD: usize = 1 + 4 + 256;

const GROUP_NAME: u8 = 1;
const TOPIC_NAME: u8 = 2;
const COMMIT: u8 = 3;
const REMOVE_GROUP: u8 = 4;
const REMOVE: u8 = 5;
const REMOVE_TOPIC: u8 = 6;
const SNAPSHOT_END: u8 = 7;

/// Bytes of one commit record.
#[cfg(test)]
pub(crate) const COMMIT_RECORD_LEN: usize = RECORD_HEAD + 1 + 12 + 8;

/// Interned names: a journal names each group and topic once and then refers
/// to it by id.
#[derive(Debug, Default, Clone)]
pub(crate) struct Names {
    by_name: HashMap<String, u32>,
    by_id: BTreeMap<u32, String>,
}

impl Names {
    pub(crate) fn id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn name(&self, id: u32) -> Option<&str> {
        self.by_id.get(&id).map(String::as_str)
    }

    /// The id of `name`, and whether it is new (its name record must be written).
    pub(crate) fn intern(&mut self, name: &str) -> (u32, bool) {
        if let Some(id) = self.id(name) {
            return (id, false);
        }
        let id = self.by_id.keys().next_back().map_or(0, |last| last.saturating_add(1));
        self.insert(id, name.to_string());
        (id, true)
    }

    fn insert(&mut self, id: u32, name: String) {
        self.by_name.insert(name.clone(), id);
        self.by_id.insert(id, name);
    }

    /// Forgets every name whose id `used` rejects.
    fn retain(&mut self, used: impl Fn(u32) -> bool) {
        self.by_id.retain(|&id, _| used(id));
        self.by_name.retain(|_, id| used(*id));
    }
}

/// (group id, topic id, queue id).
pub(crate) type Key = (u32, u32, u32);

/// The whole table: names and offsets.
#[derive(Debug, Default, Clone)]
pub(crate) struct Table {
    pub(crate) groups: Names,
    pub(crate) topics: Names,
    pub(crate) offsets: BTreeMap<Key, u64>,
}

/// One change to the table, as a record carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// A group's offset in a queue.
    Commit(Key, u64),
    /// Every offset of a group.
    RemoveGroup(u32),
    /// A group's offsets in a topic.
    Remove(u32, u32),
    /// Every group's offsets in a topic.
    RemoveTopic(u32),
}

impl Change {
    /// Whether this change removes the offset of `key` (a commit removes none).
    fn removes(self, key: &Key) -> bool {
        match self {
            Change::Commit(..) => false,
            Change::RemoveGroup(group) => key.0 == group,
            Change::Remove(group, topic) => key.0 == group && key.1 == topic,
            Change::RemoveTopic(topic) => key.1 == topic,
        }
    }
}

impl Table {
    /// Applies `change`; true if the table changed.
    pub(crate) fn apply(&mut self, change: Change) -> bool {
        match change {
            Change::Commit(key, offset) => self.offsets.insert(key, offset) != Some(offset),
            _ => {
                let before = self.offsets.len();
                self.offsets.retain(|k, _| !change.removes(k));
                self.offsets.len() != before
            }
        }
    }

    /// Forgets the groups' and topics' names no offset holds: what a
    /// snapshot names, so that the table and the journal it starts agree on
    /// which names a later record must write again (a name left in memory
    /// but absent from the snapshot would be used by id without being named,
    /// and the journal would no longer read).
    pub(crate) fn drop_unused_names(&mut self) {
        let groups: std::collections::BTreeSet<u32> = self.offsets.keys().map(|k| k.0).collect();
        let topics: std::collections::BTreeSet<u32> = self.offsets.keys().map(|k| k.1).collect();
        self.groups.retain(|id| groups.contains(&id));
        self.topics.retain(|id| topics.contains(&id));
    }

    /// Applies `change` as [`apply`](Self::apply) does, noting in `undo` what
    /// it replaced, so that [`Undo::revert`] can take it back.
    pub(crate) fn apply_noting(&mut self, change: Change, undo: &mut Undo) -> bool {
        match change {
            Change::Commit(key, offset) => {
                let before = self.offsets.insert(key, offset);
                undo.offsets.push((key, before));
                before != Some(offset)
            }
            _ => {
                let gone = self.offsets.iter().filter(|(k, _)| change.removes(k));
                undo.offsets.extend(gone.map(|(&k, &v)| (k, Some(v))));
                self.apply(change)
            }
        }
    }
}

/// What an edit of a [`Table`] changed, to take it back when its records
/// could not be written: the table in memory never shows a change the journal
/// does not hold, nor a name it never wrote.
#[derive(Debug)]
pub(crate) struct Undo {
    /// Each offset touched, with its value before (in the order touched).
    offsets: Vec<(Key, Option<u64>)>,
    /// The highest group and topic ids before the edit: names interned since
    /// have higher ids.
    last_group: Option<u32>,
    last_topic: Option<u32>,
}

impl Undo {
    /// Ready to note the edits of `table`.
    pub(crate) fn of(table: &Table) -> Self {
        Undo {
            offsets: Vec::new(),
            last_group: table.groups.by_id.keys().next_back().copied(),
            last_topic: table.topics.by_id.keys().next_back().copied(),
        }
    }

    /// Takes every noted change back, last first, and forgets the names
    /// interned since.
    pub(crate) fn revert(self, table: &mut Table) {
        for (key, before) in self.offsets.into_iter().rev() {
            match before {
                Some(offset) => table.offsets.insert(key, offset),
                None => table.offsets.remove(&key),
            };
        }
        let (groups, topics) = (self.last_group, self.last_topic);
        table.groups.retain(|id| groups.is_some_and(|last| id <= last));
        table.topics.retain(|id| topics.is_some_and(|last| id <= last));
    }
}

/// Appends records to a buffer that will be written at `position` of the
/// journal of `generation`.
#[derive(Debug)]
pub(crate) struct Encoder {
    generation: u64,
    position: usize,
    pub(crate) bytes: Vec<u8>,
}

impl Encoder {
    /// Records to be written at `position` of the journal of `generation`.
    pub(crate) fn at(generation: u64, position: usize) -> Self {
        Encoder { generation, position, bytes: Vec::new() }
    }

    /// A new journal: its header, then the snapshot of `table` (which names
    /// only the groups and topics its offsets hold:
    /// [`Table::drop_unused_names`] first).
    pub(crate) fn snapshot(generation: u64, table: &Table) -> Self {
        let mut e = Encoder { generation, position: 0, bytes: Vec::with_capacity(HEADER_LEN) };
        e.bytes.extend_from_slice(MAGIC);
        e.bytes.extend_from_slice(&generation.to_le_bytes());
        e.position = HEADER_LEN;
        let mut named_groups = std::collections::BTreeSet::new();
        let mut named_topics = std::collections::BTreeSet::new();
        for &(group, topic, _) in table.offsets.keys() {
            named_groups.insert(group);
            named_topics.insert(topic);
        }
        for group in named_groups {
            e.name(GROUP_NAME, group, table.groups.name(group).unwrap_or_default());
        }
        for topic in named_topics {
            e.name(TOPIC_NAME, topic, table.topics.name(topic).unwrap_or_default());
        }
        for (&key, &offset) in &table.offsets {
            e.change(Change::Commit(key, offset));
        }
        e.record(|p| {
            p.push(SNAPSHOT_END);
            p.extend_from_slice(&(table.offsets.len() as u64).to_le_bytes());
        });
        e
    }

    /// The record of a group's name.
    pub(crate) fn group_name(&mut self, id: u32, name: &str) {
        self.name(GROUP_NAME, id, name);
    }

    /// The record of a topic's name.
    pub(crate) fn topic_name(&mut self, id: u32, name: &str) {
        self.name(TOPIC_NAME, id, name);
    }

    fn name(&mut self, kind: u8, id: u32, name: &str) {
        self.record(|p| {
            p.push(kind);
            p.extend_from_slice(&id.to_le_bytes());
            p.extend_from_slice(name.as_bytes());
        });
    }

    /// The record of `change`.
    pub(crate) fn change(&mut self, change: Change) {
        self.record(|p| match change {
            Change::Commit((group, topic, queue), offset) => {
                p.push(COMMIT);
                for v in [group, topic, queue] {
                    p.extend_from_slice(&v.to_le_bytes());
                }
                p.extend_from_slice(&offset.to_le_bytes());
            }
            Change::RemoveGroup(group) => {
                p.push(REMOVE_GROUP);
                p.extend_from_slice(&group.to_le_bytes());
            }
            Change::Remove(group, topic) => {
                p.push(REMOVE);
                p.extend_from_slice(&group.to_le_bytes());
                p.extend_from_slice(&topic.to_le_bytes());
            }
            Change::RemoveTopic(topic) => {
                p.push(REMOVE_TOPIC);
                p.extend_from_slice(&topic.to_le_bytes());
            }
        });
    }

    fn record(&mut self, payload: impl FnOnce(&mut Vec<u8>)) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&[0; RECORD_HEAD]);
        payload(&mut self.bytes);
        let len = self.bytes.len() - start - RECORD_HEAD;
        let crc = record_crc(self.generation, self.position, &self.bytes[start + RECORD_HEAD..]);
        self.bytes[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
        self.bytes[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        self.position += RECORD_HEAD + len;
    }
}

fn record_crc(generation: u64, position: usize, payload: &[u8]) -> u32 {
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&generation.to_le_bytes());
    head[8..].copy_from_slice(&(position as u64).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&head), payload)
}

/// A journal as read back.
#[derive(Debug)]
pub(crate) struct Scanned {
    pub(crate) table: Table,
    /// Where the next record goes: one past the last valid record.
    pub(crate) end: usize,
    /// Bytes that are not zero lie past the end (a record torn by a crash, or
    /// written but never acknowledged): appending over them could make a stale
    /// record after a new one read as valid, so the journal is rewritten.
    pub(crate) dirty_tail: bool,
    /// Change records after the snapshot.
    pub(crate) changes: u64,
}

/// Reads the journal of `generation` from its bytes; `Err` names what is
/// damaged (the header, or the snapshot before its end marker).
pub(crate) fn scan(generation: u64, bytes: &[u8]) -> Result<Scanned, String> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err("not a consumer offsets journal of this version (bad header)".into());
    }
    let recorded = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default());
    if recorded != generation {
        return Err(format!("its header says generation {recorded}, its name {generation}"));
    }
    let mut table = Table::default();
    let mut pos = HEADER_LEN;
    let mut snapshot_done = false;
    let mut changes = 0u64;
    while let Some(payload) = record_at(generation, bytes, pos) {
        let at = pos;
        pos += RECORD_HEAD + payload.len();
        let bad = |what: &str| format!("record at byte {at}: {what}");
        let (&kind, rest) = payload.split_first().ok_or_else(|| bad("empty"))?;
        match kind {
            GROUP_NAME | TOPIC_NAME => {
                let (id, name) = rest.split_at_checked(4).ok_or_else(|| bad("short name record"))?;
                let id = u32::from_le_bytes(id.try_into().unwrap_or_default());
                let name = std::str::from_utf8(name).map_err(|_| bad("name not UTF-8"))?;
                let (names, valid) = if kind == GROUP_NAME {
                    (&mut table.groups, validate_group(name).is_ok())
                } else {
                    (&mut table.topics, validate_topic(name).is_ok())
                };
                if !valid || names.name(id).is_some_and(|n| n != name) || names.id(name).is_some_and(|i| i != id) {
                    return Err(bad(&format!("name {name:?} for id {id} is invalid or names another")));
                }
                names.insert(id, name.to_string());
            }
            SNAPSHOT_END => {
                let entries = u64::from_le_bytes(rest.try_into().map_err(|_| bad("short snapshot end"))?);
                if snapshot_done || entries != table.offsets.len() as u64 {
                    return Err(bad(&format!(
                        "snapshot end counts {entries} offsets, the snapshot holds {}",
                        table.offsets.len()
                    )));
                }
                snapshot_done = true;
            }
            _ => {
                let change = decode_change(kind, rest).ok_or_else(|| bad("unknown or short record"))?;
                let (group, topic) = match change {
                    Change::Commit((g, t, _), _) | Change::Remove(g, t) => (Some(g), Some(t)),
                    Change::RemoveGroup(g) => (Some(g), None),
                    Change::RemoveTopic(t) => (None, Some(t)),
                };
                if group.is_some_and(|g| table.groups.name(g).is_none())
                    || topic.is_some_and(|t| table.topics.name(t).is_none())
                {
                    return Err(bad("refers to a group or topic never named"));
                }
                if snapshot_done {
                    changes += 1;
                }
                table.apply(change);
            }
        }
    }
    if !snapshot_done {
        return Err(format!("the snapshot ends at byte {pos} before its end marker"));
    }
    let dirty_tail = bytes[pos..].iter().any(|&b| b != 0);
    Ok(Scanned { table, end: pos, dirty_tail, changes })
}

fn record_at(generation: u64, bytes: &[u8], pos: usize) -> Option<&[u8]> {
    let head = bytes.get(pos..pos + RECORD_HEAD)?;
    let len = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
    if len == 0 || len > MAX_PAYLOAD {
        return None;
    }
    let payload = bytes.get(pos + RECORD_HEAD..pos + RECORD_HEAD + len)?;
    let crc = u32::from_le_bytes(head[4..].try_into().ok()?);
    (record_crc(generation, pos, payload) == crc).then_some(payload)
}

fn decode_change(kind: u8, rest: &[u8]) -> Option<Change> {
    let u32_at = |i: usize| rest.get(i..i + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
    let exact = |len: usize| (rest.len() == len).then_some(());
    Some(match kind {
        COMMIT => {
            exact(20)?;
            let offset = u64::from_le_bytes(rest[12..20].try_into().ok()?);
            Change::Commit((u32_at(0)?, u32_at(4)?, u32_at(8)?), offset)
        }
        REMOVE_GROUP => {
            exact(4)?;
            Change::RemoveGroup(u32_at(0)?)
        }
        REMOVE => {
            exact(8)?;
            Change::Remove(u32_at(0)?, u32_at(4)?)
        }
        REMOVE_TOPIC => {
            exact(4)?;
            Change::RemoveTopic(u32_at(0)?)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut t = Table::default();
        let (g, _) = t.groups.intern("g");
        let (h, _) = t.groups.intern("h");
        let (topic, _) = t.topics.intern("t");
        t.apply(Change::Commit((g, topic, 0), 7));
        t.apply(Change::Commit((g, topic, 1), 9));
        t.apply(Change::Commit((h, topic, 0), 1));
        t
    }

    #[test]
    fn a_snapshot_and_changes_read_back() {
        let t = table();
        let mut e = Encoder::snapshot(3, &t);
        let mut more = Encoder::at(3, e.bytes.len());
        more.change(Change::Commit((0, 0, 1), 10));
        more.change(Change::RemoveGroup(1));
        e.bytes.extend_from_slice(&more.bytes);
        let end = e.bytes.len();
        e.bytes.resize(end + 100, 0);
        let s = scan(3, &e.bytes).unwrap();
        assert_eq!((s.end, s.dirty_tail, s.changes), (end, false, 2));
        assert_eq!(s.table.offsets.len(), 2);
        assert_eq!(s.table.offsets[&(0, 0, 1)], 10);
        assert_eq!(s.table.groups.name(1), Some("h"), "the name stays, its offsets are gone");
    }

    #[test]
    fn a_torn_change_is_the_end_and_a_damaged_snapshot_an_error() {
        let t = table();
        let e = Encoder::snapshot(1, &t);
        let snapshot_len = e.bytes.len();
        let mut bytes = e.bytes.clone();
        let mut more = Encoder::at(1, snapshot_len);
        more.change(Change::Commit((0, 0, 0), 8));
        bytes.extend_from_slice(&more.bytes);
        bytes[snapshot_len + RECORD_HEAD + 13] ^= 0x08; // torn: the offset's bytes half written
        bytes.resize(bytes.len() + 64, 0);
        let s = scan(1, &bytes).unwrap();
        assert_eq!((s.end, s.dirty_tail), (snapshot_len, true));
        assert_eq!(s.table.offsets[&(0, 0, 0)], 7, "the torn commit never counted");

        for at in [HEADER_LEN + 2, snapshot_len - 3] {
            let mut damaged = e.bytes.clone();
            damaged[at] ^= 0x40;
            assert!(scan(1, &damaged).is_err(), "damage at {at} seen");
        }
        assert!(scan(2, &e.bytes).is_err(), "another generation's journal");
    }

    #[test]
    fn a_record_moved_or_from_another_generation_is_not_valid() {
        let e = Encoder::snapshot(1, &Table::default());
        let mut bytes = e.bytes.clone();
        let mut c = Encoder::at(1, bytes.len() + 29);
        c.group_name(0, "g");
        bytes.extend_from_slice(&c.bytes); // written for another position
        let s = scan(1, &bytes).unwrap();
        assert_eq!(s.end, e.bytes.len());
    }
}
