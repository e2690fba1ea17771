//! A store's topics: created, deleted (with their queues' entries and every
//! group's offsets in them), cleaned (those a broker no longer names), listed.

use crate::error::StoreError;
use crate::offsets::Removal;
use crate::store::MessageStore;
use crate::topic::validate_topic;

impl MessageStore {
    /// Creates `topic` with `queues` queues (no change if it exists with as many).
    pub fn create_topic(&self, topic: &str, queues: u32) -> Result<(), StoreError> {
        self.check_open()?;
        if queues > self.core.config.max_queues_per_topic {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "topic {topic:?}: {queues} queues exceed max_queues_per_topic {}",
                    self.core.config.max_queues_per_topic
                ),
            });
        }
        let mut registry = self.core.registry.lock();
        let entry = registry.create(&*self.core.storage, topic, queues, self.core.log.max_offset())?;
        self.core.queues.add_topic(topic, entry);
        // Room in the tables now, not by growing them on the put and
        // dispatch paths as the queues are first used.
        self.core.queues.reserve(queues as usize);
        self.core.dispatcher.queue_index.reserve(queues as usize);
        drop(registry);
        // Consumers following a topic of this name (made again, perhaps with
        // another queue count) take their shares again.
        self.core.consumer_groups.touch_all();
        Ok(())
    }

    /// Deletes `topic` (RocketMQ's `deleteTopics`): it is gone from the
    /// registry, its queues from the queue index and every group's offsets in
    /// it from the consumer offsets, durably, before this returns; consumers
    /// waiting on it return. Offset commits and resets that checked the topic
    /// before are waited for (their offsets go with the topic's). Its messages stay in the log until the log's
    /// cleaning deletes their segments, but are never read again: a topic
    /// created later under the same name starts empty, with new queue keys,
    /// and dispatch gives it none of the old topic's records. Returns whether
    /// the topic existed.
    pub fn delete_topic(&self, topic: &str) -> Result<bool, StoreError> {
        self.check_open()?;
        validate_topic(topic)?;
        // No commit that checked the topic is between its check and its write.
        let life = self.core.topic_life.write();
        let mut registry = self.core.registry.lock();
        let Some(entry) = registry.remove(&*self.core.storage, topic)? else { return Ok(false) };
        // No record of the topic between its queue's lookup and its append:
        // dispatch would put a forgotten queue back into the index.
        let dispatch = self.core.dispatcher.hold();
        self.core.queues.remove_topic(topic);
        let id = u64::from(entry.id);
        self.core.dispatcher.queue_index.forget(&*self.core.storage, |key| key >> 32 == id)?;
        drop(dispatch);
        drop(registry);
        self.core.offsets.remove(&*self.core.storage, Removal::Topic(topic))?;
        drop(life);
        // Consumers following it stop (a member owning none of its queues
        // waits on nothing the deletion closes). After the topics' lock: a
        // member commits under its group's lock, then takes the topics'.
        self.core.consumer_groups.touch_all();
        tracing::info!(topic, "topic deleted");
        Ok(true)
    }

    /// Deletes every topic not in `retain` (RocketMQ's `cleanUnusedTopic`,
    /// given the topics a broker's configuration still names), each as
    /// [`delete_topic`](Self::delete_topic) does. Returns the topics deleted.
    pub fn clean_unused_topics(&self, retain: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut deleted = Vec::new();
        for (topic, _) in self.topics() {
            if !retain.contains(&topic.as_str()) && self.delete_topic(&topic)? {
                deleted.push(topic);
            }
        }
        Ok(deleted)
    }

    /// Every topic with its queue count.
    pub fn topics(&self) -> Vec<(String, u32)> {
        self.core.registry.lock().topics().map(|(t, e)| (t.to_string(), e.queues)).collect()
    }
}
