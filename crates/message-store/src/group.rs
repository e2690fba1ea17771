//! Write groups of puts ([`flush_service::WriteGroups`], the protocol): puts
//! that arrive while another put appends wait, and one put then appends
//! every one that waited in one write of the log
//! ([`CommitLog::append_group`](commitlog::CommitLog::append_group): a
//! durability request per put). This module holds what a waiting put hands
//! the leader ([`Pending`]), what a put gets back ([`PutResult`], also a lone
//! put's, and [`BatchPutResult`]) and the bounds of a group; `put.rs` does
//! the appending.
//!
//! A group's leader assigns each member its queue offset under the member's
//! queue lock and holds those locks until the group is appended, as a lone
//! put holds its own: the log holds every queue's messages in offset order,
//! and a topic's deletion (which takes each of its queue locks) either sees
//! the group appended or the group sees the deletion. A member the group
//! cannot take (its topic deleted meanwhile, or the append failed) is told
//! to put alone: its own put then meets its own error, or succeeds.

use std::sync::Arc;

use commitlog::DurabilityHandle;
use parking_lot::Mutex;

use crate::queues::Queue;

/// The most puts one group appends.
pub(crate) const MOST_MEMBERS: usize = 128;
/// The most message bytes one group appends (each message's bytes, plus a
/// record header's worth), with segments of at least twice as many.
pub(crate) const MOST_BYTES: usize = 256 << 10;
/// A record header's size in the log, counted with each member's bytes.
const RECORD_OVERHEAD: usize = 64;

/// Where a message went.
#[derive(Debug)]
#[non_exhaustive]
pub struct PutResult {
    /// Its offset in its queue.
    pub queue_offset: u64,
    /// The commit-log offset of its record.
    pub log_offset: u64,
    /// When it was stored (ms since the Unix epoch).
    pub store_timestamp_ms: u64,
    /// Resolves when the message is durable (sync flush; resolved at once
    /// under async flush).
    pub durability: DurabilityHandle,
}

/// Where a batch went: consecutive queue offsets from `first_queue_offset`.
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchPutResult {
    /// The first message's queue offset; the others follow.
    pub first_queue_offset: u64,
    /// The commit-log offset of each message's record.
    pub log_offsets: Vec<u64>,
    /// When the batch was stored.
    pub store_timestamp_ms: u64,
    /// Resolves when the whole batch is durable.
    pub durability: DurabilityHandle,
}

/// The store's write groups.
pub(crate) type PutGroups = flush_service::WriteGroups<Pending, PutResult>;
/// A put waiting in a group.
pub(crate) type PutMember = flush_service::Member<Pending, PutResult>;

/// What a waiting put hands its group's leader.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) queue: Arc<Queue>,
    pub(crate) topic: String,
    pub(crate) queue_id: u32,
    pub(crate) tags_code: u64,
    /// The encoded message; its queue offset is set by the leader.
    pub(crate) body: Mutex<Vec<u8>>,
}

impl Pending {
    /// The message's bytes, taken back (for a put alone).
    pub(crate) fn take_body(&self) -> Vec<u8> {
        std::mem::take(&mut *self.body.lock())
    }

    /// The bytes the put counts for in a group.
    pub(crate) fn bytes(&self) -> usize {
        self.body.lock().len().saturating_add(RECORD_OVERHEAD)
    }
}
