//! Messages and their encoding inside a commit-log record.
//!
//! The commit log's record keeps its own header (length, magic, offset, store
//! timestamp, CRC over everything); a message is the record's body, encoded as
//! below (little-endian, version 1). The queue offset sits at a fixed place so
//! that it can be set under the queue's put lock after the rest was encoded.
//!
//! | bytes | field |
//! | --- | --- |
//! | 2 | magic `b"M"` and version `1` |
//! | 4 | flag (the producer's, opaque) |
//! | 4 | queue id |
//! | 8 | queue offset |
//! | 8 | born timestamp (ms since the Unix epoch) |
//! | 1 + n | topic (length, UTF-8) |
//! | 2 + n | tags (length, UTF-8; 0 = none) |
//! | 2 + (2 + n)* | keys (count, then each with its length) |
//! | 4 + (2 + n, 2 + n)* | properties (total bytes of the pairs, then each name and value with their lengths) |
//! | 4 + n | body |

use bytes::Bytes;

use crate::error::MessageError;
use crate::topic::validate_topic;

/// The first byte of every encoded message.
const MAGIC: u8 = b'M';
/// The encoding's version.
const VERSION: u8 = 1;
/// Where the queue offset is in an encoded message.
const QUEUE_OFFSET_AT: usize = 10;
/// The fixed part: magic, version, flag, queue id, queue offset, born timestamp.
const FIXED: usize = 26;

/// Limits a message is checked against before anything is appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct MessageLimits {
    /// The largest body (RocketMQ's `maxMessageSize` is 4 MiB for the whole
    /// message; here the body, the rest being bounded below).
    pub max_body_size: usize,
    /// The largest encoded properties (RocketMQ: 32 KiB).
    pub max_properties_size: usize,
}

impl MessageLimits {
    /// Limits that fit records of at most `max_message_size` bytes: properties
    /// up to 32 KiB (an eighth of that, if less), the body up to what leaves
    /// as much again for the topic, tags and keys.
    pub fn within(max_message_size: usize) -> Self {
        let max_properties_size = (32usize << 10).min(max_message_size / 8);
        MessageLimits {
            max_body_size: max_message_size.saturating_sub(max_properties_size.saturating_mul(2)),
            max_properties_size,
        }
    }
}

impl Default for MessageLimits {
    /// Within RocketMQ's 4 MiB `maxMessageSize`.
    fn default() -> Self {
        Self::within(4 << 20)
    }
}

/// A message to put: its topic and queue, body, tags, keys and properties.
///
/// The body is anything that converts into [`Bytes`](crate::Bytes) without a
/// copy (`Vec<u8>`, `String`, `&'static [u8]`, `Bytes`); a borrowed slice is
/// copied once with `Bytes::copy_from_slice`:
///
/// ```
/// use message_store::{Bytes, Message};
///
/// let line = String::from("hello");
/// let owned = Message::new("orders", 0, line.clone()); // moved, not copied
/// let borrowed = Message::new("orders", 0, Bytes::copy_from_slice(line.as_bytes()));
/// assert_eq!(owned.body, borrowed.body);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// The topic.
    pub topic: String,
    /// The queue of the topic.
    pub queue_id: u32,
    /// The payload.
    pub body: Bytes,
    /// One tag (RocketMQ's `TAGS`), used by consumers' filters.
    pub tags: Option<String>,
    /// Keys the message can be found by (RocketMQ's `KEYS`), each non-empty and
    /// without spaces.
    pub keys: Vec<String>,
    /// Properties, in order.
    pub properties: Vec<(String, String)>,
    /// The producer's flag, stored as is.
    pub flag: u32,
    /// When the producer made it (ms since the Unix epoch); 0 means "now" at put.
    pub born_timestamp_ms: u64,
}

impl Message {
    /// A message for `topic`'s queue `queue_id` with `body`, no tags, keys or properties.
    pub fn new(topic: impl Into<String>, queue_id: u32, body: impl Into<Bytes>) -> Self {
        Message {
            topic: topic.into(),
            queue_id,
            body: body.into(),
            tags: None,
            keys: Vec::new(),
            properties: Vec::new(),
            flag: 0,
            born_timestamp_ms: 0,
        }
    }

    /// With this tag.
    pub fn with_tags(mut self, tags: impl Into<String>) -> Self {
        self.tags = Some(tags.into());
        self
    }

    /// With this key added.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.keys.push(key.into());
        self
    }

    /// With this property added.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((name.into(), value.into()));
        self
    }

    /// The tags' hash as queue-index entries store it ([`tags_code`]); 0 without tags.
    pub fn tags_code(&self) -> u64 {
        self.tags.as_deref().map_or(0, tags_code)
    }

    /// Checks the message against `limits` and RocketMQ's rules, then encodes it
    /// with queue offset 0 (set later with [`set_queue_offset`]).
    pub(crate) fn encode(&self, limits: &MessageLimits, born_timestamp_ms: u64) -> Result<Vec<u8>, MessageError> {
        validate_topic(&self.topic)?;
        if self.body.len() > limits.max_body_size {
            return Err(MessageError::BodyTooLarge { size: self.body.len(), max: limits.max_body_size });
        }
        let tags = self.tags.as_deref().unwrap_or("");
        let tags_len = short_len(tags, "tags")?;
        if tags.is_empty() && self.tags.is_some() {
            return Err(MessageError::Invalid { field: "tags", reason: "empty (leave it out instead)".into() });
        }
        for key in &self.keys {
            if key.is_empty() || key.contains(' ') {
                return Err(MessageError::Invalid { field: "keys", reason: format!("{key:?}: empty or with a space") });
            }
            short_len(key, "keys")?;
        }
        let key_count = u16::try_from(self.keys.len())
            .map_err(|_| MessageError::Invalid { field: "keys", reason: format!("{} keys", self.keys.len()) })?;
        let mut properties = Vec::new();
        for (name, value) in &self.properties {
            if name.is_empty() {
                return Err(MessageError::Invalid { field: "properties", reason: "an empty name".into() });
            }
            for part in [name, value] {
                properties.extend_from_slice(&short_len(part, "properties")?.to_le_bytes());
                properties.extend_from_slice(part.as_bytes());
            }
        }
        if properties.len() > limits.max_properties_size {
            return Err(MessageError::PropertiesTooLarge { size: properties.len(), max: limits.max_properties_size });
        }
        let mut out = Vec::with_capacity(
            FIXED
                .saturating_add(self.topic.len())
                .saturating_add(tags.len())
                .saturating_add(properties.len())
                .saturating_add(self.body.len())
                .saturating_add(64),
        );
        out.extend_from_slice(&[MAGIC, VERSION]);
        out.extend_from_slice(&self.flag.to_le_bytes());
        out.extend_from_slice(&self.queue_id.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&born_timestamp_ms.to_le_bytes());
        debug_assert_eq!(out.len(), FIXED);
        // `validate_topic` bounds the topic to 127 bytes.
        out.push(u8::try_from(self.topic.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(self.topic.as_bytes());
        out.extend_from_slice(&tags_len.to_le_bytes());
        out.extend_from_slice(tags.as_bytes());
        out.extend_from_slice(&key_count.to_le_bytes());
        for key in &self.keys {
            out.extend_from_slice(&short_len(key, "keys")?.to_le_bytes());
            out.extend_from_slice(key.as_bytes());
        }
        // Bounded by `max_properties_size` and the body by `max_body_size`,
        // both validated to fit a u32 by the store's config.
        out.extend_from_slice(&u32::try_from(properties.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&properties);
        out.extend_from_slice(&u32::try_from(self.body.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&self.body);
        Ok(out)
    }
}

/// A string's length as the u16 the encoding stores.
fn short_len(s: &str, field: &'static str) -> Result<u16, MessageError> {
    u16::try_from(s.len())
        .map_err(|_| MessageError::Invalid { field, reason: format!("{} bytes (at most 65535)", s.len()) })
}

/// Sets the queue offset of an encoded message.
pub(crate) fn set_queue_offset(encoded: &mut [u8], queue_offset: u64) {
    encoded[QUEUE_OFFSET_AT..QUEUE_OFFSET_AT + 8].copy_from_slice(&queue_offset.to_le_bytes());
}

/// RocketMQ's tags code: Java's `String.hashCode` of the tags (over UTF-16 code
/// units, wrapping), sign-extended to 64 bits, so queues built by either agree.
pub fn tags_code(tags: &str) -> u64 {
    let hash = tags.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)));
    i64::from(hash) as u64
}

/// A message as stored: what was put, plus where and when it was stored.
///
/// **Its body holds the log's mapping.** [`body`](Self::body) is a zero-copy
/// view of the segment it was read from, and keeps that segment mapped, and
/// the store's directory lock held, while any clone of it lives, even after
/// [`MessageStore::shutdown`](crate::MessageStore::shutdown): opening the
/// store again in the same process fails with `Locked { holder:
/// ThisProcess }` until the bodies are dropped (another store must not cut
/// or reuse a file a view still reads). Keep a body past the store's life
/// by copying it (`Bytes::copy_from_slice(&message.body)`, or
/// [`into_owned`](Self::into_owned)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredMessage {
    /// The topic.
    pub topic: String,
    /// The queue.
    pub queue_id: u32,
    /// Its offset in the queue (dense, from 0).
    pub queue_offset: u64,
    /// The commit-log offset of its record.
    pub log_offset: u64,
    /// The record's size in the log, header included.
    pub log_size: u64,
    /// When the store appended it (ms since the Unix epoch).
    pub store_timestamp_ms: u64,
    /// When the producer made it.
    pub born_timestamp_ms: u64,
    /// The producer's flag.
    pub flag: u32,
    /// Its tag, if any.
    pub tags: Option<String>,
    /// Its keys.
    pub keys: Vec<String>,
    /// Its properties.
    pub properties: Vec<(String, String)>,
    /// The payload: a zero-copy view of the log, valid while held.
    pub body: Bytes,
}

impl StoredMessage {
    /// The message with its body copied out of the log: it no longer holds
    /// the log's mapping or the store's lock.
    pub fn into_owned(mut self) -> Self {
        self.body = Bytes::copy_from_slice(&self.body);
        self
    }
}

/// A cursor over an encoded message.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MessageError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(MessageError::Malformed { reason: "shorter than its lengths say" })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, MessageError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default()))
    }

    fn u32(&mut self) -> Result<u32, MessageError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }

    fn u64(&mut self) -> Result<u64, MessageError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }

    fn string(&mut self, len: usize) -> Result<String, MessageError> {
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| MessageError::Malformed { reason: "a string is not UTF-8" })
    }
}

/// What the dispatcher needs of a record, without copying the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub tags_code: u64,
    pub keys: Vec<String>,
}

/// The fields before the properties, decoded once for both readers below.
struct Prefix {
    flag: u32,
    queue_id: u32,
    queue_offset: u64,
    born_timestamp_ms: u64,
    topic: String,
    tags: String,
    keys: Vec<String>,
}

/// Decodes the fields before the properties, leaving `r` at the properties.
fn decode_prefix(r: &mut Reader<'_>) -> Result<Prefix, MessageError> {
    let (magic, version) = match r.take(2)? {
        [m, v] => (*m, *v),
        _ => unreachable!("take(2) returns two bytes"),
    };
    if magic != MAGIC || version != VERSION {
        return Err(MessageError::Malformed { reason: "not a message (magic or version)" });
    }
    let flag = r.u32()?;
    let queue_id = r.u32()?;
    let queue_offset = r.u64()?;
    let born_timestamp_ms = r.u64()?;
    let topic_len = usize::from(r.take(1)?[0]);
    let topic = r.string(topic_len)?;
    let tags_len = usize::from(r.u16()?);
    let tags = r.string(tags_len)?;
    let key_count = r.u16()?;
    let mut keys = Vec::with_capacity(usize::from(key_count));
    for _ in 0..key_count {
        let len = usize::from(r.u16()?);
        keys.push(r.string(len)?);
    }
    Ok(Prefix { flag, queue_id, queue_offset, born_timestamp_ms, topic, tags, keys })
}

/// Decodes the header fields of an encoded message.
pub(crate) fn decode_header(body: &[u8]) -> Result<Header, MessageError> {
    let p = decode_prefix(&mut Reader { bytes: body, at: 0 })?;
    let tags_code = if p.tags.is_empty() { 0 } else { tags_code(&p.tags) };
    Ok(Header { topic: p.topic, queue_id: p.queue_id, queue_offset: p.queue_offset, tags_code, keys: p.keys })
}

/// Decodes a whole message from its record.
pub(crate) fn decode(record: &commitlog::Record) -> Result<StoredMessage, MessageError> {
    let mut r = Reader { bytes: &record.body, at: 0 };
    let prefix = decode_prefix(&mut r)?;
    let properties_len = r.u32()? as usize;
    let mut p = Reader { bytes: r.take(properties_len)?, at: 0 };
    let mut properties = Vec::new();
    while p.at < p.bytes.len() {
        let name_len = usize::from(p.u16()?);
        let name = p.string(name_len)?;
        let value_len = usize::from(p.u16()?);
        properties.push((name, p.string(value_len)?));
    }
    let body_len = r.u32()? as usize;
    let start = r.at;
    r.take(body_len)?;
    if r.at != record.body.len() {
        return Err(MessageError::Malformed { reason: "bytes after the body" });
    }
    Ok(StoredMessage {
        topic: prefix.topic,
        queue_id: prefix.queue_id,
        queue_offset: prefix.queue_offset,
        log_offset: record.offset,
        log_size: record.size,
        store_timestamp_ms: record.store_timestamp_ms,
        born_timestamp_ms: prefix.born_timestamp_ms,
        flag: prefix.flag,
        tags: (!prefix.tags.is_empty()).then_some(prefix.tags),
        keys: prefix.keys,
        properties,
        body: record.body.slice(start..start.saturating_add(body_len)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_code_is_javas_string_hash() {
        // Java: "TagA".hashCode() == 2598919, "Aa" and "BB" collide (2112).
        assert_eq!(tags_code("TagA"), 2_598_919);
        assert_eq!(tags_code("Aa"), tags_code("BB"));
        assert_eq!(tags_code("Aa"), 2112);
        // Negative hashes are sign-extended, as RocketMQ's long tags code.
        let negative = "polygenelubricants"; // Java hash: Integer.MIN_VALUE
        assert_eq!(tags_code(negative), i64::from(i32::MIN) as u64);
    }

    #[test]
    fn a_message_round_trips_with_its_queue_offset() {
        let message = Message::new("orders", 3, &b"payload"[..])
            .with_tags("TagA")
            .with_key("k1")
            .with_key("k2")
            .with_property("trace", "on");
        let mut encoded = message.encode(&MessageLimits::default(), 77).unwrap();
        set_queue_offset(&mut encoded, 41);
        let record = commitlog::Record {
            offset: 1000,
            size: encoded.len() as u64 + 40,
            store_timestamp_ms: 88,
            body: Bytes::from(encoded),
        };
        let stored = decode(&record).unwrap();
        assert_eq!(
            (stored.topic.as_str(), stored.queue_id, stored.queue_offset, stored.born_timestamp_ms),
            ("orders", 3, 41, 77)
        );
        assert_eq!(stored.tags.as_deref(), Some("TagA"));
        assert_eq!(stored.keys, vec!["k1".to_string(), "k2".to_string()]);
        assert_eq!(stored.properties, vec![("trace".to_string(), "on".to_string())]);
        assert_eq!(&stored.body[..], b"payload");
        assert_eq!((stored.log_offset, stored.store_timestamp_ms), (1000, 88));
        let header = decode_header(&record.body).unwrap();
        assert_eq!(header.tags_code, tags_code("TagA"));
    }

    #[test]
    fn bad_messages_are_refused_before_encoding() {
        let limits = MessageLimits { max_body_size: 10, max_properties_size: 16 };
        let refuse = |m: Message| m.encode(&limits, 0).unwrap_err();
        assert!(matches!(refuse(Message::new("bad topic", 0, &b""[..])), MessageError::Topic(_)));
        assert!(matches!(
            refuse(Message::new("t", 0, vec![0u8; 11])),
            MessageError::BodyTooLarge { size: 11, max: 10 }
        ));
        assert!(matches!(
            refuse(Message::new("t", 0, &b""[..]).with_property("a-long-name", "a-long-value")),
            MessageError::PropertiesTooLarge { .. }
        ));
        assert!(matches!(
            refuse(Message::new("t", 0, &b""[..]).with_key("a b")),
            MessageError::Invalid { field: "keys", .. }
        ));
        assert!(matches!(
            refuse(Message::new("t", 0, &b""[..]).with_tags("")),
            MessageError::Invalid { field: "tags", .. }
        ));
    }

    #[test]
    fn truncated_or_foreign_bodies_are_malformed_not_panics() {
        let encoded = Message::new("t", 0, &b"body"[..]).encode(&MessageLimits::default(), 0).unwrap();
        for len in 0..encoded.len() {
            let record = commitlog::Record {
                offset: 0,
                size: 0,
                store_timestamp_ms: 0,
                body: Bytes::copy_from_slice(&encoded[..len]),
            };
            assert!(decode(&record).is_err(), "a body cut to {len} bytes decodes");
        }
        assert!(decode_header(b"not a message at all").is_err());
    }
}
