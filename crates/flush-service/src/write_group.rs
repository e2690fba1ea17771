//! Write groups: writers that arrive while another writer writes wait, and
//! one writer then writes for all of them at once (one write, one lock
//! hand-off), as RocksDB's write group and raft-engine's write barrier do.
//! This module is the protocol only; its owner does the writing.
//!
//! One writer at a time *leads* ([`Leading`]). A writer that finds no leader
//! leads at once ([`WriteGroups::try_lead`]) and writes its own data, with
//! no allocation and no wait; writers that arrive meanwhile queue as
//! [`Member`]s ([`WriteGroups::join`]) and sleep. The leader then
//! [`take`](WriteGroups::take)s what queued, writes it as one group and
//! answers each member ([`Member::answer`]). Dropping the lead hands it to
//! the first member queued since (woken with [`Answer::Lead`]), or lets it
//! go. So a lone writer never waits for anyone, and writers that collide
//! share one write per group instead of each waiting its turn for a lock.
//!
//! Every member is answered: a leader answers what it wrote
//! ([`Answer::Done`]) and tells the rest to write alone ([`Answer::Alone`]);
//! [`AnswerLeft`] tells every member not answered when it is dropped (a
//! leader that returned early, or panicked) to write alone, and the lead is
//! handed on when a [`Leading`] is dropped, unwinding included.

use std::collections::VecDeque;

use crate::sync::{lock, Arc, AtomicU64, Condvar, Mutex, Ordering};

/// The writers waiting for a leader, and whether one leads.
#[derive(Debug)]
pub struct WriteGroups<T, R> {
    state: Mutex<GroupState<T, R>>,
    /// Groups written.
    groups: AtomicU64,
    /// Members written in them.
    members: AtomicU64,
}

#[derive(Debug)]
struct GroupState<T, R> {
    leading: bool,
    waiting: VecDeque<Arc<Member<T, R>>>,
}

/// A writer waiting in a group: what it writes (`T`) and its answer
/// (carrying `R` when its data was written).
#[derive(Debug)]
pub struct Member<T, R> {
    payload: T,
    answer: Mutex<Answer<R>>,
    answered: Condvar,
}

/// What a member is told.
#[derive(Debug)]
pub enum Answer<R> {
    /// Not yet (or the answer given was taken).
    Waiting,
    /// The lead is the member's: it writes a group now.
    Lead,
    /// The member's data was written in a group.
    Done(R),
    /// The group could not take the member's data: write it alone.
    Alone,
}

impl<T, R> Member<T, R> {
    /// A member writing `payload`.
    pub fn new(payload: T) -> Arc<Self> {
        Arc::new(Member { payload, answer: Mutex::new(Answer::Waiting), answered: Condvar::new() })
    }

    /// What the member writes.
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// Answers the member, if it waits for an answer (one given and not
    /// taken yet stands).
    pub fn answer(&self, answer: Answer<R>) {
        let mut slot = lock(&self.answer);
        if matches!(*slot, Answer::Waiting) {
            *slot = answer;
            drop(slot);
            self.answered.notify_one();
        }
    }

    /// Blocks until the member is answered; takes the answer.
    fn wait(&self) -> Answer<R> {
        let mut slot = lock(&self.answer);
        while matches!(*slot, Answer::Waiting) {
            slot = self.answered.wait(slot).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        std::mem::replace(&mut *slot, Answer::Waiting)
    }

    /// The answer given, taken ([`Answer::Waiting`] if none).
    pub fn take_answer(&self) -> Answer<R> {
        std::mem::replace(&mut *lock(&self.answer), Answer::Waiting)
    }
}

/// The lead, held by one writer at a time. Dropped, it passes to the first
/// member waiting (woken with [`Answer::Lead`]) or is let go.
#[derive(Debug)]
pub struct Leading<'a, T, R> {
    groups: &'a WriteGroups<T, R>,
}

impl<T, R> Drop for Leading<'_, T, R> {
    fn drop(&mut self) {
        let mut state = lock(&self.groups.state);
        match state.waiting.pop_front() {
            Some(next) => {
                drop(state);
                next.answer(Answer::Lead);
            }
            None => state.leading = false,
        }
    }
}

/// How a writer goes on after [`WriteGroups::join`].
#[derive(Debug)]
pub enum Turn<'a, T, R> {
    /// No writer led: this one leads, its member not queued; it writes its
    /// own data.
    Lead(Leading<'a, T, R>),
    /// The lead was handed to the writer, its member not queued: it writes
    /// a group with its own data first.
    LeadGroup(Leading<'a, T, R>),
    /// The member's answer: written in another writer's group, or to write
    /// alone.
    Answered(Answer<R>),
}

impl<T, R> Default for WriteGroups<T, R> {
    fn default() -> Self {
        WriteGroups {
            state: Mutex::new(GroupState { leading: false, waiting: VecDeque::new() }),
            groups: AtomicU64::new(0),
            members: AtomicU64::new(0),
        }
    }
}

impl<T, R> WriteGroups<T, R> {
    /// The lead, if no writer holds it.
    pub fn try_lead(&self) -> Option<Leading<'_, T, R>> {
        let mut state = lock(&self.state);
        if state.leading {
            return None;
        }
        state.leading = true;
        Some(Leading { groups: self })
    }

    /// Queues `member` behind the writer that leads and waits for its
    /// answer; leads at once if no writer leads now.
    pub fn join(&self, member: &Arc<Member<T, R>>) -> Turn<'_, T, R> {
        {
            let mut state = lock(&self.state);
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

    /// The members waiting now, in arrival order (`first` ahead of them, if
    /// given), up to `most_members` and `most_bytes` as `size` counts them
    /// (the first member always); the rest wait for the next group.
    pub fn take(
        &self,
        _lead: &Leading<'_, T, R>,
        first: Option<Arc<Member<T, R>>>,
        most_members: usize,
        most_bytes: usize,
        size: impl Fn(&T) -> usize,
    ) -> Vec<Arc<Member<T, R>>> {
        let mut group: Vec<Arc<Member<T, R>>> = first.into_iter().collect();
        let mut bytes: usize = group.iter().map(|m| size(&m.payload)).sum();
        let mut state = lock(&self.state);
        while group.len() < most_members.max(1) {
            let Some(next) = state.waiting.front() else { break };
            let next_bytes = size(&next.payload);
            if !group.is_empty() && bytes.saturating_add(next_bytes) > most_bytes {
                break;
            }
            bytes = bytes.saturating_add(next_bytes);
            group.extend(state.waiting.pop_front());
        }
        group
    }

    /// Counts a group written with `members` members.
    pub fn written(&self, members: usize) {
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.members.fetch_add(members as u64, Ordering::Relaxed);
    }

    /// Groups written, and the members they held.
    pub fn counts(&self) -> (u64, u64) {
        (self.groups.load(Ordering::Relaxed), self.members.load(Ordering::Relaxed))
    }

    /// Members queued behind the leader now.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }

    /// True when no writer leads and none waits.
    pub fn is_idle(&self) -> bool {
        let state = lock(&self.state);
        !state.leading && state.waiting.is_empty()
    }
}

/// Answers every member of a group that has no answer yet with
/// [`Answer::Alone`] when dropped: a leader that returns early (or panics)
/// leaves no member waiting for ever.
#[derive(Debug)]
pub struct AnswerLeft<'a, T, R>(pub &'a [Arc<Member<T, R>>]);

impl<T, R> Drop for AnswerLeft<'_, T, R> {
    fn drop(&mut self) {
        for member in self.0 {
            member.answer(Answer::Alone);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    type Groups = WriteGroups<u32, u32>;

    /// Waits until more than `ahead` members are queued.
    fn waiter_queued(groups: &Groups, ahead: usize) {
        while groups.waiting() <= ahead {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_lone_writer_leads_at_once_and_lets_the_lead_go() {
        let groups = Groups::default();
        let lead = groups.try_lead().expect("no one leads");
        assert!(groups.try_lead().is_none(), "one leader at a time");
        drop(lead);
        assert!(groups.is_idle());
        match groups.join(&Member::new(1)) {
            Turn::Lead(lead) => drop(lead),
            other => panic!("{other:?}"),
        }
        assert!(groups.is_idle());
    }

    #[test]
    fn members_are_taken_in_arrival_order_within_the_bounds_and_the_lead_goes_to_the_next() {
        let groups = std::sync::Arc::new(Groups::default());
        let lead = groups.try_lead().unwrap();
        let members: Vec<_> = (0..4u32).map(Member::new).collect();
        let outer = std::sync::Arc::clone(&groups);
        let waiters: Vec<_> = members
            .iter()
            .map(|m| {
                let ahead = usize::try_from(*m.payload()).unwrap();
                let (mine, m) = (std::sync::Arc::clone(&groups), Arc::clone(m));
                let groups = mine;
                let waiter = std::thread::spawn(move || match groups.join(&m) {
                    Turn::Answered(Answer::Done(r)) => Some(r),
                    Turn::Answered(Answer::Alone) => None,
                    Turn::LeadGroup(lead) => {
                        let group = groups.take(&lead, Some(Arc::clone(&m)), 8, usize::MAX, |_| 1);
                        for member in &group {
                            member.answer(Answer::Done(member.payload() * 10));
                        }
                        drop(lead);
                        match m.take_answer() {
                            Answer::Done(r) => Some(r),
                            other => panic!("{other:?}"),
                        }
                    }
                    other => panic!("{other:?}"),
                });
                waiter_queued(&outer, ahead);
                waiter
            })
            .collect();
        // Two by size: 0 and 1 (the bound), the rest left waiting.
        let group = groups.take(&lead, None, 8, 2, |_| 1);
        assert_eq!(group.iter().map(|m| *m.payload()).collect::<Vec<_>>(), vec![0, 1]);
        let left = AnswerLeft(&group[1..]); // 1 left unanswered: told to write alone
        group[0].answer(Answer::Done(0));
        drop(left);
        drop(lead); // to 2, which takes 2 and 3
        let answers: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(answers, vec![Some(0), None, Some(20), Some(30)]);
        assert!(groups.is_idle());
    }
}
