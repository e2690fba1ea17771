//! Topics: the name rules and the registry of topics and their queue counts,
//! kept in `config/topics` (replaced atomically on every change).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use store_io::Storage;

use crate::error::{io_err, NameError, StoreError};
use crate::textfile;

/// The longest topic name (RocketMQ's `TOPIC_MAX_LENGTH`).
pub const MAX_TOPIC_LEN: usize = 127;
/// The longest consumer group name (RocketMQ's `GROUP_MAX_LENGTH`).
pub const MAX_GROUP_LEN: usize = 120;

/// The first line of the registry file.
const HEADER: &str = "# message-store topics v1: <topic> <queue count>";

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

/// Parses the registry file at `path`.
pub(crate) fn parse_topics(path: &Path, bytes: Vec<u8>) -> Result<BTreeMap<String, u32>, StoreError> {
    let topics = textfile::parse(path, bytes, HEADER, "topics", |line| {
        let (topic, queues) = line.split_once(' ')?;
        let queues = queues.parse::<u32>().ok().filter(|&q| q > 0)?;
        validate_topic(topic).ok().map(|()| (topic.to_string(), queues))
    })?;
    Ok(topics.into_iter().collect())
}

/// The registry of topics: name → queue count, persisted in `config/topics`.
#[derive(Debug)]
pub(crate) struct Registry {
    path: PathBuf,
    topics: BTreeMap<String, u32>,
}

impl Registry {
    /// Loads the registry of the store in `root` (empty if there is none yet).
    pub(crate) fn load(storage: &dyn Storage, root: &Path) -> Result<Registry, StoreError> {
        let path = topics_path(root);
        let topics = match storage.read_small(&path).map_err(io_err(&path))? {
            Some(bytes) => parse_topics(&path, bytes)?,
            None => BTreeMap::new(),
        };
        Ok(Registry { path, topics })
    }

    /// The registry of the store in `root`, and why it could not be read if
    /// it could not (`None`: read, or there is none and the store is new);
    /// an unreadable one comes back empty, for [`crate::store`]'s recovery.
    pub(crate) fn load_or_empty(storage: &dyn Storage, root: &Path) -> Result<(Registry, Option<String>), StoreError> {
        let path = topics_path(root);
        match Registry::load(storage, root) {
            Ok(registry) if storage.read_small(&path).map_err(io_err(&path))?.is_some() => Ok((registry, None)),
            Ok(registry) => Ok((registry, Some("missing".to_string()))),
            Err(StoreError::BadFile { reason, .. }) => Ok((Registry { path, topics: BTreeMap::new() }, Some(reason))),
            Err(err) => Err(err),
        }
    }

    /// Adds `topic` with `queues` queues if it is not there, or raises its
    /// queue count to `queues`, in memory only; true if the topic was new.
    pub(crate) fn add_at_least(&mut self, topic: &str, queues: u32) -> bool {
        let count = self.topics.entry(topic.to_string()).or_insert(0);
        let new = *count == 0;
        *count = (*count).max(queues).max(1);
        new
    }

    /// Where the registry's file is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Every topic with its queue count.
    pub(crate) fn topics(&self) -> impl Iterator<Item = (&str, u32)> {
        self.topics.iter().map(|(t, q)| (t.as_str(), *q))
    }

    /// Adds `topic` with `queues` queues and persists the registry; a topic that
    /// exists with the same count is no change.
    pub(crate) fn create(&mut self, storage: &dyn Storage, topic: &str, queues: u32) -> Result<(), StoreError> {
        validate_topic(topic).map_err(crate::error::MessageError::from)?;
        if queues == 0 {
            return Err(StoreError::InvalidConfig {
                reason: format!("topic {topic:?}: a topic has at least one queue"),
            });
        }
        match self.topics.get(topic) {
            Some(&existing) if existing == queues => return Ok(()),
            Some(&existing) => {
                return Err(StoreError::TopicExists { topic: topic.to_string(), existing, asked: queues })
            }
            None => {}
        }
        self.topics.insert(topic.to_string(), queues);
        if let Err(err) = self.persist(storage) {
            self.topics.remove(topic);
            return Err(err);
        }
        Ok(())
    }

    /// Writes the registry's file.
    pub(crate) fn persist(&self, storage: &dyn Storage) -> Result<(), StoreError> {
        let lines = self.topics.iter().map(|(topic, queues)| format!("{topic} {queues}"));
        textfile::write(storage, &self.path, &textfile::render(HEADER, lines))
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
        let mut registry = Registry::load(&*storage, root).unwrap();
        registry.create(&*storage, "a", 4).unwrap();
        registry.create(&*storage, "b", 1).unwrap();
        registry.create(&*storage, "a", 4).unwrap();
        assert!(matches!(registry.create(&*storage, "a", 8), Err(StoreError::TopicExists { existing: 4, .. })));
        let reloaded = Registry::load(&*storage, root).unwrap();
        assert_eq!(reloaded.topics().collect::<Vec<_>>(), vec![("a", 4), ("b", 1)]);
    }
}
