//! The store's configuration, with RocketMQ's knob names where it has them.

use commitlog::{CommitLogConfig, FlushDiskType};

use crate::error::StoreError;
use crate::index::IndexConfig;
use crate::message::MessageLimits;

/// The longest [`MessageStoreConfig::dispatch_nap_us`]: dispatch's wait when
/// it has nothing to read.
const MOST_DISPATCH_NAP_US: u64 = 100_000;

/// How far the dispatcher may read the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum DispatchLimit {
    /// Only what is durable: consumers never see a message a crash can take
    /// back (RocketMQ #8239). Required under sync flush.
    Durable,
    /// Everything written (RocketMQ's default under async flush): lower latency;
    /// after a power loss, messages consumers saw may be gone, and their queue
    /// offsets given again.
    Written,
}

/// Configuration of a [`MessageStore`](crate::MessageStore).
///
/// Made with [`builder`](Self::builder) (which checks it), [`new`](Self::new)
/// over a commit-log configuration, or [`Default`] (the defaults over
/// [`CommitLogConfig::default`]); its fields can be changed after, and
/// [`MessageStore::open`](crate::MessageStore::open) checks them. New fields
/// may come in minor releases (`#[non_exhaustive]`).
///
/// ```
/// use commitlog::{CommitLogConfig, FlushDiskType};
/// use message_store::MessageStoreConfig;
///
/// let config = MessageStoreConfig::builder()
///     .log(CommitLogConfig::builder().mapped_file_size_commit_log(1 << 20).flush_disk_type(FlushDiskType::SyncFlush).build()?)
///     .auto_create_topics(true)
///     .build()?;
/// assert_eq!(config.log.max_message_size, 256 << 10, "a quarter of a segment, unless set");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// With the `serde` feature it reads from (and writes to) a file, TOML say,
/// every field optional (the defaults fill in; `limits`, when left out,
/// follows the `[log]` section's `max_message_size`, as the builder's does):
///
/// ```toml
/// auto_create_topics = true
/// dispatch_limit = "durable"
///
/// [log]
/// mapped_file_size_commit_log = 1048576
/// flush_disk_type = "sync_flush"
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(from = "ConfigFile"))]
#[non_exhaustive]
pub struct MessageStoreConfig {
    /// The commit log's configuration (flush mode, segment size, retention, …).
    pub log: CommitLogConfig,
    /// How far dispatch reads: `None` picks [`DispatchLimit::Durable`] under
    /// sync flush and [`DispatchLimit::Written`] under async flush.
    pub dispatch_limit: Option<DispatchLimit>,
    /// How often the flush service looks at the derived data
    /// (`flushIntervalConsumeQueue`, 1,000 ms): it seals the queue index when
    /// dispatch has passed a log segment's end or the active run is full, and
    /// flushes the key index.
    pub flush_interval_consume_queue_ms: u64,
    /// Pages of the key index that must be dirty before it is flushed between
    /// thorough flushes (`flushConsumeQueueLeastPages`, 2).
    pub flush_consume_queue_least_pages: usize,
    /// The key index is flushed whole, both indexes expired against the log's
    /// front, and the dispatch checkpoint recorded, at least this often
    /// (`flushConsumeQueueThoroughInterval`; RocketMQ: 60,000 ms, here 10,000 ms).
    pub flush_consume_queue_thorough_interval_ms: u64,
    /// The most entries the queue index keeps in memory before it seals them
    /// (1,048,576: about 40 MiB; it seals at each log segment's end anyway).
    /// What a crash makes recovery dispatch again is at most a segment or
    /// this many messages.
    pub queue_index_seal_entries: usize,
    /// Create a topic with [`default_topic_queue_nums`](Self::default_topic_queue_nums)
    /// queues on its first put (`autoCreateTopicEnable`); off by default.
    pub auto_create_topics: bool,
    /// Queues of an auto-created topic (`defaultTopicQueueNums`, 8).
    pub default_topic_queue_nums: u32,
    /// The most queues a topic may have.
    pub max_queues_per_topic: u32,
    /// Limits on each message.
    pub limits: MessageLimits,
    /// Build the key index (`messageIndexEnable`, on): messages with keys are
    /// found by [`MessageStore::query_by_key`](crate::MessageStore::query_by_key).
    pub message_index_enable: bool,
    /// Puts that arrive while another put appends share one append (write
    /// groups, on): one of them appends all of them in one write of the log.
    /// Off, every put appends its own message, waiting its turn for its
    /// queue's put lock and the log's.
    pub write_groups: bool,
    /// How long dispatch naps between busy rounds when it reads the log by
    /// its written end (async flush), in µs (0, off; 100 is the value
    /// measured in the repository's docs/benchmarks.md: faster and cheaper at
    /// 64 to 50,000 queues, but dispatch fell behind the puts at 200,000):
    /// after a round that found from 2 to 256 records (one alone says puts
    /// come sparsely; more, that it runs behind them and must go on at
    /// once). While it naps,
    /// puts do not wake it: it wakes by itself and takes what came meanwhile
    /// in one round, so a busy store pays one wake-up per round instead of
    /// one per put (RocketMQ's `ReputMessageService` sleeps 1 ms between
    /// rounds). A queue a consumer tails has each entry put by its put, so
    /// only the key index, the dispatch point and the queues no one tails
    /// see a message up to a nap later. After a round with nothing to read,
    /// dispatch sleeps until a put wakes it, as with naps off.
    pub dispatch_nap_us: u64,
    /// How long dispatch naps, in µs, after a round of at least two records
    /// whose puts had all put their queue entries themselves (queues a
    /// consumer tails, async flush; 0, off; 1,000 is the value measured in
    /// the repository's docs/benchmarks.md: 1.54x as fast at 64 queues, but
    /// at 16,384 and 50,000 queues the messages of queues no one tails
    /// reached their consumers milliseconds later, behind the tailed
    /// records that piled up in the log during a nap). Their consumers read them already, so while it naps
    /// puts to tailed queues leave it asleep, and it takes what came
    /// meanwhile in one round: a busy tailed queue pays one wake-up of
    /// dispatch per nap instead of one per put (at one queue and four
    /// producers a `futex` call in about a third of the puts and a
    /// trip of dispatch through the scheduler each time). A put its own
    /// put did not index (a queue no one tails) still wakes dispatch at
    /// once, nap or not. So only the key index and the dispatch point see a
    /// tailed queue's message up to a nap later. With
    /// [`dispatch_nap_us`](Self::dispatch_nap_us) set, its naps take the place
    /// of these (puts of every queue then leave a napping dispatch asleep).
    pub dispatch_tailed_nap_us: u64,
    /// The index files' shape.
    pub index: IndexConfig,
    /// The longest a get scans a queue for matching messages: at least this many
    /// entries (RocketMQ's `maxFilterMessageSize` / 20 = 800) or `max_count`.
    pub max_filter_entries: u64,
    /// The smallest consumer-offsets journal file, in bytes (4 MiB: about
    /// 145,000 commits between compactions). A journal is sized to twice its
    /// snapshot when that is larger, so compactions stay rare at any number of
    /// offsets. At least 64 KiB, a multiple of 4 KiB.
    pub consumer_offsets_journal_size: usize,
    /// How long a commit of an offset the queue's puts reached but dispatch
    /// has not (a commit right after a put) waits for dispatch to catch up
    /// before it is refused with
    /// [`StoreError::OffsetBeyondQueue`](crate::StoreError::OffsetBeyondQueue)
    /// (5,000 ms; 0: refused at once).
    pub commit_dispatch_wait_ms: u64,
}

impl Default for MessageStoreConfig {
    /// The defaults over [`CommitLogConfig::default`] (64 MiB segments, async
    /// flush).
    fn default() -> Self {
        MessageStoreConfig::new(CommitLogConfig::default())
    }
}

impl MessageStoreConfig {
    /// A builder starting from the defaults; [`build`](MessageStoreConfigBuilder::build)
    /// checks the result.
    pub fn builder() -> MessageStoreConfigBuilder {
        MessageStoreConfigBuilder { config: MessageStoreConfig::default(), limits_set: false }
    }

    /// The defaults over the commit log configured as `log`.
    pub fn new(log: CommitLogConfig) -> Self {
        MessageStoreConfig {
            limits: MessageLimits::within(log.max_message_size),
            log,
            dispatch_limit: None,
            flush_interval_consume_queue_ms: 1000,
            flush_consume_queue_least_pages: 2,
            flush_consume_queue_thorough_interval_ms: 10_000,
            auto_create_topics: false,
            default_topic_queue_nums: 8,
            max_queues_per_topic: 65_536,
            max_filter_entries: 800,
            consumer_offsets_journal_size: 4 << 20,
            commit_dispatch_wait_ms: 5000,
            queue_index_seal_entries: 1 << 20,
            message_index_enable: true,
            write_groups: true,
            dispatch_nap_us: 0,
            dispatch_tailed_nap_us: 0,
            index: IndexConfig::default(),
        }
    }

    /// The dispatch limit in force.
    pub fn effective_dispatch_limit(&self) -> DispatchLimit {
        self.dispatch_limit.unwrap_or(match self.log.flush_disk_type {
            FlushDiskType::SyncFlush => DispatchLimit::Durable,
            FlushDiskType::AsyncFlush => DispatchLimit::Written,
        })
    }

    /// Checks the configuration ([`MessageStore::open`](crate::MessageStore::open)
    /// does too): every error says which knob and why.
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad = |reason: String| Err(StoreError::InvalidConfig { reason });
        if self.log.flush_disk_type == FlushDiskType::SyncFlush && self.dispatch_limit == Some(DispatchLimit::Written) {
            return bad("dispatch_limit Written under sync flush would show consumers messages a crash can take back (RocketMQ #8239)".into());
        }
        if self.index.hash_slots == 0 || self.index.max_items == 0 {
            return bad("index hash_slots and max_items must be positive".into());
        }
        let journal = self.consumer_offsets_journal_size;
        if journal < 64 << 10 || !journal.is_multiple_of(4096) {
            return bad(format!(
                "consumer_offsets_journal_size {journal} must be at least 64 KiB and a multiple of 4 KiB"
            ));
        }
        if self.dispatch_nap_us > MOST_DISPATCH_NAP_US {
            return bad(format!(
                "dispatch_nap_us {} must be at most {MOST_DISPATCH_NAP_US} (100 ms: dispatch's wait when idle)",
                self.dispatch_nap_us
            ));
        }
        if self.dispatch_tailed_nap_us > MOST_DISPATCH_NAP_US {
            return bad(format!(
                "dispatch_tailed_nap_us {} must be at most {MOST_DISPATCH_NAP_US} (100 ms: dispatch's wait when idle)",
                self.dispatch_tailed_nap_us
            ));
        }
        if self.queue_index_seal_entries == 0 {
            return bad("queue_index_seal_entries must be positive".into());
        }
        if self.flush_interval_consume_queue_ms == 0 || self.flush_consume_queue_thorough_interval_ms == 0 {
            return bad("flush intervals must be positive".into());
        }
        if self.default_topic_queue_nums == 0 || self.default_topic_queue_nums > self.max_queues_per_topic {
            return bad(format!(
                "default_topic_queue_nums {} must be between 1 and max_queues_per_topic {}",
                self.default_topic_queue_nums, self.max_queues_per_topic
            ));
        }
        let room = self.log.max_message_size;
        let need = self.limits.max_body_size.saturating_add(self.limits.max_properties_size);
        if need > room || u32::try_from(need).is_err() {
            return bad(format!(
                "max_body_size + max_properties_size ({need}) must fit the log's max_message_size ({room})"
            ));
        }
        Ok(())
    }
}

/// Builds a [`MessageStoreConfig`]; [`build`](Self::build) checks it. Each
/// setter is named as the field (and RocketMQ's knob) it sets.
#[derive(Debug, Clone)]
pub struct MessageStoreConfigBuilder {
    config: MessageStoreConfig,
    limits_set: bool,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.config.$name = value;
            self
        }
    )*};
}

impl MessageStoreConfigBuilder {
    /// The commit log's configuration. Unless [`limits`](Self::limits) is
    /// set, the message limits follow its `max_message_size`.
    pub fn log(mut self, log: CommitLogConfig) -> Self {
        self.config.log = log;
        self
    }

    /// How far dispatch reads (default: by the flush mode).
    pub fn dispatch_limit(mut self, limit: DispatchLimit) -> Self {
        self.config.dispatch_limit = Some(limit);
        self
    }

    /// Limits on each message (default: within the log's `max_message_size`).
    pub fn limits(mut self, limits: MessageLimits) -> Self {
        self.config.limits = limits;
        self.limits_set = true;
        self
    }

    setters! {
        /// Sets [`auto_create_topics`](MessageStoreConfig::auto_create_topics).
        auto_create_topics: bool,
        /// Sets [`default_topic_queue_nums`](MessageStoreConfig::default_topic_queue_nums).
        default_topic_queue_nums: u32,
        /// Sets [`max_queues_per_topic`](MessageStoreConfig::max_queues_per_topic).
        max_queues_per_topic: u32,
        /// Sets [`message_index_enable`](MessageStoreConfig::message_index_enable).
        message_index_enable: bool,
        /// Sets [`write_groups`](MessageStoreConfig::write_groups).
        write_groups: bool,
        /// Sets [`dispatch_nap_us`](MessageStoreConfig::dispatch_nap_us).
        dispatch_nap_us: u64,
        /// Sets [`dispatch_tailed_nap_us`](MessageStoreConfig::dispatch_tailed_nap_us).
        dispatch_tailed_nap_us: u64,
        /// Sets [`index`](MessageStoreConfig::index).
        index: IndexConfig,
        /// Sets [`max_filter_entries`](MessageStoreConfig::max_filter_entries).
        max_filter_entries: u64,
        /// Sets [`queue_index_seal_entries`](MessageStoreConfig::queue_index_seal_entries).
        queue_index_seal_entries: usize,
        /// Sets [`consumer_offsets_journal_size`](MessageStoreConfig::consumer_offsets_journal_size).
        consumer_offsets_journal_size: usize,
        /// Sets [`commit_dispatch_wait_ms`](MessageStoreConfig::commit_dispatch_wait_ms).
        commit_dispatch_wait_ms: u64,
        /// Sets [`flush_interval_consume_queue_ms`](MessageStoreConfig::flush_interval_consume_queue_ms).
        flush_interval_consume_queue_ms: u64,
        /// Sets [`flush_consume_queue_least_pages`](MessageStoreConfig::flush_consume_queue_least_pages).
        flush_consume_queue_least_pages: usize,
        /// Sets [`flush_consume_queue_thorough_interval_ms`](MessageStoreConfig::flush_consume_queue_thorough_interval_ms).
        flush_consume_queue_thorough_interval_ms: u64,
    }

    /// Checks and returns the configuration.
    pub fn build(mut self) -> Result<MessageStoreConfig, StoreError> {
        if !self.limits_set {
            self.config.limits = MessageLimits::within(self.config.log.max_message_size);
        }
        self.config.validate()?;
        Ok(self.config)
    }
}

/// What a configuration file holds: [`MessageStoreConfig`]'s fields, each
/// optional, `limits` left out following the log's `max_message_size`.
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ConfigFile {
    log: CommitLogConfig,
    dispatch_limit: Option<DispatchLimit>,
    flush_interval_consume_queue_ms: u64,
    flush_consume_queue_least_pages: usize,
    flush_consume_queue_thorough_interval_ms: u64,
    queue_index_seal_entries: usize,
    auto_create_topics: bool,
    default_topic_queue_nums: u32,
    max_queues_per_topic: u32,
    limits: Option<MessageLimits>,
    message_index_enable: bool,
    write_groups: bool,
    dispatch_nap_us: u64,
    dispatch_tailed_nap_us: u64,
    index: IndexConfig,
    max_filter_entries: u64,
    consumer_offsets_journal_size: usize,
    commit_dispatch_wait_ms: u64,
}

#[cfg(feature = "serde")]
impl Default for ConfigFile {
    fn default() -> Self {
        let d = MessageStoreConfig::default();
        ConfigFile {
            log: d.log,
            dispatch_limit: d.dispatch_limit,
            flush_interval_consume_queue_ms: d.flush_interval_consume_queue_ms,
            flush_consume_queue_least_pages: d.flush_consume_queue_least_pages,
            flush_consume_queue_thorough_interval_ms: d.flush_consume_queue_thorough_interval_ms,
            queue_index_seal_entries: d.queue_index_seal_entries,
            auto_create_topics: d.auto_create_topics,
            default_topic_queue_nums: d.default_topic_queue_nums,
            max_queues_per_topic: d.max_queues_per_topic,
            limits: None,
            message_index_enable: d.message_index_enable,
            write_groups: d.write_groups,
            dispatch_nap_us: d.dispatch_nap_us,
            dispatch_tailed_nap_us: d.dispatch_tailed_nap_us,
            index: d.index,
            max_filter_entries: d.max_filter_entries,
            consumer_offsets_journal_size: d.consumer_offsets_journal_size,
            commit_dispatch_wait_ms: d.commit_dispatch_wait_ms,
        }
    }
}

#[cfg(feature = "serde")]
impl From<ConfigFile> for MessageStoreConfig {
    fn from(mut file: ConfigFile) -> Self {
        // A `[log]` section that shrinks the segment without saying how large
        // a record may be gets the builder's rule (a quarter of a segment,
        // at most the default), not a default that cannot fit.
        let default = CommitLogConfig::default().max_message_size;
        if file.log.max_message_size == default && default.saturating_mul(4) > file.log.mapped_file_size_commit_log {
            file.log.max_message_size = default.min(file.log.mapped_file_size_commit_log / 4).max(1);
        }
        let limits = file.limits.unwrap_or_else(|| MessageLimits::within(file.log.max_message_size));
        MessageStoreConfig {
            log: file.log,
            dispatch_limit: file.dispatch_limit,
            flush_interval_consume_queue_ms: file.flush_interval_consume_queue_ms,
            flush_consume_queue_least_pages: file.flush_consume_queue_least_pages,
            flush_consume_queue_thorough_interval_ms: file.flush_consume_queue_thorough_interval_ms,
            queue_index_seal_entries: file.queue_index_seal_entries,
            auto_create_topics: file.auto_create_topics,
            default_topic_queue_nums: file.default_topic_queue_nums,
            max_queues_per_topic: file.max_queues_per_topic,
            limits,
            message_index_enable: file.message_index_enable,
            write_groups: file.write_groups,
            dispatch_nap_us: file.dispatch_nap_us,
            dispatch_tailed_nap_us: file.dispatch_tailed_nap_us,
            index: file.index,
            max_filter_entries: file.max_filter_entries,
            consumer_offsets_journal_size: file.consumer_offsets_journal_size,
            commit_dispatch_wait_ms: file.commit_dispatch_wait_ms,
        }
    }
}
