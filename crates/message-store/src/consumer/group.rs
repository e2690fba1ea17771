//! The members of each consumer group in this process, and how they share a
//! topic's queues (RocketMQ's `RebalanceImpl` with
//! `AllocateMessageQueueAveragely`, in one process): a member joins, says
//! which topics it follows, and gets a contiguous share of each topic's
//! queues among the members that follow it. Every change of membership bumps
//! the group's generation; a member that sees another generation than the one
//! its queues came from takes its share again before it hands out or commits
//! anything (both under the group's lock), so a queue has one owner at a time
//! and a committed offset moves only by its owner.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::task::Waker;

use parking_lot::{Mutex, MutexGuard};

/// The queues a write of a group's offsets from outside its members
/// concerns ([`ConsumerGroups::while_changing`]): their owners start them
/// again from their committed offsets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// Every queue (a removal of all the group's offsets).
    Group,
    /// A topic's queues.
    Topic(&'a str),
    /// One of a topic's queues.
    Queue(&'a str, u32),
    /// The queues commits `(topic, queue, offset)` name.
    Commits(&'a [(&'a str, u32, u64)]),
}

/// Every consumer group with a member in this process.
#[derive(Debug, Default)]
pub(crate) struct ConsumerGroups {
    groups: Mutex<HashMap<String, Arc<Group>>>,
}

impl ConsumerGroups {
    /// Adds a member to `name`'s group (made if new); returns the group and
    /// the member's id.
    pub(crate) fn join(&self, name: &str) -> (Arc<Group>, u64) {
        // Under the map's lock: a group its last member is leaving is either
        // still in the map and joined, or gone and made anew, never joined
        // after it left the map.
        let (group, (id, wakers)) = {
            let mut groups = self.groups.lock();
            let group = Arc::clone(groups.entry(name.to_string()).or_default());
            let joined = group.change_quietly(|members| {
                let id = members.next_id;
                members.next_id += 1;
                members.topics.insert(id, BTreeSet::new());
                id
            });
            (group, joined)
        };
        wakers.into_values().for_each(Waker::wake);
        (group, id)
    }

    /// Every group's members take their shares again (and every member
    /// waiting is woken): a topic was made, deleted, or made again under its
    /// name (its queue count may differ), or the store shut down.
    pub(crate) fn touch_all(&self) {
        let groups: Vec<Arc<Group>> = self.groups.lock().values().cloned().collect();
        for group in groups {
            group.change(|_| ());
        }
    }

    /// Runs `change` (a write of `name`'s committed offsets from outside its
    /// members: a commit, a reset, a removal) under the group's lock, so none
    /// commits over it; the group is looked up and locked under the map's
    /// lock (held throughout for a group with no member here), so no member
    /// joins or leaves meanwhile. When the change is taken, the members take
    /// their shares again and each queue in `scope` starts again from its
    /// committed offset, even one equal to what its member last knew; the
    /// other queues keep their positions. One refused changes nothing.
    pub(crate) fn while_changing<R, E>(
        &self,
        name: &str,
        scope: Scope<'_>,
        change: impl FnOnce() -> Result<R, E>,
    ) -> Result<R, E> {
        let groups = self.groups.lock();
        let Some(group) = groups.get(name).cloned() else {
            // A member joining now starts from the table the change leaves.
            return change();
        };
        let mut members = group.members.lock();
        drop(groups);
        let result = change();
        if result.is_ok() {
            members.mark_reset(scope);
            let wakers = members.changed();
            drop(members);
            wakers.into_values().for_each(Waker::wake);
        }
        result
    }

    /// Runs `change` (a write of every group's committed offsets in `topic`:
    /// a clean) under the lock of every group with members here, as
    /// [`while_changing`](Self::while_changing) does for one, with the
    /// topic as its scope (the map's lock is held throughout; groups' locks
    /// are taken in their names' order).
    pub(crate) fn while_changing_all<R, E>(&self, topic: &str, change: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
        let groups = self.groups.lock();
        let mut named: Vec<(&String, &Arc<Group>)> = groups.iter().collect();
        named.sort_by(|a, b| a.0.cmp(b.0));
        let mut locked: Vec<MutexGuard<'_, Members>> = named.iter().map(|(_, group)| group.members.lock()).collect();
        let result = change();
        let mut wakers = Vec::new();
        for members in locked.iter_mut().filter(|_| result.is_ok()) {
            members.mark_reset(Scope::Topic(topic));
            wakers.extend(members.changed().into_values());
        }
        drop(locked);
        drop(groups);
        wakers.into_iter().for_each(Waker::wake);
        result
    }

    /// Reset marks `name`'s group keeps (tests).
    #[cfg(test)]
    pub(crate) fn reset_marks(&self, name: &str) -> usize {
        self.groups.lock().get(name).map_or(0, |group| group.members.lock().reset_marks())
    }

    /// Takes member `id` out of `name`'s group (the group goes with its last
    /// member).
    pub(crate) fn leave(&self, name: &str, group: &Group, id: u64) {
        let wakers = {
            let mut groups = self.groups.lock();
            let (empty, wakers) = group.change_quietly(|members| {
                members.topics.remove(&id);
                members.seen_resets.remove(&id);
                members.wakers.remove(&id);
                members.topics.is_empty()
            });
            if empty {
                groups.remove(name);
            }
            wakers
        };
        wakers.into_values().for_each(Waker::wake);
    }
}

/// One group's members.
#[derive(Debug, Default)]
pub(crate) struct Group {
    members: Mutex<Members>,
}

/// The last writes from outside the members of one topic's queues (values
/// of [`Members`]' `resets`; 0: none).
#[derive(Debug, Default)]
struct TopicMarks {
    /// Of all its queues.
    topic: u64,
    /// Of single queues.
    queues: HashMap<u32, u64>,
}

/// Who is in a group and what each follows.
#[derive(Debug, Default)]
pub(crate) struct Members {
    next_id: u64,
    /// Bumped by every change of membership or of a member's topics.
    generation: u64,
    /// Bumped by every write of the group's offsets from outside its members
    /// (a commit, a reset, a removal); each queue it concerned is marked
    /// with the new value (`reset_marks`, or `all_reset` for every queue),
    /// and a member that last looked before starts that queue again from its
    /// committed offset, even one equal to what it last knew.
    resets: u64,
    /// The last such write of every queue of the group.
    all_reset: u64,
    /// The last such writes of each topic's queues; kept while a member has
    /// not looked since (see `saw_resets`).
    reset_marks: HashMap<String, TopicMarks>,
    /// The value of `resets` each member last took its share at.
    seen_resets: HashMap<u64, u64>,
    /// Each member's topics, by id (ids in joining order).
    topics: BTreeMap<u64, BTreeSet<String>>,
    /// Members waiting for a change (a consumer waiting for messages is woken
    /// by one too: it may have queues to take).
    wakers: HashMap<u64, Waker>,
}

impl Members {
    /// The generation the shares below belong to.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Member `id` took its share with every write from outside so far in
    /// view: returns how many there were, and forgets the marks every member
    /// has seen (they can restart no queue any more), so the marks stay as
    /// few as the writes some member has yet to see.
    pub(crate) fn saw_resets(&mut self, id: u64) -> u64 {
        self.seen_resets.insert(id, self.resets);
        let oldest = self.topics.keys().map(|member| self.seen_resets.get(member).copied().unwrap_or(0)).min();
        let oldest = oldest.unwrap_or(self.resets);
        self.reset_marks.retain(|_, marks| {
            marks.queues.retain(|_, at| *at > oldest);
            marks.topic > oldest || !marks.queues.is_empty()
        });
        self.resets
    }

    /// Marks kept (tests).
    #[cfg(test)]
    pub(crate) fn reset_marks(&self) -> usize {
        self.reset_marks.values().map(|marks| usize::from(marks.topic > 0) + marks.queues.len()).sum()
    }

    /// Whether `topic`'s queue `queue` was written from outside since a
    /// member saw the writes counted at `seen` ([`saw_resets`](Self::saw_resets)).
    pub(crate) fn reset_since(&self, topic: &str, queue: u32, seen: u64) -> bool {
        let marks = self.reset_marks.get(topic);
        let topic_at = marks.map_or(0, |m| m.topic);
        let queue_at = marks.and_then(|m| m.queues.get(&queue)).copied().unwrap_or(0);
        self.all_reset.max(topic_at).max(queue_at) > seen
    }

    /// Counts a write from outside the members and marks the queues of `scope`.
    fn mark_reset(&mut self, scope: Scope<'_>) {
        self.resets += 1;
        let at = self.resets;
        fn marks<'m>(all: &'m mut HashMap<String, TopicMarks>, topic: &str) -> &'m mut TopicMarks {
            all.entry(topic.to_string()).or_default()
        }
        let all = &mut self.reset_marks;
        match scope {
            Scope::Group => self.all_reset = at,
            Scope::Topic(topic) => marks(all, topic).topic = at,
            Scope::Queue(topic, queue) => {
                marks(all, topic).queues.insert(queue, at);
            }
            Scope::Commits(commits) => {
                for &(topic, queue, _) in commits {
                    marks(all, topic).queues.insert(queue, at);
                }
            }
        }
    }

    /// A change of the group: bumps the generation (each member takes its
    /// share again before it hands out or commits anything) and returns the
    /// wakers of the members waiting for one, to wake after the lock.
    fn changed(&mut self) -> HashMap<u64, Waker> {
        self.generation += 1;
        std::mem::take(&mut self.wakers)
    }

    /// Member `id`'s share of `topic`'s `queues`: a contiguous range among
    /// the members that follow the topic, in joining order (RocketMQ's
    /// average allocation: the first `queues % members` take one more).
    pub(crate) fn share(&self, id: u64, topic: &str, queues: u32) -> Range<u32> {
        let following: Vec<u64> =
            self.topics.iter().filter(|(_, topics)| topics.contains(topic)).map(|(&member, _)| member).collect();
        match following.iter().position(|&member| member == id) {
            Some(index) => average_share(index, following.len(), queues),
            None => 0..0,
        }
    }
}

impl Group {
    /// The members, locked: shares are taken, messages handed out and
    /// offsets committed under it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Members> {
        self.members.lock()
    }

    /// Member `id` follows `topic` (or, with `follows` false, no longer does).
    pub(crate) fn follow(&self, id: u64, topic: &str, follows: bool) {
        self.change(|members| {
            if let Some(topics) = members.topics.get_mut(&id) {
                if follows {
                    topics.insert(topic.to_string());
                } else {
                    topics.remove(topic);
                }
            }
        });
    }

    /// Wakes member `id` (its `waker`) at the next change past `generation`;
    /// true if there was one already.
    pub(crate) fn changed_since(&self, id: u64, generation: u64, waker: &Waker) -> bool {
        let mut members = self.members.lock();
        if members.generation != generation {
            return true;
        }
        match members.wakers.get_mut(&id) {
            Some(known) if known.will_wake(waker) => {}
            Some(known) => known.clone_from(waker),
            None => {
                members.wakers.insert(id, waker.clone());
            }
        }
        false
    }

    /// Member `id` no longer waits for a change.
    pub(crate) fn forget_waker(&self, id: u64) {
        self.members.lock().wakers.remove(&id);
    }

    /// Changes the members with `change`, bumps the generation, and wakes
    /// every member waiting, once the lock is let go (a waker may run
    /// anything, a consumer's poll included).
    fn change<R>(&self, change: impl FnOnce(&mut Members) -> R) -> R {
        let (result, wakers) = self.change_quietly(change);
        wakers.into_values().for_each(Waker::wake);
        result
    }

    /// [`change`](Self::change), returning the wakers to wake instead: for a
    /// caller that holds another lock.
    fn change_quietly<R>(&self, change: impl FnOnce(&mut Members) -> R) -> (R, HashMap<u64, Waker>) {
        let mut members = self.members.lock();
        let result = change(&mut members);
        (result, members.changed())
    }
}

/// The `index`-th of `members` members' share of `queues` queues
/// (`AllocateMessageQueueAveragely`).
fn average_share(index: usize, members: usize, queues: u32) -> Range<u32> {
    let queues = queues as usize;
    let rem = queues % members;
    let size = if queues <= members {
        1
    } else if index < rem {
        queues / members + 1
    } else {
        queues / members
    };
    let start = if index < rem { index * size } else { index * size + rem };
    let len = size.min(queues.saturating_sub(start));
    let at = |i: usize| u32::try_from(i).expect("below the queue count");
    at(start.min(queues))..at(start.min(queues) + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_goes_to_exactly_one_member_and_shares_differ_by_at_most_one() {
        for members in 1..=9 {
            for queues in 0..=20u32 {
                let mut owner = vec![None; queues as usize];
                let mut sizes = Vec::new();
                for index in 0..members {
                    let share = average_share(index, members, queues);
                    sizes.push(share.len());
                    for q in share {
                        assert_eq!(owner[q as usize].replace(index), None, "{members} members, {queues} queues");
                    }
                }
                assert!(owner.iter().all(Option::is_some), "{members} members, {queues} queues: {owner:?}");
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "{members} members, {queues} queues: {sizes:?}");
            }
        }
        assert_eq!(average_share(0, 3, 8), 0..3, "RocketMQ's: the first take one more");
        assert_eq!(average_share(2, 3, 8), 6..8);
    }

    #[test]
    fn members_share_only_the_topics_they_follow_and_changes_bump_the_generation() {
        let groups = ConsumerGroups::default();
        let (group, a) = groups.join("g");
        let (_, b) = groups.join("g");
        group.follow(a, "t", true);
        group.follow(b, "t", true);
        group.follow(b, "u", true);
        let generation = group.lock().generation();
        {
            let members = group.lock();
            assert_eq!((members.share(a, "t", 4), members.share(b, "t", 4)), (0..2, 2..4));
            assert_eq!((members.share(a, "u", 4), members.share(b, "u", 4)), (0..0, 0..4));
        }
        groups.leave("g", &group, b);
        assert!(group.lock().generation() > generation);
        assert_eq!(group.lock().share(a, "t", 4), 0..4, "the queues of a member that left move");
        groups.leave("g", &group, a);
        assert!(groups.groups.lock().is_empty(), "the group goes with its last member");
    }
}
