//! Write groups: puts that arrive while another put appends wait, and one
//! put then appends every one that waited in one write of the log
//! ([`CommitLog::append_group`](commitlog::CommitLog::append_group): one
//! write, a durability request per put), as RocksDB's write group and
//! raft-engine's write barrier do.
//!
//! One put at a time *leads*. A put that finds no leader leads at once and
//! appends its own message as before (no allocation, no wait); puts that
//! arrive meanwhile queue as [`Member`]s and sleep. When its append is done
//! the leader appends what queued meanwhile as one group, then hands the
//! lead to the first put that queued since (waking it), or lets it go. So a
//! lone producer never waits for anyone, and producers that collide share
//! one write per group instead of each waiting its turn for a lock.
//!
//! A group's leader assigns each member its queue offset under the member's
//! queue lock and holds those locks until the group is appended, as a lone
//! put holds its own: the log holds every queue's messages in offset order,
//! and a topic's deletion (which takes each of its queue locks) either sees
//! the group appended or the group sees the deletion. A member the group
//! cannot take (its topic deleted meanwhile, or the append failed) is told
//! to put alone: its own put then meets its own error, or succeeds.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::put::PutResult;
use crate::queues::Queue;

/// The most puts one group appends.
pub(crate) const MOST_MEMBERS: usize = 128;
/// The most message bytes one group appends (each message's bytes, plus a
/// record header's worth), with segments of at least twice as many.
pub(crate) const MOST_BYTES: usize = 256 << 10;
/// A record header's size in the log, counted with each member's bytes.
const RECORD_OVERHEAD: usize = 64;

/// The puts waiting for a leader, and whether one leads.
#[derive(Debug, Default)]
pub(crate) struct WriteGroups {
    state: Mutex<State>,
    /// Groups appended.
    groups: AtomicU64,
    /// Puts appended in groups.
    members: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    leading: bool,
    waiting: VecDeque<Arc<Member>>,
}

/// A put waiting in a group: what it puts, and its answer.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) queue: Arc<Queue>,
    pub(crate) topic: String,
    pub(crate) queue_id: u32,
    pub(crate) tags_code: u64,
    /// The encoded message; its queue offset is set by the leader.
    pub(crate) body: Mutex<Vec<u8>>,
    answer: Mutex<Answer>,
    answered: Condvar,
}

/// What a member is told.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Not yet.
    Waiting,
    /// The lead is the member's: it appends a group now.
    Lead,
    /// The member's message was appended in a group.
    Put(PutResult),
    /// The group could not take the member's message: put it alone.
    Alone,
}

impl Member {
    pub(crate) fn new(queue: Arc<Queue>, topic: &str, queue_id: u32, tags_code: u64, body: Vec<u8>) -> Arc<Self> {
        Arc::new(Member {
            queue,
            topic: topic.to_string(),
            queue_id,
            tags_code,
            body: Mutex::new(body),
            answer: Mutex::new(Answer::Waiting),
            answered: Condvar::new(),
        })
    }

    /// Answers the member, if it waits for an answer (one given and not
    /// taken yet stands).
    pub(crate) fn answer(&self, answer: Answer) {
        let mut slot = self.answer.lock();
        if matches!(*slot, Answer::Waiting) {
            *slot = answer;
            drop(slot);
            self.answered.notify_one();
        }
    }

    /// Blocks until the member is answered; takes the answer.
    fn wait(&self) -> Answer {
        let mut slot = self.answer.lock();
        while matches!(*slot, Answer::Waiting) {
            self.answered.wait(&mut slot);
        }
        std::mem::replace(&mut *slot, Answer::Waiting)
    }

    /// The answer given, taken (`Waiting` if none).
    pub(crate) fn take_answer(&self) -> Answer {
        std::mem::replace(&mut *self.answer.lock(), Answer::Waiting)
    }

    /// The message's bytes, taken back (for a put alone).
    pub(crate) fn take_body(&self) -> Vec<u8> {
        std::mem::take(&mut *self.body.lock())
    }

    fn bytes(&self) -> usize {
        self.body.lock().len().saturating_add(RECORD_OVERHEAD)
    }
}

/// The lead, held by one put at a time. Dropped, it passes to the first
/// member waiting (woken to lead) or is let go.
#[derive(Debug)]
pub(crate) struct Leading<'a> {
    groups: &'a WriteGroups,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut state = self.groups.state.lock();
        match state.waiting.pop_front() {
            Some(next) => {
                drop(state);
                next.answer(Answer::Lead);
            }
            None => state.leading = false,
        }
    }
}

/// How a put goes on after [`WriteGroups::join`].
#[derive(Debug)]
pub(crate) enum Turn<'a> {
    /// The put leads, its member not queued: it appends its own message.
    Lead(Leading<'a>),
    /// The put's message was appended in another put's group, or must be
    /// put alone: the member's answer says which.
    Answered(Answer),
    /// The lead was handed to the put, its member not queued: it appends a
    /// group with its own message first.
    LeadGroup(Leading<'a>),
}

impl WriteGroups {
    /// The lead, if no put holds it.
    pub(crate) fn try_lead(&self) -> Option<Leading<'_>> {
        let mut state = self.state.lock();
        if state.leading {
            return None;
        }
        state.leading = true;
        Some(Leading { groups: self })
    }

    /// Queues `member` behind the put that leads and waits for its answer;
    /// leads at once if no put leads now.
    pub(crate) fn join(&self, member: &Arc<Member>) -> Turn<'_> {
        {
            let mut state = self.state.lock();
            if !state.leading {
                state.leading = true;
                return Turn::Lead(Leading { groups: self });
            }
            state.waiting.push_back(Arc::clone(member));
        }
        match member.wait() {
            Answer::Lead => Turn::LeadGroup(Leading { groups: self }),
            answer => Turn::Answered(answer),
        }
    }

    /// The members waiting now, in arrival order, up to a group's size
    /// ([`MOST_MEMBERS`], and `max_bytes` but for the first member)
    /// (`first` ahead of them, if given); the rest wait for the next group.
    pub(crate) fn take(&self, _lead: &Leading<'_>, first: Option<Arc<Member>>, max_bytes: usize) -> Vec<Arc<Member>> {
        let mut group: Vec<Arc<Member>> = first.into_iter().collect();
        let mut bytes: usize = group.iter().map(|m| m.bytes()).sum();
        let mut state = self.state.lock();
        while group.len() < MOST_MEMBERS {
            let Some(next) = state.waiting.front() else { break };
            let size = next.bytes();
            if !group.is_empty() && bytes.saturating_add(size) > max_bytes {
                break;
            }
            bytes = bytes.saturating_add(size);
            group.extend(state.waiting.pop_front());
        }
        group
    }

    /// Counts a group appended with `members` puts.
    pub(crate) fn appended(&self, members: usize) {
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.members.fetch_add(members as u64, Ordering::Relaxed);
    }

    /// Groups appended, and the puts they held.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.groups.load(Ordering::Relaxed), self.members.load(Ordering::Relaxed))
    }

    /// Puts queued behind the leader now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.state.lock().waiting.len()
    }
}

/// Answers every member of a group that has no answer yet with
/// [`Answer::Alone`] when dropped: a leader that fails (or panics) half-way
/// leaves no member waiting for ever.
pub(crate) struct AnswerLeft<'a>(pub(crate) &'a [Arc<Member>]);

impl Drop for AnswerLeft<'_> {
    fn drop(&mut self) {
        for member in self.0 {
            member.answer(Answer::Alone);
        }
    }
}
