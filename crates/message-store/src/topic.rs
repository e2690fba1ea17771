//! Topics: the name rules and the registry of topics, their queue counts and
//! ids, kept in `config/topics` (replaced atomically on every change).

mod admin;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use store_io::Storage;

use crate::error::{io_err, NameError, StoreError};
use crate::textfile;

/// The longest topic name (RocketMQ's `TOPIC_MAX_LENGTH`).
pub const MAX_TOPIC_LEN: usize = 127;
/// The longest consumer group name (RocketMQ's `GROUP_MAX_LENGTH`).
pub const MAX_GROUP_LEN: usize = 120;

/// The first line of the registry file (sealed: a checksum line ends it).
const HEADER: &str = "# message-store topics v3: next <topic id>, then <topic> <queue count> <topic id> <log offset created at>, then crc32c <hex>";
/// The first line of the second version's file (no checksum line), read and
/// written again as the third at the next change.
const HEADER_V2: &str =
    "# message-store topics v2: next <topic id>, then <topic> <queue count> <topic id> <log offset created at>";
/// The first line of the first version's file (no topic ids: a store of the
/// consume-queue layout, converted at its first open).
const HEADER_V1: &str = "# message-store topics v1: <topic> <queue count>";

fn validate_name(kind: &'static str, name: &str, max: usize) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if name.len() > max {
        return Err(NameError::TooLong { kind, name: name.to_string(), len: name.len(), max });
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-'))) {
        return Err(NameError::BadCharacter { kind, name: name.to_string(), bad });
    }
    Ok(())
}

/// Checks a topic name: 1 to 127 characters of `[%|a-zA-Z0-9_-]`.
pub fn validate_topic(topic: &str) -> Result<(), NameError> {
    validate_name("topic", topic, MAX_TOPIC_LEN)
}

/// Checks a consumer group name: 1 to 120 characters of `[%|a-zA-Z0-9_-]`.
pub fn validate_group(group: &str) -> Result<(), NameError> {
    validate_name("group", group, MAX_GROUP_LEN)
}

/// Where the registry of the store in `root` is.
pub(crate) fn topics_path(root: &Path) -> PathBuf {
    root.join("config").join("topics")
}

/// The key of `topic_id`'s queue `queue_id` in the queue index.
pub(crate) fn queue_key(topic_id: u32, queue_id: u32) -> u64 {
    (u64::from(topic_id) << 32) | u64::from(queue_id)
}

/// A topic as the registry holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopicEntry {
    /// Its queue count.
    pub(crate) queues: u32,
    /// Its id: its queues' keys in the queue index ([`queue_key`]). Never
    /// given to another topic, even after this one is deleted (the index may
    /// still hold its entries until they expire).
    pub(crate) id: u32,
    /// The log's end when it was created: records of its name below it are
    /// of a topic of that name deleted before (not dispatched to this one).
    pub(crate) since: u64,
}

/// The topics of a registry file, the next topic id, and whether it was of
/// the first version (ids then given in name order).
pub(crate) struct Parsed {
    pub(crate) topics: BTreeMap<String, TopicEntry>,
    pub(crate) next_id: u32,
    pub(crate) first_version: bool,
}

enum Line {
    Next(u32),
    Topic(String, TopicEntry),
}

/// Parses the registry file at `path`.
pub(crate) fn parse_topics(path: &Path, bytes: Vec<u8>) -> Result<Parsed, StoreError> {
    if bytes.starts_with(HEADER_V1.as_bytes()) {
        let topics = textfile::parse(path, bytes, HEADER_V1, "topics", |line| {
            let (topic, queues) = line.split_once(' ')?;
            let queues = queues.parse::<u32>().ok().filter(|&q| q > 0)?;
            validate_topic(topic).ok().map(|()| (topic.to_string(), queues))
        })?;
        let mut sorted: Vec<(String, u32)> = topics;
        sorted.sort();
        let topics: BTreeMap<String, TopicEntry> = sorted
            .into_iter()
            .enumerate()
            .map(|(id, (topic, queues))| {
                (topic, TopicEntry { queues, id: u32::try_from(id).unwrap_or(u32::MAX), since: 0 })
            })
            .collect();
        let next_id = u32::try_from(topics.len()).unwrap_or(u32::MAX);
        return Ok(Parsed { topics, next_id, first_version: true });
    }
    let parse_line = |line: &str| {
        if let Some(next) = line.strip_prefix("next ") {
            return next.parse::<u32>().ok().map(Line::Next);
        }
        let mut fields = line.split(' ');
        let (topic, queues, id, since) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        let queues = queues.parse::<u32>().ok().filter(|&q| q > 0)?;
        let (id, since) = (id.parse::<u32>().ok()?, since.parse::<u64>().ok()?);
        (fields.next().is_none() && validate_topic(topic).is_ok())
            .then(|| Line::Topic(topic.to_string(), TopicEntry { queues, id, since }))
    };
    let lines = if bytes.starts_with(HEADER_V2.as_bytes()) {
        textfile::parse(path, bytes, HEADER_V2, "topics", parse_line)?
    } else {
        textfile::parse_sealed(path, bytes, HEADER, "topics", parse_line)?
    };
    let bad = |reason: String| StoreError::BadFile { path: path.to_path_buf(), reason };
    let mut topics = BTreeMap::new();
    let mut next_id = None;
    let mut ids = std::collections::HashSet::new();
    for line in lines {
        match line {
            Line::Next(next) if next_id.is_none() => next_id = Some(next),
            Line::Next(_) => return Err(bad("two next-id lines".into())),
            Line::Topic(topic, entry) => {
                if !ids.insert(entry.id) {
                    return Err(bad(format!("topic id {} given twice", entry.id)));
                }
                topics.insert(topic, entry);
            }
        }
    }
    let next_id = next_id.ok_or_else(|| bad("no next-id line".into()))?;
    if topics.values().any(|e| e.id >= next_id) {
        return Err(bad(format!("a topic id at or past the next id {next_id}")));
    }
    Ok(Parsed { topics, next_id, first_version: false })
}

/// The registry of topics: name → queue count and id, persisted in
/// `config/topics`.
#[derive(Debug)]
pub(crate) struct Registry {
    path: PathBuf,
    topics: BTreeMap<String, TopicEntry>,
    /// The id the next topic created gets.
    next_id: u32,
}

/// How [`Registry::load_or_empty`] found the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// Read (or absent in a new store).
    Read,
    /// Of the first version (topic ids given now).
    FirstVersion,
    /// Missing or damaged: why.
    Lost(String),
}

impl Registry {
    /// Loads the registry of the store in `root` (empty if there is none yet).
    pub(crate) fn load(storage: &dyn Storage, root: &Path) -> Result<(Registry, bool), StoreError> {
        let path = topics_path(root);
        let parsed = match storage.read_small(&path).map_err(io_err(&path))? {
            Some(bytes) => parse_topics(&path, bytes)?,
            None => Parsed { topics: BTreeMap::new(), next_id: 0, first_version: false },
        };
        Ok((Registry { path, topics: parsed.topics, next_id: parsed.next_id }, parsed.first_version))
    }

    /// The registry of the store in `root`, and how it was found; an
    /// unreadable one comes back empty, for the open's recovery (`open.rs`).
    pub(crate) fn load_or_empty(storage: &dyn Storage, root: &Path) -> Result<(Registry, Found), StoreError> {
        let path = topics_path(root);
        match Registry::load(storage, root) {
            Ok((registry, true)) => Ok((registry, Found::FirstVersion)),
            Ok((registry, false)) if storage.read_small(&path).map_err(io_err(&path))?.is_some() => {
                Ok((registry, Found::Read))
            }
            Ok((registry, false)) => Ok((registry, Found::Lost("missing".to_string()))),
            Err(StoreError::BadFile { reason, .. }) => {
                Ok((Registry { path, topics: BTreeMap::new(), next_id: 0 }, Found::Lost(reason)))
            }
            Err(err) => Err(err),
        }
    }

    /// Adds `topic` with `queues` queues, the id `id` (a recovered topic:
    /// `None` gives the next id) and `since`, if it is not there, or raises its
    /// queue count to `queues`, in memory only; true if the topic was new.
    pub(crate) fn add_at_least(&mut self, topic: &str, queues: u32, id: Option<u32>, since: u64) -> bool {
        if let Some(entry) = self.topics.get_mut(topic) {
            entry.queues = entry.queues.max(queues).max(1);
            return false;
        }
        let id = match id {
            Some(id) if self.topics.values().all(|e| e.id != id) => id,
            _ => self.next_id,
        };
        self.next_id = self.next_id.max(id.saturating_add(1));
        self.topics.insert(topic.to_string(), TopicEntry { queues: queues.max(1), id, since });
        true
    }

    /// Lowers every topic's creation point to at most `log_end` (the log's
    /// end as recovery found it); returns how many moved. Under async flush a
    /// topic is made at the log's written end, which a power cut can take
    /// back: a point past the log's end would leave every later record of the
    /// topic below it, never dispatched. No record of a topic of the same name
    /// deleted before lies past the log's end, so the lowered point still
    /// keeps them out.
    pub(crate) fn lower_since(&mut self, log_end: u64) -> usize {
        let mut lowered = 0;
        for entry in self.topics.values_mut().filter(|e| e.since > log_end) {
            entry.since = log_end;
            lowered += 1;
        }
        lowered
    }

    /// Raises the next id to at least `next` (recovered: ids given before).
    pub(crate) fn raise_next_id(&mut self, next: u32) {
        self.next_id = self.next_id.max(next);
    }

    /// The id the next topic gets.
    pub(crate) fn next_id(&self) -> u32 {
        self.next_id
    }

    /// Where the registry's file is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Every topic with its entry.
    pub(crate) fn topics(&self) -> impl Iterator<Item = (&str, TopicEntry)> {
        self.topics.iter().map(|(t, e)| (t.as_str(), *e))
    }

    /// `topic`'s entry.
    pub(crate) fn get(&self, topic: &str) -> Option<TopicEntry> {
        self.topics.get(topic).copied()
    }

    /// Adds `topic` with `queues` queues, created at log offset `since`, and
    /// persists the registry; a topic that exists with the same count is no
    /// change. Returns its entry.
    pub(crate) fn create(
        &mut self,
        storage: &dyn Storage,
        topic: &str,
        queues: u32,
        since: u64,
    ) -> Result<TopicEntry, StoreError> {
        validate_topic(topic).map_err(crate::error::MessageError::from)?;
        if queues == 0 {
            return Err(StoreError::InvalidConfig {
                reason: format!("topic {topic:?}: a topic has at least one queue"),
            });
        }
        match self.topics.get(topic) {
            Some(existing) if existing.queues == queues => return Ok(*existing),
            Some(existing) => {
                return Err(StoreError::TopicExists {
                    topic: topic.to_string(),
                    existing: existing.queues,
                    asked: queues,
                })
            }
            None => {}
        }
        let entry = TopicEntry { queues, id: self.next_id, since };
        self.topics.insert(topic.to_string(), entry);
        self.next_id = self.next_id.saturating_add(1);
        if let Err(err) = self.persist(storage) {
            self.topics.remove(topic);
            self.next_id -= 1;
            return Err(err);
        }
        Ok(entry)
    }

    /// Removes `topic` and persists the registry (its id is not given again);
    /// returns its entry, `None` if there was no such topic.
    pub(crate) fn remove(&mut self, storage: &dyn Storage, topic: &str) -> Result<Option<TopicEntry>, StoreError> {
        let Some(entry) = self.topics.remove(topic) else { return Ok(None) };
        if let Err(err) = self.persist(storage) {
            self.topics.insert(topic.to_string(), entry);
            return Err(err);
        }
        Ok(Some(entry))
    }

    /// Writes the registry's file.
    pub(crate) fn persist(&self, storage: &dyn Storage) -> Result<(), StoreError> {
        let next = std::iter::once(format!("next {}", self.next_id));
        let lines = self.topics.iter().map(|(topic, e)| format!("{topic} {} {} {}", e.queues, e.id, e.since));
        textfile::write(storage, &self.path, &textfile::render_sealed(HEADER, next.chain(lines)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn names_follow_rocketmqs_rules() {
        assert!(validate_topic("Orders_2024-%RETRY%|x").is_ok());
        assert!(matches!(validate_topic(""), Err(NameError::Empty { .. })));
        assert!(matches!(validate_topic(&"t".repeat(128)), Err(NameError::TooLong { len: 128, .. })));
        assert!(validate_topic(&"t".repeat(127)).is_ok());
        assert!(matches!(validate_topic("a/b"), Err(NameError::BadCharacter { bad: '/', .. })));
        assert!(matches!(validate_topic("é"), Err(NameError::BadCharacter { .. })));
        assert!(matches!(validate_group(&"g".repeat(121)), Err(NameError::TooLong { max: 120, .. })));
    }

    #[test]
    fn the_registry_survives_a_reload_and_refuses_a_changed_count() {
        let storage: Arc<dyn Storage> = Arc::new(store_io::sim::SimStorage::new());
        let root = Path::new("/store");
        let (mut registry, _) = Registry::load(&*storage, root).unwrap();
        registry.create(&*storage, "a", 4, 0).unwrap();
        registry.create(&*storage, "b", 1, 0).unwrap();
        registry.create(&*storage, "a", 4, 0).unwrap();
        assert!(matches!(registry.create(&*storage, "a", 8, 0), Err(StoreError::TopicExists { existing: 4, .. })));
        let (reloaded, first_version) = Registry::load(&*storage, root).unwrap();
        assert!(!first_version);
        let shown: Vec<_> = reloaded.topics().map(|(t, e)| (t, e.queues, e.id)).collect();
        assert_eq!(shown, vec![("a", 4, 0), ("b", 1, 1)]);
    }

    #[test]
    fn a_deleted_topics_id_is_never_given_again() {
        let storage: Arc<dyn Storage> = Arc::new(store_io::sim::SimStorage::new());
        let root = Path::new("/store");
        let (mut registry, _) = Registry::load(&*storage, root).unwrap();
        registry.create(&*storage, "a", 1, 0).unwrap();
        registry.create(&*storage, "b", 1, 0).unwrap();
        assert_eq!(registry.remove(&*storage, "b").unwrap().map(|e| e.id), Some(1));
        let (mut reloaded, _) = Registry::load(&*storage, root).unwrap();
        assert_eq!(reloaded.create(&*storage, "b", 1, 0).unwrap().id, 2, "b's old id stays retired");
    }

    #[test]
    fn a_first_version_registry_gets_ids_in_name_order() {
        let path = Path::new("/store/config/topics");
        let text = format!("{HEADER_V1}\nzeta 2\nalpha 4\n");
        let parsed = parse_topics(path, text.into_bytes()).unwrap();
        assert!(parsed.first_version);
        assert_eq!(parsed.topics["alpha"], TopicEntry { queues: 4, id: 0, since: 0 });
        assert_eq!(parsed.topics["zeta"], TopicEntry { queues: 2, id: 1, since: 0 });
        assert_eq!(parsed.next_id, 2);
        let dup = format!("{HEADER_V2}\nnext 3\na 1 0 0\nb 1 0 0\n");
        assert!(parse_topics(path, dup.into_bytes()).is_err(), "one id twice");
        let v2 = format!("{HEADER_V2}\nnext 3\na 1 0 0\nb 2 2 70\n");
        assert_eq!(
            parse_topics(path, v2.into_bytes()).unwrap().topics["b"],
            TopicEntry { queues: 2, id: 2, since: 70 }
        );
    }

    #[test]
    fn a_registry_cut_at_a_lines_end_or_with_a_digit_changed_is_damaged_not_shorter() {
        let path = Path::new("/store/config/topics");
        let text = textfile::render_sealed(HEADER, ["next 2".to_string(), "a 4 0 0".into(), "b 1 1 90".into()]);
        assert_eq!(parse_topics(path, text.clone().into_bytes()).unwrap().topics.len(), 2);
        let b_line = text.find("b 1 1 90").unwrap();
        for bytes in [
            text.as_bytes()[..b_line].to_vec(),                  // cut before b's line
            text.replacen("a 4 0 0", "a 5 0 0", 1).into_bytes(), // a queue count changed
            text.as_bytes()[..text.len() - 1].to_vec(),          // the checksum line's end cut
        ] {
            assert!(matches!(parse_topics(path, bytes), Err(StoreError::BadFile { .. })));
        }
    }
}
